"""Inline interpreter code (``python -c``, ``node -e``, ``perl -e``, ``ruby -e``, ``php -r``,
``awk``): the commands it runs and the files and hosts it touches, as effects.

``python3 -c "import os; os.system('git push -f origin main')"`` is a force push; a rule over
shell words sees only ``python3``. Python and JavaScript are parsed with their tree-sitter
grammars and the calls that matter are read from :data:`CALLS` (a table: callee name -> role);
arguments are resolved when they are literals or built from literals (concatenation,
``os.path.join``, ``Path.home() / '.ssh'``, names assigned a literal earlier). Perl, Ruby, PHP and
awk, whose grammars are not shipped, get a lexical scan for the same calls. What cannot be
resolved stays ``unknown``: a command built at run time, ``eval`` of a computed string.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field

import tree_sitter
import tree_sitter_javascript
import tree_sitter_python

UNKNOWN = None
"""An argument whose value is only known when the code runs."""

CALLS: dict[str, dict[str, str]] = {
    "python": {
        "system": "shell", "popen": "shell", "getoutput": "shell", "getstatusoutput": "shell",
        "run": "shell", "call": "shell", "check_call": "shell", "check_output": "shell", "Popen": "shell",
        "execv": "argv-after-path", "execvp": "argv-after-path", "execve": "argv-after-path",
        "execl": "args-after-path", "execlp": "args-after-path", "spawnv": "argv-after-mode", "spawnvp": "argv-after-mode",
        "spawn": "shell",
        "eval": "code", "exec": "code", "compile": "code",
        "remove": "delete", "unlink": "delete", "rmdir": "delete", "removedirs": "delete",
        "rmtree": "delete-recursive", "send2trash": "delete",
        "open": "open", "read_text": "read-self", "read_bytes": "read-self", "write_text": "write-self",
        "write_bytes": "write-self",
        "copy": "copy", "copy2": "copy", "copyfile": "copy", "copytree": "copy", "move": "move", "rename": "move",
        "replace": "move",
        "urlopen": "url", "urlretrieve": "url", "get": "url", "post": "url-send", "put": "url-send",
        "request": "url", "create_connection": "address", "connect": "address",
    },
    "javascript": {
        "exec": "shell", "execSync": "shell", "spawn": "argv", "spawnSync": "argv", "execFile": "argv",
        "execFileSync": "argv", "fork": "argv",
        "eval": "code", "Function": "code", "runInNewContext": "code", "runInThisContext": "code",
        "rmSync": "delete-options", "rm": "delete-options", "rmdirSync": "delete-options", "rmdir": "delete-options",
        "unlinkSync": "delete", "unlink": "delete",
        "readFileSync": "read", "readFile": "read", "createReadStream": "read", "readdirSync": "list",
        "writeFileSync": "write", "writeFile": "write", "appendFileSync": "write", "appendFile": "write",
        "createWriteStream": "write", "copyFileSync": "copy", "copyFile": "copy", "cpSync": "copy", "cp": "copy",
        "renameSync": "move", "rename": "move",
        "fetch": "url", "get": "url", "request": "url", "post": "url-send",
    },
}  # fmt: skip
"""What each call does, by the callee's last name (``os.system`` and ``__import__('os').system``
alike). Python's ``get``/``run``/``open`` are only judged with a literal argument of the right
shape (a URL, a command line, a path), so ``dict.get('x')`` is not a download."""

STRONG: dict[str, frozenset[str]] = {
    "python": frozenset({"system", "popen", "getoutput", "getstatusoutput", "check_call", "check_output", "Popen",
                         "execv", "execvp", "execve", "execl", "execlp", "spawnv", "spawnvp", "rmtree", "removedirs",
                         "send2trash", "urlopen", "urlretrieve", "create_connection", "eval", "exec",
                         "read_text", "read_bytes", "write_text", "write_bytes", "copyfile", "copytree"}),
    "javascript": frozenset({"execSync", "spawnSync", "execFileSync", "rmSync", "rmdirSync", "unlinkSync",
                             "readFileSync", "writeFileSync", "appendFileSync", "copyFileSync", "cpSync",
                             "createReadStream", "createWriteStream", "eval", "Function", "fetch", "renameSync"}),
}  # fmt: skip
"""Names that mean the same whatever they are called on; every other name in :data:`CALLS` counts
only on a module of :data:`MODULES` (``subprocess.run``, not ``asyncio.run``) or a path object."""
MODULES: dict[str, frozenset[str]] = {
    "python": frozenset({"os", "subprocess", "sp", "shutil", "pty", "commands", "io", "codecs", "requests", "httpx",
                         "urllib", "request", "socket", "pathlib", "builtins", "posix", "nt"}),
    "javascript": frozenset({"child_process", "cp", "fs", "fsp", "fse", "http", "https", "axios", "got", "vm",
                             "process", "Deno", "Bun"}),
}  # fmt: skip

_NETWORK_MARK = re.compile(
    r"urlopen|urlretrieve|requests\.|httpx\.|socket|fetch\(|https?\.get|http\.request|XMLHttpRequest|\brecv\("
)
_DECODE_MARK = re.compile(
    r"b64decode|b32decode|b16decode|a85decode|b85decode|fromhex|unhexlify|decompress|codecs\.decode|rot.?13|"
    r"atob\(|Buffer\.from|fromCharCode|\bchr\(|\[::-1\]|\.reverse\(\)|marshal\.loads|zlib|gzip|bz2|lzma"
)

_PY = tree_sitter.Language(tree_sitter_python.language())
_JS = tree_sitter.Language(tree_sitter_javascript.language())


@dataclass
class Found:
    """What the code does: command lines it runs, and (kind, value, recursive) for files/hosts."""

    commands: list[str] = field(default_factory=list)
    touches: list[tuple[str, str | None, bool]] = field(default_factory=list)
    """(kind, path or host or None when unknown, recursive); kind read|write|delete|network|network-send|exec."""


def analyze(language: str, text: str, depth: int = 0) -> Found:
    """The effects of ``text`` in ``language`` (python, javascript, perl, ruby, php, awk)."""
    found = Found()
    if depth > 3 or len(text) > 65536:
        found.touches.append(("exec", None, False))
        return found
    if language == "python":
        _Tree(_PY, "python", found, depth).walk(text)
    elif language == "javascript":
        _Tree(_JS, "javascript", found, depth).walk(text)
    else:
        _scan(language, text, found)
    return found


class _Tree:
    def __init__(self, lang: tree_sitter.Language, name: str, found: Found, depth: int) -> None:
        self.parser = tree_sitter.Parser(lang)
        self.name = name
        self.calls = CALLS[name]
        self.found = found
        self.depth = depth
        self.names: dict[str, str | None] = {}
        self.text = ""
        self.modules: dict[str, bool] = {}
        """Names bound to a module of :data:`MODULES` (``import subprocess as sp``,
        ``const cp = require('child_process')``)."""

    def walk(self, text: str) -> None:
        self.text = text
        tree = self.parser.parse(text.encode("utf-8", "surrogatepass"))
        stack = [tree.root_node]
        while stack:
            n = stack.pop()
            if n.type in ("assignment", "variable_declarator"):
                self.assign(n)
            elif n.type in ("import_statement", "import_from_statement"):
                self.alias(n)
            if n.type in ("call", "call_expression", "new_expression"):
                self.call(n)
            stack.extend(reversed(n.children))

    # ---- values ---------------------------------------------------------------------------
    def assign(self, n: tree_sitter.Node) -> None:
        left = n.child_by_field_name("left") or n.child_by_field_name("name")
        right = n.child_by_field_name("right") or n.child_by_field_name("value")
        if left is not None and right is not None and left.text:
            text = (right.text or b"").decode()
            module = right.type in ("call_expression", "await_expression", "member_expression") and (
                "require(" in text or "import(" in text
            )
            for name in re.findall(r"[A-Za-z_$][\w$]*", left.text.decode()) if module else ():
                self.modules[name] = True  # `const {execSync} = require('child_process')` too
            if left.type == "identifier":
                self.names[left.text.decode()] = self.value(right)

    def alias(self, n: tree_sitter.Node) -> None:
        """``import subprocess as sp``, ``from os import system as s``: the names are modules'."""
        for c in n.named_children:
            if c.type == "aliased_import":
                alias = c.child_by_field_name("alias")
                if alias is not None and alias.text:
                    self.modules[alias.text.decode()] = True

    def value(self, n: tree_sitter.Node | None) -> str | None:
        """The string ``n`` evaluates to, when built from literals; else None."""
        if n is None:
            return UNKNOWN
        t = n.type
        if t == "string":
            return self.string(n)
        if t == "template_string":
            out = ""
            for c in n.named_children:
                if c.type == "string_fragment":
                    out += (c.text or b"").decode()
                elif c.type == "template_substitution":
                    inner = self.value(c.named_children[0] if c.named_children else None)
                    if inner is None:
                        return UNKNOWN
                    out += inner
                elif c.type == "escape_sequence":
                    out += _unescape((c.text or b"").decode())
            return out
        if t in ("concatenated_string",):
            parts = [self.value(c) for c in n.named_children]
            return None if any(p is None for p in parts) else "".join(p for p in parts if p is not None)
        if t in ("binary_operator", "binary_expression"):
            op = n.child_by_field_name("operator")
            left = self.value(n.child_by_field_name("left"))
            right = self.value(n.child_by_field_name("right"))
            if left is None or right is None or op is None:
                return UNKNOWN
            if op.type == "+":
                return left + right
            if op.type == "/":
                return left.rstrip("/") + "/" + right
            return UNKNOWN
        if t == "parenthesized_expression":
            return self.value(n.named_children[0] if n.named_children else None)
        if t == "identifier" and n.text:
            return self.names.get(n.text.decode(), UNKNOWN)
        if t in ("call", "call_expression"):
            name = self.callee(n)
            args = self.arguments(n)
            if name in (
                "expanduser",
                "Path",
                "PurePath",
                "PosixPath",
                "resolve",
                "abspath",
                "realpath",
                "str",
                "normpath",
                "resolve_path",
                "expandvars",
            ):
                return self.value(args[0]) if args else ("." if name in ("Path", "PurePath") else UNKNOWN)
            if name in ("home", "homedir", "gethomedir"):
                return "~"
            if name in ("cwd", "getcwd"):
                return "."
            if name == "join":
                parts = [self.value(a) for a in args]
                if parts and all(p is not None for p in parts):
                    out = ""
                    for p in parts:
                        assert p is not None
                        out = p if p.startswith("/") or not out else out.rstrip("/") + "/" + p
                    return out
                return UNKNOWN
            fn = n.child_by_field_name("function")
            if fn is not None and fn.type in ("attribute", "member_expression") and name in ("expanduser", "absolute"):
                return self.value(fn.child_by_field_name("object"))
            return UNKNOWN
        if t in ("attribute", "member_expression") and n.text:
            text = n.text.decode()
            if text in ("process.env.HOME", "os.environ['HOME']"):
                return "~"
            return UNKNOWN
        if t == "subscript" and n.text and n.text.decode().replace('"', "'") == "os.environ['HOME']":
            return "~"
        return UNKNOWN

    def string(self, n: tree_sitter.Node) -> str | None:
        text = (n.text or b"").decode()
        if self.name == "python":
            prefix = re.match(r"^[A-Za-z]*", text)
            flags = prefix.group(0).lower() if prefix else ""
            if "f" in flags and any(c.type == "interpolation" for c in n.named_children):
                return UNKNOWN
            out = ""
            for c in n.named_children:
                if c.type == "string_content":
                    out += (c.text or b"").decode()
                elif c.type == "escape_sequence":
                    out += _unescape((c.text or b"").decode())
            return out if "r" in flags else _unescape(out)
        out = ""
        for c in n.named_children:
            if c.type == "string_fragment":
                out += (c.text or b"").decode()
            elif c.type == "escape_sequence":
                out += _unescape((c.text or b"").decode())
        return out

    # ---- calls ----------------------------------------------------------------------------
    def callee(self, n: tree_sitter.Node) -> str:
        fn = n.child_by_field_name("function") or n.child_by_field_name("constructor")
        if fn is None:
            return ""
        if fn.type in ("attribute", "member_expression"):
            attr = fn.child_by_field_name("attribute") or fn.child_by_field_name("property")
            return (attr.text or b"").decode() if attr is not None else ""
        if fn.type == "identifier":
            return (fn.text or b"").decode()
        return "?"  # getattr(os, 'sys' + 'tem')(...), obj['exec'](...): not resolvable

    def arguments(self, n: tree_sitter.Node) -> list[tree_sitter.Node]:
        args = n.child_by_field_name("arguments")
        if args is None:
            return []
        return [c for c in args.named_children if c.type not in ("comment",)]

    def receiver(self, n: tree_sitter.Node) -> tree_sitter.Node | None:
        fn = n.child_by_field_name("function")
        if fn is not None and fn.type in ("attribute", "member_expression"):
            return fn.child_by_field_name("object")
        return None

    def call(self, n: tree_sitter.Node) -> None:
        name = self.callee(n)
        args = self.arguments(n)
        positional = [a for a in args if a.type not in ("keyword_argument", "dictionary_splat", "list_splat", "pair")]
        touch = self.found.touches.append
        if name == "?":
            if any(a.type in ("string", "template_string") for a in args):
                touch(("exec", None, False))
            return
        if name in ("getattr", "__import__", "import_module") and positional:
            if self.value(positional[-1 if name == "getattr" else 0]) is None:
                touch(("exec", None, False))  # a module or function chosen at run time
            return
        role = self.calls.get(name)
        if role is None:
            return
        strong = name in STRONG[self.name]
        rec = self.receiver(n)
        on_path = role in ("read-self", "write-self") or (
            role in ("delete", "open") and rec is not None and rec.type == "call"
        )
        if not strong and rec is not None and not self.known_module(rec) and not on_path:
            return  # `asyncio.run(...)`, `d.get(...)`, `re.exec(...)`: not the module's function
        first = self.value(positional[0]) if positional else UNKNOWN
        if role == "shell":
            self.shell(positional[0] if positional else None, strong)
        elif role in ("argv", "argv-after-path", "argv-after-mode", "args-after-path"):
            self.argv(role, positional)
        elif role == "code":
            if first is None:
                if positional and strong and (taint := self.taint()):
                    touch((taint, None, False))
            elif self.depth < 3:
                inner = analyze(self.name, first, self.depth + 1)
                self.found.commands += inner.commands
                self.found.touches += inner.touches
        elif role in ("delete", "delete-recursive"):
            if rec is not None and rec.type == "call" and not positional:  # Path('x').unlink()
                touch(("delete", self.value(rec), False))
            elif positional:
                touch(("delete", first, role == "delete-recursive"))
        elif role == "delete-options":
            recursive = any(b"recursive" in (a.text or b"") and b"true" in (a.text or b"") for a in positional[1:])
            touch(("delete", first, recursive))
        elif role in ("read", "write"):
            touch((role, first, False))
        elif role == "open":
            if not positional and rec is None:
                return
            mode = self.value(positional[1]) if len(positional) > 1 else self.keyword(args, "mode")
            if rec is not None and rec.type == "call":  # Path('x').open('w')
                mode, first = first, self.value(rec)
            writing = mode is not None and any(c in mode for c in "wax+")
            touch(("write" if writing else "read", first, False))
        elif role in ("read-self", "write-self"):
            touch((role.split("-")[0], self.value(rec) if rec is not None else UNKNOWN, False))
        elif role == "copy":
            second = self.value(positional[1]) if len(positional) > 1 else UNKNOWN
            touch(("read", first, name in ("copytree", "cpSync", "cp")))
            touch(("write", second, False))
        elif role == "move":
            second = self.value(positional[1]) if len(positional) > 1 else UNKNOWN
            touch(("delete", first, False))
            touch(("write", second, False))
        elif role in ("url", "url-send"):
            if first is not None and "://" in first:
                touch(("network-send" if role == "url-send" else "network", first, False))
        elif role == "address" and positional and positional[0].type == "tuple":
            host = self.value(positional[0].named_children[0]) if positional[0].named_children else None
            if host is not None:
                touch(("network", host, False))

    def taint(self) -> str | None:
        """Where computed code passed to ``eval``/``exec`` may come from: ``exec-download`` when
        the code also reads the network, ``exec-decoded`` when it decodes or decompresses, else
        None (code the program built itself, as from an AST: not judged)."""
        if _NETWORK_MARK.search(self.text):
            return "exec-download"
        if _DECODE_MARK.search(self.text):
            return "exec-decoded"
        return None

    def known_module(self, rec: tree_sitter.Node) -> bool:
        """Whether a call's receiver is one of the modules :data:`CALLS` describes (``os``,
        ``subprocess``, ``fs``, ``child_process``, ``require('fs')``, a name bound to one)."""
        text = (rec.text or b"").decode()
        root = re.split(r"[.(\[]", text, maxsplit=1)[0]
        if root in MODULES[self.name] or self.modules.get(root, False):
            return True
        return "child_process" in text or "'fs'" in text or '"fs"' in text or "fs/promises" in text

    def _module(self, n: tree_sitter.Node, modules: tuple[str, ...]) -> bool:
        rec = self.receiver(n)
        return rec is not None and (rec.text or b"").decode().split(".")[0] in modules

    def keyword(self, args: list[tree_sitter.Node], key: str) -> str | None:
        for a in args:
            if a.type == "keyword_argument":
                name = a.child_by_field_name("name")
                if name is not None and name.text == key.encode():
                    return self.value(a.child_by_field_name("value"))
        return UNKNOWN

    def shell(self, arg: tree_sitter.Node | None, strict: bool) -> None:
        """A command line (a string) or an argv (a list) the code runs."""
        if arg is None:
            return
        if arg.type in ("list", "array", "tuple"):
            words = [self.value(c) for c in arg.named_children]
            if words and all(w is not None for w in words):
                self.found.commands.append(_join([w for w in words if w is not None]))
            else:
                self.found.touches.append(("exec", None, False))
            return
        text = self.value(arg)
        if text is None:
            self.found.touches.append(("exec", None, False))
        elif not strict or " " in text or "/" in text or text.isidentifier():
            self.found.commands.append(text)

    def argv(self, role: str, positional: list[tree_sitter.Node]) -> None:
        if role == "argv":  # spawn(cmd, [args]): the program, then its arguments
            program = self.value(positional[0]) if positional else None
            rest: list[str | None] = []
            if len(positional) > 1 and positional[1].type == "array":
                rest = [self.value(c) for c in positional[1].named_children]
            if program is None or any(r is None for r in rest):
                self.found.touches.append(("exec", None, False))
                return
            self.found.commands.append(_join([program, *[r for r in rest if r is not None]]))
            return
        skip = 2 if role == "argv-after-mode" else 1
        nodes = positional[skip:]
        if role != "args-after-path" and nodes and nodes[0].type in ("list", "tuple"):
            nodes = nodes[0].named_children
        words = [self.value(c) for c in nodes]
        if not words or any(w is None for w in words):
            self.found.touches.append(("exec", None, False))
            return
        self.found.commands.append(_join([w for w in words if w is not None]))


