"""What a tool call is, independent of the harness: its kind, target paths, hosts, MCP server."""

from __future__ import annotations

import re
import shlex
from typing import Any

from gateway.policy.facts import hosts as hostmod
from gateway.policy.facts import paths as pathmod

READ_TOOLS = frozenset({
    "read", "read_file", "read_text_file", "read_multiple_files", "read_many_files", "read_media_file", "view",
    "view_file", "open_file", "get_file_contents", "cat", "notebook_read", "notebookread", "readfile", "read_notebook", "read_code",
})  # fmt: skip
SEARCH_TOOLS = frozenset(
    {"grep", "grep_search", "search_file_content", "search_files", "codebase_search", "ripgrep", "rg"}
)
WRITE_TOOLS = frozenset({
    "write", "edit", "multiedit", "multi_edit", "notebookedit", "notebook_edit", "write_file", "writefile",
    "write_to_file", "create", "create_file", "edit_file", "editfile", "edit_files", "replace", "replace_in_file",
    "str_replace_editor", "str_replace_based_edit_tool", "insert_edit_into_file", "apply_diff", "search_replace",
    "delete", "delete_file", "move_file", "rename_file", "create_directory", "apply_patch", "write_code",
})  # fmt: skip
MCP_WRITE_TOOLS = frozenset({"write_file", "edit_file", "create_directory", "move_file", "edit_block"})
READING_EDITS = frozenset({
    "edit", "multiedit", "multi_edit", "notebookedit", "notebook_edit", "edit_file", "editfile", "edit_files",
    "replace", "replace_in_file", "str_replace_editor", "str_replace_based_edit_tool", "insert_edit_into_file",
    "apply_diff", "search_replace", "edit_block",
})  # fmt: skip
"""Edit tools show the harness (and so the model) the file's current text: they read it too."""
LIST_TOOLS = frozenset({"glob", "ls", "list_directory", "list_dir", "find", "file_search", "list_files",
                        "directory_tree", "list_directory_with_sizes"})  # fmt: skip
MCP_LIST_TOOLS = frozenset({"search_files"})
"""The filesystem MCP server's ``search_files`` matches file names (``pattern``), not contents: a
listing. A ``search_files`` with a ``regex`` (Cline's) searches contents."""
FETCH_TOOLS = frozenset({"webfetch", "web_fetch", "fetch", "fetch_url", "read_url", "browse", "http_request", "curl"})
SHELL_TOOLS = frozenset({
    "bash", "shell", "run_shell_command", "run_in_terminal", "run_terminal_cmd", "run_command", "pre_run_command",
    "execute_command", "exec_command", "terminal", "powershell", "pwsh", "cmd", "local_shell", "container.exec",
    "shell_exec", "shell_execute", "execute_shell", "exec_shell", "run_shell", "run_bash", "execute_bash",
    "bash_exec", "run_terminal_command", "start_process",
})  # fmt: skip
KEYSTROKE_TOOLS = frozenset({"write_stdin", "write_bash", "interact_with_process", "send_input", "write_to_terminal"})
"""Tools that type into a running shell (Codex ``write_stdin {session_id, chars}``, Copilot CLI
``write_bash {sessionId, input}``): what they send is a command line."""
KEYSTROKE_FIELDS = ("chars", "input", "text", "keys")
PATH_FIELDS = ("file_path", "path", "filePath", "absolute_path", "target_file", "filename", "file", "notebook_path",
               "uri", "source", "destination", "dir_path", "directory", "target", "old_path", "new_path")  # fmt: skip
LIST_FIELDS = ("paths", "file_paths", "filePaths", "files")
_PATH_FIELD_NAMES = frozenset(PATH_FIELDS)
_LIST_FIELD_NAMES = frozenset(LIST_FIELDS)
_HOST_FIELDS = ("url", "uri", "href", "endpoint")
_HOST_FIELD_NAMES = frozenset(_HOST_FIELDS)
"""The fields as sets: an input without any of them (most) skips the loop over them."""
GLOB_FIELDS = ("glob", "include", "pattern", "file_pattern", "includePattern")
_PATTERN_FIELD_NAMES = frozenset({*GLOB_FIELDS, *LIST_FIELDS})
_PATCH_FILE = re.compile(r"^\*\*\* (Add|Update|Delete) File: (.+)$|^\*\*\* (Move) to: (.+)$", re.M)
PATCH_FIELDS = ("command", "input", "patch")
_GLOB = re.compile(r"[*?\[]")
"""Where an ``apply_patch`` call holds its patch text (Codex sends ``input`` or ``command``)."""


def short_name(name: str) -> str:
    """The last part of a tool name after ``__``, ``.``, ``:`` or ``/`` (``mcp__fs__read_file``)."""
    n = name.lower()
    for sep in ("__", ":", "/", "."):
        if sep in n:
            n = n.rsplit(sep, 1)[1] or n
    return n


_MCP_NAME = re.compile(r"^mcp__[^_].*__.")
"""Claude Code's name of an MCP tool: ``mcp__<server>__<tool>``."""


