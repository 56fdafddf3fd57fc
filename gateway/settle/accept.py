"""Atomic acceptance of one upstream answer (protocol §6.3-6.4, AHP-CAP-001).

Parse, validate and stage the *whole* answer against the capabilities that were sent to that
upstream before anything is published; any defect rejects the entire answer as an operational
failure. Never salvage a part, not even a valid deny.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gateway.protocol import wire
from gateway.protocol.events import MODIFY_TARGETS
from gateway.protocol.grants import grant_problem
from gateway.protocol.schemas import Check
from gateway.settle.reply import Accepted, Failure, FailureClass, Reply

_COMPACTION_TARGET = {"context.compact.before": "instructions", "context.compact.after": "summary"}


@dataclass(slots=True)
class Expectation:
    """What a valid answer to one upstream request must satisfy."""

    request_id: Any
    version: str
    event_type: str
    caps: Mapping[str, Any]
    event: dict[str, Any]
    """The full (unprojected) current event the answer's modifications apply to."""
    sent_event: Mapping[str, Any]
    """The projected view the upstream saw (compaction edits require its inline text)."""
    remaining: int | None
    response_check: Check
    event_check: Check


def _invalid(detail: str) -> Failure:
    return Failure(FailureClass.INVALID_RESPONSE, detail)


def _not_granted(detail: str) -> Failure:
    return Failure(FailureClass.NOT_GRANTED, detail)


def accept(reply: Reply, exp: Expectation) -> Accepted | Failure:
    """The whole answer, or the failure that rejects all of it."""
    if reply.effects is not None:
        return accept_effects(reply.effects, exp)
    try:
        message = wire.loads(reply.body)
    except wire.JSONDecodeError:
        return _invalid("malformed JSON")
    if not isinstance(message, dict):
        return _invalid("not a JSON-RPC object")
    if "error" in message:
        return Failure(FailureClass.RPC_ERROR, "JSON-RPC error response")
    if message.get("id") != exp.request_id or type(message.get("id")) is not type(exp.request_id):
        return _invalid("response id does not match the event id")
    result = message.get("result")
    if not isinstance(result, dict):
        return _invalid("missing result")
    if result.get("protocolVersion") != exp.version:
        return _invalid("protocolVersion mismatch")
    if not exp.response_check.ok(message):
        where = exp.response_check.explain(message)
        return _invalid(f"schema: {where[0]} ({where[1]})" if where else "schema")
    return accept_effects(result.get("effects", []), exp)


def accept_effects(effects: list[dict[str, Any]], exp: Expectation) -> Accepted | Failure:
    """Grants and staging of a schema-valid effect list (the local backend's answers start here:
    its effects are built from validated rule specs, with no envelope around them)."""
    problem = _grant_problem(effects, exp)
    if problem:
        return _not_granted(problem)
    staged = _stage(effects, exp)
    if isinstance(staged, Failure):
        return staged
    return Accepted(effects, staged)


def _grant_problem(effects: list[dict[str, Any]], exp: Expectation) -> str | None:
    """Capability grants (one rule with the native adapters, :mod:`gateway.protocol.grants`), then
    the compaction rule, which only the gateway applies."""
    targets = MODIFY_TARGETS.get(exp.event_type, {})
    for effect in effects:
        problem = grant_problem(effect, exp.caps, exp.remaining, targets)
        if problem:
            return problem
    compaction = _COMPACTION_TARGET.get(exp.event_type)
    if compaction:
        for effect in effects:
            if effect["type"] in ("modify", "return") and (
                not _inline_text(exp.sent_event.get(compaction)) or not _inline_text(effect["value"])
            ):
                return "compaction edits require selected inline text"
    return None


def _inline_text(parts: Any) -> bool:
    return isinstance(parts, list) and all(
        isinstance(p, dict) and p.get("selection") == "body" and "text" in p for p in parts
    )


def _stage(effects: list[dict[str, Any]], exp: Expectation) -> dict[str, Any] | Failure | None:
    """Apply this answer's modifications to a copy of the event; None when nothing changed."""
    mods = [e for e in effects if e["type"] == "modify"]
    if not mods:
        return None
    event = exp.event
    staged = apply_modifications(event, mods, exp.event_type)
    if staged is None:  # the caller's event shapes the target, so it is request-dependent
        return _not_granted("modification target is missing or has the wrong shape")
    if not exp.event_check.ok(staged):
        return _invalid("modified event is not a valid event")
    return None if json_equal(staged, event) else staged


def apply_modifications(event: dict[str, Any], mods: list[dict[str, Any]], event_type: str) -> dict[str, Any] | None:
    """Ordered modify effects applied to a copy of ``event`` (replace substitutes; merge appends
    lists in order and merges objects shallowly, null being a literal). None on a shape error."""
    targets = MODIFY_TARGETS[event_type]
    staged = dict(event)
    copied: set[tuple[str, ...]] = set()
    for mod in mods:
        path, kind = targets[mod["target"]]
        parent = staged
        for depth, key in enumerate(path[:-1]):
            prefix = path[: depth + 1]
            child = parent.get(key)
            if not isinstance(child, dict):
                return None
            if prefix not in copied:
                child = dict(child)
                parent[key] = child
                copied.add(prefix)
            parent = child
        leaf = path[-1]
        value = mod["value"]
        if mod["operation"] == "merge":
            before = parent.get(leaf)
            if kind == "list":
                if before is None:
                    before = []
                if not isinstance(before, list) or not isinstance(value, list):
                    return None
                value = before + value
            else:
                if not isinstance(before, dict) or not isinstance(value, dict):
                    return None
                value = {**before, **value}
        parent[leaf] = value
    return staged


def json_equal(left: Any, right: Any) -> bool:
    """JSON equality: booleans are not numbers; member order is irrelevant."""
    if isinstance(left, bool) or isinstance(right, bool):
        return type(left) is type(right) and left == right
    if isinstance(left, dict):
        return (
            isinstance(right, dict)
            and left.keys() == right.keys()
            and all(json_equal(v, right[k]) for k, v in left.items())
        )
    if isinstance(left, list):
        return (
            isinstance(right, list)
            and len(left) == len(right)
            and all(json_equal(a, b) for a, b in zip(left, right, strict=True))
        )
    return bool(left == right)