def _join(words: list[str]) -> str:
    return shlex.join(words)


def _unescape(text: str) -> str:
    if "\\" not in text:
        return text
    try:
        return text.encode("latin-1", "backslashreplace").decode("unicode_escape")
    except (UnicodeDecodeError, UnicodeEncodeError):
        return text


# ---- a lexical scan for the languages without a shipped grammar ------------------------------
_STRING = r"""(?:"((?:[^"\\]|\\.)*)"|'((?:[^'\\]|\\.)*)')"""
_SCANS: dict[str, list[tuple[str, re.Pattern[str]]]] = {
    "perl": [
        ("shell", re.compile(r"\b(?:system|exec|open)\s*\(?\s*" + _STRING)),
        ("shell", re.compile(r"`([^`]*)`")),
        ("shell", re.compile(r"\bqx\s*[({\[/|!]([^)}\]/|!]*)")),
        ("delete-recursive", re.compile(r"\b(?:rmtree|remove_tree)\s*\(?\s*" + _STRING)),
        ("delete", re.compile(r"\bunlink\s*\(?\s*" + _STRING)),
        ("read", re.compile(r"\bopen\s*\(?\s*(?:my\s+)?\$?\w*\s*,\s*(?:'<'\s*,\s*)?" + _STRING)),
    ],
    "ruby": [
        ("shell", re.compile(r"\b(?:system|exec|spawn|IO\.popen|Open3\.\w+)\s*\(?\s*" + _STRING)),
        ("shell", re.compile(r"`([^`]*)`")),
        ("shell", re.compile(r"%x[({\[]([^)}\]]*)")),
        (
            "delete-recursive",
            re.compile(r"\bFileUtils\.(?:rm_rf|rm_r|remove_dir|remove_entry(?:_secure)?)\s*\(?\s*" + _STRING),
        ),
        ("delete", re.compile(r"\b(?:File\.(?:delete|unlink)|FileUtils\.rm(?:_f)?)\s*\(?\s*" + _STRING)),
        ("read", re.compile(r"\b(?:File\.(?:read|open|readlines|foreach)|IO\.read)\s*\(?\s*" + _STRING)),
    ],
    "php": [
        ("shell", re.compile(r"\b(?:system|exec|shell_exec|passthru|popen|proc_open)\s*\(\s*" + _STRING)),
        ("shell", re.compile(r"`([^`]*)`")),
        ("delete", re.compile(r"\b(?:unlink|rmdir)\s*\(\s*" + _STRING)),
        ("read", re.compile(r"\b(?:file_get_contents|readfile|fopen|file)\s*\(\s*" + _STRING)),
    ],
    "awk": [
        ("shell", re.compile(r"\bsystem\s*\(\s*" + _STRING)),
        ("pipe", re.compile(r"\|\s*" + _STRING)),
    ],
}
_DYNAMIC_RUN: dict[str, re.Pattern[str]] = {
    "perl": re.compile(r"\b(?:system|exec|eval|qx)\b|`"),
    "ruby": re.compile(r"\b(?:system|exec|spawn|eval|popen|instance_eval|send)\b|`|%x"),
    "php": re.compile(r"\b(?:system|exec|shell_exec|passthru|popen|proc_open|eval|assert)\b|`"),
    "awk": re.compile(r"\bsystem\b|\|\s*getline|\|\s*\""),
}


