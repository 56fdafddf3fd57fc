"""Cheap pre-tests for ``matches()``: ``x.matches('…foo…')`` becomes
``(x.contains('foo') && x.matches('…foo…'))`` when every match of the pattern must contain ``foo``.

Why: the pinned engine compiles the RE2 pattern on every ``matches()`` call (tens of
microseconds), and most policy regexes look at commands that cannot match. A ``contains`` test
costs about one microsecond. The rewrite is only applied where it provably keeps the result:

* the receiver is a plain name or field path (``cmd``, ``event.tool.input.command``), so evaluating
  it twice has no cost and the same value; ``contains`` and ``matches`` both take only strings, so
  for any other receiver both fail with the same error;
* the pattern is one plain or raw string literal whose required text is found conservatively: only
  characters outside groups, classes and alternations, not followed by ``*``, ``?`` or ``{``;
  patterns with inline flags (``(?i)``) or ``\\Q…\\E`` are left alone.
"""

from __future__ import annotations

import re
from collections.abc import Callable

_TOKEN = re.compile(
    r"""
    (?P<space>\s+|//[^\n]*)
  | (?P<raw>(?:[rR][bB]?|[bB][rR])(?:'''.*?'''|\"\"\".*?\"\"\"|'[^'\n]*'|"[^"\n]*"))
  | (?P<string>[bB]?(?:'''(?:\\.|[^\\])*?'''|\"\"\"(?:\\.|[^\\])*?\"\"\"|'(?:\\.|[^'\\\n])*'|"(?:\\.|[^"\\\n])*"))
  | (?P<number>\d[\w.]*)
  | (?P<ident>[A-Za-z_][A-Za-z0-9_]*)
  | (?P<punct>.)
    """,
    re.VERBOSE | re.DOTALL,
)
_SIMPLE_ESCAPES = {
    "\\": "\\", "'": "'", '"': '"', "`": "`", "?": "?",
    "a": "\a", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v",
}  # fmt: skip
_HEX_ESCAPES = {"x": 2, "u": 4, "U": 8}
_CLASS_ESCAPES = frozenset("dDsSwWbBAzntrfva")
"""RE2 escapes of one letter without arguments (classes, anchors, control characters)."""
_INLINE_FLAGS = re.compile(r"\(\?[A-Za-z]")


def guard_matches(source: str, valid: Callable[[str], bool]) -> str:
    """``source`` with a ``contains`` pre-test in front of every ``matches`` call that allows one.
    ``valid(token)`` must say whether the engine accepts that pattern literal: an invalid pattern
    is an evaluation error, which a pre-test must not turn into ``false``."""
    tokens = [(m.lastgroup, m.start(), m.end()) for m in _TOKEN.finditer(source) if m.lastgroup != "space"]
    edits: list[tuple[int, int, str]] = []
    for i in range(len(tokens) - 4):
        kind, start, end = tokens[i]
        if not (
            kind == "punct"
            and source[start:end] == "."
            and source[tokens[i + 1][1] : tokens[i + 1][2]] == "matches"
            and source[tokens[i + 2][1] : tokens[i + 2][2]] == "("
            and tokens[i + 3][0] in ("string", "raw")
            and source[tokens[i + 4][1] : tokens[i + 4][2]] == ")"
        ):
            continue
        first = _path_start(source, tokens, i)
        if first is None:
            continue
        pattern = string_value(source[tokens[i + 3][1] : tokens[i + 3][2]])
        literal = required_literal(pattern) if pattern is not None else None
        if not literal or not valid(source[tokens[i + 3][1] : tokens[i + 3][2]]):
            continue
        receiver = source[tokens[first][1] : start]
        call = source[start : tokens[i + 4][2]]
        edits.append(
            (tokens[first][1], tokens[i + 4][2], f"({receiver}.contains({cel_string(literal)}) && {receiver}{call})")
        )
    for begin, finish, text in reversed(edits):
        source = source[:begin] + text + source[finish:]
    return source


def _path_start(source: str, tokens: list[tuple[str | None, int, int]], dot: int) -> int | None:
    """Index of the first token of the ``name(.name)*`` path ending just before token ``dot``,
    or None when the receiver is anything else (a call, an index, a literal, ``.name``)."""
    j = dot - 1
    if j < 0 or tokens[j][0] != "ident":
        return None
    while j >= 2 and source[tokens[j - 1][1] : tokens[j - 1][2]] == "." and tokens[j - 2][0] == "ident":
        j -= 2
    before = source[tokens[j - 1][1] : tokens[j - 1][2]] if j > 0 else ""
    if before in (".", ")", "]") or (before == "?" and j > 1 and source[tokens[j - 2][1] : tokens[j - 2][2]] == "."):
        return None
    return j


