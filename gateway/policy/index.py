"""Rule indexing: which rules can match a tool call, known from each rule's checked AST.

Most tool calls (``ls``, ``cat src/x.py``, ``pytest -k y``) cannot make most rules true: a rule
over ``facts.effects.filter(e, e.kind == 'delete' && ...)`` needs a delete effect, one over
``facts.commands.filter(c, c.program == 'git' && ...)`` a git command. At load, each rule gets a
*need*: a set of tokens (``effect:delete``, ``program:git``, ``tool:read``, ``shell:unparsed``,
``hosts``) of which the event must have at least one for the rule to be true, or None when no
such set can be read from the AST (the rule is always evaluated). A call then evaluates only the
rules whose need it meets, as OPA indexes rules and agentgateway builds only what an expression
reads; a skipped rule is false by construction, so its result is never guessed.

The analysis is sound and conservative: ``a && b`` needs what both need, ``a || b`` the union
of both (None if either is None), a non-empty ``filter`` / ``exists`` over ``facts.effects`` or
``facts.commands`` needs the kinds or programs its condition compares with ``==`` or ``in``, and
anything else needs nothing. The AST is read with :mod:`gateway.routing.reads`'s wire decoder.

So a rule's full requirement is a conjunction of such sets (:data:`Clauses`: ``e.kind == 'read'
&& e.path.contains('/.')`` needs a read *and* a path holding ``/.``); its *need* is the rarest of
them. :class:`RuleIndex` looks rules up by the event's tokens (token → rules, as OPA indexes
rules), so a call costs what its few tokens cost, not what the number of rules does, and then
checks the candidates' other clauses.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import ahocorasick

from gateway.routing import reads as wire

Need = frozenset[str] | None
Clauses = tuple[frozenset[str], ...] | None
"""A rule's requirement: the event must have a token of every set (None: nothing is known, the
rule is always evaluated)."""

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
        checked = wire.one_field(wire.fields_of(serialized), 2)
        return _node(wire.one_field(wire.fields_of(checked), wire.CHECKED_EXPR_FIELD))
    except (wire.Unreadable, IndexError, UnicodeDecodeError, RecursionError, ValueError):
        return None


def _node(expr: bytes) -> Node:
    kind, body = wire.expr_kind(expr)
    parts = wire.fields_of(body)
    if kind == _CONST:
        for number, _, value in parts:
            if number == _STRING and isinstance(value, bytes):
                return Node("const", value.decode())
            if number in (_BOOL, _INT, _UINT) and isinstance(value, int):
                return Node("const", value)
        return Node("const", None)
    if kind == _IDENT:
        return Node("ident", wire.text_field(parts, 1))
    if kind == _SELECT:
        if wire.optional_int(parts, 3, 0):
            return Node("has")
        return Node("select", wire.text_field(parts, 2), (_node(wire.one_field(parts, 1)),))
    if kind == _CALL:
        target = [_node(wire.as_bytes(v)) for n, _, v in parts if n == 1]
        args = [_node(wire.as_bytes(v)) for n, _, v in parts if n == 3]
        name = wire.text_field(parts, 2)
        return Node("call", name, (*target, *args), ("target",) if target else ())
    if kind == _LIST:
        return Node("list", None, tuple(_node(wire.as_bytes(v)) for n, _, v in parts if n == 1))
    if kind == _COMPREHENSION:
        by = {n: v for n, _, v in parts}
        names = (wire.as_bytes(by.get(1, b"")).decode(), wire.as_bytes(by.get(3, b"")).decode())
        children = tuple(_node(wire.as_bytes(by[n])) for n in (2, 4, 5, 6, 7))
        return Node("comprehension", None, children, names)
    return Node("other")


def need_of(serialized: bytes) -> Need:
    """The rule's need (module docstring), from its serialized checked expression."""
    clauses = requirement_of(serialized)
    return None if clauses is None else need_of_clauses(clauses)


def need_of_clauses(clauses: tuple[frozenset[str], ...]) -> frozenset[str]:
    """The need of a requirement: its rarest set (:func:`requirement_of` puts it first)."""
    return clauses[0]


def requirement_of(serialized: bytes) -> Clauses:
    """Every set the rule needs a token of (module docstring), the rarest first."""
    root = decode(serialized)
    clauses = None if root is None else _need(root, {})
    if clauses is None:
        return None
    best = _best(clauses)
    return (best, *(c for c in clauses if c != best))


Env = dict[str, str]
"""What a local name denotes: ``effect`` (an element of ``facts.effects``), ``command`` (of
``facts.commands``) or ``path`` (a path string of the facts)."""


