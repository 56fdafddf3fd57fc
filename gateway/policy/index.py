"""Rule indexing: which rules can match a tool call, known from each rule's checked AST.

Most tool calls (``ls``, ``cat src/x.py``, ``pytest -k y``) cannot make most rules true: a rule
over ``facts.effects.filter(e, e.kind == 'delete' && ...)`` needs a delete effect, one over
``facts.commands.filter(c, c.program == 'git' && ...)`` a git command. At load, each rule gets a
*need*: a set of tokens (``effect:delete``, ``program:git``, ``tool:read``, ``shell:unparsed``,
``hosts``) of which the event must have at least one for the rule to be true, or None when no
such set can be read from the AST (the rule is always evaluated). A call then evaluates only the
rules whose need it meets, as OPA indexes rules and agentgateway builds only what an expression
reads; a skipped rule is false by construction, so its result is never guessed.

The analysis is sound and conservative: ``a && b`` needs what either needs, ``a || b`` the union
of both (None if either is None), a non-empty ``filter`` / ``exists`` over ``facts.effects`` or
``facts.commands`` needs the kinds or programs its condition compares with ``==`` or ``in``, and
anything else needs nothing. The AST is read with :mod:`gateway.routing.reads`'s wire decoder.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from gateway.routing import reads as wire

Need = frozenset[str] | None

# cel.expr.Expr kinds and cel.expr.Constant fields
_CONST, _IDENT, _SELECT, _CALL, _LIST, _COMPREHENSION = 3, 4, 5, 6, 7, 9
_BOOL, _INT, _UINT, _STRING = 2, 3, 4, 6


@dataclass(frozen=True, slots=True)
class Node:
    """One decoded expression: ``kind`` and its parts (see :func:`decode`)."""

    kind: str
    value: Any = None
    children: tuple[Node, ...] = ()
    names: tuple[str, ...] = ()


def decode(serialized: bytes) -> Node | None:
    """The checked expression as a small tree, or None when it is not understood."""
    try:
        checked = wire._one(wire._fields(serialized), 2)
        return _node(wire._one(wire._fields(checked), wire._CHECKED_EXPR_FIELD))
    except (wire.Unreadable, IndexError, UnicodeDecodeError, RecursionError, ValueError):
        return None


def _node(expr: bytes) -> Node:
    kind, body = wire._kind(expr)
    parts = wire._fields(body)
    if kind == _CONST:
        for number, _, value in parts:
            if number == _STRING and isinstance(value, bytes):
                return Node("const", value.decode())
            if number in (_BOOL, _INT, _UINT) and isinstance(value, int):
                return Node("const", value)
        return Node("const", None)
    if kind == _IDENT:
        return Node("ident", wire._text(parts, 1))
    if kind == _SELECT:
        if wire._optional(parts, 3, 0):
            return Node("has")
        return Node("select", wire._text(parts, 2), (_node(wire._one(parts, 1)),))
    if kind == _CALL:
        target = [_node(wire._bytes(v)) for n, _, v in parts if n == 1]
        args = [_node(wire._bytes(v)) for n, _, v in parts if n == 3]
        name = wire._text(parts, 2)
        return Node("call", name, (*target, *args), ("target",) if target else ())
    if kind == _LIST:
        return Node("list", None, tuple(_node(wire._bytes(v)) for n, _, v in parts if n == 1))
    if kind == _COMPREHENSION:
        by = {n: v for n, _, v in parts}
        names = (wire._bytes(by.get(1, b"")).decode(), wire._bytes(by.get(3, b"")).decode())
        children = tuple(_node(wire._bytes(by[n])) for n in (2, 4, 5, 6, 7))
        return Node("comprehension", None, children, names)
    return Node("other")


def need_of(serialized: bytes) -> Need:
    """The rule's need (module docstring), from its serialized checked expression."""
    root = decode(serialized)
    return None if root is None else _need(root)


def _need(n: Node) -> Need:
    if n.kind == "call":
        if n.value == "_&&_":
            found = [x for x in (_need(c) for c in n.children) if x is not None]
            return min(found, key=len) if found else None
        if n.value == "_||_":
            parts = [_need(c) for c in n.children]
            if any(p is None for p in parts):
                return None
            return frozenset().union(*(p for p in parts if p is not None))
        if n.value in ("_>_", "_!=_") and len(n.children) == 2 and _is_zero(n.children[1]):
            return _nonempty(n.children[0])
        if n.value == "_>=_" and len(n.children) == 2 and _is_const(n.children[1], 1):
            return _nonempty(n.children[0])
        if n.value == "_==_" and len(n.children) == 2:
            return _tool_token(n.children[0], n.children[1])
        if n.value == "@in" and len(n.children) == 2:
            return _tool_in(n.children[0], n.children[1])
        return None
    if n.kind == "comprehension":
        rng, result = n.children[0], n.children[4]
        if rng.kind == "list" and not rng.children:  # cel.bind(name, value, result)
            return _need(result)
        return _macro(n)
    if n.kind == "select":
        path = _path(n)
        if path in (("facts", "shell", "unparsed"), ("facts", "shell", "present")):
            return frozenset({"shell:" + path[2]})
    return None


