"""Wrappers resolved to the program they run (``env``, ``sudo -u x``, ``nice``, ``exec``,
``command``, ``busybox``, ``xargs``, ...), and what the program then runs itself: a shell's
``-c`` script, ``eval``, a function, git, ``find``, inline code."""

from __future__ import annotations

import re
import shlex
from typing import TYPE_CHECKING

from gateway.policy.facts import code as codemod
from gateway.policy.facts import paths as pathmod
from gateway.policy.facts import programs
from gateway.policy.facts.shell import fact, git, runs
from gateway.policy.facts.shell.command import (
    PRIVILEGE,
    SHELLS,
    Command,
    State,
    program_name,
)
from gateway.policy.facts.shell.inline import (
    inline_code,
    option_value,
    shell_payload,
)
from gateway.policy.facts.words import (
    Word,
)

if TYPE_CHECKING:
    from gateway.policy.facts.shell.walker import Walker


# wrapper name -> (short options with a value, long options with a value, stop words)
_WRAPPERS: dict[str, tuple[str, frozenset[str]]] = {
    "sudo": ("ugpChDrtTURc", frozenset({"user", "group", "prompt", "close-from", "chdir", "role", "type", "command-timeout", "other-user", "host"})),
    "doas": ("uC", frozenset()),
    "pkexec": ("", frozenset({"user"})),
    "run0": ("ugD", frozenset({"user", "group", "chdir", "description", "setenv", "property", "unit", "slice", "nice"})),
    "runuser": ("ugGw", frozenset({"user", "group", "supp-group", "whitelist-environment"})),
    "env": ("uCSP", frozenset({"unset", "chdir", "split-string", "argv0", "default-signal", "ignore-signal", "block-signal"})),
    "nice": ("n", frozenset({"adjustment"})),
    "ionice": ("cnpPtu", frozenset({"class", "classdata", "pid", "pgid", "uid"})),
    "nohup": ("", frozenset()),
    "npx": ("p", frozenset({"package"})),
    "bunx": ("p", frozenset({"package"})),
    "pnpx": ("", frozenset()),
    "exec": ("a", frozenset()),
    "command": ("", frozenset()),
    "builtin": ("", frozenset()),
    "time": ("fo", frozenset({"format", "output"})),
    "timeout": ("sk", frozenset({"signal", "kill-after"})),
    "stdbuf": ("ioe", frozenset({"input", "output", "error"})),
    "setsid": ("", frozenset()),
    "unbuffer": ("", frozenset()),
    "caffeinate": ("tw", frozenset()),
    "chrt": ("T", frozenset({"sched-runtime", "sched-deadline", "sched-period"})),
    "taskset": ("", frozenset()),
    "xargs": ("ILnPdEsaeil", frozenset({"replace", "max-lines", "max-args", "max-procs", "delimiter", "eof", "max-chars", "arg-file", "process-slot-var"})),
    "strace": ("oeEpPsSuXbIa", frozenset({"output", "trace", "signal", "env", "user"})),
    "ltrace": ("oeEpsSuna", frozenset({"output"})),
    "torsocks": ("uPpa", frozenset()),
    "proxychains": ("f", frozenset()),
    "proxychains4": ("f", frozenset()),
    "firejail": ("", frozenset()),
    "flock": ("wEc", frozenset({"timeout", "conflict-exit-code", "command"})),
    "chroot": ("", frozenset({"userspec", "groups"})),
    "watch": ("ndqc", frozenset({"interval", "differences"})),
    "sshpass": ("pfdP", frozenset()),
    "cross-env": ("", frozenset()),
    "fakeroot": ("lfsib", frozenset({"lib", "faked"})),
    "catchsegv": ("", frozenset()),
    "rlwrap": ("bfHlPSzCDeghmOpqstw", frozenset()),
    "dbus-launch": ("", frozenset({"config-file", "autolaunch"})),
    "numactl": ("CNmpiP", frozenset({"physcpubind", "cpunodebind", "membind", "preferred", "interleave"})),
    "distrobox-host-exec": ("", frozenset()),
    "flatpak-spawn": ("", frozenset({"directory", "forward-fd", "env", "unset-env"})),
    "xvfb-run": ("nefpsw", frozenset({"server-num", "error-file", "auth-file", "xauth-protocol", "server-args", "wait"})),
    "valgrind": ("", frozenset()),
    "unshare": ("SGRw", frozenset({"map-user", "map-group", "setuid", "setgid", "root", "wd", "propagation", "setgroups"})),
    "nsenter": ("tSGwrW", frozenset({"target", "setuid", "setgid", "wd", "root", "wdns", "env"})),
    "then": ("", frozenset()),
    "do": ("", frozenset()),
    "else": ("", frozenset()),
}  # fmt: skip
_TAKES_OPERAND = {"timeout": 1, "chrt": 1, "taskset": 1, "chroot": 1, "flock": 1}
"""Wrappers whose first operand is not the command (a duration, priority, mask, root, lock file)."""


