"""Parameter and arithmetic expansion with static operands, and the static text a command prints."""

from __future__ import annotations

import ast
import fnmatch
import posixpath
import re
import shlex

import tree_sitter

from gateway.policy.facts.shell.command import Command, State
from gateway.policy.facts.words import (
    Word,
    echo_escapes,
    printf_text,
)

ALL_ITEMS = re.compile(r"^\$(@|\*|\{@\}|\{\*\}|\{[A-Za-z_]\w*\[[@*]\]\})$")
"""``"$@"``, ``"${a[@]}"``: quoted, still one word per item."""
_PARAM = re.compile(r"^(#)?(!)?([A-Za-z_]\w*|[0-9]+|[@*])(?:\[([^\]]*)\])?(.*)$", re.S)
_MAX_VALUE = 512


def _plain(text: str) -> Word:
    return Word(text, "0" * len(text))


def _operand(text: str, st: State) -> tuple[str, bool] | None:
    """A parameter-expansion operand that is static text: (text, quoted); None otherwise."""
    if "$" in text or "`" in text:
        return None
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"" and text[0] not in text[1:-1]:
        return text[1:-1], True
    if any(c in text for c in "'\"\\"):
        return None
    if text == "~" or text.startswith("~/"):
        return st.home + text[1:], False
    return text, False


def _pattern(text: str, st: State) -> re.Pattern[str] | None:
    got = _operand(text, st)
    if got is None:
        return None
    body, quoted = got
    return re.compile(re.escape(body) + r"\Z" if quoted else fnmatch.translate(body), re.S)


def parameter(body: str, st: State) -> Word | None:
    """``${...}`` with static operands (``${v/a/b}``, ``${v#x}``, ``${v:-d}``, ``${v^^}``,
    ``${v:1:3}``, ``${#v}``, ``${!v}``, ``${a[0]}``, ``${a[@]}``, ``$@``), or None (then the
    plain lookup or dynamic). A name the line did not set is unknown, except a lower-case one
    (not an environment variable), which is unset."""
    m = _PARAM.match(body)
    if m is None:
        return None
    length, indirect, name, index, op = m.groups()
    if not (length or indirect or index is not None or op or name in ("@", "*")):
        return None  # `${name}`: the plain lookup
    if indirect:
        ref = st.vars.get(name)
        if index is not None or ref is None or ref.dynamic or not re.fullmatch(r"[A-Za-z_]\w*", ref.text):
            return None
        name = ref.text
    if name in ("@", "*") or index in ("@", "*"):
        items = st.arrays.get("@" if name in ("@", "*") else name)
        if items is None or op or any(x.dynamic for x in items):
            return None
        if length:
            return _plain(str(len(items)))
        out = Word()
        for k, x in enumerate(items):
            if k:
                out.add(" ", False)
            out.add(x.text, True)
        return out
    value: Word | None
    if index is not None:
        at = arithmetic(index, st) if name in st.arrays else None
        if at is not None and int(at) >= 0:
            items = st.arrays[name]
            value = items[int(at)] if int(at) < len(items) else Word()
        elif index.strip() == "0":
            value = st.vars.get(name)
        else:
            return None
    else:
        value = st.vars.get(name)
        if value is None and name == "HOME":
            value = Word(st.home, "1" * len(st.home))
    if value is not None and value.dynamic:
        return None
    unset_known = value is None and any(c.islower() for c in name)
    if length:
        return _plain(str(len(value.text))) if value is not None and not op else None
    if not op:
        return _plain(value.text) if value is not None else None
    m2 = re.match(r"^(:?)([-=+?])(.*)$", op, re.S)
    if m2:
        colon, kind, given = m2.groups()
        if value is None and not unset_known:
            return None
        empty = value is None or (colon == ":" and value.text == "")
        arg = _operand(given, st)
        if kind in "-=":
            if not empty and value is not None:
                return _plain(value.text)
            if arg is None:
                return None
            if kind == "=":
                st.vars[name] = Word(arg[0], "1" * len(arg[0]))
            return Word(arg[0], ("1" if arg[1] else "0") * len(arg[0]))
        if kind == "+":
            return _plain("") if empty else (Word(arg[0], "0" * len(arg[0])) if arg is not None else None)
        return None if empty or value is None else _plain(value.text)
    if value is None or len(value.text) > _MAX_VALUE:
        return None
    text = value.text
    m2 = re.match(r"^(##?|%%?)(.*)$", op, re.S)
    if m2:
        rx = _pattern(m2.group(2), st)
        if rx is None:
            return None
        cuts = range(len(text) + 1) if len(m2.group(1)) == 1 else range(len(text), -1, -1)
        for k in cuts:
            if m2.group(1)[0] == "#" and rx.match(text[:k]):
                return _plain(text[k:])
            if m2.group(1)[0] == "%" and rx.match(text[len(text) - k :]):
                return _plain(text[: len(text) - k])
        return _plain(text)
    m2 = re.match(r"^/([/#%]?)((?:\\.|[^/])*)(?:/(.*))?$", op, re.S)
    if m2:
        mode, pat, rep = m2.group(1), m2.group(2), m2.group(3) or ""
        rx = _pattern(pat, st) if pat else None
        got = _operand(rep, st) if rep else ("", False)
        if (pat and rx is None) or got is None or len(text) > 128:
            return None
        if rx is None:
            return _plain(text)
        out_text, k = "", 0
        while k < len(text):
            if mode == "#" and k > 0:
                break
            ends = [len(text)] if mode == "%" else range(len(text), k, -1)
            hit = next((e for e in ends if rx.match(text[k:e])), None)
            if hit is not None:
                out_text += got[0]
                if mode != "/":
                    return _plain(out_text + text[hit:])
                k = hit
                continue
            out_text += text[k]
            k += 1
        return _plain(out_text + text[k:])
    if op in ("^^", "^", ",,", ","):
        if op == "^^":
            return _plain(text.upper())
        if op == ",,":
            return _plain(text.lower())
        return _plain((text[:1].upper() if op == "^" else text[:1].lower()) + text[1:])
    m2 = re.match(r"^:\s*\(?\s*(-?\d+)\s*\)?\s*(?::\s*\(?\s*(-?\d+)\s*\)?\s*)?$", op)
    if m2:
        off = int(m2.group(1))
        off = len(text) + off if off < 0 else off
        if off < 0 or off > len(text):
            return _plain("")
        if m2.group(2) is None:
            return _plain(text[off:])
        size = int(m2.group(2))
        end = off + size if size >= 0 else len(text) + size
        return _plain(text[off:end]) if end >= off else None
    return None


