"""Commands that other programs run: ``xargs`` and ``find -exec``, the program table's ``runs``
role (``watch``, ``ssh``, ``parallel``, ...), and what git runs from its configuration, its
environment and its options."""

from __future__ import annotations

import json
import re
import shlex
from typing import TYPE_CHECKING

from gateway.policy.facts import effects as effectmod
from gateway.policy.facts import options as opts
from gateway.policy.facts import paths as pathmod
from gateway.policy.facts import programs
from gateway.policy.facts.shell import git
from gateway.policy.facts.shell.command import (
    Command,
    State,
)
from gateway.policy.facts.words import (
    Word,
    ansi_c,
)

if TYPE_CHECKING:
    from gateway.policy.facts.shell.walker import Walker


_GIT_RUNS_SUBS = frozenset(r.spec.sub[0] for r in programs.table().get("git", ()) if r.spec.runs and r.spec.sub)
_JOINS = frozenset({("ssh", ""), ("parallel", ""), ("git", "submodule")})
_EACH = frozenset({"concurrently", "npm-run-all", "run-p", "run-s"})
"""Programs whose every operand is a command line of its own."""
"""Programs that join the words of the command they run into one shell line."""
_SHORT_ALIAS = {("git", "rebase", "--exec"): "-x", ("rsync", "", "-e"): "--rsh"}
_KEY_NAMES = {"enter": "\n", "c-m": "\n", "c-j": "\n", "kpenter": "\n", "space": " ", "tab": "\t", "bspace": ""}
"""tmux key names that type a character (``send-keys 'rm -rf ~' Enter``)."""
SSH_LIKE = frozenset({"ssh", "scp", "sftp", "sshfs", "autossh", "mosh"})
_SSH_COMMANDS = frozenset({"proxycommand", "localcommand", "knownhostscommand", "remotecommand"})
"""``ssh -o`` options whose value is a command (run locally, except ``RemoteCommand``)."""


def _keys(words: list[Word]) -> Word:
    """The text ``tmux send-keys`` types: each argument as is, key names as their character."""
    line = Word()
    for w in words:
        key = _KEY_NAMES.get(w.text.lower()) if not w.dynamic else None
        line.extend(Word(key, "1" * len(key)) if key is not None else w)
    return line


def ssh_options(walker: Walker, cmd: Command, args: list[Word], src: bytes, st: State, depth: int) -> list[Command]:
    """``ssh -o ProxyCommand='...'`` (also ``LocalCommand``, ``KnownHostsCommand``,
    ``RemoteCommand``; ``-oKey=value`` and ``-o 'Key value'``): the command is run."""
    out: list[Command] = []
    for k, w in enumerate(args):
        if w.text == "-o" and k + 1 < len(args):
            value = args[k + 1]
        elif w.text.startswith("-o") and len(w.text) > 2:
            value = Word(w.text[2:], w.mask[2:], w.dynamic, w.sources)
        else:
            continue
        key, _, _ = value.text.replace("=", " ", 1).partition(" ")
        if key.lower() in _SSH_COMMANDS:
            cut = len(key) + 1
            out += run_word(walker, cmd, Word(value.text[cut:], value.mask[cut:], value.dynamic, value.sources),
                            src, st, depth)  # fmt: skip
    return out