def string_value(token: str) -> str | None:
    """The value of a CEL string literal token, or None for bytes and escapes it does not know."""
    prefix = len(token) - len(token.lstrip("rRbB"))
    flags = token[:prefix].lower()
    if "b" in flags:
        return None
    body = token[prefix:]
    quote = 3 if body[:3] in ("'''", '"""') else 1
    text = body[quote:-quote]
    if "r" in flags:
        return text
    out: list[str] = []
    i = 0
    while i < len(text):
        char = text[i]
        if char != "\\":
            out.append(char)
            i += 1
            continue
        code = text[i + 1 : i + 2]
        if code in _SIMPLE_ESCAPES:
            out.append(_SIMPLE_ESCAPES[code])
            i += 2
        elif code in _HEX_ESCAPES:
            digits = text[i + 2 : i + 2 + _HEX_ESCAPES[code]]
            if len(digits) != _HEX_ESCAPES[code] or not all(c in "0123456789abcdefABCDEF" for c in digits):
                return None
            out.append(chr(int(digits, 16)))
            i += 2 + len(digits)
        elif re.fullmatch(r"[0-3][0-7][0-7]", text[i + 1 : i + 4]):
            out.append(chr(int(text[i + 1 : i + 4], 8)))
            i += 4
        else:
            return None
    return "".join(out)


def required_literal(pattern: str) -> str | None:
    """The longest text that every match of the RE2 ``pattern`` contains, found conservatively
    (None when there is none or the pattern uses syntax this reader does not follow)."""
    if "\\Q" in pattern or _INLINE_FLAGS.search(pattern.replace("(?P<", "(?:")):
        return None
    runs: list[str] = []
    run: list[str] = []
    depth = 0
    i, n = 0, len(pattern)
    while i < n:
        char = pattern[i]
        if char == "\\":
            escaped = pattern[i + 1 : i + 2]
            if not escaped:
                return None
            if escaped.isascii() and not escaped.isalnum():
                if depth == 0:
                    run.append(escaped)
            elif escaped in _CLASS_ESCAPES:
                if depth == 0:
                    runs.append("".join(run))
                    run = []
            else:  # \x41, \pL, \123, ...: escapes with arguments are not followed
                return None
            i += 2
            continue
        if char == "[":
            end = _class_end(pattern, i)
            if end is None:
                return None
            if depth == 0:
                runs.append("".join(run))
                run = []
            i = end + 1
            continue
        if char == "(":
            if depth == 0:
                runs.append("".join(run))
                run = []
            depth += 1
        elif char == ")":
            depth -= 1
            if depth < 0:
                return None
        elif depth > 0:
            pass
        elif char == "|":
            return None
        elif char in "*?{":
            if run:
                run.pop()
            runs.append("".join(run))
            run = []
            if char == "{":
                close = pattern.find("}", i)
                i = close if close != -1 else i
        elif char == "+" or char in ".^$":
            runs.append("".join(run))
            run = []
        else:
            run.append(char)
        i += 1
    if depth != 0:
        return None
    runs.append("".join(run))
    best = max(runs, key=len)
    return best or None


def _class_end(pattern: str, start: int) -> int | None:
    """Index of the ``]`` closing the character class opened at ``start``."""
    i = start + 1
    if pattern[i : i + 1] == "^":
        i += 1
    if pattern[i : i + 1] == "]":
        i += 1
    while i < len(pattern):
        if pattern[i] == "\\":
            i += 2
            continue
        if pattern[i] == "[" and pattern[i + 1 : i + 2] == ":":
            close = pattern.find(":]", i + 2)
            if close == -1:
                return None
            i = close + 2
            continue
        if pattern[i] == "]":
            return i
        i += 1
    return None


def cel_string(text: str) -> str:
    """``text`` as a single-quoted CEL string literal."""
    out = []
    for char in text:
        if char in "\\'":
            out.append("\\" + char)
        elif " " <= char <= "~":
            out.append(char)
        elif ord(char) <= 0xFFFF:
            out.append(f"\\u{ord(char):04x}")
        else:
            out.append(f"\\U{ord(char):08x}")
    return "'" + "".join(out) + "'"
