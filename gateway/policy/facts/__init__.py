"""Facts about one event, computed in Python once, for CEL rules to reason over (the ``facts``
variable of local policies).

Matching regular expressions against a raw command string cannot keep up with the shell: quoting,
wrappers, variables, globs and pipelines each give an attacker another spelling. So the event's
tool call is parsed here (:mod:`shell` with tree-sitter-bash, :mod:`paths`, :mod:`hosts`,
:mod:`tools`) and the rules test the structure. Shape (docs/policies/index.md)::

    facts.tool      {name, short, kind, server}      kind: shell|read|edit|write|search|list|fetch|patch|other
    facts.paths     [normalized paths of the tool input]   facts.raw_paths  [as given]
    facts.globs     [glob patterns of the tool input]
    facts.hosts     [canonical hosts of the tool input and of every command]
    facts.cwd / facts.home / facts.roots
    facts.shell     {present, unparsed, reasons, dynamic}
    facts.effects   [{kind, path, recursive, certainty, source, host, direction, ref, force,
                      program, via}]      what the call would do (:mod:`effects`)
    facts.commands  [{program, argv, args, subcommand, options, operands, wrappers, privileged,
                      dynamic, globs, paths, hosts, cwd, branch, redirects, stdin_from, stdout_to,
                      code_from, context, depth}]

Pure: no I/O, nothing read from the machine the gateway runs on.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from gateway.policy.facts import effects, powershell, shell, tools
from gateway.policy.facts import paths as pathmod

__all__ = ["INPUTS", "derived_variables", "describe_facts", "for_event", "references_facts", "with_facts"]

INPUTS = (("event", "tool"), ("event", "session", "cwd"), ("event", "session", "workspaceRoots"))
"""The only parts of the event that facts are computed from (:func:`for_event` reads nothing
else), so what a rule reads through ``facts`` is these (:mod:`gateway.policy.memo`)."""

_REFERENCE = re.compile(r"\bfacts\b")


def references_facts(source: str) -> bool:
    """Whether a CEL source uses the ``facts`` variable (facts are computed only then)."""
    return bool(_REFERENCE.search(source))


def _str(value: Any) -> str:
    return value.replace("\x00", "\ufffd") if isinstance(value, str) else ""


DIR_FIELDS = ("cwd", "workdir", "working_directory")
SHELL_DIR_FIELDS = (*DIR_FIELDS, "dir_path", "directory")
"""Tool-input fields naming the working directory (for a shell tool, Gemini's ``dir_path`` and
older ``directory`` too); the first absolute one wins, and two different ones make the command
unreadable (``ambiguous-cwd``) instead of letting a harmless one hide the one that runs."""


def _cwd_disagrees(inp: dict[str, Any], session_cwd: str, windows: bool = False) -> bool:
    """A ``cwd`` in the tool input that is not the session's: the harnesses that send one (Cursor,
    Windsurf) report the same directory for the session, while in a tool that takes none
    (Claude Code's ``Bash``) it is only text the model wrote. In a Windows session ``/c/x``,
    ``C:\\x`` and ``c:/x`` are one directory."""
    given = _str(inp.get("cwd"))
    if not (_absolute(given) and _absolute(session_cwd)):
        return False
    if windows:
        return _windows_dir(given).lower() != _windows_dir(session_cwd).lower()
    return pathmod.normalize(given) != pathmod.normalize(session_cwd)


def _windows_dir(path: str) -> str:
    return pathmod.drive_spelling(pathmod.normalize(path))


def _absolute(path: str) -> bool:
    return path.startswith("/") or pathmod.has_drive(path)


def _map(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def for_event(event: Mapping[str, Any]) -> dict[str, Any]:
    """The facts of ``event``, from :data:`INPUTS` only; call once per event (nothing is cached:
    an event may change between backends of a chain)."""
    session: dict[str, Any] = _map(event.get("session"))
    tool: dict[str, Any] = _map(event.get("tool"))
    inp: dict[str, Any] = _map(tool.get("input"))
    name = _str(tool.get("name"))
    kind = tools.kind_of(name, tool, inp)
    roots = [
        pathmod.normalize(_str(r)) for r in session.get("workspaceRoots") or [] if isinstance(r, str) and r.strip()
    ]
    roots = [r for r in roots if r]
    given = [inp[k] for k in (SHELL_DIR_FIELDS if kind == "shell" else DIR_FIELDS) if k in inp]
    dirs = list(dict.fromkeys(pathmod.normalize(c) for c in map(_str, given) if _absolute(c))) if given else []
    session_cwd = _str(session.get("cwd"))
    cwd = pathmod.normalize(session_cwd) if _absolute(session_cwd) else ""
    # a Windows session (as the session shows it; the tool input's cwd only when it shows nothing):
    # one spelling of its paths, C:/..., also for Git Bash's /c/...
    windows = any(map(pathmod.is_windows, (cwd, *roots) if cwd or roots else dirs))
    if windows:
        roots = [pathmod.drive_spelling(r) for r in roots]
        dirs = list(dict.fromkeys(pathmod.drive_spelling(d) for d in dirs))
        cwd = pathmod.drive_spelling(cwd)
    cwd = dirs[0] if dirs else cwd
    home = pathmod.home_of(cwd, roots)
    paths, raw_paths, globs = tools.tool_paths(kind, inp, cwd, home)
    hosts = tools.tool_hosts(kind, inp)
    commands: list[dict[str, Any]] = []
    reasons: list[str] = []
    present = False
    ps = False
    if kind == "shell":
        ps = "powershell" in name.lower() or "pwsh" in name.lower()
        text = tools.command_text(inp, ps)
        if text is not None and text.strip():
            present = True
            commands, reasons = shell.parse_command(text, cwd, home)
            for command in commands:
                hosts += command["hosts"]
            if len(dirs) > 1 or _cwd_disagrees(inp, session_cwd, windows):
                reasons = [*reasons, "ambiguous-cwd"]  # which directory the command runs in is unknown
    short = tools.short_name(name)
    found = [] if kind == "shell" else effects.of_tool(kind, short, paths, globs, hosts, inp)
    for command in commands:
        found += command.pop("effects")
    if ps:
        found += powershell.expression_effects(tools.command_text(inp, False) or "", short, [])
    return {
        "tool": {"name": name.lower(), "short": short, "kind": kind, "server": tools.server_of(tool)},
        "paths": paths,
        "raw_paths": [_str(p) for p in raw_paths],
        "globs": globs,
        "hosts": list(dict.fromkeys(hosts)),
        "cwd": cwd,
        "home": home,
        "roots": roots,
        "shell": {
            "present": present,
            "unparsed": bool(reasons),
            "reasons": reasons,
            "dynamic": any(c["dynamic"] for c in commands),
        },
        "commands": commands,
        "effects": found,
    }


def derived_variables(event: Mapping[str, Any]) -> Mapping[str, Any]:
    """The variables the request's CEL activation derives from ``event``
    (:class:`gateway.routing.context.ContextBuilder`), so the facts are computed once and the
    activation is converted once."""
    return {"facts": for_event(event)}


def with_facts(engine: Any, activation: Any, uses: bool) -> Any:
    """``activation`` plus the ``facts`` variable when the library ``uses`` it (else unchanged),
    derived on first use. In a request the activation already derives them
    (:func:`derived_variables`); this is for an activation rebound to a modified event, and
    outside requests."""
    if not uses or activation.derives or "facts" in activation.given:
        return activation
    return engine.activation(activation.given, maybe_nul=False, derive=derived_variables)


def describe_facts(event: Mapping[str, Any]) -> list[str]:
    """Human-readable lines for ``ahp-gateway explain``."""
    f = for_event(event)
    lines = [f"facts: tool {f['tool']['name']!r} kind={f['tool']['kind']} cwd={f['cwd'] or '?'} home={f['home']}"]
    if f["tool"]["server"]:
        lines.append(f"  mcp server: {f['tool']['server']}")
    if f["paths"]:
        lines.append(f"  paths: {', '.join(f['paths'])}")
    if f["hosts"]:
        lines.append(f"  hosts: {', '.join(f['hosts'])}")
    sh = f["shell"]
    if sh["present"]:
        flags = [k for k in ("unparsed", "dynamic") if sh[k]]
        lines.append(
            f"  shell: {len(f['commands'])} command(s){' ' + ' '.join(flags) if flags else ''}"
            f"{' (' + ', '.join(sh['reasons']) + ')' if sh['reasons'] else ''}"
        )
        for c in f["commands"]:
            parts = [f"program={c['program'] or '?'}", f"argv={c['argv']}"]
            keys = (
                "subcommand",
                "wrappers",
                "options",
                "paths",
                "globs",
                "hosts",
                "stdin_from",
                "stdout_to",
                "code_from",
            )
            parts += [f"{key}={c[key]}" for key in keys if c[key]]
            if c["cwd"]:
                parts.append(f"cwd={c['cwd']}")
            if c["dynamic"]:
                parts.append("dynamic")
            if c["context"]:
                parts.append(f"in={c['context']}")
            lines.append("    " + " ".join(parts))
    if f["effects"]:
        lines.append(f"  effects: {len(f['effects'])}")
        lines += ["    " + describe_effect(e) for e in f["effects"]]
    return lines


def describe_effect(e: Mapping[str, Any]) -> str:
    """One effect as a line: ``delete /home/ana recursive exact by rm via sudo``."""
    parts = [e["kind"]]
    parts += [e[k] if k == "path" else f"{k}={e[k]}" for k in ("path", "host", "ref", "source", "direction") if e[k]]
    parts += [flag for flag in ("recursive", "force") if e[flag]]
    parts.append(e["certainty"])
    if e["program"]:
        parts.append(f"by {e['program']}")
    if e["via"]:
        parts.append("via " + ",".join(e["via"]))
    return " ".join(parts)