_GIT_RUN_KEYS = re.compile(
    r"^(core\.(sshcommand|pager|editor|askpass|gitproxy|alternaterefscommand)|sequence\.editor|diff\.external|"
    r"diff\.[^.]+\.(command|textconv)|merge\.[^.]+\.driver|filter\.[^.]+\.(clean|smudge|process)|"
    r"gpg(\.[^.]+)?\.program|uploadpack\.packobjectshook|pager\..+|interactive\.difffilter|"
    r"(difftool|mergetool|man|browser)\.[^.]+\.(cmd|path)|web\.browser|remote\.[^.]+\.(uploadpack|receivepack)|"
    r"sendemail\.(tocmd|cccmd|smtpserver)|trailer\.[^.]+\.(command|cmd)|core\.fsmonitor|credential(\..+)?\.helper)$"
)
"""Configuration keys whose value is a command git runs."""
_GIT_ENV = (
    "GIT_SSH_COMMAND",
    "GIT_SSH",
    "GIT_EDITOR",
    "GIT_PAGER",
    "GIT_EXTERNAL_DIFF",
    "GIT_ASKPASS",
    "GIT_SEQUENCE_EDITOR",
    "GIT_PROXY_COMMAND",
    "SSH_ASKPASS",
    "EDITOR",
    "VISUAL",
    "PAGER",
)
"""Environment variables whose value is a command git runs (``EDITOR``, ``VISUAL`` and ``PAGER``
when git's own are not set)."""
_GIT_DIR_ENV = ("GIT_EXEC_PATH", "GIT_TEMPLATE_DIR", "GIT_CONFIG_GLOBAL", "GIT_CONFIG_SYSTEM", "GIT_CONFIG")
"""Environment variables naming a directory git runs programs from (``git-*``, template hooks) or
a configuration file it reads (whose commands the line does not show)."""
_GIT_COMMAND_OPTIONS: dict[str, tuple[str, ...]] = {
    "filter-branch": ("--setup", "--env-filter", "--tree-filter", "--index-filter", "--parent-filter",
                      "--msg-filter", "--commit-filter", "--tag-name-filter"),
    "difftool": ("-x", "--extcmd"),
    "fetch": ("--upload-pack",),
    "pull": ("--upload-pack",),
    "clone": ("-u", "--upload-pack"),
    "ls-remote": ("--upload-pack",),
    "push": ("--receive-pack", "--exec"),
    "archive": ("--exec",),
    "send-email": ("--to-cmd", "--cc-cmd"),
}  # fmt: skip
"""git subcommand options whose value is a command git runs (``rebase --exec`` is in the table)."""


def xargs_words(walker: Walker, cmd: Command, words: list[Word], i: int, j: int) -> list[Word] | None:
    """``xargs``' command with its static input (``echo ~ | xargs rm -rf``) as arguments, or
    None when the input is only known at run time."""
    text = cmd.stdin_text
    if text is None:
        return None
    options = words[i + 1 : j]
    replace: str | None = None
    delimiter: str | None = None
    for k, o in enumerate(options):
        t = o.text
        if t in ("-I", "--replace") and k + 1 < len(options):
            replace = options[k + 1].text
        elif t.startswith("-I") and len(t) > 2:
            replace = t[2:]
        elif t.startswith(("-i", "--replace")):
            replace = t.split("=", 1)[1] if "=" in t else (t[2:] or "{}")
        elif t in ("-0", "--null"):
            delimiter = "\0"
        elif t in ("-d", "--delimiter") and k + 1 < len(options):
            delimiter = ansi_c(options[k + 1].text)
        elif t.startswith("-d") and len(t) > 2:
            delimiter = ansi_c(t[2:])
        elif t.startswith(("-a", "--arg-file")):
            return None  # the input is a file
    command = words[j:] or [Word("echo", "1111")]
    if replace is not None:
        lines = [line.strip() for line in text.split("\n") if line.strip()]
        out: list[Word] = []
        for w in command:
            if w.text == replace:
                out += [Word(line, "1" * len(line)) for line in lines]
            elif replace and replace in w.text:
                t = w.text.replace(replace, " ".join(lines))
                out.append(Word(t, "1" * len(t), w.dynamic, w.sources))
            else:
                out.append(w)
        return [*words[:j], *out]
    if delimiter is not None:
        tokens = [t for t in text.split(delimiter) if t and t != "\n"]
    else:
        try:
            tokens = shlex.split(text)
        except ValueError:
            return None
    return [*words[:j], *command, *(Word(t, "1" * len(t)) for t in tokens)]


