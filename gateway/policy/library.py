"""Policy files: ordered CEL rules, each with one effect (deny / ask / message / inject) and an
optional fallback for harnesses that did not advertise that effect, plus built-in tests.

File format (docs/policies/index.md; reference: docs/reference/policy-files.md)::

    namespace: org.example.git          # reverse-DNS; default deny codes are <namespace>.<rule id>
    rules:
      - id: force-push
        description: ...
        events: [tool.before]
        when: 'event.tool.input.command.matches("...")'
        deny: {reason: "...", code: org.example.git.force_push}
        fallback: {message: {text: "..."}}
    tests:
      - name: ...
        event: {type: tool.before, tool: {name: shell, input: {command: "..."}}}
        capabilities: {effects: [deny, message]}
        expect: [{type: deny}]
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from gateway.config.issues import Issue, json_path
from gateway.config.load import line_of, read_source, validation_issues
from gateway.policy import index as indexing
from gateway.policy.facts import INPUTS, references_facts
from gateway.policy.index import Clauses, Need, RuleIndex
from gateway.policy.memo import Memo
from gateway.policy.spec import AskSpec, DenySpec, EffectSpec, PolicyFileSpec, RuleSpec
from gateway.protocol.events import ALL_EVENTS, matches
from gateway.routing.cel import Activation, Batch, CelCompileError, Engine, EvalError, Program
from gateway.routing.reads import Path as ReadPath
from gateway.routing.reads import shortest


class PolicyError(Exception):
    def __init__(self, issues: list[Issue]) -> None:
        super().__init__("\n".join(str(i) for i in issues))
        self.issues = issues


@dataclass(frozen=True, slots=True)
class Rule:
    id: str
    file: str
    namespace: str
    """Reverse-DNS namespace: the default deny code prefix and the effects' extension key."""
    events: tuple[str, ...]
    program: Program
    effect: EffectSpec
    fallback: EffectSpec | None
    description: str = ""

    def applies_to(self, event_type: str) -> bool:
        return any(matches(p, event_type) for p in self.events)


@dataclass(frozen=True, slots=True)
class TraceEntry:
    rule: str
    file: str
    result: bool | str
    """True / False, or the evaluation error message."""
    emitted: str | None
    """The effect type emitted, ``suppressed`` when neither effect nor fallback was advertised,
    ``unenforceable`` for a deny the advertisement can carry neither as deny nor as ask."""


@dataclass(frozen=True, slots=True)
class Evaluation:
    effects: list[dict[str, Any]]
    trace: list[TraceEntry]
    error: TraceEntry | None = None
    unenforceable: TraceEntry | None = None
    """The rule that denies although the harness advertised neither ``deny`` nor ``ask``: no
    honest effect list exists, so the backend answers ``unenforceable`` (the harness gets -32003)."""


@dataclass(frozen=True)
class PolicyFile:
    path: Path
    spec: PolicyFileSpec
    rules: tuple[Rule, ...]