_ARITH_REJECT = ("&&", "||", "?", "=", "++", "--", ",", "[", "$(")


def arithmetic(expr: str, st: State) -> str | None:
    """``$((expr))`` with integer literals and variables set earlier to integers; else None."""
    if len(expr) > 200 or any(r in expr for r in _ARITH_REJECT):
        return None

    def var(m: re.Match[str]) -> str:
        value = st.vars.get(m.group(1) or m.group(2) or "")
        if value is None or value.dynamic or not re.fullmatch(r"\s*-?\d+\s*", value.text):
            raise ValueError(m.group())
        return "(" + value.text.strip() + ")"

    try:
        text = re.sub(r"\$\{?([A-Za-z_]\w*)\}?|\b([A-Za-z_]\w*)\b", var, expr)
        if re.search(r"(?<![\w.])0\d", text):
            return None  # octal
        return str(_arith(ast.parse(text.strip(), mode="eval").body))
    except (ValueError, SyntaxError, ZeroDivisionError, OverflowError, RecursionError):
        return None


def _arith(node: ast.expr) -> int:
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    if isinstance(node, ast.UnaryOp):
        v = _arith(node.operand)
        if isinstance(node.op, ast.USub):
            return -v
        if isinstance(node.op, ast.UAdd):
            return v
        if isinstance(node.op, ast.Invert):
            return ~v
        if isinstance(node.op, ast.Not):
            return int(not v)
    if isinstance(node, ast.BinOp):
        a, b = _arith(node.left), _arith(node.right)
        op = node.op
        if isinstance(op, ast.Add):
            return a + b
        if isinstance(op, ast.Sub):
            return a - b
        if isinstance(op, ast.Mult):
            return a * b
        if isinstance(op, ast.Div | ast.FloorDiv):
            q = abs(a) // abs(b)
            return q if (a >= 0) == (b >= 0) else -q
        if isinstance(op, ast.Mod):
            r = abs(a) % abs(b)
            return r if a >= 0 else -r
        if isinstance(op, ast.Pow) and 0 <= b <= 64:
            return int(a**b)
        if isinstance(op, ast.LShift) and 0 <= b <= 63:
            return a << b
        if isinstance(op, ast.RShift) and 0 <= b <= 63:
            return a >> b
        if isinstance(op, ast.BitAnd):
            return a & b
        if isinstance(op, ast.BitOr):
            return a | b
        if isinstance(op, ast.BitXor):
            return a ^ b
    raise ValueError("not arithmetic")


def escaped_tail(src: bytes, pos: int) -> bytes:
    """Blanks and escaped characters right after the last word (where the grammar may end a
    command before a trailing ``\\ ``)."""
    end = pos
    while end < len(src):
        c = src[end : end + 1]
        if c in (b" ", b"\t"):
            end += 1
        elif c == b"\\" and end + 1 < len(src) and src[end + 1 : end + 2] != b"\n":
            end += 2
        else:
            break
    return src[pos:end]


def gap_tokens(gap: str) -> list[tuple[str, bool, bool]]:
    """Escaped characters in the text between two words: (raw text, touches the previous word,
    touches the next word)."""
    out: list[tuple[str, bool, bool]] = []
    start = -1
    i = 0
    while i < len(gap):
        c = gap[i]
        if c == "\\" and i + 1 < len(gap) and gap[i + 1] != "\n":
            if start < 0:
                start = i
            i += 2
            continue
        if c == "\\" and i + 1 < len(gap):  # line continuation
            if start >= 0:
                out.append((gap[start:i], start == 0, False))
                start = -1
            i += 2
            continue
        if c in " \t" and start >= 0:
            out.append((gap[start:i], start == 0, False))
            start = -1
        i += 1
    if start >= 0:
        out.append((gap[start:], start == 0, True))
    return out