def run_word(walker: Walker, cmd: Command, script: Word, src: bytes, st: State, depth: int) -> list[Command]:
    """A word that some program runs as a shell command line: parsed as a payload, or (known
    only at run time) code of unknown source."""
    if script.dynamic and not script.sources:
        cmd.code_effects.append(
            effectmod.effect("exec", cmd.program, cmd.wrappers, source="unknown", certainty="unknown")
        )
    if not script.dynamic and script.text.strip() in ("", "-"):
        return []
    return walker.payload(cmd, script, src, st, depth)


def runs(
    walker: Walker, cmd: Command, program: str, args: list[Word], src: bytes, st: State, depth: int
) -> list[Command]:
    """The ``runs`` role of the program table: the selected words are a command the program
    runs (``ssh host 'rm -rf ~'``, ``trap '...' EXIT``, ``tmux new -d '...'``, ``git rebase
    --exec``): one word is a command line, several are the command's words from there on."""
    texts = [w.text for w in args]
    base = args
    sub = ""
    if program == "git":
        top = opts.parse(texts, opts.spec_for("git"))
        if not top.operands:
            return []
        at = top.operands[0]
        base = git.expand(cmd, args[at:], top.values.get("-c", []))
        sub = base[0].text.lower()
        if sub not in _GIT_RUNS_SUBS:
            return []
        texts = [w.text for w in base]
    lowered = {t.lower() for t in texts}
    for row in programs.table().get(program, ()):
        spec = row.spec
        if spec.sub and spec.sub[0] not in lowered:
            continue  # cheap: the row's subcommand is not even a word
        rest = base[1:] if program == "git" else base
        parsed = opts.parse([w.text for w in rest], row.parse_spec)
        operand_words = [rest[k] for k in parsed.operands]
        names = [w.text.lower() for w in ([base[0], *operand_words] if program == "git" else operand_words)]
        if spec.sub and names[: len(spec.sub)] != spec.sub:
            continue
        present = set(parsed.options) | set(texts)
        if spec.when and not any(w in present for w in spec.when):
            continue
        if spec.unless and any(w in present for w in spec.unless):
            continue
        if spec.runs is None:
            return []
        chosen = effectmod.select(spec.runs, operand_words, rest, parsed)
        if spec.runs.startswith("option:") or spec.runs in ("first-operand", "last-operand"):
            short = _SHORT_ALIAS.get((program, sub, spec.runs[7:]))
            if short:
                chosen += [Word(v, "1" * len(v)) for v in parsed.values.get(short, [])]
            return [c for w in chosen for c in run_word(walker, cmd, w, src, st, depth)]
        if not chosen:
            return []
        if program == "tmux" and spec.sub[:1] in (["send-keys"], ["send"]):
            return run_word(walker, cmd, _keys(chosen), src, st, depth)
        if program in _EACH:  # `concurrently 'a' 'b'`: every operand is a command line
            return [c for w in chosen for c in run_word(walker, cmd, w, src, st, depth)]
        start = next(k for k, w in enumerate(rest) if w is chosen[0])
        stop = len(rest)
        if spec.runs == "operands-before-separator":
            stop = next((k for k in range(start, len(rest)) if rest[k].text in (":::", "::::", ":::+")), stop)
        words = rest[start:stop]
        cut = next((k for k, w in enumerate(rest) if w.text == "--"), None)
        if (
            cut is not None
            and cut + 1 < len(rest)
            and spec.runs in ("operands", "operands-after-first")
            and not rest[cut + 1].text.startswith("-")
        ):
            words = rest[cut + 1 :]  # `op run -- CMD`, `mise exec node@20 -- CMD`: the command follows `--`
        if program == "parallel" and stop < len(rest):  # the values after `:::` are the arguments
            values = [w for w in rest[stop:] if w.text not in (":::", "::::", ":::+")]
            if any("{}" in w.text for w in words):
                joined = " ".join(shlex.quote(v.text) for v in values)
                words = [Word(w.text.replace("{}", joined), w.mask, w.dynamic, w.sources) for w in words]
            else:
                words = [*words, *values]
        if len(words) == 1 or (program, sub) in _JOINS:
            line = Word()
            for k, w in enumerate(words):
                if k:
                    line.add(" ", True)
                line.extend(w)
            return run_word(walker, cmd, line, src, st, depth)
        inner = Command(list(words), st, depth + 1, "payload")
        return walker.resolve(inner, src, st, depth + 1)
    return []