def _rank(token: str) -> int:
    """How common a token is, roughly (lower: rarer). Of the needs of ``a && b`` the one whose
    commonest token is rarest is kept: a path holding ``.env`` is rarer than a read, a read than
    a ``cat``, and a one- or two-character literal (``/``) says nothing."""
    kind, _, value = token.partition(":")
    if kind in ("text", "start"):
        return 0 if len(value) >= 3 else 9
    if kind == "prefix":
        return 6 if len(value) >= 3 else 9
    return {"effect": 1, "hosts": 2, "mcp": 3, "reason": 3, "sub": 4, "shell": 4, "program": 5, "tool": 7}.get(
        kind, 8
    ) + (token == "shell:present") * 4


def _best(found: Iterable[frozenset[str]]) -> frozenset[str]:
    return min(found, key=lambda need: (max(_rank(t) for t in need), len(need)))


def _one(need: frozenset[str]) -> Clauses:
    return (need,)


def _any(parts: Sequence[Clauses]) -> Clauses:
    """What one of ``parts`` being true needs: one set, the union of their rarest (None if one
    of them needs nothing)."""
    if any(p is None for p in parts):
        return None
    return _one(frozenset().union(*(_best(p) for p in parts if p is not None)))


def _need(n: Node, env: Env) -> Clauses:
    if n.kind == "call":
        name, args = n.value, n.children
        if name == "_&&_":
            found = [clause for c in args for clause in _need(c, env) or ()]
            return tuple(dict.fromkeys(found)) if found else None
        if name == "_||_":
            return _any([_need(c, env) for c in args])
        if name in ("_>_", "_!=_") and len(args) == 2 and _is_const(args[1], 0):
            return _nonempty(args[0], env)
        if name == "_>=_" and len(args) == 2 and _is_const(args[1], 1):
            return _nonempty(args[0], env)
        if name in ("_==_", "_!=_", "@in", "contains", "startsWith", "endsWith") and len(args) == 2:
            return _compare(name, args[0], args[1], env)
        return None
    if n.kind == "comprehension":
        rng, init, result = n.children[0], n.children[1], n.children[4]
        if rng.kind == "list" and not rng.children:  # cel.bind(name, value, result)
            denotes = _denotes(init, env)
            inner = {k: v for k, v in env.items() if k != n.names[1]}
            if denotes is not None:
                inner[n.names[1]] = denotes
            return _need(result, inner)
        return _macro(n, env)
    if n.kind == "select":
        path = _path(n)
        if path in (("facts", "shell", "unparsed"), ("facts", "shell", "present")):
            return _one(frozenset({"shell:" + path[2]}))
    return None


def _compare(name: str, a: Node, b: Node, env: Env) -> Clauses:
    found = _compared(name, a, b, env)
    return None if found is None else _one(found)


def _compared(name: str, a: Node, b: Node, env: Env) -> Need:
    """``x == 'lit'``, ``x in [...]``, ``p.contains('lit')``, ``c.program.startsWith('lit')``."""
    if name in ("contains", "startsWith", "endsWith", "_==_"):  # a path that holds the literal
        kind = "start:" if name == "startsWith" else "text:"
        for x, y in ((a, b), (b, a)) if name == "_==_" else ((a, b),):
            if _denotes(_unlowered(x), env) == "path" and y.kind == "const" and isinstance(y.value, str) and y.value:
                return frozenset({kind + y.value.lower()})
            tail = _literal_tail(y) if name == "_==_" else None
            if tail and _denotes(_unlowered(x), env) == "path":  # `p == facts.home + '/.npmrc'`
                return frozenset({"text:" + tail.lower()})
        if name == "contains":
            return None
    if name == "startsWith":
        if _field(a, env) == ("command", "program") and b.kind == "const" and isinstance(b.value, str) and b.value:
            return frozenset({"prefix:" + b.value})
        return None
    if name == "endsWith":
        return None
    if name == "@in" and _path(b) == ("facts", "shell", "reasons") and a.kind == "const" and isinstance(a.value, str):
        return frozenset({"reason:" + a.value})
    if name == "_!=_":
        if _path(a) == ("facts", "tool", "server") and b.kind == "const" and b.value == "":
            return frozenset({"mcp"})
        return None
    values: list[str] | None
    if name == "@in":
        values = _strings(b) if b.kind == "list" else None
    else:
        if b.kind != "const" or not isinstance(b.value, str):
            a, b = b, a
        values = [b.value] if b.kind == "const" and isinstance(b.value, str) else None
    if values is None:
        return None
    field = _field(a, env)
    prefix = {("effect", "kind"): "effect:", ("command", "program"): "program:", ("command", "subcommand"): "sub:"}.get(
        field or ("", "")
    )
    if prefix is None and _path(a) == ("facts", "tool", "kind"):
        prefix = "tool:"
    return frozenset(prefix + v for v in values) if prefix is not None else None