_RUNS = frozenset(name for name, rows in programs.table().items() if any(r.spec.runs for r in rows))
"""Programs with a ``runs`` row in the program table."""
_CODE = frozenset(name for name, rows in programs.table().items() if any(r.spec.code for r in rows))
"""Programs with a ``code`` row in the program table (vim, less, gdb, sed)."""


def resolve(walker: Walker, cmd: Command, src: bytes, st: State, depth: int) -> list[Command]:
    words = cmd.words
    i = 0
    out: list[Command] = [cmd]
    head = words[0] if words else None
    if head is not None and head.text in st.shell_aliases and "1" not in head.mask and not head.dynamic:
        # `alias x='rm -rf'; x ~`: bash expands it only with expand_aliases (interactive
        # shells, zsh); read conservatively as expanded
        line = Word(st.shell_aliases[head.text], "1" * len(st.shell_aliases[head.text]))
        for arg in words[1:]:
            quoted = shlex.quote(arg.text)
            line.add(" ", True)
            line.extend(Word(quoted, "1" * len(quoted), arg.dynamic, arg.sources))
        out += walker.payload(cmd, line, src, st, depth)
    while i < len(words):
        w = words[i]
        if w.dynamic:
            cmd.dynamic = True
            break
        name = program_name(w.text)
        if name in ("busybox", "toybox") and i + 1 < len(words) and not words[i + 1].text.startswith("-"):
            cmd.wrappers.append(name)
            i += 1
            continue
        if name == "command" and any(x.text in ("-v", "-V") for x in words[i + 1 : i + 2]):
            break
        if name in ("su", "script", "sg") or (name == "runuser" and any(x.text in ("-c", "--command") for x in words)):
            cmd.wrappers.append(name)
            payload = option_value(words[i + 1 :], ("-c", "--command"))
            if payload is not None:
                out += walker.payload(cmd, payload, src, st, depth)
                cmd.resolved = name
            i = len(words)
            break
        if name not in _WRAPPERS:
            break
        short_v, long_v = _WRAPPERS[name]
        cmd.wrappers.append(name)
        j = i + 1
        operands_to_skip = _TAKES_OPERAND.get(name, 0)
        if name == "taskset" and j < len(words) and words[j].text in ("-c", "--cpu-list"):
            j += 1
        while j < len(words):
            a = words[j].text
            if a == "--":
                j += 1
                break
            if name in ("env", "cross-env") and "=" in a and not a.startswith("-"):
                key, _, value = a.partition("=")
                w_value = words[j]
                cmd.env[key] = Word(value, w_value.mask[len(key) + 1 :], w_value.dynamic, w_value.sources)
                j += 1
                continue
            if name == "nice" and a[:1] == "-" and a[1:].lstrip("-").isdigit():
                j += 1
                continue
            if a.startswith("--") and len(a) > 2:
                key, eq, val = a[2:].partition("=")
                if key in ("split-string", "command") and name in ("env", "flock"):
                    text = val if eq else (words[j + 1].text if j + 1 < len(words) else "")
                    out += walker.payload(cmd, Word(text, "1" * len(text)), src, st, depth)
                    j = len(words)
                    break
                if key == "chdir" and name in ("env", "sudo", "run0"):
                    chdir_for(walker, cmd, val if eq else (words[j + 1].text if j + 1 < len(words) else ""))
                j += 1 if eq or key not in long_v else 2
                continue
            if a.startswith("-") and len(a) > 1:
                body = a[1:]
                consumed = 1
                for k, ch in enumerate(body):
                    if ch in short_v:
                        if (name in ("env",) and ch == "S") or (name == "flock" and ch == "c"):
                            payload = (
                                Word(body[k + 1 :])
                                if body[k + 1 :]
                                else (words[j + 1] if j + 1 < len(words) else Word())
                            )
                            out += walker.payload(cmd, payload, src, st, depth)
                            j = len(words)
                            consumed = 0
                            break
                        if name == "xargs" and ch in "eil":
                            break  # optional attached value only
                        if (name == "env" and ch == "C") or (name in ("sudo", "run0") and ch == "D"):
                            value = body[k + 1 :] or (words[j + 1].text if j + 1 < len(words) else "")
                            chdir_for(walker, cmd, value)
                        if not body[k + 1 :]:
                            consumed = 2
                        break
                if consumed == 0:
                    break
                j += consumed
                continue
            if operands_to_skip:
                operands_to_skip -= 1
                j += 1
                continue
            break
        if name == "watch":
            rest = words[j:]
            text = " ".join(x.text for x in rest)
            out += walker.payload(cmd, Word(text, "1" * len(text), any(x.dynamic for x in rest)), src, st, depth)
            i = len(words)
            break
        if name == "xargs":
            fed = runs.xargs_words(walker, cmd, words, i, j)
            if fed is None:
                cmd.dynamic = True
            else:
                given = words[j:]
                words = cmd.words = fed
                if given and program_name(given[0].text) in SHELLS and re.fullmatch(r"-[a-z]*c", given[-1].text):
                    text = cmd.stdin_text or ""  # `... | xargs sh -c`: the input is the script
                    out += walker.payload(cmd, Word(text, "1" * len(text)), src, st, depth)
        i = j
    cmd.start = i
    if cmd.resolved is None and i >= len(words) and cmd.wrappers and cmd.wrappers[-1] in PRIVILEGE:
        options = {w.text for w in words[1:]}
        if cmd.wrappers[-1] == "su" or options & {"-s", "-i", "--shell", "--login"}:
            cmd.implied = "sh"  # `sudo -s`, `sudo -i`, `su`: a shell that reads stdin
    elif cmd.resolved is None and i >= len(words) and cmd.wrappers[-1:] == ["env"]:
        cmd.implied = "env"  # `env` alone prints the environment
    program = cmd.resolved = cmd.resolved or cmd.program
    args = words[i + 1 :] if i < len(words) else []
    if not program and i < len(words) and words[i].dynamic and (script := shell_payload(args)) is not None:
        out += walker.payload(cmd, script, src, st, depth)  # `${SHELL:-sh} -c '...'`: read as a shell's
    if program in SHELLS:
        script = shell_payload(args)
        if script is not None:
            at = next(k for k, w in enumerate(args) if w is script)
            positional = {str(k): w for k, w in enumerate(args[at + 1 :])}  # `sh -c '...$1' _ /`
            out += walker.payload(cmd, script, src, st, depth, positional)
    elif program == "eval":
        joined = Word()
        for k, arg in enumerate(args):
            if k:
                joined.add(" ", True)
            joined.extend(arg)
        out += walker.payload(cmd, joined, src, st, depth)
    elif program == "alias":
        for arg in args:
            name, eq, value = arg.text.partition("=")
            if eq and name and not arg.dynamic:
                st.shell_aliases[name] = value
    elif program == "set" and not cmd.dynamic:
        texts = [a.text for a in args]
        if "--" in texts or (args and not texts[0].startswith(("-", "+"))):
            given = args[texts.index("--") + 1 :] if "--" in texts else args
            for key in [key for key in st.vars if key.isdigit() and key != "0"]:
                del st.vars[key]
            st.vars.update({str(k + 1): a for k, a in enumerate(given)})
            st.arrays["@"] = list(given)
    elif (
        cmd.start < len(words)
        and (called := words[cmd.start].text) in st.functions
        and "1" not in words[cmd.start].mask
    ):
        walker.called.add(called)  # `f(){ rm -rf "$1"; }; f ~`: the body with its arguments
        positional = {"0": words[cmd.start], **{str(k + 1): a for k, a in enumerate(args)}}
        out += walker.payload(
            cmd, Word(st.functions[called], "1" * len(st.functions[called])), src, st, depth, positional
        )
    elif program in ("cd", "pushd") and cmd.context != "substitution":
        walker.change_dir(args, st)
    elif program == "git":
        if not cmd.dynamic:
            git.state(cmd, args, st)
        out += runs.git_runs(walker, cmd, args, src, st, depth)
    elif program == "find":
        out += runs.find_exec(walker, cmd, args, src, st, depth)
    elif program in runs.CONTAINER_ENGINES:
        runs.container(cmd, args)
    elif (language := codemod.language_of(program)) is not None:
        inline = inline_code(language, args)
        if inline is not None:
            out += walker.run_code(cmd, language, inline, src, st, depth)
    if program in _RUNS:
        out += runs.runs(walker, cmd, program, args, src, st, depth)
    if program in _CODE:
        out += runs.code(walker, cmd, program, args, src, st, depth)
    if program in runs.PROJECT_TOOLS and st.scripts:
        out += runs.project_config(walker, cmd, program, args, src, st, depth)
    if program in runs.SSH_LIKE:
        out += runs.ssh_options(walker, cmd, args, src, st, depth)
    fact.build(cmd)
    walker.commands.append(cmd)
    walker.finish_code(cmd, src, depth)
    walker.track_files(cmd, st)
    return out


def chdir_for(walker: Walker, cmd: Command, directory: str) -> None:
    """``env -C dir`` / ``sudo -D dir``: the command runs elsewhere (this command only)."""
    cmd.state = cmd.state.copy()
    cmd.state.cwd = pathmod.normalize(directory, cmd.state.cwd, cmd.state.home, shell=True) if directory else ""