def code(
    walker: Walker, cmd: Command, program: str, args: list[Word], src: bytes, st: State, depth: int
) -> list[Command]:
    """The program table's ``code`` role: words that are code in the row's ``language`` (vim
    ``-c ':!cmd'``/``+'!cmd'``, less ``+'!cmd'``, gdb ``-ex 'shell cmd'``, sed ``1e cmd``), read
    like inline interpreter code. Options are matched as whole words, so single-dash long options
    (gdb ``-ex``) work; ``first-operand`` counts only when no option gave code."""
    texts = [w.text for w in args]
    out: list[Command] = []
    if program.startswith("gdb") and "--args" in texts and texts.index("--args") + 1 < len(args):
        inner = Command(list(args[texts.index("--args") + 1 :]), st, depth + 1, "payload")  # the debugged program
        out += walker.resolve(inner, src, st, depth + 1)
    for name in _ENV_COMMANDS.get(program, ()):  # `LESSOPEN='|cmd %s' less f`
        given = cmd.env.get(name) or cmd.state.vars.get(name)
        if given is not None:
            line = given.text.lstrip("|").replace("%s", "f")
            out += run_word(walker, cmd, Word(line, "1" * len(line), given.dynamic, given.sources), src, st, depth)
    for row in programs.table().get(program, ()):
        spec = row.spec
        if not spec.code:
            continue
        present = set(texts)
        if spec.when and present.isdisjoint(spec.when):
            continue
        if spec.unless and not present.isdisjoint(spec.unless):
            continue
        words: list[Word] = []
        for selector in spec.code:
            if selector.startswith("option:"):
                name = selector[7:]
                for k, t in enumerate(texts):
                    if t == "--":
                        break
                    if t == name and k + 1 < len(args):
                        words.append(args[k + 1])
                    elif name.startswith("--") and t.startswith(name + "="):
                        v = args[k]
                        words.append(Word(t[len(name) + 1 :], v.mask[len(name) + 1 :], v.dynamic, v.sources))
            elif selector == "plus-operands":
                words += effectmod.select(selector, args, args, opts.Parsed())
            elif selector == "first-operand" and not words:
                parsed = opts.parse(texts, row.parse_spec)
                words += [args[k] for k in parsed.operands[:1]]
        for w in words:
            out += walker.run_code(cmd, spec.language, w, src, st, depth)
        return out
    return out


_ENV_COMMANDS = {"less": ("LESSOPEN", "LESSCLOSE")}
"""Environment variables whose value is a command the program runs."""