def _nonempty(n: Node) -> Need:
    """What ``n`` (a list) needs to be non-empty: ``x.filter(...).size()``, ``size(x)``."""
    if n.kind == "call" and n.value == "size" and len(n.children) == 1:
        inner = n.children[0]
        if inner.kind == "comprehension":
            return _macro(inner)
        if _path(inner) == ("facts", "hosts"):
            return frozenset({"hosts"})
    return None


def _macro(n: Node) -> Need:
    """A ``filter``/``exists`` comprehension over ``facts.effects`` or ``facts.commands``."""
    rng, step = n.children[0], n.children[3]
    var = n.names[0]
    path = _path(rng)
    if path == ("facts", "effects"):
        field, prefix = "kind", "effect:"
    elif path == ("facts", "commands"):
        field, prefix = "program", "program:"
    else:
        return None
    accepts = _step_condition(step, n.names[1])
    if accepts is None:
        return None
    return _element(accepts, var, field, prefix)


def _step_condition(step: Node, accu: str) -> Node | None:
    """The condition under which an element counts: ``filter`` (``cond ? accu + [x] : accu``)
    and ``exists`` (``accu || cond``); None for any other comprehension."""
    if step.kind == "call" and step.value == "_?_:_" and len(step.children) == 3:
        cond, _, other = step.children
        if other.kind == "ident" and other.value == accu:
            return cond
    if step.kind == "call" and step.value == "_||_" and len(step.children) == 2:
        left, right = step.children
        if left.kind == "ident" and left.value == accu:
            return right
    return None


def _element(n: Node, var: str, field: str, prefix: str) -> Need:
    if n.kind == "call":
        if n.value == "_&&_":
            found = [x for x in (_element(c, var, field, prefix) for c in n.children) if x is not None]
            return min(found, key=len) if found else None
        if n.value == "_||_":
            parts = [_element(c, var, field, prefix) for c in n.children]
            if any(p is None for p in parts):
                return None
            return frozenset().union(*(p for p in parts if p is not None))
        if n.value == "_==_" and len(n.children) == 2:
            for a, b in (n.children, reversed(n.children)):
                if _path(a) == (var, field) and b.kind == "const" and isinstance(b.value, str):
                    return frozenset({prefix + b.value})
        if n.value == "@in" and len(n.children) == 2:
            item, items = n.children
            if _path(item) == (var, field) and items.kind == "list" and _strings(items) is not None:
                return frozenset(prefix + s for s in _strings(items) or ())
        return None
    if n.kind == "comprehension":
        rng, result = n.children[0], n.children[4]
        if rng.kind == "list" and not rng.children:
            return _element(result, var, field, prefix)
    return None


def _tool_token(a: Node, b: Node) -> Need:
    for x, y in ((a, b), (b, a)):
        if _path(x) == ("facts", "tool", "kind") and y.kind == "const" and isinstance(y.value, str):
            return frozenset({"tool:" + y.value})
    return None


def _tool_in(item: Node, items: Node) -> Need:
    strings = _strings(items) if items.kind == "list" else None
    if _path(item) == ("facts", "tool", "kind") and strings is not None:
        return frozenset("tool:" + s for s in strings)
    return None


def _strings(n: Node) -> list[str] | None:
    out = []
    for c in n.children:
        if c.kind != "const" or not isinstance(c.value, str):
            return None
        out.append(c.value)
    return out


def _path(n: Node) -> tuple[str, ...] | None:
    fields: list[str] = []
    while n.kind == "select":
        fields.append(n.value)
        n = n.children[0]
    if n.kind != "ident":
        return None
    return (str(n.value).lstrip("."), *reversed(fields))


def _is_zero(n: Node) -> bool:
    return _is_const(n, 0)


def _is_const(n: Node, value: int) -> bool:
    return n.kind == "const" and n.value == value and not isinstance(n.value, bool)


def tokens(facts: Mapping[str, Any]) -> frozenset[str]:
    """The tokens an event has (module docstring), from its facts."""
    out = {"tool:" + facts["tool"]["kind"]}
    out.update("effect:" + e["kind"] for e in facts["effects"])
    out.update("program:" + c["program"] for c in facts["commands"])
    shell = facts["shell"]
    if shell["present"]:
        out.add("shell:present")
    if shell["unparsed"]:
        out.add("shell:unparsed")
    if facts["hosts"]:
        out.add("hosts")
    return frozenset(out)


def can_match(need: Need, have: Iterable[str] | frozenset[str]) -> bool:
    return need is None or not need.isdisjoint(have)
