"""Shell words after quote removal, with what stays unknown.

A word is kept as two parallel strings: its characters and a mask that says which of them were
quoted (``1``) or came from unquoted source text (``0``). Only unquoted ``*?[`` are glob
characters and only unquoted ``{a,b}`` / ``{1..3}`` are brace expansions, exactly as in bash.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass, field
from typing import Any

MAX_BRACE = 64
"""Brace expansion beyond this many words is not expanded (the word is then dynamic)."""

_ESCAPES = {
    "a": "\a",
    "b": "\b",
    "e": "\x1b",
    "E": "\x1b",
    "f": "\f",
    "n": "\n",
    "r": "\r",
    "t": "\t",
    "v": "\v",
    "\\": "\\",
    "'": "'",
    '"': '"',
    "?": "?",
}


@dataclass(slots=True)
class Word:
    """One shell word: ``text``/``mask`` as described above, plus what could not be resolved."""

    text: str = ""
    mask: str = ""
    dynamic: bool = False
    """Contains a variable, command substitution or arithmetic whose value is not known."""
    sources: list[str] = field(default_factory=list)
    """Programs whose output becomes (part of) this word: ``$(curl ...)``, ``<(curl ...)``."""
    procsub: bool = False
    """The word is a process substitution ``<(...)`` (a file name such as /dev/fd/63)."""
    fixed: int = 0
    """For a dynamic word: how many leading characters are static."""
    readers: list[Any] = field(default_factory=list)
    """Commands of an output process substitution ``>(...)``: they read the command's output."""
    output: str | None = None
    """For an input process substitution ``<(...)``: its output, when it is static text."""

    def add(self, text: str, quoted: bool) -> None:
        self.text += text
        self.mask += ("1" if quoted else "0") * len(text)

    def extend(self, other: Word) -> None:
        if other.dynamic and not self.dynamic:
            self.fixed = len(self.text) + other.fixed
        self.text += other.text
        self.mask += other.mask
        self.dynamic = self.dynamic or other.dynamic
        self.sources += other.sources
        self.procsub = self.procsub or other.procsub
        self.readers += other.readers
        self.output = other.output if other.procsub else self.output

    @property
    def glob(self) -> bool:
        text = self.text
        if "*" not in text and "?" not in text and "[" not in text:
            return False
        return any(c in "*?[" and m == "0" for c, m in zip(text, self.mask, strict=True))

    def pattern(self) -> str:
        """The word as a glob pattern: quoted glob characters escaped with a backslash."""
        out = []
        for c, m in zip(self.text, self.mask, strict=True):
            out.append("\\" + c if m == "1" and c in "*?[]\\" else c)
        return "".join(out)


def ansi_c(body: str) -> str:
    """The value of ``$'...'`` (ANSI-C quoting) for its body between the quotes."""
    out: list[str] = []
    i = 0
    while i < len(body):
        c = body[i]
        if c != "\\" or i + 1 >= len(body):
            out.append(c)
            i += 1
            continue
        n = body[i + 1]
        if n in _ESCAPES:
            out.append(_ESCAPES[n])
            i += 2
        elif n in "01234567":
            m = re.match(r"[0-7]{1,3}", body[i + 1 :])
            assert m is not None
            out.append(chr(int(m.group(), 8) & 0xFF))
            i += 1 + len(m.group())
        elif n == "x" and (m := re.match(r"[0-9A-Fa-f]{1,2}", body[i + 2 :])):
            out.append(chr(int(m.group(), 16)))
            i += 2 + len(m.group())
        elif n in "uU" and (m := re.match(r"[0-9A-Fa-f]{1,8}" if n == "U" else r"[0-9A-Fa-f]{1,4}", body[i + 2 :])):
            value = int(m.group(), 16)
            out.append(chr(value) if value < 0x110000 else "\ufffd")
            i += 2 + len(m.group())
        elif n == "c" and i + 2 < len(body):
            out.append(chr(ord(body[i + 2]) & 0x1F))
            i += 3
        else:
            out.append("\\" + n)
            i += 2
    return "".join(out)