def git_runs(walker: Walker, cmd: Command, args: list[Word], src: bytes, st: State, depth: int) -> list[Command]:
    """Commands git runs by itself: configuration that names a command (``core.sshCommand``,
    ``core.pager``, ``credential.helper='!...'``, a ``!`` alias, ...), the environment
    (``GIT_SSH_COMMAND``, ``GIT_EDITOR``, ...) and options that take a command
    (``filter-branch --tree-filter``, ``fetch --upload-pack``)."""
    texts = [a.text for a in args]
    top = opts.parse(texts, opts.spec_for("git"))
    settings = top.values.get("-c", [])
    config = git.config(cmd, settings)
    dynamic = {a.text.removeprefix("-c") for a in args if a.dynamic}
    for item in settings:  # `-c core.pager="$P"`: the value is only known at run time
        name, _, raw = item.partition("=")
        if item in dynamic and name.lower() in config:
            config[name.lower()] = Word(raw, "1" * len(raw), True)
    scripts: list[Word] = []
    for key, value in config.items():
        if key in ("core.hookspath", "init.templatedir", "include.path") or (
            key.startswith("includeif.") and key.endswith(".path")
        ):  # directories whose programs run, and configuration files read in (their commands unseen)
            scripts += _hooks(cmd, value)
            continue
        if key == "(unknown)" or (value.dynamic and _GIT_RUN_KEYS.match(key)):
            scripts.append(Word(value.text, value.mask, True, value.sources))
            continue
        text = value.text
        if key.startswith("credential.") and key.endswith(".helper"):
            if text.startswith("!"):
                scripts.append(Word(text[1:], "1" * (len(text) - 1)))
            elif text.startswith(("/", "~")) or " " in text:
                scripts.append(value)
        elif key == "core.fsmonitor":
            if text.lower() not in ("", "true", "false", "yes", "no", "on", "off", "1", "0"):
                scripts.append(value)
        elif _GIT_RUN_KEYS.match(key):
            scripts.append(value)
    for name in _GIT_ENV:
        given = cmd.env.get(name) or cmd.state.vars.get(name)
        if given is not None:
            scripts.append(given)
    for name in _GIT_DIR_ENV:  # `GIT_EXEC_PATH=/tmp/x git pull` runs /tmp/x/git-pull
        given = cmd.env.get(name) or cmd.state.vars.get(name)
        if given is not None:
            scripts += _hooks(cmd, given)
    for path in top.values.get("--exec-path", []):
        scripts += _hooks(cmd, Word(path, "1" * len(path), any(a.dynamic and path in a.text for a in args)))
    sub_at = top.operands[0] if top.operands else None
    if sub_at is not None:
        sub = texts[sub_at].lower()
        rest = args[sub_at + 1 :]
        if sub == "config":
            scripts += _config_persist(cmd, rest)
        if sub in ("clone", "init"):  # `--template=DIR`: its hooks are installed and run on checkout
            for k, w in enumerate(rest):
                if w.text == "--template" and k + 1 < len(rest):
                    scripts += _hooks(cmd, rest[k + 1])
                elif w.text.startswith("--template="):
                    scripts += _hooks(cmd, Word(w.text[11:], w.mask[11:], w.dynamic, w.sources))
        for w in rest:  # `git clone 'ext::sh -c cmd'`: the ext transport runs a command
            if w.text.startswith("ext::"):
                spaced = w.text[5:].replace("%%", "\0").replace("% ", "\1")
                argv = [a.replace("\1", " ").replace("\0", "%") for a in spaced.split(" ") if a]
                joined = " ".join(shlex.quote(a) for a in argv)
                scripts.append(Word(joined, "1" * len(joined), w.dynamic, w.sources))
        alias = config.get("alias." + sub)
        if alias is not None and (alias.dynamic or alias.text.startswith("!")):
            line = Word(alias.text[1:] if not alias.dynamic else alias.text, "", alias.dynamic, alias.sources)
            line.mask = "1" * len(line.text)
            for w in rest:
                line.add(" ", True)
                line.extend(Word(shlex.quote(w.text), "1" * len(shlex.quote(w.text)), w.dynamic, w.sources))
            scripts.append(line)
        for option in _GIT_COMMAND_OPTIONS.get(sub, ()):
            for k, w in enumerate(rest):
                if w.text == option and k + 1 < len(rest):
                    scripts.append(rest[k + 1])
                elif w.text.startswith(option + "=") and option.startswith("--"):
                    v = w.text[len(option) + 1 :]
                    scripts.append(Word(v, w.mask[len(option) + 1 :], w.dynamic, w.sources))
    out: list[Command] = []
    for script in scripts:
        out += run_word(walker, cmd, script, src, st, depth)
    return out


_NO_HOOKS = frozenset({"", "/dev/null", "nul", "/etc/gitconfig", "~/.gitconfig"})


