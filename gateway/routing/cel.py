"""CEL behind one small typed interface, so the engine (cel-expr-python, pinned) can be swapped.

Expressions are compiled and type-checked once, at configuration load, against the declared
variables. Evaluation never raises: an error comes back as :class:`EvalError`.

NUL safety: cel-expr-python 0.1.3 truncates strings and map keys at U+0000, so text after a NUL
would be invisible to a rule. Activations therefore carry a copy in which every NUL is replaced by
U+FFFD; what upstreams receive is never changed.

Regex cost: the engine compiles the RE2 pattern of ``matches()`` on every call (tens to hundreds
of microseconds). Where a pattern has text every match must contain, :mod:`regex_guard` puts a
``contains`` pre-test in front of it; other regexes still need hand-written cheap guards. (Routing
``matches`` through a cached Python-side RE2 function would be faster, but cel-expr-python
0.1.3 leaks the arguments of every Python callback, so no custom function is registered.)

Call cost: one engine call costs a few microseconds even for ``false``, so a policy library
evaluates its rules for one event type as a few list expressions (:class:`Batch`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import orjson
from cel_expr_python import cel
from cel_expr_python.ext import ext_bindings, ext_encoders, ext_math, ext_optional, ext_strings

from gateway.protocol import wire
from gateway.routing.reads import Path, paths_read
from gateway.routing.regex_guard import guard_matches

_T = cel.Type
VARIABLES: dict[str, Any] = {
    "event": _T.Map(_T.STRING, _T.DYN),
    "method": _T.STRING,
    "protocolVersion": _T.STRING,
    "capabilities": _T.Map(_T.STRING, _T.DYN),
    "principal": _T.Map(_T.STRING, _T.DYN),
    "headers": _T.Map(_T.STRING, _T.STRING),
    "facts": _T.Map(_T.STRING, _T.DYN),  # bound by local policies only (gateway.policy.facts)
}
"""The declared variables (docs/policies/index.md, "Routing with CEL")."""

_POSITION = re.compile(r"<input>:(\d+):(\d+): (.*)")
_BIND = re.compile(r"\bcel\s*\.\s*bind\s*\(")
_EARLY_EXIT_MACRO = re.compile(r"\.\s*(exists|exists_one|all)\s*\(")
_NUL_ESCAPE = b"\\u0000"
_OUT_OF_RANGE = "out of range for"
_I64_MIN = -(2**63)
_U64_MAX = 2**64 - 1
Derive = Callable[[Mapping[str, Any]], Mapping[str, Any]]
"""The derived variables of one event (``{"facts": ...}``), supplied by the policy package so
routing never imports it."""
BATCH_SIZE = 8
"""Programs per engine call in a :class:`Batch`. Larger lists save little more time but keep
more memory per evaluation (measured with 68 rules: 8 per list 207 µs and +3.7 MB resident,
one list 155 µs and +7.2 MB, one call per rule 450 µs)."""


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
    """A compiled, type-checked boolean expression. ``source`` is what the author wrote,
    ``compiled`` what the engine runs (``source`` with regex pre-tests)."""

    __slots__ = ("_expr", "compiled", "id", "source")

    def __init__(self, expr: Any, source: str, id: str, compiled: str) -> None:
        self._expr = expr
        self.source = source
        self.id = id
        self.compiled = compiled

    def serialized(self) -> bytes:
        """The engine's checked expression (a serialized ``cel.expr.CheckedExpr``)."""
        return bytes(self._expr.serialize())

    def reads(self) -> frozenset[Path] | None:
        """The paths of the declared variables this program reads, or None when unknown
        (:mod:`gateway.routing.reads`)."""
        return paths_read(self._expr.serialize(), VARIABLES)

    def eval(self, activation: Activation) -> bool | EvalError:
        try:
            value = self._expr.eval(activation.native)
        except RuntimeError as exc:  # a few engine errors raise instead of returning an error value
            return EvalError(str(exc).splitlines()[0])
        except MemoryError:  # a list or string built up without bound (no iteration budget covers it)
            return EvalError("evaluation ran out of memory")
        if value.type() == _T.BOOL:
            return bool(value.value())
        if value.type() == _T.ERROR:
            message = str(value.value())
            if _OUT_OF_RANGE in message and activation.widen():
                return self.eval(activation)
            return EvalError(message.splitlines()[0])
        return EvalError(f"expression produced {value.type().name()}, not bool")


_FIELD_PATH = re.compile(
    r"(principal|headers|event)((?:\.[A-Za-z_][A-Za-z0-9_]*)*)((?:\.\?[A-Za-z_][A-Za-z0-9_]*)*)"
    r"(?:\.orValue\('([^'\\]*)'\))?"
)
"""A key that only selects map fields (``principal.name``, ``event.session.id``), optionally
ending in optional selects with a literal default (``principal.?name.orValue('anonymous')``):
read straight from the variables, the same value or error the engine gives, without building
the engine's view of them."""