def _scan(language: str, text: str, found: Found) -> None:
    """Calls with literal arguments; any other call of a running function is ``exec`` unknown."""
    literal_runs = 0
    for role, pattern in _SCANS.get(language, []):
        for m in pattern.finditer(text):
            groups = [g for g in m.groups() if g is not None]
            value = _unescape(groups[0]) if groups else ""
            if role == "shell":
                found.commands.append(value)
                literal_runs += 1
            elif role == "pipe":
                found.commands.append(value)  # awk `print ... | "sh"`: its output runs as code
                found.touches.append(("exec", None, False))
                literal_runs += 1
            else:
                found.touches.append(
                    ("delete" if role.startswith("delete") else role, value, role == "delete-recursive")
                )
    dynamic = _DYNAMIC_RUN.get(language)
    if dynamic is not None and len(dynamic.findall(text)) > literal_runs:
        found.touches.append(("exec", None, False))


LANGUAGES: dict[str, str] = {"node": "javascript", "nodejs": "javascript", "deno": "javascript", "bun": "javascript"}


def language_of(program: str) -> str | None:
    """The inline-code language of an interpreter program name (``python3.11`` is python)."""
    base = program.rstrip("0123456789.")
    if base in ("python", "pypy", "python-m"):
        return "python"
    if base in LANGUAGES:
        return LANGUAGES[base]
    if base in ("perl", "ruby", "php", "awk", "gawk", "mawk", "nawk"):
        return "awk" if base.endswith("awk") else base
    return None