def _hooks(cmd: Command, value: Word) -> list[Word]:
    """``core.hooksPath`` (also ``--exec-path``, ``--template``, ``GIT_EXEC_PATH``): programs in
    that directory run. Files written earlier in the line are read; a directory outside the working
    directory (or only known at run time) runs code the command does not show, so it is ``exec``
    unknown; the project's own hooks directory is not."""
    if value.dynamic:
        return [Word(value.text, value.mask, True, value.sources)]
    text = value.text.strip()
    if text.lower() in _NO_HOOKS:
        return []
    where = pathmod.normalize(text, cmd.state.cwd, cmd.state.home, shell=True)
    written = [body for path, body in cmd.state.scripts.items() if path.startswith(where.rstrip("/") + "/")]
    if written:
        return [Word(body, "1" * len(body)) for body in written]
    cwd = cmd.state.cwd
    if cwd and (where == cwd or where.startswith(cwd.rstrip("/") + "/")):
        return []
    cmd.code_effects.append(
        effectmod.effect("exec", cmd.program, [*cmd.wrappers, "git-hooks"], path=where, source="unknown",
                         certainty="unknown")
    )  # fmt: skip
    return []


_GIT_CONFIG_FILES = {"--global": "~/.gitconfig", "--system": "/etc/gitconfig"}


def _config_persist(cmd: Command, rest: list[Word]) -> list[Word]:
    """``git config KEY VALUE`` for a key whose value is a command git runs later (``core.pager``,
    ``core.hooksPath``, a ``!`` alias, ...): the command is read as one (``git config core.pager
    'curl ... | sh'``), and ``persist`` on the configuration file when it is the user's or the
    system's (``--global``, ``--system``, ``--file``), or for ``core.hooksPath`` anywhere."""
    key, value, scope = git.setting([w.text for w in rest], rest)
    if value is None:
        return []
    runs_later = (
        _GIT_RUN_KEYS.match(key) is not None
        or key == "core.hookspath"
        or (key.startswith("alias.") and (value.dynamic or value.text.startswith("!")))
    )
    if not runs_later:
        return []
    if scope or key == "core.hookspath":  # the repository's own: its command is read below
        path = pathmod.normalize(_GIT_CONFIG_FILES.get(scope, scope) or ".git/config", cmd.state.cwd, cmd.state.home,
                                 shell=True)  # fmt: skip
        cmd.code_effects.append(effectmod.effect("persist", cmd.program, [*cmd.wrappers, "git-config"], path=path))
    if key == "core.hookspath" or value.dynamic:
        return []
    text = value.text[1:] if key.startswith(("alias.", "credential.")) and value.text.startswith("!") else value.text
    return [Word(text, "1" * len(text))]


PROJECT_TOOLS = frozenset({"make", "gmake", "npm", "pnpm", "yarn", "bun"})
_MAKEFILES = ("GNUmakefile", "makefile", "Makefile")
_NPM_HOOKS = {
    "install": ("preinstall", "install", "postinstall", "prepare"), "i": ("preinstall", "install", "postinstall", "prepare"),
    "ci": ("preinstall", "install", "postinstall", "prepare"), "add": ("preinstall", "install", "postinstall", "prepare"),
    "test": ("pretest", "test", "posttest"), "t": ("pretest", "test", "posttest"),
    "start": ("prestart", "start", "poststart"), "publish": ("prepublishOnly", "prepack", "prepare", "publish"),
}  # fmt: skip


