"""``ahp-gateway policy test``: run the ``tests:`` of policy files, like ``opa test``.

Each file's tests run against that file's rules alone, so a file's tests stay meaningful wherever
the file is used. Test events may be partial: envelope fields (id, source, time, harness) and the
required tool-call fields get defaults, then the event is validated against the canonical schema.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gateway.policy.facts import with_facts
from gateway.policy.library import Library, library_of, load_policies
from gateway.policy.spec import RULE_EFFECTS, CaseSpec
from gateway.protocol import schemas
from gateway.protocol.events import INTERCEPTABLE_SET
from gateway.protocol.methods import INTERCEPT
from gateway.routing.cel import Engine

DEFAULT_CAPABILITIES: dict[str, Any] = {
    "effects": list(RULE_EFFECTS),
    "inject": {"context": {"append": True, "deliverAt": ["now", "next_turn"]}},
}
_TOOL_EVENTS = ("tool.before", "tool.after", "tool.permission.request")


def default_capabilities(event_type: str) -> dict[str, Any]:
    """deny, ask, message and inject, as far as the event's capability bound allows them."""
    from gateway.discovery import bound

    allowed = bound(schemas.load(), event_type)["effects"] if event_type in INTERCEPTABLE_SET else []
    effects = [e for e in DEFAULT_CAPABILITIES["effects"] if e in allowed]
    caps: dict[str, Any] = {"effects": effects}
    if "inject" in effects:
        caps["inject"] = DEFAULT_CAPABILITIES["inject"]
    return caps


def complete_event(partial: dict[str, Any], index: int) -> dict[str, Any]:
    """A full event from a test's partial one (explicit fields always win)."""
    event = copy.deepcopy(partial)
    event.setdefault("id", f"policy-test-{index}")
    event.setdefault("source", "urn:ahp-gateway:policy-test")
    event.setdefault("time", "2026-01-01T00:00:00Z")
    event.setdefault("harness", {"name": "ahp-gateway-policy-test", "version": "1"})
    if event.get("type") == "tool.permission.request":
        event.setdefault("suggestions", [])
        event.setdefault("sandboxBypass", False)
    if event.get("type") in _TOOL_EVENTS:
        event.setdefault("call", {"id": f"call-{index}"})
        event.setdefault("path", "native")
        tool = event.setdefault("tool", {})
        if isinstance(tool, dict):
            tool.setdefault("name", "shell")
            tool.setdefault("origin", "native")
            tool.setdefault("input", {})
    return event


def subset(expected: Any, actual: Any) -> bool:
    """``expected`` is contained in ``actual``: dict keys recursively, lists element-wise."""
    if isinstance(expected, dict):
        return isinstance(actual, dict) and all(k in actual and subset(v, actual[k]) for k, v in expected.items())
    if isinstance(expected, list):
        return (
            isinstance(actual, list)
            and len(expected) == len(actual)
            and all(subset(e, a) for e, a in zip(expected, actual, strict=True))
        )
    return bool(expected == actual) and type(expected) is type(actual)


@dataclass(frozen=True, slots=True)
class CaseResult:
    file: Path
    name: str
    passed: bool
    expected: list[dict[str, Any]]
    actual: list[dict[str, Any]] | None
    error: str | None = None
    fired: tuple[str, ...] = ()
    """Ids of the rules whose condition was true in this test (for ``--coverage``)."""


def run_case(library: Library, case: CaseSpec, index: int, engine: Engine, file: Path) -> CaseResult:
    event = complete_event(case.event, index)
    check = schemas.load().event_for.get(str(event.get("type")))
    if check is None or not check.ok(event):
        where = check.explain(event) if check else None
        reason = f"invalid test event at {where[0]} ({where[1]})" if where else "unknown event type"
        return CaseResult(file, case.name, False, case.expect, None, reason)
    caps = case.capabilities or default_capabilities(event["type"])
    activation = with_facts(
        engine,
        engine.activation(
            {
                "event": event,
                "method": INTERCEPT,
                "protocolVersion": "draft",
                "capabilities": caps,
                "principal": case.principal,
                "headers": {k.lower(): v for k, v in case.headers.items()},
            }
        ),
        library.uses_facts or case.facts is not None,
    )
    if case.facts is not None and not subset(case.facts, activation.values["facts"]):
        return CaseResult(file, case.name, False, case.expect, None, f"facts differ: {activation.values['facts']!r}")
    result = library.evaluate(event["type"], activation, caps, trace=True)
    fired = tuple(entry.rule for entry in result.trace if entry.result is True)
    if result.error is not None:  # no effects to compare: the backend failed (its failure policy applies)
        return CaseResult(
            file,
            case.name,
            False,
            case.expect,
            None,
            f"rule {result.error.rule} failed to evaluate: {result.error.result}",
            fired,
        )
    if result.unenforceable is not None:
        return CaseResult(
            file,
            case.name,
            False,
            case.expect,
            result.effects,
            f"rule {result.unenforceable.rule} denies, but the capabilities carry neither deny nor ask (-32003)",
            fired,
        )
    return CaseResult(file, case.name, subset(case.expect, result.effects), case.expect, result.effects, None, fired)


def run(
    paths: Sequence[Path], engine: Engine | None = None, select: Callable[[CaseSpec], bool] | None = None
) -> list[CaseResult]:
    """Every test (or every ``select``-ed test) of every policy file under ``paths``; raises
    PolicyError on a broken file."""
    return run_library(load_policies(paths, engine := engine or Engine()), engine, select)


def run_library(library: Library, engine: Engine, select: Callable[[CaseSpec], bool] | None = None) -> list[CaseResult]:
    results: list[CaseResult] = []
    for policy_file in library.files:
        single = library_of([policy_file], engine)
        for index, case in enumerate(policy_file.spec.tests):
            if select is None or select(case):
                results.append(run_case(single, case, index, engine, policy_file.path))
    return results