def unquoted(raw: str, word: Word) -> None:
    """Append unquoted source text: a backslash quotes the next character, ``\\<newline>`` vanishes
    (a trailing lone backslash stays itself). The text between backslashes goes in one piece."""
    _escaped(raw, word, None, quoted=False)


def double_quoted(raw: str, word: Word) -> None:
    """Append the literal text inside double quotes: backslash only escapes ``$ ` " \\`` and newline."""
    _escaped(raw, word, _DQ_ESCAPABLE, quoted=True)


_DQ_ESCAPABLE = frozenset('$`"\\\n')


def _escaped(raw: str, word: Word, escapable: frozenset[str] | None, *, quoted: bool) -> None:
    """``raw`` into ``word``: a backslash before a character of ``escapable`` (any, when None)
    quotes that character and is dropped (``\\<newline>`` drops both); every other character is
    appended as it is, marked ``quoted``."""
    start, end = 0, len(raw)
    at = raw.find("\\")
    while 0 <= at < end - 1:
        following = raw[at + 1]
        if escapable is None or following in escapable:
            if at > start:
                word.add(raw[start:at], quoted)
            if following != "\n":
                word.add(following, True)
            start = at + 2
            at = raw.find("\\", start)
        else:  # a literal backslash; the character after it is not a backslash (that one escapes)
            at = raw.find("\\", at + 1)
    if start < end:
        word.add(raw[start:], quoted)


def field_split(text: str, mask: str, ifs: str = " \t\n") -> list[tuple[str, str]]:
    """Split at unquoted ``ifs`` characters (blanks by default), which only substituted values
    can bring (``${IFS}``, ``$X``)."""
    if ifs == " \t\n":
        if " " not in text and "\t" not in text and "\n" not in text:
            return [(text, mask)] if text else []
    elif not any(c in text for c in ifs):
        return [(text, mask)] if text else []
    out: list[tuple[str, str]] = []
    start = None
    for i, (c, m) in enumerate(zip(text, mask, strict=True)):
        blank = m == "0" and c in ifs
        if blank and start is not None:
            out.append((text[start:i], mask[start:i]))
            start = None
        elif not blank and start is None:
            start = i
    if start is not None:
        out.append((text[start:], mask[start:]))
    return out


def brace_expand(text: str, mask: str) -> list[tuple[str, str]] | None:
    """Bash brace expansion of an unquoted ``{a,b}`` or ``{1..3}``; None when it would exceed
    :data:`MAX_BRACE` words. A word without a brace expression comes back unchanged."""
    if "{" not in text:
        return [(text, mask)]
    out: list[tuple[str, str]] = []
    work = [(text, mask)]
    while work:
        t, m = work.pop()
        found = _first_brace(t, m)
        if found is None:
            out.append((t, m))
        else:
            start, end, parts = found
            for part_t, part_m in parts:
                work.append((t[:start] + part_t + t[end + 1 :], m[:start] + part_m + m[end + 1 :]))
        if len(out) + len(work) > MAX_BRACE:
            return None
    out.reverse()
    return out


def _first_brace(t: str, m: str) -> tuple[int, int, list[tuple[str, str]]] | None:
    for start, c in enumerate(t):
        if c != "{" or m[start] != "0" or (start > 0 and t[start - 1] == "$" and m[start - 1] == "0"):
            continue
        depth = 0
        commas: list[int] = []
        for end in range(start, len(t)):
            if m[end] != "0":
                continue
            if t[end] == "{":
                depth += 1
            elif t[end] == "}":
                depth -= 1
                if depth == 0:
                    if commas:
                        bounds = [start, *commas, end]
                        parts = [(t[a + 1 : b], m[a + 1 : b]) for a, b in itertools.pairwise(bounds)]
                        return start, end, parts
                    seq = _sequence(t[start + 1 : end])
                    if seq is not None:
                        return start, end, [(s, "1" * len(s)) for s in seq]
                    break
            elif t[end] == "," and depth == 1:
                commas.append(end)
    return None