def _literal_tail(n: Node) -> str | None:
    """The literal a string concatenation ends with (``facts.home + '/.npmrc'``): a path equal to
    it contains that literal."""
    if n.kind == "call" and n.value == "_+_" and len(n.children) == 2:
        last = n.children[1]
        if last.kind == "const" and isinstance(last.value, str):
            return last.value
    return None


def _nonempty(n: Node, env: Env) -> Clauses:
    """What ``n`` (a list) needs to be non-empty: ``x.filter(...).size()``, ``size(x)``."""
    if n.kind == "call" and n.value == "size" and len(n.children) == 1:
        inner = n.children[0]
        if inner.kind == "comprehension":
            return _macro(inner, env)
        if _path(inner) == ("facts", "hosts"):
            return _one(frozenset({"hosts"}))
    return None


def _macro(n: Node, env: Env) -> Clauses:
    """A ``filter``/``exists`` comprehension over the effects, the commands or a path list, or
    over a list of string literals (``['/.netrc', '/.pypirc'].exists(s, p.endsWith(s))``: what the
    condition needs for one of them)."""
    rng, step = n.children[0], n.children[3]
    accepts = _step_condition(step, n.names[1])
    if accepts is None:
        return None
    literals = _strings(rng) if rng.kind == "list" and rng.children else None
    if literals is not None:
        return _any([_need(_substitute(accepts, n.names[0], value), env) for value in literals])
    element = _element_of(rng, env)
    if element is None:
        return None
    return _need(accepts, {**env, n.names[0]: element})


def _substitute(n: Node, name: str, value: str) -> Node:
    """``n`` with the free name ``name`` replaced by the literal ``value`` (a comprehension that
    binds the same name again keeps its own)."""
    if n.kind == "ident" and n.value == name:
        return Node("const", value)
    if n.kind == "comprehension" and name in n.names:
        return n
    if not n.children:
        return n
    return Node(n.kind, n.value, tuple(_substitute(c, name, value) for c in n.children), n.names)


def _element_of(rng: Node, env: Env) -> str | None:
    path = _path(rng)
    if path == ("facts", "effects"):
        return "effect"
    if path == ("facts", "commands"):
        return "command"
    if path in (("facts", "paths"),) or _field(rng, env) == ("command", "paths"):
        return "path"
    return None


def _denotes(n: Node, env: Env) -> str | None:
    """What an expression denotes in ``env``: a bound name, or ``e.path`` of an effect; a path
    lower-cased (``cel.bind(l, p.lowerAscii(), ...)``) is still a path: the literals are looked for
    in the lower-cased paths anyway."""
    if n.kind == "ident":
        return env.get(str(n.value))
    if _field(n, env) == ("effect", "path"):
        return "path"
    if n.kind == "call" and n.value == "lowerAscii" and len(n.children) == 1:
        return "path" if _denotes(n.children[0], env) == "path" else None
    return None


def _field(n: Node, env: Env) -> tuple[str, str] | None:
    """``(denotation, field)`` for ``x.field`` where ``x`` is a bound name."""
    if n.kind == "select" and n.children and n.children[0].kind == "ident":
        owner = env.get(str(n.children[0].value))
        return (owner, str(n.value)) if owner is not None else None
    return None


def _unlowered(n: Node) -> Node:
    """``p.lowerAscii()`` -> ``p`` (a literal is matched against the lowered text anyway)."""
    if n.kind == "call" and n.value == "lowerAscii" and len(n.children) == 1:
        return n.children[0]
    return n


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


def _is_const(n: Node, value: int) -> bool:
    return n.kind == "const" and n.value == value and not isinstance(n.value, bool)


def literals(needs: Iterable[Need]) -> frozenset[str]:
    """The ``text:``, ``start:`` and ``prefix:`` tokens the needs use: an event gets those its
    paths contain or start with, and the program prefixes its commands have."""
    return frozenset(
        t for need in needs if need is not None for t in need if t.startswith(("text:", "start:", "prefix:"))
    )