def project_config(
    walker: Walker, cmd: Command, program: str, args: list[Word], src: bytes, st: State, depth: int
) -> list[Command]:
    """A build file written earlier in the same line and then used: ``printf 'all:\\n\\trm -rf ~'
    > Makefile && make`` runs the recipes, ``echo '{"scripts": {"postinstall": ...}}' >
    package.json && npm install`` runs the lifecycle scripts. Files on disk stay unknown (policies/README.md)."""
    scripts = cmd.state.scripts
    if not scripts:
        return []
    cwd = cmd.state.cwd
    texts = [w.text for w in args]
    lines: list[str] = []
    if program in ("make", "gmake"):
        given = next((texts[k + 1] for k, t in enumerate(texts[:-1]) if t in ("-f", "--file", "--makefile")), None)
        names = [given] if given else list(_MAKEFILES)
        body = next((scripts[p] for n in names if (p := pathmod.normalize(n, cwd, cmd.state.home, shell=True)) in scripts),
                    None)  # fmt: skip
        if body is not None:
            lines = [ln.lstrip("\t").lstrip("@+-").replace("$$", "$") for ln in body.split("\n") if ln.startswith("\t")]
    else:
        body = scripts.get(pathmod.normalize("package.json", cwd, cmd.state.home, shell=True))
        if body is None:
            return []
        try:
            table = json.loads(body).get("scripts", {})
        except (ValueError, AttributeError):
            return []
        operands = [t for t in texts if not t.startswith("-")]
        sub = operands[0] if operands else ("install" if program in ("yarn", "bun") else "")
        if sub in ("run", "run-script") and len(operands) > 1:
            hooks: tuple[str, ...] = ("pre" + operands[1], operands[1], "post" + operands[1])
        elif sub in _NPM_HOOKS:
            hooks = _NPM_HOOKS[sub]
        else:
            hooks = ("pre" + sub, sub, "post" + sub) if program in ("yarn", "bun") and sub else ()
        lines = [v for h in hooks if isinstance(v := table.get(h) if isinstance(table, dict) else None, str)]
    out: list[Command] = []
    for line in lines:
        out += run_word(walker, cmd, Word(line, "1" * len(line)), src, st, depth)
    return out


CONTAINER_ENGINES = frozenset({"docker", "podman", "nerdctl"})
_CONTAINER_FLAGS = frozenset({"--rm", "--privileged", "--init", "--interactive", "--tty", "--detach", "--read-only",
                              "--no-healthcheck", "--oom-kill-disable", "--publish-all", "--quiet", "--help"})  # fmt: skip
"""Long options of ``docker run`` without a value (every other long option takes one)."""
_CONTAINER_SHORT_VALUED = "acehlmpuvw"
_KEPT = frozenset({"read", "write", "delete", "network"})
_SYSTEM_DIR = re.compile(r"^/(bin|boot|dev|etc|home|lib[0-9x]*|opt|root|sbin|srv|usr|var|Users|Library|System)/?$")