class ValueProgram:
    """A compiled, type-checked expression producing a string (a rate limit's ``key``)."""

    __slots__ = ("_default", "_expr", "_optional", "_path", "id", "source")

    def __init__(
        self,
        expr: Any,
        source: str,
        id: str,
        path: tuple[str, ...] | None = None,
        optional: tuple[str, ...] = (),
        default: str | None = None,
    ) -> None:
        self._expr = expr
        self.source = source
        self.id = id
        self._path = path
        self._optional = optional
        self._default = default

    def reads_event(self) -> bool:
        """Whether the expression may read ``event`` (unknown: yes); a key over the principal or
        the headers alone needs no event in its activation, which saves converting it."""
        paths = paths_read(self._expr.serialize(), VARIABLES)
        return paths is None or any(path[0] == "event" for path in paths)

    def eval(self, activation: Activation) -> str | EvalError:
        if self._path is not None:
            return _select(activation.values, self._path, self._optional, self._default)
        try:
            value = self._expr.eval(activation.native)
        except RuntimeError as exc:
            return EvalError(str(exc).splitlines()[0])
        except MemoryError:
            return EvalError("evaluation ran out of memory")
        if value.type() == _T.STRING:
            return str(value.value())
        if value.type() == _T.ERROR:
            message = str(value.value())
            if _OUT_OF_RANGE in message and activation.widen():
                return self.eval(activation)
            return EvalError(message.splitlines()[0])
        return EvalError(f"expression produced {value.type().name()}, not string")


def _select(
    values: Mapping[str, Any], path: tuple[str, ...], optional: tuple[str, ...], default: str | None
) -> str | EvalError:
    """``path`` through nested maps, as the engine selects fields: a missing key or a non-map on
    the way is an error; then the ``optional`` selects, where a missing key gives ``default``; a
    value that is not a string is an error."""
    value: Any = values
    for part in path:
        if not isinstance(value, Mapping) or part not in value:
            return EvalError(f"no such key: {part}")
        value = value[part]
    for part in optional:
        if not isinstance(value, Mapping):
            return EvalError(f"no such key: {part}")
        if part not in value:
            assert default is not None
            return default
        value = value[part]
    if isinstance(value, str):
        return value
    return EvalError("expression produced a value that is not a string")


class Batch:
    """Programs evaluated as a few CEL list expressions: one engine call per :data:`BATCH_SIZE`
    programs instead of one per program. ``slots[i]`` is program ``i``'s position in the
    results, or -1 when it runs alone."""

    __slots__ = ("_exprs", "slots")

    def __init__(self, exprs: tuple[Any, ...], slots: tuple[int, ...]) -> None:
        self._exprs = exprs
        self.slots = slots

    def eval(self, activation: Activation) -> list[bool] | None:
        """Every program's result, or None when any of them is not a plain bool (an evaluation
        error or another type): the caller then evaluates them one by one, which names the
        failing program and keeps the order in which errors are seen."""
        results: list[Any] = []
        for expr in self._exprs:
            try:
                value = expr.eval(activation.native)
            except (RuntimeError, MemoryError):  # one by one then, which names the failing program
                return None
            if value.type() == _T.ERROR:
                return None
            results += value.plain_value()
        for result in results:
            if result is not True and result is not False:
                return None
        return results


