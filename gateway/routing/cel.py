"""CEL behind one small typed interface, so the engine (cel-expr-python, pinned) can be swapped.

Expressions are compiled and type-checked once, at configuration load, against the declared
variables. Evaluation never raises: an error comes back as :class:`EvalError`.

NUL safety: cel-expr-python 0.1.3 truncates strings and map keys at U+0000, so text after a NUL
would be invisible to a rule. Activations therefore carry a copy in which every NUL is replaced by
U+FFFD; what upstreams receive is never changed.

Regex cost: the engine compiles the RE2 pattern of ``matches()`` on every call (tens to hundreds
of microseconds). After type-checking the expression as written, ``matches`` calls are rewritten
to an equivalent function backed by RE2 with a cache of compiled patterns (same engine, same
partial-match semantics, linear time), which makes a regex rule several times cheaper.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson
import re2
from cel_expr_python import cel
from cel_expr_python.ext import ext_bindings, ext_encoders, ext_math, ext_optional, ext_strings

_T = cel.Type
VARIABLES: dict[str, Any] = {
    "event": _T.Map(_T.STRING, _T.DYN),
    "method": _T.STRING,
    "protocolVersion": _T.STRING,
    "capabilities": _T.Map(_T.STRING, _T.DYN),
    "principal": _T.Map(_T.STRING, _T.DYN),
    "headers": _T.Map(_T.STRING, _T.STRING),
}
"""The declared variables (README, "CEL variables")."""

_POSITION = re.compile(r"<input>:(\d+):(\d+): (.*)")
_BIND = re.compile(r"\bcel\s*\.\s*bind\s*\(")
_EARLY_EXIT_MACRO = re.compile(r"\.\s*(exists|exists_one|all)\s*\(")
_NUL_ESCAPE = b"\\u0000"


CACHED_MATCHES = "ahpMatches"
_UNANCHORED = getattr(getattr(re2, "_Anchor", None), "UNANCHORED", None)
_NULL_SPAN = getattr(re2, "_NULL_SPAN", None)
_WORD = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_")


_RE2_OPTIONS = re2.Options()
_RE2_OPTIONS.log_errors = False  # a bad pattern is an evaluation error, not stderr noise
_RE2_OPTIONS.never_capture = True  # only "does it match?" is asked


@functools.lru_cache(maxsize=4096)
def _regex(pattern: str) -> Any:
    return re2.compile(pattern, _RE2_OPTIONS)


def _matches(text: str, pattern: str) -> bool:
    """CEL ``matches``: an RE2 partial match. A bad pattern raises (an evaluation error)."""
    compiled = _regex(pattern)
    if _UNANCHORED is not None and _NULL_SPAN is not None:
        encoded = text.encode()
        return bool(compiled._regexp.Match(_UNANCHORED, encoded, 0, len(encoded))[0] != _NULL_SPAN)
    return compiled.search(text) is not None  # pragma: no cover - public API fallback


def rewrite_matches(source: str) -> str:
    """``matches(`` call sites (member or global form) renamed to the cached implementation;
    string literals and comments are copied unchanged."""
    out: list[str] = []
    i, n = 0, len(source)
    while i < n:
        ch = source[i]
        if ch in "'\"":
            start = i
            raw = i > 0 and source[i - 1] in "rR"
            triple = source[i : i + 3]
            quote = triple if triple in ("'''", '"""') else ch
            i += len(quote)
            while i < n and not source.startswith(quote, i):
                i += 2 if (source[i] == "\\" and not raw) else 1
            i += len(quote)
            out.append(source[start:i])
            continue
        if source.startswith("//", i):
            end = source.find("\n", i)
            end = n if end < 0 else end
            out.append(source[i:end])
            i = end
            continue
        if source.startswith("matches", i) and (i == 0 or source[i - 1] not in _WORD):
            j = i + len("matches")
            k = j
            while k < n and source[k] in " \t\r\n":
                k += 1
            if (j == n or source[j] not in _WORD) and k < n and source[k] == "(":
                out.append(CACHED_MATCHES)
                i = j
                continue
        out.append(ch)
        i += 1
    return "".join(out)


class CelCompileError(ValueError):
    def __init__(self, message: str, line: int | None, column: int | None) -> None:
        super().__init__(message)
        self.message = message
        self.line = line
        self.column = column


@dataclass(frozen=True, slots=True)
class EvalError:
    message: str


class Program:
    """A compiled, type-checked boolean expression."""

    __slots__ = ("_expr", "id", "source")

    def __init__(self, expr: Any, source: str, id: str) -> None:
        self._expr = expr
        self.source = source
        self.id = id

    def eval(self, activation: Activation) -> bool | EvalError:
        try:
            value = self._expr.eval(activation.native)
        except RuntimeError as exc:  # a few engine errors raise instead of returning an error value
            return EvalError(str(exc).splitlines()[0])
        if value.type() == _T.BOOL:
            return bool(value.value())
        if value.type() == _T.ERROR:
            return EvalError(str(value.value()).splitlines()[0])
        return EvalError(f"expression produced {value.type().name()}, not bool")


class Activation:
    """Variables for one evaluation context, converted lazily and cached by the engine."""

    __slots__ = ("native", "values")

    def __init__(self, native: Any, values: Mapping[str, Any]) -> None:
        self.native = native
        self.values = values


class Engine:
    def __init__(self) -> None:
        self._env = cel.NewEnv(
            variables=VARIABLES,
            extensions=[
                ext_strings.ExtStrings(),
                ext_optional.ExtOptional(),
                ext_bindings.ExtBindings(),
                ext_math.ExtMath(),
                ext_encoders.ExtEncoders(),
            ],
            functions=[
                cel.FunctionDecl(
                    CACHED_MATCHES,
                    [
                        cel.Overload(
                            "ahp_string_matches_string", _T.BOOL, [_T.STRING, _T.STRING], is_member=True, impl=_matches
                        ),
                        cel.Overload(
                            "ahp_matches_string_string", _T.BOOL, [_T.STRING, _T.STRING], is_member=False, impl=_matches
                        ),
                    ],
                )
            ],
        )

    def compile(self, source: str, id: str) -> Program:
        """Compile and type-check a condition; it must evaluate to bool (or dyn)."""
        if _BIND.search(source) and (macro := _EARLY_EXIT_MACRO.search(source)):
            # cel-expr-python 0.1.3: a cel.bind evaluated after an exists/all that stopped early
            # reads a stale value (a silently wrong result). Refuse the combination outright.
            raise CelCompileError(
                f"cel.bind cannot be combined with {macro.group(1)}() in this engine version "
                "(wrong results); use list.filter(x, ...).size() > 0 instead",
                *_line_col(source, macro.start()),
            )
        try:
            expr = self._env.compile(source)
        except RuntimeError as exc:
            raise _compile_error(str(exc)) from None
        rtype = expr.return_type()
        if rtype != _T.BOOL and rtype != _T.DYN:
            raise CelCompileError(f"expression has type {rtype.name()}, expected bool", 1, 1)
        if CACHED_MATCHES in source:
            raise CelCompileError(
                f"{CACHED_MATCHES} is reserved; use matches()", *_line_col(source, source.index(CACHED_MATCHES))
            )
        fast = rewrite_matches(source)
        if fast != source:
            try:
                expr = self._env.compile(fast)
            except RuntimeError as exc:  # pragma: no cover - the rewrite only renames call sites
                raise _compile_error(str(exc)) from None
        return Program(expr, source, id)

    def activation(self, values: Mapping[str, Any], *, maybe_nul: bool = True) -> Activation:
        """``maybe_nul=False`` promises that no string in ``values`` contains U+0000 (the caller
        checked the raw JSON); otherwise values are scanned and sanitised."""
        if maybe_nul and _NUL_ESCAPE in orjson.dumps(values):
            values = sanitize(values)
        return Activation(self._env.Activation(values), values)


def _line_col(source: str, offset: int) -> tuple[int, int]:
    before = source[:offset]
    return before.count("\n") + 1, offset - (before.rfind("\n") + 1) + 1


def _compile_error(text: str) -> CelCompileError:
    match = _POSITION.search(text)
    if match:
        return CelCompileError(match.group(3).strip(), int(match.group(1)), int(match.group(2)))
    first = text.splitlines()[0] if text else "invalid expression"
    return CelCompileError(first.removeprefix("INVALID_ARGUMENT: "), None, None)


def sanitize(value: Any) -> Any:
    """A copy of ``value`` with U+0000 replaced by U+FFFD in every string and map key."""
    if isinstance(value, str):
        return value.replace("\x00", "\ufffd")
    if isinstance(value, dict):
        return {k.replace("\x00", "\ufffd"): sanitize(v) for k, v in value.items()}
    if isinstance(value, list):
        return [sanitize(v) for v in value]
    return value