@dataclass(frozen=True)
class Library:
    files: tuple[PolicyFile, ...]
    rules: tuple[Rule, ...]
    by_event: Mapping[str, tuple[Rule, ...]] = field(default_factory=dict)
    batches: Mapping[str, Batch] = field(default_factory=dict)
    """Per event type, its rules as a few engine calls (:class:`Batch`), where they can be."""
    uses_facts: bool = False
    """Some rule reads the ``facts`` variable, so the backend computes facts for each event."""
    memo: Memo | None = None
    """Rule results by exactly what the rules read (:mod:`gateway.policy.memo`)."""
    needs: Mapping[str, tuple[Need, ...]] = field(default_factory=dict)
    """Per event type, each rule's need (:mod:`gateway.policy.index`), aligned with
    :meth:`rules_for`; absent when no rule there can be indexed."""
    texts: frozenset[str] = frozenset()
    """The literals the rules' requirements look for in the event's paths (:func:`index.literals`)."""
    index: Mapping[str, RuleIndex] = field(default_factory=dict)
    """Per event type where some rule has a need, its rules by token (:class:`index.RuleIndex`)."""

    def rules_for(self, event_type: str) -> tuple[Rule, ...]:
        found = self.by_event.get(event_type)
        if found is None:
            found = tuple(r for r in self.rules if r.applies_to(event_type))
        return found

    def evaluate(
        self, event_type: str, activation: Activation, caps: Mapping[str, Any], *, trace: bool = False
    ) -> Evaluation:
        """Rules in file order; the first deny ends evaluation. An evaluation error is an
        operational failure of this backend (its failure policy applies). Results come from the
        memo when an earlier event agreed on everything the rules read; otherwise only the rules
        the index finds for the event's facts are evaluated (the others are false)."""
        advertised = caps.get("effects", ())
        effects: list[dict[str, Any]] = []
        entries: list[TraceEntry] = []
        asked = False
        rules = self.rules_for(event_type)
        count = len(rules)
        memo = self.memo
        key = memo.key(event_type, activation.given) if memo is not None else None
        known = memo.get(key) if memo is not None and key is not None else None
        given: Sequence[bool | None]
        """Per rule, its result when known without evaluating it (None: evaluate it)."""
        order: Sequence[int]
        seen: list[bool | None] | None = None
        """Per rule, what the memo is to remember (None: nothing)."""
        visited: Sequence[int] = ()
        """The rules that were not known to be false (all others are False in ``seen``)."""
        if known is not None:
            given, order = known[0], range(count) if trace else known[1]
        else:
            index = self.index.get(event_type)
            facts = activation.values.get("facts") if index is not None else None
            if index is not None and isinstance(facts, Mapping):
                order = index.candidates(facts)
                if not order and not trace:  # most calls: no rule can be true, nothing to evaluate
                    if memo is not None and key is not None:
                        memo.put(key, index.none, ())
                    return Evaluation(effects, entries)
                found: list[bool | None] = [False] * count
                for at in order:
                    found[at] = None
            else:
                order, found = range(count), [None] * count
            if key is not None:
                seen = found.copy()
                visited = order
            batch = self.batches.get(event_type) if len(order) >= BATCH_FROM else None
            results = batch.eval(activation) if batch is not None else None
            if batch is not None and results is not None:
                slots = batch.slots
                for at in order:
                    if slots[at] >= 0:
                        found[at] = results[slots[at]]
            given = found
            if trace:
                order = range(count)
        for at in order:
            rule = rules[at]
            result = given[at]
            if result is None:
                evaluated = rule.program.eval(activation)
                if isinstance(evaluated, EvalError):
                    entry = TraceEntry(rule.id, rule.file, evaluated.message, None)
                    return Evaluation(effects, [*entries, entry], entry)
                result = evaluated
            if seen is not None:
                seen[at] = result
            if not result:
                if trace:
                    entries.append(TraceEntry(rule.id, rule.file, False, None))
                continue
            chosen = _chosen(rule, caps, advertised)
            if chosen is UNENFORCEABLE:
                entry = TraceEntry(rule.id, rule.file, True, UNENFORCEABLE_MARK)
                return Evaluation(effects, [*entries, entry], unenforceable=entry)
            if trace:
                entries.append(TraceEntry(rule.id, rule.file, True, chosen.kind if chosen else "suppressed"))
            if chosen is None:
                continue
            kind = chosen.kind
            if kind == "ask":
                if not asked:
                    effects.append({"type": "ask"})
                    asked = True
                why = _ask_text(rule, chosen)
                if why and "message" in advertised:
                    effects.append({"type": "message", "text": why})
            else:
                effects.append(_effect(chosen, rule))
            if kind == "deny" or chosen is ASK_FOR_DENY:
                break  # an ask standing in for a deny ends the evaluation as the deny would
        if memo is not None and key is not None and seen is not None:
            memo.put(key, tuple(seen), tuple([at for at in visited if seen[at] is not False]))
        return Evaluation(effects, entries)


ASK_FOR_DENY = EffectSpec(ask=AskSpec(reason=None))
"""What a deny becomes for a harness that advertised ``ask`` but not ``deny``."""
UNENFORCEABLE = EffectSpec(deny=DenySpec(reason="unenforceable", code=None))
"""Marker (compared by identity): the rule denies and the harness can enforce neither deny nor ask."""
UNENFORCEABLE_MARK = "unenforceable"