class Activation:
    """Variables for one evaluation context. The engine's view of them (:attr:`native`) is built
    on first use, and derived variables (``facts``) are computed on first use of :attr:`values`
    or :attr:`native`: an evaluation answered from a policy library's memo needs neither."""

    __slots__ = ("_derive", "_env", "_native", "_values", "_wide")

    def __init__(self, values: Mapping[str, Any], env: Any, derive: Derive | None = None) -> None:
        self._values = values
        self._env = env
        self._derive = derive
        self._native: Any = None
        self._wide = False

    @property
    def values(self) -> Mapping[str, Any]:
        """Every variable, the derived ones included."""
        if self._derive is not None:
            derive, self._derive = self._derive, None
            event = self._values.get("event")
            self._values = {**self._values, **derive(event if isinstance(event, Mapping) else {})}
        return self._values

    @property
    def given(self) -> Mapping[str, Any]:
        """The variables as given, without the derived ones not yet computed."""
        return self._values

    @property
    def derives(self) -> bool:
        """Whether derived variables are still to be computed, on first use of :attr:`values`
        (once computed, they are in :attr:`given`)."""
        return self._derive is not None

    @property
    def native(self) -> Any:
        native = self._native
        if native is None:
            native = self._native = self._env.Activation(self.values)
        return native

    def widen(self) -> bool:
        """Rebuild the engine's view with numbers beyond 64 bits as doubles (valid JSON the engine
        cannot hold as int); False when already done. ``values`` itself is never changed."""
        if self._wide:
            return False
        self._native = self._env.Activation(sanitize(self.values))
        self._wide = True
        return True


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
        guarded = guard_matches(source, self._valid_pattern)
        if guarded != source:
            try:  # the added parentheses can exceed the parser's nesting limit: keep the original
                expr = self._env.compile(guarded)
            except RuntimeError:
                guarded = source
        return Program(expr, source, id, guarded)

    def compile_string(self, source: str, id: str) -> ValueProgram:
        """Compile and type-check an expression that must evaluate to string (or dyn, checked
        again at evaluation)."""
        try:
            expr = self._env.compile(source)
        except RuntimeError as exc:
            raise _compile_error(str(exc)) from None
        rtype = expr.return_type()
        if rtype != _T.STRING and rtype != _T.DYN:
            raise CelCompileError(f"expression has type {rtype.name()}, expected string", 1, 1)
        simple = _FIELD_PATH.fullmatch(source.strip())
        if simple is None or (simple.group(3) != "") != (simple.group(4) is not None):
            return ValueProgram(expr, source, id)  # optional selects without orValue stay the engine's
        path = (simple.group(1), *simple.group(2).split(".")[1:])
        optional = tuple(part for part in simple.group(3).split(".?")[1:])
        return ValueProgram(expr, source, id, path, optional, simple.group(4))

    def batch(self, programs: Sequence[Program]) -> Batch | None:
        """``programs`` as list expressions of up to :data:`BATCH_SIZE`, or None for fewer than
        two that can run together. Left out: programs too deeply nested to sit in a list (the
        parser's nesting limit; looked for only in a list that fails to compile), and
        ``exists``/``all`` when another program uses ``cel.bind`` (the stale-value bug refused in
        :meth:`compile` would cross program boundaries)."""
        candidates = list(range(len(programs)))
        if any(_BIND.search(p.compiled) for p in programs):
            candidates = [i for i in candidates if not _EARLY_EXIT_MACRO.search(programs[i].compiled)]
        members: list[int] = []
        exprs = []
        for start in range(0, len(candidates), BATCH_SIZE):
            group = candidates[start : start + BATCH_SIZE]
            expr = self._list([programs[i] for i in group])
            if expr is None:
                group = [i for i in group if self._list([programs[i]]) is not None]
                expr = self._list([programs[i] for i in group]) if group else None
            if expr is not None:
                members += group
                exprs.append(expr)
        if len(members) < 2:
            return None
        slots = [-1] * len(programs)
        for position, index in enumerate(members):
            slots[index] = position
        return Batch(tuple(exprs), tuple(slots))

    def _list(self, programs: Sequence[Program]) -> Any:
        source = "[" + ",\n".join(p.compiled for p in programs) + "]"
        if _BIND.search(source) and _EARLY_EXIT_MACRO.search(source):
            return None
        try:
            return self._env.compile(source)
        except RuntimeError:
            return None

    def _valid_pattern(self, literal: str) -> bool:
        """Whether ``matches`` accepts the pattern written as the CEL string literal ``literal``."""
        try:
            result = self._env.compile(f"''.matches({literal})").eval(self._env.Activation({}))
        except RuntimeError:
            return False
        return bool(result.type() == _T.BOOL)

    def activation(
        self, values: Mapping[str, Any], *, maybe_nul: bool = True, derive: Derive | None = None
    ) -> Activation:
        """``maybe_nul=False`` promises that no string in ``values`` contains U+0000 (the caller
        checked the raw JSON); otherwise values are scanned and sanitised. ``derive`` computes
        the derived variables from the (sanitised) event, on first use."""
        return Activation(clean(values) if maybe_nul else values, self._env, derive)


def clean(values: Mapping[str, Any]) -> Mapping[str, Any]:
    """``values`` itself when no string in it holds U+0000, else a sanitised copy."""
    try:
        needs = _NUL_ESCAPE in orjson.dumps(values)
    except TypeError:  # numbers beyond 64 bits: widened on first use (Activation.widen)
        needs = _NUL_ESCAPE in wire.dumps(values)
    return sanitize(values) if needs else values


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
    """A copy of ``value`` with U+0000 replaced by U+FFFD in every string and map key, and numbers
    the engine cannot hold (integers beyond 64 bits, ``Decimal``) as the nearest double."""
    if isinstance(value, str):
        return value.replace("\x00", "\ufffd")
    if isinstance(value, dict):
        return {k.replace("\x00", "\ufffd"): sanitize(v) for k, v in value.items()}
    if isinstance(value, list):
        return [sanitize(v) for v in value]
    if type(value) is int and not _I64_MIN <= value <= _U64_MAX:
        try:
            return float(value)
        except OverflowError:
            return math.inf if value > 0 else -math.inf
    if isinstance(value, Decimal):
        return float(value)
    return value
