"""Which parts of the declared variables a compiled CEL expression reads, taken from the engine's
own type-checked AST (so quoting, comments, macros and shadowing are the engine's, not a regex's).

The answer is a set of paths such as ``("event", "tool", "name")``: the expression's result
depends on nothing but the values at those paths (a path ends where the expression stops
selecting fields: an index, a method call, a function argument). A policy library uses it to
remember rule results by exactly what the rules read (:mod:`gateway.policy.memo`).

cel-expr-python exposes the checked expression only as a serialized ``cel.expr.CheckedExpr``
protobuf, so this module reads the few message fields it needs from the wire format itself (no
protobuf runtime or generated code is needed for six messages). Anything it does not recognise
makes the expression unreadable (``None``): the caller then treats it as reading everything.
"""

from __future__ import annotations

from collections.abc import Collection

Path = tuple[str, ...]

# cel.expr.Expr fields (cel/expr/syntax.proto)
_ID, _CONST, _IDENT, _SELECT, _CALL, _LIST, _STRUCT, _COMPREHENSION = 2, 3, 4, 5, 6, 7, 8, 9
_KNOWN = frozenset((_ID, _CONST, _IDENT, _SELECT, _CALL, _LIST, _STRUCT, _COMPREHENSION))
CHECKED_EXPR_FIELD = 4
"""``CheckedExpr.expr``; the serialized value is a ``google.protobuf.Any`` around it (field 2)."""


class Unreadable(Exception):
    """The bytes are not a checked expression this module understands."""


def paths_read(serialized: bytes, variables: Collection[str]) -> frozenset[Path] | None:
    """The paths of ``variables`` that the serialized checked expression reads, reduced to the
    shortest (a path whose prefix is read adds nothing), or None when the AST is not understood."""
    try:
        checked = one_field(fields_of(serialized), 2)
        expr = one_field(fields_of(checked), CHECKED_EXPR_FIELD)
        found: set[Path] = set()
        _visit(expr, frozenset(), frozenset(variables), found)
    except (Unreadable, IndexError, UnicodeDecodeError, RecursionError):
        return None
    return shortest(found)


def shortest(paths: Collection[Path]) -> frozenset[Path]:
    """``paths`` without those whose prefix is among them (the value at the prefix holds theirs)."""
    return frozenset(p for p in paths if not any(p[:n] in paths for n in range(1, len(p))))


def _visit(expr: bytes, bound: frozenset[str], variables: frozenset[str], found: set[Path]) -> None:
    kind, body = expr_kind(expr)
    fields: list[str] = []
    while kind == _SELECT:  # a chain of field selections, down to what it selects from
        select = fields_of(body)
        if optional_int(select, 3, 0) not in (0, 1):  # test_only: has()
            raise Unreadable("select test_only")
        fields.append(text_field(select, 2))
        kind, body = expr_kind(one_field(select, 1))
    parts = fields_of(body) if kind != _CONST else []
    if kind == _IDENT:
        name = text_field(parts, 1)
        if name.startswith("."):  # a leading dot names the global, past any local binding
            name = name[1:]
        elif name in bound:
            return
        if name in variables:
            found.add((name, *reversed(fields)))
    elif kind == _CALL:  # target (1), args (3)
        for number, _, value in parts:
            if number in (1, 3):
                _visit(as_bytes(value), bound, variables, found)
    elif kind == _LIST:  # elements (1); optional_indices (2) hold no expressions
        for number, _, value in parts:
            if number == 1:
                _visit(as_bytes(value), bound, variables, found)
    elif kind == _STRUCT:  # entries (2): map_key (3), value (4)
        for number, _, value in parts:
            if number == 2:
                for inner, _, item in fields_of(as_bytes(value)):
                    if inner in (3, 4):
                        _visit(as_bytes(item), bound, variables, found)
    elif kind == _COMPREHENSION:
        # iter_var (1), iter_range (2), accu_var (3), accu_init (4), loop_condition (5),
        # loop_step (6), result (7), iter_var2 (8): the range and the initial value are outside
        # the comprehension's scope, the condition, step and result inside it.
        names = frozenset(as_bytes(v).decode() for n, _, v in parts if n in (1, 3, 8))
        for number, _, value in parts:
            if number in (2, 4):
                _visit(as_bytes(value), bound, variables, found)
            elif number in (5, 6, 7):
                _visit(as_bytes(value), bound | names, variables, found)
            elif number not in (1, 3, 8):
                raise Unreadable(f"comprehension field {number}")
    elif kind != _CONST:
        raise Unreadable(f"expression kind {kind}")


def expr_kind(expr: bytes) -> tuple[int, bytes]:
    kind, body = 0, b""
    for number, wire, value in fields_of(expr):
        if number not in _KNOWN:
            raise Unreadable(f"expression field {number}")
        if number != _ID:
            if kind or wire != 2:
                raise Unreadable("expression kind")
            kind, body = number, as_bytes(value)
    if not kind:
        raise Unreadable("expression without a kind")
    return kind, body


def fields_of(data: bytes) -> list[tuple[int, int, int | bytes]]:
    """(field number, wire type, value) of each field of one message."""
    out: list[tuple[int, int, int | bytes]] = []
    i, end = 0, len(data)
    while i < end:
        tag, i = _varint(data, i)
        number, wire = tag >> 3, tag & 7
        value: int | bytes
        if wire == 0:
            value, i = _varint(data, i)
        elif wire == 2:
            size, i = _varint(data, i)
            if i + size > end:
                raise Unreadable("truncated field")
            value, i = data[i : i + size], i + size
        elif wire == 1:
            value, i = data[i : i + 8], i + 8
        elif wire == 5:
            value, i = data[i : i + 4], i + 4
        else:
            raise Unreadable(f"wire type {wire}")
        if i > end:
            raise Unreadable("truncated field")
        out.append((number, wire, value))
    return out


def _varint(data: bytes, i: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        byte = data[i]
        i += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, i
        shift += 7
        if shift > 63:
            raise Unreadable("varint too long")


def one_field(parts: list[tuple[int, int, int | bytes]], number: int) -> bytes:
    values = [v for n, _, v in parts if n == number]
    if len(values) != 1:
        raise Unreadable(f"field {number} present {len(values)} times")
    return as_bytes(values[0])


def optional_int(parts: list[tuple[int, int, int | bytes]], number: int, default: int) -> int:
    values = [v for n, _, v in parts if n == number]
    if not values:
        return default
    if len(values) != 1 or not isinstance(values[0], int):
        raise Unreadable(f"field {number}")
    return values[0]


def text_field(parts: list[tuple[int, int, int | bytes]], number: int) -> str:
    return one_field(parts, number).decode()


def as_bytes(value: int | bytes) -> bytes:
    if not isinstance(value, bytes):
        raise Unreadable("expected a length-delimited field")
    return value
