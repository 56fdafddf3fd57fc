"""Inline interpreter code (``python -c``, ``node -e``, ``perl -e``, ``ruby -e``, ``php -r``,
``awk``): the commands it runs and the files and hosts it touches, as effects.

``python3 -c "import os; os.system('git push -f origin main')"`` is a force push; a rule over
shell words sees only ``python3``. Python and JavaScript are parsed with their tree-sitter
grammars and the calls that matter are read from :data:`CALLS` (a table: callee name -> role);
arguments are resolved when they are literals or built from literals (concatenation,
``os.path.join``, ``Path.home() / '.ssh'``, names assigned a literal earlier). Ruby, PHP and Perl are parsed
with their grammars too (:data:`SCRIPT_CALLS`, each grammar loaded on first use); awk, which has
none, gets a lexical scan. What cannot be resolved stays ``unknown``: a command built at run
time, ``eval`` of a computed string.
"""

from __future__ import annotations

import importlib
import re
import shlex
import textwrap
import warnings
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
        "spawnl": "argv-after-mode", "spawnlp": "argv-after-mode", "spawnle": "argv-after-mode",
        "spawnlpe": "argv-after-mode",
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
        "removeSync": "delete-options", "remove": "delete-options",
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
    "javascript": frozenset({"execSync", "spawnSync", "execFileSync", "rmSync", "rmdirSync", "unlinkSync", "removeSync",
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

STDIN_CODE = "exec-stdin"
"""The touch of code that evaluates what it read from stdin: the shell layer knows what feeds it."""
_STDIN_MARK = re.compile(
    r"\.stdin\b|['\"]stdin['\"]|\binput\(|fileinput|/dev/stdin|/dev/fd/0|/proc/self/fd/0|\bopen\(\s*0\b|"
    r"\bos\.read\(\s*0\b|readFileSync\(\s*0\b|\bSTDIN\b|\$stdin|\bgets\b|\bARGF\b|php://stdin|<>|"
    r"\breadline\("
)
"""Code that reads its standard input: computed code it evaluates may be whatever was piped in."""

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
    elif language in SCRIPT_CALLS:
        _Script(language, found, depth).walk(text)
    elif language == "sed":
        _sed(text, found)
    else:
        _scan(language, text, found)
    if found.commands and _SOCKET.search(text) and any(_interactive_shell(c) for c in found.commands):
        found.touches.append(("exec-network", None, False))  # a shell on the code's socket
    return found


_SED_ADDRESS = r"(?:\d+(?:~\d+)?|\$|/(?:[^/\\\n]|\\.)*/[IM]*)"
_SED_E = re.compile(
    r"(?:^|[;\n{}])\s*(?:" + _SED_ADDRESS + r"(?:\s*,\s*" + _SED_ADDRESS + r")?)?"
    r"\s*!?\s*e(?:[ \t]+([^;\n}]*)|(?=[;\n}]|$))"
)
_SED_S_EXEC = re.compile(r"(?:^|[;\n{}]|[/\d$])\s*s(.)(?:(?!\1)[^\\]|\\.)*\1(?:(?!\1)[^\\]|\\.)*\1[gpiImM0-9]*e")


def _sed(text: str, found: Found) -> None:
    """GNU sed's ``e`` command runs a command (``1e rm -rf ~``), or the pattern space when it
    has none, as does the ``e`` flag of ``s///``: the input decides, so that is ``exec`` unknown."""
    if "e" not in text:
        return  # both need an `e` (most scripts, `1,20p`, have none)
    for m in _SED_E.finditer(text):
        command = (m.group(1) or "").strip()
        if command:
            found.commands.append(command)
        else:
            found.touches.append(("exec", None, False))
    if _SED_S_EXEC.search(text):
        found.touches.append(("exec", None, False))


_SOCKET = re.compile(
    r"socket\.socket|\bsocket\(|create_connection|fsockopen|stream_socket_client|socket_create|TCPSocket|"
    r"IO::Socket|\bSocket\b|\bnet\.(connect|Socket|createConnection)|new\s+net\.Socket|require\(.net.\)"
)
"""Code that opens a network socket itself (a reverse shell's first half)."""
_SHELL_NAMES = frozenset({"sh", "bash", "zsh", "dash", "ksh", "ash", "mksh", "fish", "csh", "tcsh"})


def _interactive_shell(line: str) -> bool:
    """A command line that starts a shell reading commands from its input (``/bin/sh -i``)."""
    try:
        words = shlex.split(line)
    except ValueError:
        words = line.split()
    return (
        bool(words)
        and words[0].rsplit("/", 1)[-1] in _SHELL_NAMES
        and all(w.startswith("-") and "c" not in w[1:] for w in words[1:] if not w.startswith(("<", ">", "2>")))
    )


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
        cursor = tree.walk()  # every node in source order (parents first), without a list per node
        while (n := cursor.node) is not None:
            kind = n.type
            if kind in ("assignment", "variable_declarator"):
                self.assign(n)
            elif kind in ("import_statement", "import_from_statement"):
                self.alias(n)
            if kind in ("call", "call_expression", "new_expression"):
                self.call(n)
            if cursor.goto_first_child():
                continue
            while not cursor.goto_next_sibling():
                if not cursor.goto_parent():
                    return

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
            if fn is not None and fn.type == "attribute" and name in ("joinpath", "with_name"):
                base = self.value(fn.child_by_field_name("object"))  # `Path.home().joinpath('.aws', 'x')`
                parts = [self.value(a) for a in args]
                if base is None or not parts or any(p is None for p in parts):
                    return UNKNOWN
                if name == "with_name":
                    return base.rsplit("/", 1)[0] + "/" + str(parts[0])
                return "/".join([base.rstrip("/"), *(str(p).strip("/") for p in parts)])
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
            out = _literal(n, "string_content")
            return out if "r" in flags else _unescape(out)
        return _literal(n, "string_fragment")

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
        elif role == "move":  # a directory moves away whole, as `mv` does
            second = self.value(positional[1]) if len(positional) > 1 else UNKNOWN
            touch(("delete", first, True))
            touch(("write", second, False))
        elif role in ("url", "url-send"):
            if first is not None and "://" in first:
                touch(("network-send" if role == "url-send" else "network", first, False))
        elif role == "address" and positional and positional[0].type == "tuple":
            host = self.value(positional[0].named_children[0]) if positional[0].named_children else None
            if host is not None:
                touch(("network", host, False))

    def computed(self) -> str:
        """The touch of a command line or code only known at run time: what the code read from its
        stdin when it reads it (:data:`STDIN_CODE`), else unknown."""
        return STDIN_CODE if _STDIN_MARK.search(self.text) else "exec"

    def taint(self) -> str | None:
        """Where computed code passed to ``eval``/``exec`` may come from: ``exec-download`` when
        the code also reads the network, ``exec-decoded`` when it decodes or decompresses, else
        None (code the program built itself, as from an AST: not judged)."""
        if _NETWORK_MARK.search(self.text):
            return "exec-download"
        if _DECODE_MARK.search(self.text):
            return "exec-decoded"
        if _STDIN_MARK.search(self.text):
            return STDIN_CODE
        return None

    def known_module(self, rec: tree_sitter.Node) -> bool:
        """Whether a call's receiver is one of the modules :data:`CALLS` describes (``os``,
        ``subprocess``, ``fs``, ``child_process``, ``require('fs')``, a name bound to one)."""
        text = (rec.text or b"").decode()
        root = re.split(r"[.(\[]", text, maxsplit=1)[0]
        if root in MODULES[self.name] or self.modules.get(root, False):
            return True
        imported = re.match(r"""^(?:__import__|importlib\.import_module|import_module)\(\s*['"]([\w.]+)['"]""", text)
        if imported and imported.group(1).split(".")[0] in MODULES[self.name]:
            return True  # `__import__('subprocess').run(...)`
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
                self.found.touches.append((self.computed(), None, False))
            return
        text = self.value(arg)
        if text is None:
            self.found.touches.append((self.computed(), None, False))
        elif not strict or " " in text or "/" in text or text.isidentifier():
            self.found.commands.append(text)

    def argv(self, role: str, positional: list[tree_sitter.Node]) -> None:
        if role == "argv":  # spawn(cmd, [args]): the program, then its arguments
            program = self.value(positional[0]) if positional else None
            rest: list[str | None] = []
            if len(positional) > 1 and positional[1].type == "array":
                rest = [self.value(c) for c in positional[1].named_children]
            if program is None or any(r is None for r in rest):
                self.found.touches.append((self.computed(), None, False))
                return
            self.found.commands.append(_join([program, *[r for r in rest if r is not None]]))
            return
        skip = 2 if role == "argv-after-mode" else 1
        nodes = positional[skip:]
        if role == "argv-after-mode" and len(positional) > 2 and positional[2].type not in ("list", "tuple"):
            nodes = [positional[1], *positional[3:]]  # `os.spawnlp(mode, file, arg0, arg1, ...)`
        if role != "args-after-path" and nodes and nodes[0].type in ("list", "tuple"):
            nodes = nodes[0].named_children
        words = [self.value(c) for c in nodes]
        if not words or any(w is None for w in words):
            self.found.touches.append((self.computed(), None, False))
            return
        self.found.commands.append(_join([w for w in words if w is not None]))


def _literal(n: tree_sitter.Node, content: str) -> str:
    """A string node's text: its ``content`` pieces and decoded escape sequences."""
    out = ""
    for c in n.named_children:
        if c.type == content:
            out += (c.text or b"").decode()
        elif c.type == "escape_sequence":
            out += _unescape((c.text or b"").decode())
    return out


def _join(words: list[str]) -> str:
    return shlex.join(words)


def _join_home(words: list[str]) -> str:
    """An argv as a command line, a word that is the home directory (``Dir.home``,
    ``$ENV{HOME}``, resolved to ``~``) left for the shell parser to expand."""
    return " ".join(
        "~" + (shlex.quote(w[1:]) if w[1:] else "") if w == "~" or w.startswith("~/") else shlex.quote(w) for w in words
    )


def _unescape(text: str) -> str:
    if "\\" not in text:
        return text
    try:
        return text.encode("latin-1", "backslashreplace").decode("unicode_escape")
    except (UnicodeDecodeError, UnicodeEncodeError):
        return text


# ---- Ruby, PHP and Perl: their tree-sitter grammars, one walker driven by SCRIPT_CALLS -------
_RUBY_OPEN3 = ("capture2", "capture2e", "capture3", "popen2", "popen2e", "popen3", "pipeline", "pipeline_r")
SCRIPT_CALLS: dict[str, dict[str, str]] = {
    "ruby": {
        "system": "run", "exec": "run", "spawn": "run", "Kernel.system": "run", "Kernel.exec": "run",
        "Kernel.spawn": "run", "Process.spawn": "run", "Process.exec": "run", "IO.popen": "run",
        **{f"Open3.{n}": "run" for n in _RUBY_OPEN3},
        "eval": "code", "instance_eval": "code", "class_eval": "code", "Kernel.eval": "code",
        "File.delete": "delete", "File.unlink": "delete", "FileUtils.rm": "delete", "FileUtils.rm_f": "delete",
        "FileUtils.rmdir": "delete", "Dir.delete": "delete", "Dir.rmdir": "delete",
        "FileUtils.rm_rf": "delete-recursive", "FileUtils.rm_r": "delete-recursive",
        "FileUtils.remove_dir": "delete-recursive", "FileUtils.remove_entry": "delete-recursive",
        "FileUtils.remove_entry_secure": "delete-recursive", "FileUtils.rmtree": "delete-recursive",
        "File.read": "read", "File.readlines": "read", "File.foreach": "read", "File.binread": "read",
        "IO.read": "read", "IO.readlines": "read", "IO.foreach": "read",
        "File.open": "open", "open": "open", "Kernel.open": "open", "File.new": "open",
        "File.write": "write", "File.binwrite": "write", "IO.write": "write",
        "FileUtils.cp": "copy", "FileUtils.cp_r": "copy", "FileUtils.mv": "move", "File.rename": "move",
        "Net::HTTP.get": "url", "Net::HTTP.get_response": "url", "Net::HTTP.get_print": "url", "URI.open": "url",
        "Net::HTTP.post": "url-send", "Net::HTTP.post_form": "url-send",
    },
    "php": {
        "system": "run", "exec": "run", "shell_exec": "run", "passthru": "run", "popen": "run", "proc_open": "run",
        "eval": "code", "assert": "code",
        "unlink": "delete", "rmdir": "delete",
        "file_get_contents": "open", "fopen": "open", "readfile": "open", "file": "open",
        "file_put_contents": "write", "copy": "copy", "rename": "move", "curl_init": "url",
    },
    "perl": {
        "system": "run", "exec": "run", "open": "perl-open", "eval": "code",
        "unlink": "delete", "rmdir": "delete", "rmtree": "delete-recursive", "remove_tree": "delete-recursive",
        "copy": "copy", "move": "move", "rename": "move",
    },
}  # fmt: skip
"""What each call does, by callee: Ruby ``Receiver.method`` (constants only; a bare method is a
``Kernel`` one), PHP function names (lower case), Perl function names (the last ``::`` part).
Roles: ``run`` (one string is a command line, several are an argv; PHP takes the first only),
``code`` (its string is code of the same language), ``delete``/``delete-recursive``/``read``/
``write`` (every path argument), ``open`` (a path and a mode: ``|cmd`` runs, a URL is network),
``perl-open`` (``open(F, "cmd |")``, ``open(my $f, "-|", @cmd)``, ``<``/``>``/``>>``), ``copy``,
``move``, ``url``/``url-send``."""

_GRAMMARS: dict[str, tuple[str, str]] = {
    "ruby": ("tree_sitter_ruby", "language"),
    "php": ("tree_sitter_php", "language_php"),
    "perl": ("tree_sitter_perl", "language"),
}
_PARSERS: dict[str, tree_sitter.Parser] = {}


def _parser(language: str) -> tree_sitter.Parser:
    """The language's parser, its grammar loaded on first use (most commands have no such code)."""
    parser = _PARSERS.get(language)
    if parser is None:
        module, function = _GRAMMARS[language]
        with warnings.catch_warnings():  # tree-sitter-perl 2.0 hands over an int, not a capsule
            warnings.simplefilter("ignore", DeprecationWarning)
            parser = tree_sitter.Parser(tree_sitter.Language(getattr(importlib.import_module(module), function)()))
        _PARSERS[language] = parser
    return parser


_CALL_TYPES = frozenset({"call", "function_call_expression", "ambiguous_function_call_expression",
                         "method_call_expression", "eval_expression"})  # fmt: skip
_RUN_LITERALS = frozenset({"subshell", "shell_command_expression", "command_string"})
"""Backticks, ``%x()``, ``qx//``: their text is a command line."""
_HEREDOC_START = frozenset({"heredoc_beginning", "heredoc_token"})
_HEREDOC_BODY = frozenset({"heredoc_body", "heredoc_content"})


def _preorder(tree: tree_sitter.Tree) -> list[tree_sitter.Node]:
    """Every node of ``tree`` in source order, parents before their children (a cursor's walk:
    no list of children per node)."""
    nodes: list[tree_sitter.Node] = []
    cursor = tree.walk()
    while (n := cursor.node) is not None:
        nodes.append(n)
        if cursor.goto_first_child():
            continue
        while not cursor.goto_next_sibling():
            if not cursor.goto_parent():
                return nodes
    return nodes


class _Script:
    """Ruby, PHP or Perl code: names assigned a literal, then the calls of :data:`SCRIPT_CALLS`."""

    def __init__(self, language: str, found: Found, depth: int) -> None:
        self.lang = language
        self.calls = SCRIPT_CALLS[language]
        self.found = found
        self.depth = depth
        self.names: dict[str, str | None] = {}
        self.lists: dict[str, list[str | None]] = {}
        self.heredocs: dict[tuple[int, int], tree_sitter.Node] = {}
        self.text = ""

    def computed(self) -> str:
        """The touch of a command line or code only known at run time: what the code read from its
        stdin when it reads it (:data:`STDIN_CODE`), else unknown."""
        return STDIN_CODE if _STDIN_MARK.search(self.text) else "exec"

    def walk(self, text: str) -> None:
        self.text = text
        source = ("<?php " + text) if self.lang == "php" else text
        tree = _parser(self.lang).parse(source.encode("utf-8", "surrogatepass"))
        nodes = _preorder(tree)
        starts = [n for n in nodes if n.type in _HEREDOC_START]
        bodies = [n for n in nodes if n.type in _HEREDOC_BODY]
        self.heredocs = {(s.start_byte, s.end_byte): b for s, b in zip(starts, bodies, strict=False)}
        for n in nodes:
            t = n.type
            if t in ("assignment", "assignment_expression"):
                self.assign(n)
            elif t in _RUN_LITERALS:
                self.run([n])
            elif t in _CALL_TYPES:
                self.call(n)

    # ---- values ---------------------------------------------------------------------------
    def assign(self, n: tree_sitter.Node) -> None:
        left, right = n.child_by_field_name("left"), n.child_by_field_name("right")
        if left is None or right is None:
            return
        if left.type == "variable_declaration":
            left = left.child_by_field_name("variable") or left
        name = (left.text or b"").decode()
        if left.type in ("identifier", "variable_name", "scalar"):
            self.names[name] = self.value(right)
        elif left.type == "array" or right.type in ("array", "string_array", "array_creation_expression"):
            self.lists[name] = [self.value(c) for c in self.items([right])]

    def items(self, nodes: list[tree_sitter.Node]) -> list[tree_sitter.Node]:
        """Arguments with lists flattened (``system(@a)``, ``("rm", "-rf")``, ``%w[rm -rf]``)."""
        out: list[tree_sitter.Node] = []
        for n in nodes:
            if n.type in ("argument", "parenthesized_expression", "list_expression", "array", "string_array",
                          "array_creation_expression", "array_element_initializer"):  # fmt: skip
                if n.type == "array" and self.lang == "perl":
                    out.append(n)  # `@a`: resolved from self.lists by run()
                else:
                    out += self.items([c for c in n.named_children if c.type != "comment"])
            else:
                out.append(n)
        return out

    def value(self, n: tree_sitter.Node | None) -> str | None:
        """The string ``n`` evaluates to, when built from literals; else None."""
        if n is None:
            return UNKNOWN
        t, text = n.type, (n.text or b"").decode()
        if t in ("string", "encapsed_string", "string_literal", "interpolated_string_literal", "bare_string",
                 "subshell", "shell_command_expression", "command_string", "heredoc_body", "nowdoc_body"):  # fmt: skip
            content = n.child_by_field_name("content") if self.lang == "perl" else None
            raw = t in ("string_literal",) or (t == "string" and (text.startswith(("'", "%q"))))
            return self.pieces(content if content is not None else n, raw)
        if t in ("heredoc", "nowdoc"):
            return self.value(n.child_by_field_name("value"))
        if t in _HEREDOC_START:
            body = self.heredocs.get((n.start_byte, n.end_byte))
            if body is None:
                return UNKNOWN
            out = self.pieces(body, "'" in text)
            if out is not None and self.lang == "ruby":
                out = out[1:] if out.startswith("\n") else out
                out = textwrap.dedent(out) if "~" in text else out
            return out
        if t == "chained_string":
            parts = [self.value(c) for c in n.named_children]
            return None if any(p is None for p in parts) else "".join(p or "" for p in parts)
        if t in ("binary", "binary_expression"):
            op = n.child_by_field_name("operator")
            left, right = self.value(n.child_by_field_name("left")), self.value(n.child_by_field_name("right"))
            if op is None or left is None or right is None or op.type not in ("+", "."):
                return UNKNOWN
            return left + right
        if t in ("parenthesized_expression", "parenthesized_statements", "argument") and n.named_children:
            return self.value(n.named_children[0])
        if t in ("identifier", "variable_name", "scalar"):
            return self.names.get(text, UNKNOWN)
        if re.fullmatch(r"""ENV\[["']HOME["']\]|\$ENV\{["']?HOME["']?\}|\$_(?:SERVER|ENV)\[["']HOME["']\]""", text):
            return "~"
        if t in ("call", "function_call_expression"):
            name = self.callee(n)
            args = self.arguments(n)
            if name in ("Dir.home", "getenv", "ENV.fetch") and (
                name == "Dir.home" or (args and self.value(args[0]) == "HOME")
            ):
                return "~"
            if name in ("Dir.pwd", "getcwd", "Dir.getwd"):
                return "."
            if name in ("File.expand_path", "URI", "URI.parse", "realpath") and args:
                return self.value(args[0])
            if name == "File.join" and args:
                parts = [self.value(a) for a in args]
                if any(p is None for p in parts):
                    return UNKNOWN
                return "/".join(p.rstrip("/") if i < len(parts) - 1 else p for i, p in enumerate(parts) if p)
        return UNKNOWN

    def pieces(self, n: tree_sitter.Node, raw: bool) -> str | None:
        """A string's text: its contents, escapes decoded, interpolations resolved or unknown."""
        if self.lang == "perl" and n.type in ("string_content", "heredoc_content"):
            return self.perl_pieces(n, raw)
        out = ""
        for c in n.children:
            ctext = (c.text or b"").decode()
            if c.type in ("string_content", "heredoc_content", "nowdoc_string"):
                inner = self.perl_pieces(c, raw) if self.lang == "perl" else ctext
                if inner is None:
                    return UNKNOWN
                out += inner
            elif c.type == "escape_sequence":
                out += self.escape(ctext, raw)
            elif c.type == "interpolation":
                inner = self.value(c.named_children[0] if c.named_children else None)
                if inner is None:
                    return UNKNOWN
                out += inner
            elif c.type == "variable_name" or (c.is_named and ctext[:1] in ("$", "@")):
                inner = self.value(c)
                if inner is None:
                    return UNKNOWN
                out += inner
        return out

    def perl_pieces(self, n: tree_sitter.Node, raw: bool) -> str | None:
        """Perl string contents: the text between the interpolated variables and escapes."""
        body, base = n.text or b"", n.start_byte
        out, at = "", base
        for c in n.children:
            if c.type == "not-interpolated":
                continue  # a mark inside the text, which the gaps already hold
            out += body[at - base : c.start_byte - base].decode()
            at = c.end_byte
            ctext = (c.text or b"").decode()
            if c.type == "heredoc_end":
                return out
            if c.type == "escape_sequence":
                out += self.escape(ctext, raw)
            elif ctext[:1] in ("$", "@") and not raw:
                inner = self.value(c)
                if inner is None:
                    return UNKNOWN
                out += inner
            else:
                out += ctext
        return out + body[at - base :].decode()

    def escape(self, text: str, raw: bool) -> str:
        if raw:  # single quotes: only \\ and \' are escapes
            return text[1:] if text[1:] in ("\\", "'") else text
        return _unescape(text)

    # ---- calls ----------------------------------------------------------------------------
    def callee(self, n: tree_sitter.Node) -> str:
        if self.lang == "ruby":
            method = n.child_by_field_name("method")
            rec = n.child_by_field_name("receiver")
            name = (method.text or b"").decode() if method is not None else ""
            if rec is None:
                return name
            if rec.type in ("constant", "scope_resolution"):
                return (rec.text or b"").decode() + "." + name
            return "." + name  # a method of some object: only `obj.send(...)` is looked at
        if n.type == "eval_expression":
            return "eval"
        fn = n.child_by_field_name("function") or n.child_by_field_name("method")
        if fn is None:
            return ""
        if self.lang == "php":
            if fn.type not in ("name", "qualified_name"):
                return "?"  # `$f("rm -rf ~")`: the function is chosen at run time
            return (fn.text or b"").decode().lstrip("\\").rsplit("\\", 1)[-1].lower()
        return re.split(r"::|->", (fn.text or b"").decode())[-1]

    def arguments(self, n: tree_sitter.Node) -> list[tree_sitter.Node]:
        if n.type == "eval_expression":
            return [c for c in n.named_children if c.type != "block"]
        args = n.child_by_field_name("arguments")
        if args is None:
            return []
        if args.type in ("argument_list", "arguments", "list_expression"):
            return [c for c in args.named_children if c.type not in ("comment", "block_argument")]
        return [args]

    def call(self, n: tree_sitter.Node) -> None:
        name = self.callee(n)
        args = self.arguments(n)
        if name == "?":
            if args:
                self.found.touches.append(("exec", None, False))
            return
        if name in ("send", ".send", "public_send", ".public_send", "__send__", ".__send__") and args:
            first = args[0]
            target = (first.text or b"").decode().lstrip(":") if first.type == "simple_symbol" else self.value(first)
            if target is None:
                self.found.touches.append(("exec", None, False))  # a method chosen at run time
            elif self.calls.get(target) in ("run", "code"):
                self.act(self.calls[target], target, args[1:])
            return
        role = self.calls.get(name)
        if role is not None:
            self.act(role, name, args)

    def act(self, role: str, name: str, args: list[tree_sitter.Node]) -> None:
        touch = self.found.touches.append
        if self.lang == "ruby" and args and args[0].type == "hash":
            args = args[1:]  # system({"VAR" => "x"}, "cmd")
        if role == "run":
            self.run(args[:1] if self.lang == "php" else args)
        elif role == "code":
            code = self.value(args[0]) if args else UNKNOWN
            if code is None:
                if args:
                    touch((self.computed(), None, False))
            elif self.depth < 3:
                inner = analyze(self.lang, code, self.depth + 1)
                self.found.commands += inner.commands
                self.found.touches += inner.touches
        elif role in ("delete", "delete-recursive", "read"):
            for a in self.items(args):
                path = self.value(a)
                if path is not None:
                    touch(("read" if role == "read" else "delete", path, role == "delete-recursive"))
        elif role == "write":
            path = self.value(args[0]) if args else UNKNOWN
            if path is not None:
                touch(("write", path, False))
        elif role == "open":
            self.open(args)
        elif role == "perl-open":
            self.perl_open(args[1:])
        elif role in ("copy", "move") and len(args) > 1:
            src, dst = self.value(args[0]), self.value(args[1])
            if src is not None:
                touch(("read" if role == "copy" else "delete", src, role == "move" or name.endswith("cp_r")))
            if dst is not None:
                touch(("write", dst, False))
        elif role in ("url", "url-send") and args:
            url = self.value(args[0])
            if url is not None and ("://" in url or len(args) > 1):
                touch(("network-send" if role == "url-send" else "network", url, False))

    def open(self, args: list[tree_sitter.Node]) -> None:
        """Ruby ``open``/``File.open``, PHP ``fopen``/``file_get_contents``: by the path and the mode."""
        path = self.value(args[0]) if args else UNKNOWN
        if path is None:
            return
        if path.startswith("|") and self.lang == "ruby":
            self.found.commands.append(path[1:].strip())
            return
        if "://" in path:
            self.found.touches.append(("network", path, False))
            return
        mode = self.value(args[1]) if len(args) > 1 else ""
        writing = mode is not None and any(c in mode for c in "wax+")
        self.found.touches.append(("write" if writing else "read", path, False))

    def perl_open(self, rest: list[tree_sitter.Node]) -> None:
        """``open(F, "cmd |")``, ``open(my $f, "-|", "cmd", @args)``, ``open(F, "<", $path)``."""
        touch = self.found.touches.append
        if not rest:
            return
        if len(rest) == 1:
            spec = self.value(rest[0])
            if spec is None:
                return
            spec = spec.strip()
            if spec.endswith("|") or spec.startswith("|"):
                self.found.commands.append(spec.strip("|").strip())
                if spec.startswith("|") and spec.strip("|").split()[:1] in (
                    ["sh"],
                    ["bash"],
                    ["/bin/sh"],
                    ["/bin/bash"],
                ):
                    touch(("exec", None, False))  # `open(P, "|sh"); print P ...`: what it prints runs
            elif spec.startswith((">", "+")):
                touch(("write", spec.lstrip("+<>").strip(), False))
            else:
                touch(("read", spec.lstrip("<").strip(), False))
            return
        mode = (self.value(rest[0]) or "").strip()
        if mode.startswith(("-|", "|-")):
            self.run(rest[1:])
            return
        path = self.value(rest[1])
        if path is not None:
            touch(("write" if mode.startswith((">", "+")) else "read", path, False))

    def run(self, args: list[tree_sitter.Node]) -> None:
        """A command line (one string) or an argv (several, or a list) the code runs."""
        nodes = self.items(args)
        if not nodes:
            return
        words: list[str | None] = []
        for a in nodes:
            if a.type == "array" and self.lang == "perl":
                words += self.lists.get((a.text or b"").decode(), [UNKNOWN])
            elif a.type in ("identifier", "variable_name") and (a.text or b"").decode() in self.lists:
                words += self.lists[(a.text or b"").decode()]
            else:
                words.append(self.value(a))
        if not words or any(w is None for w in words):
            self.found.touches.append((self.computed(), None, False))
            return
        listed = len(words) > 1 or args[0].type in ("array", "string_array", "array_creation_expression")
        self.found.commands.append(_join_home([w for w in words if w is not None]) if listed else words[0] or "")


# ---- a lexical scan for the languages without a shipped grammar ------------------------------
_STRING = r"""(?:"((?:[^"\\]|\\.)*)"|'((?:[^'\\]|\\.)*)')"""
_SCANS: dict[str, list[tuple[str, re.Pattern[str]]]] = {
    "awk": [
        ("shell", re.compile(r"\bsystem\s*\(\s*" + _STRING)),
        ("pipe", re.compile(r"\|\s*" + _STRING)),
    ],
}
_EX = r"(?:^|\|)\s*:*\s*(?:sil(?:ent)?!?\s*)?"
"""The start of one Ex command (vim ``-c``/``+``, ``:a | :b``), after ``:`` and ``silent``."""
_SCANS.update(
    {
        "lua": [
            ("shell", re.compile(r"\b(?:os\.execute|io\.popen)\s*\(?\s*" + _STRING)),
            ("delete", re.compile(r"\bos\.remove\s*\(?\s*" + _STRING)),
        ],
        "tcl": [  # tclsh, expect: `exec`/`spawn`/`system` take the command's words; `open "|cmd"`
            ("shell", re.compile(r"(?:^|[\n;\[{])\s*(?:exec|spawn|system)\s+(?:-\S+\s+)*([^\n;\]}]+)")),
            ("shell", re.compile(r"\bopen\s+[\"{]\|([^\"}]+)")),
            ("delete-recursive", re.compile(r"\bfile\s+delete\s+-force\s+(?:--\s+)?([^\s;\]}]+)")),
        ],
        "r": [
            ("shell", re.compile(r"\b(?:system2?|shell)\s*\(\s*" + _STRING)),
            ("delete-recursive", re.compile(r"\bunlink\s*\(\s*" + _STRING + r"[^)]*recursive\s*=\s*T")),
        ],
        "applescript": [("shell", re.compile(r"\bdo\s+shell\s+script\s+" + _STRING))],
        "elisp": [
            ("shell", re.compile(r"\((?:async-)?shell-command(?:-to-string)?\s+" + _STRING)),
            ("shell", re.compile(r"\((?:call|start)-process(?:-shell-command)?\s+" + _STRING)),
            ("delete-recursive", re.compile(r"\(delete-directory\s+" + _STRING + r"\s+t\b")),
        ],
        "vim": [  # `:!cmd`, `:r !cmd`, `:w !cmd`, `:.!cmd`, `:terminal cmd`, `system('cmd')`
            ("shell", re.compile(_EX + r"[.$%\d,']*\s*(?:r(?:ead)?\s*|w(?:rite)?\s+)?!(.*)")),
            ("shell", re.compile(_EX + r"ter(?:m|minal)?!?\s+(?:\+\+\S+\s+)*(.+)")),
            ("shell", re.compile(r"\bsystem(?:list)?\s*\(\s*" + _STRING)),
            ("python", re.compile(_EX + r"(?:py3?|python3?|pyx|pythonx)\s+(.*)")),
        ],
        "less": [("shell", re.compile(r"^[^/?]*?(?:!|\|.)(.+)"))],  # `+!cmd`, `+|mcmd`
        "jvm": [  # groovy, kotlin, scala, jshell: Runtime.exec, ProcessBuilder, "cmd".execute(), Process("cmd").!
            ("shell", re.compile(r"\.exec\s*\(\s*" + _STRING)),
            ("shell", re.compile(r"\b(?:ProcessBuilder|Process)\s*\(\s*" + _STRING)),
            ("shell", re.compile(_STRING + r"\s*\.\s*(?:execute\s*\(|!)")),
        ],
        "julia": [
            ("shell", re.compile(r"\b(?:run|read|success|pipeline)\s*\(\s*`([^`]*)`")),
            ("delete-recursive", re.compile(r"\brm\s*\(\s*" + _STRING + r"[^)]*recursive\s*=\s*true")),
        ],
        "gdb": [
            ("shell", re.compile(r"^\s*(?:shell|!)\s*(.*)")),
            ("shell", re.compile(r"^\s*pipe\s+[^|]*\|\s*(.*)")),
            ("shell", re.compile(r"\bsystem\s*\(\s*" + _STRING)),
            ("python", re.compile(r"^\s*(?:python|py|python-interactive|pi)\s+(.*)")),
        ],
    }
)
_DYNAMIC_RUN: dict[str, re.Pattern[str]] = {
    "awk": re.compile(r"\bsystem\b|\|\s*getline|\|\s*\""),
    "lua": re.compile(r"\bos\.execute\b|\bio\.popen\b|\bload(?:string)?\s*\("),
    "tcl": re.compile(r"(?:^|[\n;\[{])\s*(?:exec|spawn|system|eval)\b|\bopen\s+[\"{]\|"),
    "r": re.compile(r"\b(?:system2?|shell)\s*\(|\beval\s*\(\s*parse"),
    "applescript": re.compile(r"\bdo\s+shell\s+script\b"),
    "elisp": re.compile(r"\((?:async-)?shell-command|\((?:call|start|make)-process|\(eval\b"),
    "vim": re.compile(r"\bsystem(?:list)?\s*\(|\bexe(?:cute)?\s"),
    "gdb": re.compile(r"\bsystem\s*\("),
    "jvm": re.compile(r"\.exec\s*\(|\bProcessBuilder\b|\bProcess\s*\(|\.execute\s*\("),
    "julia": re.compile(r"\b(?:run|read|success|pipeline)\s*\(\s*`"),
}
"""A running call or eval whose argument is not a literal: ``exec`` unknown."""


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
                if language == "tcl" and ("$" in value or "[" in value):
                    found.touches.append(("exec", None, False))  # Tcl substitutes these first
            elif role == "python":  # vim `:py3 ...`, gdb `python ...`
                inner = analyze("python", value)
                found.commands += inner.commands
                found.touches += inner.touches
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
    if base in ("python", "pypy", "python-m", "ipython"):
        return "python"
    if base in LANGUAGES:
        return LANGUAGES[base]
    if base in ("perl", "ruby", "php", "awk", "gawk", "mawk", "nawk"):
        return "awk" if base.endswith("awk") else base
    return SCANNED.get(base)


SCANNED: dict[str, str] = {
    "lua": "lua", "luajit": "lua", "tclsh": "tcl", "wish": "tcl", "expect": "tcl", "rscript": "r",
    "osascript": "applescript", "emacs": "elisp", "groovy": "jvm", "kotlin": "jvm", "kotlinc": "jvm",
    "scala": "jvm", "jshell": "jvm", "julia": "julia",
}  # fmt: skip
"""Interpreters read with a lexical scan (:data:`_SCANS`): their inline code (``lua -e``,
``expect -c``, ``Rscript -e``, ``osascript -e``, ``emacs --eval``) and their stdin."""
