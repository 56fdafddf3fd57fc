"""The bundled policy library on real agent traffic (issue 26): thousands of everyday tool calls
that coding agents really made must pass, and the genuinely dangerous calls found in the same
sources must stay flagged.

The data lives outside the repository, in ``../shared/realcmds`` relative to the repository root
(its ``SOURCES.md`` names the public trajectories it was extracted from): ``corpus.json`` (benign
calls), ``dangerous.json`` (calls that should be flagged, each with a ``why``) and
``ambiguous.json`` (reported, not judged). Each case is sent exactly as a harness would send it
to ``ahp-gateway serve`` with the bundled default configuration: a ``tool.before`` intercept
through :meth:`Gateway.handle` (the same request path as the HTTP front end, minus the socket),
advertising the effects ``deny``, ``ask`` and ``message``. A false positive is a ``deny`` or an
``ask`` effect.

Without the data the tests are skipped, unless ``CI`` is set: then they fail.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterable
from typing import Any

from gateway.assemble import Assembly
from gateway.config.load import load
from gateway.telemetry import NullTelemetry
from tests.support.paths import ROOT as REPO
from tests.support.realcmds import CAPABILITIES, body, cases, event

BLOCKING = ("deny", "ask")
MAX_FALSE_POSITIVES = 3
"""Benign calls of ``corpus.json`` the library may still deny or ask about."""
DANGEROUS_FLOOR = 71
"""Calls of ``dangerous.json`` that must be flagged: every one of them (issue 26)."""


def decisions(items: Iterable[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """The effects the default gateway answers for each case, in order."""
    gateway = Assembly(load(None), telemetry=NullTelemetry()).gateway

    async def run() -> list[list[dict[str, Any]]]:
        out = []
        for n, case in enumerate(items):
            answer = (await gateway.handle(body(n, case), {})).answer
            assert answer is not None
            reply = json.loads(answer)
            assert "result" in reply, f"case {n} was rejected: {reply}"
            out.append(reply["result"]["effects"])
        return out

    return asyncio.run(run())


def blocking(effects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for e in effects if e.get("type") in BLOCKING]


def rules(n: int, case: dict[str, Any]) -> list[str]:
    """The rules of the bundled library whose effect was emitted for a case (an ``ask`` effect
    carries no code), from the library's own trace."""
    from gateway.policy.facts import with_facts
    from gateway.policy.library import load_policies
    from gateway.routing.cel import Engine

    engine = Engine()
    library = load_policies([REPO / "policies"], engine)
    values = {"event": event(n, case), "method": "hooks/intercept", "protocolVersion": "draft"}
    activation = engine.activation({**values, "capabilities": CAPABILITIES, "principal": {}, "headers": {}})
    result = library.evaluate(
        "tool.before", with_facts(engine, activation, library.uses_facts), CAPABILITIES, trace=True
    )
    return [e.rule for e in result.trace if e.result is True and e.emitted not in (None, "suppressed")]


def describe(case: dict[str, Any], effects: list[dict[str, Any]]) -> str:
    codes = ", ".join(f"{e['type']} {e.get('code', '')}".rstrip() for e in effects) or "nothing"
    if any(e.get("type") in BLOCKING for e in effects):
        codes += f" (rules: {', '.join(rules(0, case)) or '?'})"
    session = f" session={json.dumps(case['session'], ensure_ascii=False)}" if case.get("session") else ""
    return f"  {case['tool']} {json.dumps(case['input'], ensure_ascii=False)[:400]}{session}\n    -> {codes}"


def test_benign_real_calls_pass() -> None:
    corpus = cases("corpus.json")
    answered = decisions(corpus)
    flagged = [(c, blocking(e)) for c, e in zip(corpus, answered, strict=True) if blocking(e)]
    report = "\n".join(describe(c, e) for c, e in flagged)
    print(f"{len(flagged)} of {len(corpus)} benign real calls denied or asked about\n{report}")
    assert len(flagged) <= MAX_FALSE_POSITIVES, (
        f"{len(flagged)} false positives (at most {MAX_FALSE_POSITIVES}):\n{report}"
    )


def test_dangerous_real_calls_are_flagged() -> None:
    dangerous = cases("dangerous.json")
    answered = decisions(dangerous)
    missed = [c for c, e in zip(dangerous, answered, strict=True) if not blocking(e)]
    caught = len(dangerous) - len(missed)
    report = "\n".join(
        f"  {c['tool']} {json.dumps(c['input'], ensure_ascii=False)[:300]}  ({c['why']})" for c in missed
    )
    print(f"{caught} of {len(dangerous)} dangerous real calls flagged; missed:\n{report}")
    assert caught >= DANGEROUS_FLOOR, f"{caught} flagged, below the floor of {DANGEROUS_FLOOR}; missed:\n{report}"


def test_ambiguous_real_calls_are_reported() -> None:
    """Env-file calls that are neither clearly benign nor clearly a secret read: every one gets an
    answer, and what the library decides is printed (``-s``), not judged."""
    ambiguous = cases("ambiguous.json")
    answered = decisions(ambiguous)
    report = "\n".join(describe(c, e) + f"  ({c.get('why', '')})" for c, e in zip(ambiguous, answered, strict=True))
    flagged = sum(1 for e in answered if blocking(e))
    print(f"{flagged} of {len(ambiguous)} ambiguous real calls denied or asked about\n{report}")