def server_of(tool: dict[str, Any]) -> str:
    """The MCP server id, lower-cased; ``(unknown)`` for an MCP tool without one; '' otherwise."""
    name = tool.get("name") if isinstance(tool.get("name"), str) else ""
    if tool.get("origin") == "mcp":
        mcp = tool.get("mcp")
        server = mcp.get("server") if isinstance(mcp, dict) else None
        ident = server.get("id") if isinstance(server, dict) else None
        return ident.lower() if isinstance(ident, str) and ident.strip() else "(unknown)"
    if isinstance(name, str) and name.startswith("mcp__") and _MCP_NAME.match(name):
        return name.split("__")[1].lower()
    return ""


def kind_of(name: str, tool: dict[str, Any], inp: dict[str, Any]) -> str:
    lower = name.lower()
    short = short_name(name)
    mcp_named = lower.startswith("mcp_")
    mcp = tool.get("origin") == "mcp" or mcp_named

    def ending(names: frozenset[str]) -> bool:
        return short in names or lower in names or (mcp_named and any(lower.endswith("_" + n) for n in names))

    if short == "apply_patch" or patch_text(inp) is not None:
        return "patch"
    if short in ("str_replace_based_edit_tool", "str_replace_editor") and inp.get("command") == "view":
        return "read"
    if ending(KEYSTROKE_TOOLS) and any(isinstance(inp.get(f), str) for f in KEYSTROKE_FIELDS):
        return "shell"
    if ending(SHELL_TOOLS) and ("command" in inp or "command_line" in inp or "cmd" in inp):
        return "shell"
    if (
        ("command" in inp or "command_line" in inp)
        and not mcp
        and isinstance(inp.get("command", inp.get("command_line")), (str, list))
        and short not in WRITE_TOOLS | READ_TOOLS
    ):
        return "shell"
    if mcp and ending(MCP_LIST_TOOLS) and "regex" not in inp:
        return "list"
    if ending(READ_TOOLS):
        return "read"
    if ending(SEARCH_TOOLS):
        return "search"
    if ending(LIST_TOOLS):
        return "list"
    if ending(FETCH_TOOLS):
        return "fetch"
    if (mcp and ending(MCP_WRITE_TOOLS)) or (not mcp and ending(WRITE_TOOLS)):
        return "edit" if ending(READING_EDITS) else "write"
    return "other"


COMMAND_FIELDS = ("command", "command_line", "cmd")
"""Where harnesses put a shell command (Windsurf runs ``command_line``, most others ``command``)."""


def command_text(inp: dict[str, Any], powershell: bool) -> str | None:
    """The shell command of a tool input: each of :data:`COMMAND_FIELDS` that holds a string or an
    argv list, one per line when they differ. Which one the harness runs is not known here, so
    all are checked: a harmless ``command`` beside the ``command_line`` that runs hides nothing.
    An MCP shell tool's ``args`` list follows its ``command``. Without a command field, the
    keystrokes of a tool that types into a running shell (:data:`KEYSTROKE_FIELDS`) are the
    command line (:func:`keystrokes`)."""
    texts: list[str] = []
    for field in COMMAND_FIELDS:
        raw = inp.get(field)
        if isinstance(raw, list) and raw and all(isinstance(a, str) for a in raw):
            texts.append(shlex.join(raw))
        elif isinstance(raw, str):
            args = inp.get("args") if field == "command" else None
            if isinstance(args, list) and args and all(isinstance(a, str) for a in args):
                raw = raw + " " + shlex.join(args)  # `{command: "rm", args: ["-rf", "~"]}`
            texts.append(raw)
    if not texts:
        for field in KEYSTROKE_FIELDS:
            raw = inp.get(field)
            if isinstance(raw, str):
                texts.append(keystrokes(raw))
                break
    if not texts:
        return None
    text = "\n".join(dict.fromkeys(texts))
    text = text.replace("\x00", " ").replace("\ufffd", " ").replace("\r\n", "\n").replace("\r", "\n")
    if powershell:
        text = powershell_text(text)
    return text


_TERMINAL_ESCAPE = re.compile(r"\x1b(\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(\x07|\x1b\\)?|[@-_]|$)")
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")


def keystrokes(chars: str) -> str:
    """Keystrokes into a running shell as the command lines they type: terminal escape sequences
    (arrow keys, bracketed paste) and control characters (``\\u0003`` Ctrl-C, ``\\u0004``) end a
    line and are no command themselves; the trailing newline that runs the line is dropped.
    A line typed without its newline (the Enter may come in a later call) is judged too."""
    text = _TERMINAL_ESCAPE.sub("\n", chars.replace("\r\n", "\n").replace("\r", "\n"))
    return _CONTROL.sub("\n", text).rstrip("\n")


_PS_HOME = re.compile(r"\$(\{env:(userprofile|home)\}|env:(userprofile|home)\b)", re.I)


_PS_BLOCK = re.compile(r"(?<![$@])[{}]")
_PS_CALL = re.compile(r"(^|[\n;|(])\s*&\s+")