@dataclass(frozen=True, slots=True, eq=False)
class Literals:
    """:func:`literals` prepared once. The text literals are found in one pass over the joined
    paths by an Aho-Corasick automaton (every occurrence of every literal, overlapping ones
    included: the same answer as one ``in`` test per literal, at about a fifth of the cost with
    the bundled library's 55); a ``start:`` literal is looked for after the newline that begins
    every path. A one-character text (``/``, ``:``) is in nearly every call, so it is taken as
    present without a search (the rule is then evaluated, never skipped)."""

    automaton: Any = None
    """The text literals of two characters or more, each with its token (None: there are none)."""
    present: frozenset[str] = frozenset()
    """The tokens of the one-character texts."""
    prefixes: tuple[tuple[str, str], ...] = ()
    """(program prefix, token) pairs."""

    @classmethod
    def of(cls, tokens: Iterable[str]) -> Literals:
        automaton = ahocorasick.Automaton()
        present, prefixes = set(), []
        for token in sorted(tokens):
            kind, _, value = token.partition(":")
            if kind == "prefix":
                prefixes.append((value, token))
            elif kind in ("text", "start"):
                text = value if kind == "text" else "\n" + value
                if len(text) <= 1:
                    present.add(token)
                elif not automaton.exists(text):
                    automaton.add_word(text, [token])
                else:  # another token looks for the same text (start:x and text:\nx)
                    automaton.get(text).append(token)
        if len(automaton):
            automaton.make_automaton()
        return cls(automaton if len(automaton) else None, frozenset(present), tuple(prefixes))

    def found(self, joined: str) -> set[str]:
        """The text tokens whose literal occurs in ``joined``."""
        out = set(self.present)
        if self.automaton is not None:
            for _, found in self.automaton.iter(joined):
                out.update(found)
        return out


def tokens(facts: Mapping[str, Any], texts: frozenset[str] = frozenset()) -> frozenset[str]:
    """The tokens an event has (module docstring), from its facts; ``texts``: the tokens of
    :func:`literals` to look for in every path of the facts, lower-cased and joined by newlines
    (a literal holds no newline, so the tests can only err towards evaluating a rule)."""
    return frozenset(_tokens(facts, Literals.of(texts)))


def _tokens(facts: Mapping[str, Any], literals: Literals) -> set[str]:
    tool = facts["tool"]
    out = {"tool:" + tool["kind"]}
    effects = facts["effects"]
    commands = facts["commands"]
    for effect in effects:
        out.add("effect:" + effect["kind"])
    for command in commands:
        out.add("program:" + command["program"])
        out.add("sub:" + command["subcommand"])  # also "sub:" for none: a rule may compare with ''
    shell = facts["shell"]
    if shell["present"]:
        out.add("shell:present")
    if shell["unparsed"]:
        out.add("shell:unparsed")
    for reason in shell["reasons"]:
        out.add("reason:" + reason)
    if facts["hosts"]:
        out.add("hosts")
    if tool["server"]:
        out.add("mcp")
    if literals.automaton is not None or literals.present:
        paths = [*facts["paths"], *(e["path"] for e in effects)]
        for command in commands:
            paths += command["paths"]
        out |= literals.found("\n" + "\n".join(paths).lower())
    if literals.prefixes:
        programs = [c["program"] for c in commands]
        out.update([token for prefix, token in literals.prefixes if any(p.startswith(prefix) for p in programs)])
    return out


def can_match(need: Need, have: Iterable[str] | frozenset[str]) -> bool:
    return need is None or not need.isdisjoint(have)


@dataclass(frozen=True, slots=True)
class RuleIndex:
    """One event type's rules by token: a rule is a candidate when the event has a token of its
    need (``by_token``, or it has none: ``always``) and of each of its other sets (``rest``)."""

    always: tuple[int, ...]
    by_token: Mapping[str, tuple[int, ...]]
    rest: tuple[tuple[frozenset[str], ...], ...]
    literals: Literals
    none: tuple[bool, ...]
    """Every rule false: the results of an event that is no rule's candidate."""

    @classmethod
    def of(cls, requirements: Sequence[Clauses], literals: Literals) -> RuleIndex:
        always: list[int] = []
        by_token: dict[str, list[int]] = {}
        for at, clauses in enumerate(requirements):
            if clauses is None:
                always.append(at)
                continue
            for token in clauses[0]:
                by_token.setdefault(token, []).append(at)
        rest = tuple(clauses[1:] if clauses is not None else () for clauses in requirements)
        by = {t: tuple(at) for t, at in by_token.items()}
        return cls(tuple(always), by, rest, literals, (False,) * len(requirements))

    def candidates(self, facts: Mapping[str, Any]) -> list[int]:
        """The positions, in order, of the rules ``facts`` can make true (the others are false)."""
        have = _tokens(facts, self.literals)
        found = set(self.always)
        by_token = self.by_token
        for token in have:
            hits = by_token.get(token)
            if hits is not None:
                found.update(hits)
        if not found:
            return []
        rest = self.rest
        out = []
        for at in sorted(found):
            for clause in rest[at]:
                if clause.isdisjoint(have):
                    break
            else:
                out.append(at)
        return out