def _chosen(rule: Rule, caps: Mapping[str, Any], advertised: Sequence[str]) -> EffectSpec | None:
    """The effect a matching rule emits for this advertisement. A deny (the rule's effect or its
    fallback) never becomes "no objection": without ``deny`` it is the strongest permission
    effect the harness can enforce, ``ask``, and without that too it is :data:`UNENFORCEABLE`."""
    chosen = _usable(rule.effect, caps, advertised)
    if chosen is None and rule.effect.kind == "deny" and "ask" in advertised:
        chosen = ASK_FOR_DENY
    if chosen is None and rule.fallback is not None:
        chosen = _usable(rule.fallback, caps, advertised)
        if chosen is None and rule.fallback.kind == "deny" and "ask" in advertised:
            chosen = ASK_FOR_DENY
    denies = rule.effect.kind == "deny" or (rule.fallback is not None and rule.fallback.kind == "deny")
    if denies and (chosen is None or chosen.kind not in ("deny", "ask")):
        return UNENFORCEABLE
    return chosen


def _ask_text(rule: Rule, chosen: EffectSpec) -> str:
    """Why a rule asks, for the person asked: the AHP ``ask`` effect carries no text, and
    ``message`` is the user-facing effect (protocol §6.1), so it goes out beside the ask when the
    harness advertised it. A deny standing in as an ask gives the deny's reason, a rule's own ask
    its ``reason``, else its description (nothing without either)."""
    if chosen is ASK_FOR_DENY:
        for spec in (rule.effect, rule.fallback):
            if spec is not None and spec.deny is not None:
                return spec.deny.reason
    if chosen.ask is not None and chosen.ask.reason:
        return " ".join(chosen.ask.reason.split())
    return " ".join(rule.description.split())


def _usable(spec: EffectSpec | None, caps: Mapping[str, Any], advertised: Sequence[str]) -> EffectSpec | None:
    if spec is None or spec.kind not in advertised:
        return None
    if spec.kind == "inject":
        assert spec.inject is not None
        context = caps.get("inject", {}).get("context", {})
        if spec.inject.deliverAt not in context.get("deliverAt", ()):
            return None
    return spec


def _effect(spec: EffectSpec, rule: Rule) -> dict[str, Any]:
    if spec.deny is not None:
        return {
            "type": "deny",
            "reason": spec.deny.reason,
            "code": spec.deny.code or f"{rule.namespace}.{rule.id}",
            "extensions": {rule.namespace: {"rule": rule.id}},
        }
    if spec.message is not None:
        return {"type": "message", "text": spec.message.text}
    assert spec.inject is not None
    ident = f"{rule.namespace}.{rule.id}"
    return {
        "type": "inject",
        "target": "context",
        "operation": "append",
        "deliverAt": spec.inject.deliverAt,
        "value": [
            {
                "id": ident,
                "role": spec.inject.role,
                "parts": [
                    {
                        "id": ident + ".text",
                        "kind": "text",
                        "mediaType": "text/plain",
                        "selection": "body",
                        "text": spec.inject.text,
                    }
                ],
            }
        ],
    }


def policy_files(paths: Sequence[Path]) -> list[Path]:
    """Expand directories to their *.yaml / *.yml entries (sorted), keep files as given. Every
    such entry that is not a directory is loaded, so a broken one (a dangling or looping symlink,
    a FIFO) is reported instead of its rules vanishing in silence."""
    out: list[Path] = []
    for path in paths:
        if path.is_dir():
            out += sorted(p for p in path.rglob("*") if p.suffix in (".yaml", ".yml") and not p.is_dir())
        else:
            out.append(path)
    return out


def load_policies(paths: Sequence[Path], engine: Engine) -> Library:
    issues: list[Issue] = []
    files: list[PolicyFile] = []
    for path in policy_files(paths):
        loaded = _load_file(path, engine, issues)
        if loaded is not None:
            files.append(loaded)
    if issues:
        raise PolicyError(issues)
    return library_of(files, engine)