def container(cmd: Command, args: list[Word]) -> None:
    """``docker run -v /:/h IMAGE rm -rf /h/home``: the container's command is read on its own
    (paths inside the container), and what it does to a bind-mounted directory is done to the
    host directory (``rm -rf /home/ana`` here); writes through a read-only mount are dropped."""
    texts = [w.text for w in args]
    at = next((k for k, t in enumerate(texts) if not t.startswith("-")), None)
    if at is None or texts[at] not in ("run", "container"):
        return
    if texts[at] == "container":
        if texts[at + 1 : at + 2] != ["run"]:
            return
        at += 1
    mounts: list[tuple[str, str, bool]] = []
    workdir, entrypoint, privileged = "/", "", False
    k = at + 1
    while k < len(args):
        t = texts[k]
        if t == "--":
            k += 1
            break
        if not t.startswith("-") or t == "-":
            break
        name, eq, value = t.partition("=")
        takes = (name.startswith("--") and name not in _CONTAINER_FLAGS) or (
            not name.startswith("--") and name[-1:] in _CONTAINER_SHORT_VALUED
        )
        if not eq and not name.startswith("--") and len(name) > 2 and name[1] in _CONTAINER_SHORT_VALUED:
            name, value, eq, takes = name[:2], name[2:], "=", True  # `-v/:/h`
        dynamic = args[k].dynamic
        if takes and not eq:
            value = texts[k + 1] if k + 1 < len(args) else ""
            dynamic = k + 1 < len(args) and args[k + 1].dynamic
            k += 1
        k += 1
        if name in ("-v", "--volume"):
            parts = value.split(":")
            if dynamic and "$" in parts[0]:
                parts[0] = "\0"
            if len(parts) >= 2:
                mounts.append((parts[0], parts[1], "ro" in parts[2:] or "readonly" in parts[2:]))
        elif name == "--mount":
            fields = dict(f.partition("=")[::2] for f in value.split(","))
            source = fields.get("source") or fields.get("src") or ""
            target = fields.get("target") or fields.get("destination") or fields.get("dst") or ""
            if fields.get("type", "volume") == "bind" and source and target:
                mounts.append((source, target, "readonly" in fields or fields.get("ro") in ("", "true", "1")))
        elif name in ("-w", "--workdir"):
            workdir = value
        elif name == "--entrypoint":
            entrypoint = value
        elif name == "--privileged" or (name in ("--pid", "--userns") and value == "host"):
            privileged = True
    words = ([Word(entrypoint, "1" * len(entrypoint))] if entrypoint else []) + args[k + 1 :]
    binds = [(src, dst.rstrip("/") or "/", ro) for src, dst, ro in mounts if src.startswith(("/", "~", "$", ".", "\0"))]
    st = cmd.state
    if binds and (privileged or k >= len(args) or len(words) == (1 if entrypoint else 0)):
        # the image's own command, unseen, gets the root, the home or a system directory to write
        # (or a privileged container, which can reach any of the host's files: `chroot /mnt ...`)
        for src, _, ro in binds:
            host = pathmod.normalize(src, st.cwd, st.home, shell=True) if src != "\0" else ""
            if not ro and (host in ("/", st.home) or _SYSTEM_DIR.match(host)):
                cmd.code_effects.append(effectmod.effect("exec", cmd.program, [*cmd.wrappers, cmd.program],
                                                         path=host, source="unknown", certainty="unknown"))  # fmt: skip
        return
    if not binds or not words or any(w.dynamic for w in words):
        return
    from gateway.policy.facts.shell import parse_command  # here: the package imports this module

    inner, _ = parse_command(" ".join(shlex.quote(w.text) for w in words), workdir, "/root")
    for fact_ in inner:
        for e in fact_["effects"]:
            if e["kind"] not in _KEPT:
                continue
            if e["kind"] == "network":
                cmd.code_effects.append(e | {"via": [*cmd.wrappers, cmd.program, *e["via"]]})
                continue
            path = e["path"]
            best = max((b for b in binds if path == b[1] or path.startswith(b[1].rstrip("/") + "/")),
                       key=lambda b: len(b[1]), default=None)  # fmt: skip
            if best is None or (best[2] and e["kind"] != "read"):
                continue
            source, target, _ = best
            if source == "\0":  # a host directory only known at run time
                host, certainty = "", "unknown"
            else:
                rest = path[len(target) :] if target != "/" else path
                host = pathmod.normalize(source.rstrip("/") + rest if rest else source, st.cwd, st.home, shell=True)
                certainty = e["certainty"]
            cmd.code_effects.append(
                e | {"path": host, "certainty": certainty, "via": [*cmd.wrappers, cmd.program, *e["via"]]}
            )


def find_exec(walker: Walker, cmd: Command, args: list[Word], src: bytes, st: State, depth: int) -> list[Command]:
    out: list[Command] = []
    starts = []
    for a in args:
        if a.text.startswith("-") or a.text in ("(", "!"):
            break
        starts.append(a.text)
    starts = starts or ["."]
    if any(a.text == "-delete" for a in args):
        words = [Word("rm", "11"), Word("-rf", "111")] + [Word(x, "1" * len(x)) for x in starts]
        out += walker.resolve(Command(words, st, depth + 1, "find-delete"), src, st, depth + 1)
    k = 0
    while k < len(args):
        if args[k].text in ("-exec", "-execdir", "-ok", "-okdir"):
            end = k + 1
            while end < len(args) and args[end].text not in (";", "+"):
                end += 1
            inner: list[Word] = []
            for a in args[k + 1 : end]:
                if "{}" in a.text:
                    for start in starts:
                        t = a.text.replace("{}", start.rstrip("/") + "/{}")
                        inner.append(Word(t, "1" * len(t)))
                else:
                    inner.append(a)
            if inner:
                sub = Command(inner, st, depth + 1, "find-exec")
                out += walker.resolve(sub, src, st, depth + 1)
            k = end
        k += 1
    return out