def split_words(text: str) -> list[str]:
    try:
        return shlex.split(text)
    except ValueError:
        return []


def adjacent(nodes: list[tree_sitter.Node], src: bytes) -> list[list[tree_sitter.Node]]:
    """Argument nodes that touch (``$"x"`` is ``$`` + string; a backslash-newline between parts) form one word."""
    groups: list[list[tree_sitter.Node]] = []
    end = 0
    for n in nodes:
        start = n.start_byte
        if groups and (start <= end or src[end:start] == b"\\\n"):  # nothing, or only `\<newline>`, between
            groups[-1].append(n)
        else:
            groups.append([n])
        end = n.end_byte
    return groups


def static_output(commands: list[Command], st: State) -> str | None:
    """The output of a substituted ``echo``/``printf``/``pwd`` whose words are static, or of ``cat``
    of a heredoc or here-string (trailing newlines removed, as bash does), else None."""
    cmd = commands[0]
    if cmd.dynamic or cmd.stdin_from or cmd.redirects:
        return None
    if cmd.program == "pwd" and len(cmd.words) == cmd.start + 1 and cmd.state.cwd:
        return cmd.state.cwd
    if cmd.program in ("echo", "printf"):
        text = echo_text(cmd)
        return text.rstrip("\n") if text is not None else None
    if cmd.program == "cat":  # `$(cat <<'EOF' ... EOF)`: the heredoc's text
        text = fed_text(cmd)
        return text.rstrip("\n") if text is not None else None
    return None


def pipe_nodes(n: tree_sitter.Node) -> list[tree_sitter.Node]:
    """The elements of a pipeline, nested pipelines flattened."""
    out: list[tree_sitter.Node] = []
    for c in n.named_children:
        out += pipe_nodes(c) if c.type == "pipeline" else [c]
    return out


def fed_text(cmd: Command) -> str | None:
    """The static text a command prints: ``echo``/``printf`` of static words, ``cat`` of its
    heredoc or here-string; else None."""
    if cmd.dynamic or cmd.program not in ("echo", "printf", "cat", "tee"):
        return None
    if cmd.program == "tee":
        return cmd.stdin_text
    if cmd.program == "cat":
        rest = [w.text for w in cmd.words[cmd.start + 1 :]]
        if all(t.startswith("-") and t != "-" for t in rest):
            return cmd.stdin_text
        files = [posixpath.normpath(posixpath.join(cmd.state.cwd, t)) for t in rest if not t.startswith("-")]
        if cmd.state.scripts and all(f in cmd.state.scripts for f in files):  # `echo ... > f; cat f | sh`
            return "".join(cmd.state.scripts[f] for f in files)
        return None
    return echo_text(cmd, fed=True)


def echo_text(cmd: Command, fed: bool = False) -> str | None:
    """What a static ``echo``/``printf`` prints (escapes decoded as ``echo -e`` and ``printf`` do),
    else None. ``fed``: the text goes to a shell's stdin; an ``echo`` without ``-e`` whose text
    has a backslash then gives both readings (zsh's and dash's ``echo`` decode by default)."""
    words = cmd.words[cmd.start + 1 :]
    if any(w.dynamic for w in words):
        return None
    texts = [w.text for w in words]
    if cmd.program == "printf":
        if texts[:1] == ["--"]:
            texts = texts[1:]
        if not texts or texts[0] == "-v":
            return None
        return printf_text(texts[0], texts[1:])
    escapes: bool | None = None
    newline = True
    while texts and re.fullmatch(r"-[neE]+", texts[0]):
        for ch in texts[0][1:]:
            if ch == "n":
                newline = False
            else:
                escapes = ch == "e"
        texts = texts[1:]
    text = " ".join(texts)
    if escapes or (escapes is None and fed and "\\" in text):
        decoded, stop = echo_escapes(text)
        newline = newline and not stop
        text = decoded if escapes else text + "\n" + decoded
    return text + ("\n" if newline else "")


_HEREDOC_VAR = re.compile(r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*)\}|([A-Za-z_][A-Za-z0-9_]*))")


def heredoc_text(body: str, st: State) -> str | None:
    """The text of an unquoted heredoc (``cat <<EOF | sh``, ``rm -rf $HOME``) when every
    expansion in it is a variable whose value is known (one assigned a static value earlier in the
    line, or ``HOME``); None when any is only known at run time (``$X``, ``$(...)``, backquotes)."""
    if "`" in body or "$(" in body or "\\" in body:
        return None

    def value(m: re.Match[str]) -> str:
        name = m.group(1) or m.group(2)
        given = st.vars.get(name)
        if given is not None and not given.dynamic:
            return given.text
        if name == "HOME" and st.home not in ("", "~"):
            return st.home
        raise LookupError(name)

    try:
        text = _HEREDOC_VAR.sub(value, body)
    except LookupError:
        return None
    return None if "$" in text.replace("$$", "") else text