def powershell_text(text: str) -> str:
    """PowerShell source in the spelling the shell parser reads: the backtick escape removed,
    ``\\`` as ``/``, the home directory's variables (``$env:USERPROFILE``, ``$env:HOME``, any
    case) as ``$HOME``, which PowerShell also knows (``~`` is the home for both), script-block
    braces as line breaks (``& { Remove-Item ... }``, ``if (...) { ... }``: the commands inside
    are commands) and the call operator ``&`` dropped."""
    text = _PS_HOME.sub("$HOME", text.replace("`", "").replace("\\", "/"))
    return _PS_CALL.sub(r"\1 ", _PS_BLOCK.sub("\n", text))


def patch_text(inp: dict[str, Any], loose: bool = False) -> str | None:
    """The ``apply_patch`` text of a tool input (:data:`PATCH_FIELDS`), or None; ``loose`` (the
    tool is known to be ``apply_patch``) also takes a text without the ``*** Begin Patch`` line."""
    texts = [v for v in map(inp.get, PATCH_FIELDS) if isinstance(v, str)]
    for v in texts:
        if v.lstrip().startswith("*** Begin Patch"):
            return v
    return next((v for v in texts if v.startswith("*** ") or "\n*** " in v), None) if loose else None


def patch_files(text: str) -> list[tuple[str, str]]:
    """``(operation, path)`` for each file of a patch: ``write`` (``*** Add File:``,
    ``*** Update File:``), ``delete`` (``*** Delete File:``), and for ``*** Move to:`` a ``write``
    of the destination and a ``delete`` of the file being updated."""
    out: list[tuple[str, str]] = []
    for m in _PATCH_FILE.finditer(text):
        if m.group(1):
            out.append(("delete" if m.group(1) == "Delete" else "write", m.group(2).strip()))
        else:
            if out and out[-1][0] == "write":
                out[-1] = ("delete", out[-1][1])  # the updated file goes away under its old name
            out.append(("write", m.group(4).strip()))
    return [(op, path) for op, path in out if path]


def path_fields(inp: dict[str, Any]) -> list[str]:
    """The :data:`PATH_FIELDS` of ``inp`` that name a path, in order (the first of the tool's
    paths, :func:`tool_paths`)."""
    if _PATH_FIELD_NAMES.isdisjoint(inp):  # most inputs (a shell command) have none
        return []
    return [key for key in PATH_FIELDS if key in inp and isinstance(inp[key], str) and inp[key].strip()]


def tool_paths(kind: str, inp: dict[str, Any], cwd: str, home: str) -> tuple[list[str], list[str], list[str]]:
    """(normalized paths, raw path strings, glob patterns) named by a tool input."""
    raws: list[str] = [inp[key] for key in path_fields(inp)]
    for key in LIST_FIELDS if not _LIST_FIELD_NAMES.isdisjoint(inp) else ():
        v = inp.get(key)
        if isinstance(v, list):
            raws += [x for x in v if isinstance(x, str) and x]
    patch = patch_text(inp, loose=True) if kind == "patch" else None
    if patch is not None:
        raws += [path for _, path in patch_files(patch)]
    globs: list[str] = []
    if kind in ("search", "read", "list") and not _PATTERN_FIELD_NAMES.isdisjoint(inp):
        base = inp.get("path") if isinstance(inp.get("path"), str) else ""
        patterns: list[str] = []
        for key in GLOB_FIELDS:
            v = inp.get(key)
            if kind == "search" and key == "pattern":
                continue  # a search tool's pattern is a regular expression over contents
            patterns += (
                [v] if isinstance(v, str) else [x for x in v if isinstance(x, str)] if isinstance(v, list) else []
            )
        for key in LIST_FIELDS:  # Gemini read_many_files: `paths` may be globs
            v = inp.get(key)
            patterns += [x for x in v if isinstance(x, str) and _GLOB.search(x)] if isinstance(v, list) else []
        globs += [
            pathmod.normalize(base.rstrip("/") + "/" + v if base else v, cwd, home)
            for v in dict.fromkeys(p for p in patterns if p)
        ]
    paths = [pathmod.normalize(p, cwd, home) for p in raws]
    for g in globs:
        tail = g.replace("**/", "")
        paths += pathmod.glob_candidates(tail, [home.rsplit("/", 1)[-1]] if home.startswith("/") else [])
        if "/" in tail:
            paths += pathmod.glob_candidates(tail.rsplit("/", 1)[1])
    return [p for p in paths if p], raws, globs


def tool_hosts(kind: str, inp: dict[str, Any]) -> list[str]:
    out: list[str] = []
    for key in _HOST_FIELDS if not _HOST_FIELD_NAMES.isdisjoint(inp) else ():
        v = inp.get(key)
        if isinstance(v, str):
            out += hostmod.of_argument(v) if "://" not in v else hostmod.in_text(v)
    v = inp.get("urls")
    if isinstance(v, list):
        for x in v:
            if isinstance(x, str):
                out += hostmod.in_text(x) or hostmod.of_argument(x)
    if kind == "fetch":
        for key in ("prompt", "query", "input"):
            v = inp.get(key)
            if isinstance(v, str):
                out += hostmod.in_text(v)
    return out
