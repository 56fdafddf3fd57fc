"""``ahp-gateway explain``: why an event is routed where it is, what local rules decide, and (with
``--call``) what every upstream answered and the collapsed result. It uses the serving path's own
stages — the CEL activation, route selection, the local backend, the pipeline — so it cannot
disagree with it; ``--call`` reads the decision from the exchange the pipeline returns."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from gateway.assemble import Assembly
from gateway.policy.cases import complete_event
from gateway.policy.facts import describe_facts
from gateway.protocol import jsonrpc, wire
from gateway.protocol.capabilities import narrow
from gateway.protocol.methods import INTERCEPT
from gateway.routing.cel import EvalError
from gateway.routing.select import verdicts
from gateway.runtime import RuntimeConfig
from gateway.telemetry import NullTelemetry
from gateway.upstream.base import Call


def request_from(document: dict[str, Any], capabilities: dict[str, Any] | None, snap: RuntimeConfig) -> dict[str, Any]:
    """Accept a whole hooks/intercept request, or a (possibly partial) event."""
    if document.get("method") == INTERCEPT and isinstance(document.get("params"), dict):
        request = document
        if capabilities is not None:
            request["params"]["capabilities"] = capabilities
        return request
    event = complete_event(document, 0)
    if capabilities is None:
        bound = snap.manifest["events"]
        capabilities = next(
            (e["capabilities"] for e in bound if e["event"] == event.get("type") and "capabilities" in e),
            {"effects": ["deny", "message"]},
        )
    params = {"protocolVersion": snap.versions[0], "event": event, "capabilities": capabilities}
    return jsonrpc.request(event["id"], INTERCEPT, params)


def _fmt(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


def explain(snap: RuntimeConfig, request: dict[str, Any], principal: Mapping[str, Any] | None = None) -> list[str]:
    params = request["params"]
    event = params["event"]
    etype = event.get("type", "?")
    version = params["protocolVersion"]
    lines = [f"event {etype} id={event.get('id')} source={event.get('source')}"]
    routes = snap.intercept_routes.get(etype, ()) + snap.shadow_routes.get(etype, ())
    if not routes:
        lines.append("routing: no intercept subscription matches this event -> effects: [] without any upstream call")
        return lines
    activation = snap.cel.for_intercept(event, version, params["capabilities"], None, principal, None)
    lines.append("routing (in chain order):")
    for route in routes:
        shown = []
        selected = True
        for (program, result), skip in zip(verdicts(route, activation), route.skip_on_error, strict=True):
            text = f"error: {result.message}" if isinstance(result, EvalError) else str(result).lower()
            shown.append(f"when `{program.source.strip()}` = {text}")
            if (isinstance(result, EvalError) and skip) or result is False:
                selected = False
        role = "shadow" if route.shadow else ("fail-closed" if route.fail_closed else "fail-open")
        status = "selected" if selected else "not selected"
        lines.append(f"  {route.key} ({route.upstream.kind}, {role}): subscription matches {etype}; {status}")
        lines.extend(f"      {v}" for v in shown)
        upstream = route.upstream.policy  # the local backend, or None for a transport
        if upstream is not None and selected:
            caps = narrow(params["capabilities"], etype)
            call = Call({**request, "params": {**params, "capabilities": caps}}, 0.0, activation)
            evaluation = upstream.evaluate(call, trace=True)
            if upstream.library.uses_facts:
                lines.extend("      " + line for line in describe_facts(event))
            for entry in evaluation.trace:
                value = entry.result if isinstance(entry.result, str) else str(entry.result).lower()
                fired = f" -> {entry.emitted}" if entry.emitted else ""
                lines.append(f"      rule {entry.file}:{entry.rule} = {value}{fired}")
            if evaluation.error is not None:
                lines.append("      local backend: evaluation error (its failure policy applies)")
            else:
                lines.append(f"      local backend effects: {_fmt(evaluation.effects)}")
    return lines


async def explain_call(
    snap: RuntimeConfig, request: dict[str, Any], principal: Mapping[str, Any] | None = None
) -> list[str]:
    """Run ``request`` through the pipeline on ``snap`` (real upstreams); closes ``snap``."""
    assembly = Assembly(snap.loaded, snapshot=snap, telemetry=NullTelemetry())
    try:
        exchange = await assembly.gateway.handle(wire.dumps(request), {}, principal)
    finally:
        await assembly.aclose(0.0)  # shadow calls still running are not waited for
    body = exchange.answer
    lines = ["calls (real upstreams):"]
    decision = exchange.decision
    if decision is not None:
        for step in decision.steps:
            answer = f" answer={_fmt(step.answer)}" if step.answer is not None else ""
            failure = f" failure={step.failure} ({step.detail})" if step.failure else ""
            lines.append(f"  {step.key}: {step.outcome.value} in {step.latency * 1000:.1f} ms{failure}{answer}")
        if decision.decided_by:
            lines.append(f"decided by {decision.decided_by} ({decision.kind or 'flow'})")
    lines.append(f"collapsed response: {body.decode() if body else ''}")
    return lines
