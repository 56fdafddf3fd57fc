"""Commands that other programs run: ``xargs`` and ``find -exec``, the program table's ``runs``
role (``watch``, ``ssh``, ``parallel``, ...), and what git runs from its configuration, its
environment and its options."""

from __future__ import annotations

import re
import shlex
from typing import TYPE_CHECKING

from gateway.policy.facts import effects as effectmod
from gateway.policy.facts import options as opts
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
"""Programs that join the words of the command they run into one shell line."""
_SHORT_ALIAS = {("git", "rebase", "--exec"): "-x"}
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
)
"""Environment variables whose value is a command git runs."""
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
        start = next(k for k, w in enumerate(rest) if w is chosen[0])
        stop = len(rest)
        if spec.runs == "operands-before-separator":
            stop = next((k for k in range(start, len(rest)) if rest[k].text in (":::", "::::", ":::+")), stop)
        words = rest[start:stop]
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


def git_runs(walker: Walker, cmd: Command, args: list[Word], src: bytes, st: State, depth: int) -> list[Command]:
    """Commands git runs by itself: configuration that names a command (``core.sshCommand``,
    ``core.pager``, ``credential.helper='!...'``, a ``!`` alias, ...), the environment
    (``GIT_SSH_COMMAND``, ``GIT_EDITOR``, ...) and options that take a command
    (``filter-branch --tree-filter``, ``fetch --upload-pack``)."""
    texts = [a.text for a in args]
    top = opts.parse(texts, opts.spec_for("git"))
    config = git.config(cmd, top.values.get("-c", []))
    scripts: list[Word] = []
    for key, value in config.items():
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
    sub_at = top.operands[0] if top.operands else None
    if sub_at is not None:
        sub = texts[sub_at].lower()
        rest = args[sub_at + 1 :]
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