def _sequence(inner: str) -> list[str] | None:
    m = re.fullmatch(r"(-?\d+)\.\.(-?\d+)(?:\.\.(-?\d+))?", inner)
    if m:
        a, b = int(m.group(1)), int(m.group(2))
        step = abs(int(m.group(3) or 1)) or 1
        if abs(b - a) // step + 1 > MAX_BRACE:
            return [str(a)] * (MAX_BRACE + 1)
        rng = range(a, b + 1, step) if a <= b else range(a, b - 1, -step)
        return [str(i) for i in rng]
    m = re.fullmatch(r"([A-Za-z])\.\.([A-Za-z])", inner)
    if m:
        a, b = ord(m.group(1)), ord(m.group(2))
        return [chr(i) for i in (range(a, b + 1) if a <= b else range(a, b - 1, -1))]
    return None


def echo_escapes(body: str) -> tuple[str, bool]:
    """``echo -e`` / ``printf %b`` escapes decoded (``\\0nnn`` octal, ``\\xHH``, ``\\n``, ...);
    and whether ``\\c`` ended the output there."""
    out: list[str] = []
    i = 0
    while i < len(body):
        c = body[i]
        if c != "\\" or i + 1 >= len(body):
            out.append(c)
            i += 1
            continue
        n = body[i + 1]
        if n == "c":
            return "".join(out), True
        if n == "0" and (m := re.match(r"[0-7]{0,3}", body[i + 2 :])) is not None:
            out.append(chr(int(m.group() or "0", 8) & 0xFF))
            i += 2 + len(m.group())
        elif n in "1234567" and (m := re.match(r"[0-7]{1,3}", body[i + 1 :])) is not None:
            out.append(chr(int(m.group(), 8) & 0xFF))
            i += 1 + len(m.group())
        elif n in "'\"?":
            out.append("\\" + n)
            i += 2
        else:
            decoded = ansi_c(body[i : i + 10])
            m2 = re.match(r"\\(x[0-9A-Fa-f]{1,2}|u[0-9A-Fa-f]{1,4}|U[0-9A-Fa-f]{1,8}|.)", body[i:])
            size = len(m2.group()) if m2 else 2
            out.append(ansi_c(body[i : i + size]) if decoded else body[i : i + size])
            i += size
    return "".join(out), False


_CONVERSION = re.compile(r"%([-+ #0]*)(\d+|\*)?(?:\.(\d*|\*))?([sbdiouxXcq%])")


def printf_text(fmt: str, args: list[str]) -> str | None:
    """What ``printf FMT ARGS...`` prints (the format reused while arguments remain), or None for
    a conversion this does not know."""
    fmt = ansi_c(fmt.replace("\\'", "\\\\'").replace('\\"', '\\\\"'))
    out: list[str] = []
    rest = list(args)
    for _ in range(64):
        used = False
        pos = 0
        for m in _CONVERSION.finditer(fmt):
            if "%" in fmt[pos : m.start()]:
                return None  # a conversion this does not know
            out.append(fmt[pos : m.start()])
            pos = m.end()
            flags, width, precision, conv = m.groups()
            if conv == "%":
                out.append("%")
                continue
            if width == "*":
                width = rest.pop(0) if rest else "0"
                used = True
            if precision == "*":
                precision = rest.pop(0) if rest else "0"
                used = True
            value = rest.pop(0) if rest else ""
            used = used or bool(args)
            if conv == "b":
                value, stop = echo_escapes(value)
                if stop:
                    out.append(value)
                    return "".join(out)
            elif conv == "q":
                value = value if re.fullmatch(r"[A-Za-z0-9_./=-]*", value) else "'" + value.replace("'", "'\\''") + "'"
            elif conv in "diouxXc":
                if conv == "c":
                    value = value[:1]
                else:
                    try:
                        number = int(value or "0", 0)
                    except ValueError:
                        return None
                    value = format(number, {"i": "d", "u": "d"}.get(conv, conv))
            if precision not in (None, "") and conv in "sbq":
                value = value[: int(precision)]
            if width not in (None, "") and width.lstrip("-").isdigit():
                size = int(width)
                value = value.ljust(abs(size)) if "-" in flags or size < 0 else value.rjust(size)
            out.append(value)
        if "%" in fmt[pos:]:
            return None
        out.append(fmt[pos:])
        if not rest or not used:
            break
    return "".join(out)