def library_of(files: Sequence[PolicyFile], engine: Engine) -> Library:
    rules = tuple(r for f in files for r in f.rules)
    by_event = {e: tuple(r for r in rules if r.applies_to(e)) for e in ALL_EVENTS}
    compiled: dict[tuple[int, ...], Batch | None] = {}
    batches: dict[str, Batch] = {}
    for event, selected in by_event.items():
        key = tuple(id(r) for r in selected)
        if key not in compiled:
            compiled[key] = engine.batch([r.program for r in selected])
        if (batch := compiled[key]) is not None:
            batches[event] = batch
    uses = any(references_facts(r.program.source) for r in rules)
    requirements = _requirements(by_event) if uses else {}
    needs = {
        event: tuple(None if c is None else indexing.need_of_clauses(c) for c in per_event)
        for event, per_event in requirements.items()
    }
    texts = indexing.literals(c for per_event in requirements.values() for r in per_event for c in r or ())
    literals = indexing.Literals.of(texts)
    index = {event: RuleIndex.of(per_event, literals) for event, per_event in requirements.items()}
    return Library(tuple(files), rules, by_event, batches, uses, _memo(by_event), needs, texts, index)


BATCH_FROM = 4
"""Rules left after indexing from which one batched engine call beats one call per rule."""


def _requirements(by_event: Mapping[str, tuple[Rule, ...]]) -> dict[str, tuple[Clauses, ...]]:
    """Each rule's requirement (:mod:`gateway.policy.index`), for the event types where some rule
    has one."""
    found: dict[int, Clauses] = {}
    out: dict[str, tuple[Clauses, ...]] = {}
    for event, rules in by_event.items():
        needs = []
        for rule in rules:
            if id(rule) not in found:
                found[id(rule)] = indexing.requirement_of(rule.program.serialized())
            needs.append(found[id(rule)])
        if any(n is not None for n in needs):
            out[event] = tuple(needs)
    return out


def _memo(by_event: Mapping[str, tuple[Rule, ...]]) -> Memo | None:
    """A memo for the event types whose rules are all readable (:meth:`Program.reads`)."""
    reads: dict[int, frozenset[ReadPath] | None] = {}  # a rule may serve several event types
    paths: dict[str, tuple[ReadPath, ...]] = {}
    for event, rules in by_event.items():
        read: set[ReadPath] = set()
        for rule in rules:
            if id(rule) not in reads:
                reads[id(rule)] = rule.program.reads()
            found = reads[id(rule)]
            if found is None:
                break
            for path in found:  # facts are computed from their inputs alone
                read.update(INPUTS if path[0] == "facts" else (path,))
        else:
            if rules:
                paths[event] = tuple(sorted(shortest(read)))
    return Memo(paths) if paths else None


def _load_file(path: Path, engine: Engine, issues: list[Issue]) -> PolicyFile | None:
    source = read_source(path, issues, missing="policy file not found")
    if source is None:
        return None
    try:
        spec = PolicyFileSpec.model_validate(source.data if source.data is not None else {})
    except ValidationError as exc:
        issues.extend(validation_issues(exc, source))
        return None
    rules = []
    seen: set[str] = set()
    for index, raw in enumerate(spec.rules):
        try:
            rule = RuleSpec.model_validate(raw)
        except ValidationError as exc:
            issues.extend(validation_issues(exc, source, ("rules", index)))
            continue
        items: tuple[str | int, ...] = ("rules", index, "when")
        if rule.id in seen:
            issues.append(
                Issue(
                    str(path),
                    json_path(("rules", index, "id")),
                    f"duplicate rule id {rule.id!r}",
                    source.line(["rules", index, "id"]),
                )
            )
        seen.add(rule.id)
        try:
            program = engine.compile(rule.when, f"{path.name}:{rule.id}")
        except CelCompileError as exc:
            where = f"{exc.line}:{exc.column}: " if exc.line else ""
            issues.append(Issue(str(path), json_path(items), f"CEL {where}{exc.message}", source.line(list(items))))
            continue
        rules.append(
            Rule(rule.id, path.name, spec.namespace, tuple(rule.events), program, rule, rule.fallback, rule.description)
        )
    return PolicyFile(path, spec, tuple(rules))


def require_rules(library: Library, allow_empty: bool, config: Path, items: tuple[str | int, ...]) -> None:
    """Refuse a local backend whose policy files hold no rule, unless ``allowEmpty: true``: moving
    the files away must not turn a policy point into one that allows everything (at start and on
    reload alike). ``items`` is the transport's JSON path in ``config``."""
    if library.rules or allow_empty:
        return
    at = (*items, "policies")
    raise PolicyError(
        [
            Issue(
                str(config),
                json_path(at),
                "the policy files hold no rule, so this backend would allow everything; "
                "fix the paths or set allowEmpty: true",
                line_of(config, at),
            )
        ]
    )
