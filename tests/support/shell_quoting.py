"""Ways to quote a shell word that keep its value (single, double, backslash, ANSI-C hex and octal, plain), for properties that re-quote caught commands."""

from __future__ import annotations

import re


def _single(word: str) -> str:
    return "'" + word.replace("'", "'\\''") + "'"


def _double(word: str) -> str:
    return '"' + "".join("\\" + c if c in '"\\$`' else c for c in word) + '"'


def _backslash(word: str) -> str:
    return "".join("\\" + c for c in word)


def _ansi(word: str) -> str:
    return "$'" + "".join(f"\\x{ord(c):02x}" for c in word) + "'"


def _octal(word: str) -> str:
    return "$'" + "".join(f"\\{ord(c):03o}" for c in word) + "'"


def _plain(word: str) -> str:
    return word if re.fullmatch(r"[A-Za-z0-9_./:@=+-]*", word) else _single(word)


QUOTERS = [_single, _double, _backslash, _ansi, _octal, _plain]
