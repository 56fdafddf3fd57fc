"""The chain run (AHP-COMP-001, protocol §8): the selected upstreams called in ``hooks`` order
under one deadline, each answer accepted atomically and folded into the event and state
(:mod:`gateway.settle`), returning a :class:`Settlement` value.

Each upstream gets one :class:`~gateway.upstream.base.Call`: the request with the event as
modified so far (projected for its subscription), the accumulated state, capabilities narrowed to
what the harness advertised with the continuation allowance left, ``min(timeoutMs, remaining
deadline)``, the request's CEL activation and its outbound trace headers. A call is recorded as
made when it is sent (``sent``), so an observation of the same event arriving meanwhile is never
forwarded to it (protocol §8.3).

``fanout: parallel`` is an opt-in deviation (docs/design/settlement.md): every call starts at once, answers still
settle in chain order, and after the deciding upstream the rest are discarded and cancelled.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from gateway.pipeline.call import CircuitSink, call_upstream
from gateway.protocol import jsonrpc
from gateway.protocol.capabilities import with_remaining
from gateway.protocol.content import project
from gateway.protocol.methods import INTERCEPT
from gateway.routing.cel import Activation
from gateway.runtime import Route, RuntimeConfig
from gateway.settle.accept import Expectation
from gateway.settle.fold import ChainState
from gateway.settle.ledger import StepOutcome, StepRecord
from gateway.settle.reply import Accepted, Failure, FailureClass
from gateway.uploads.forward import reports_unknown
from gateway.upstream.base import Call

log = logging.getLogger("ahp_gateway")
Headers = Callable[[Route], Any]
MIN_BUDGET = 0.001
"""Seconds of deadline below which an upstream is not called at all (timers may fire a hair
early, so "exactly spent" must not become a sub-millisecond call that is sure to time out)."""
FULL_BUDGET = 0.9
"""A call given less than this fraction of its configured budget (min(timeoutMs, deadlineMs)) was
cut short by earlier work of the same request — re-uploading its attachments, earlier upstreams,
the local policy's analysis of its input, all of which a caller can make slow — so its timeout
says nothing about the upstream and is not charged to the breaker every caller shares."""


def _call(run: ChainRun, route: Route, req: dict[str, Any], budget: float) -> Call:
    configured = min(route.timeout, run.snap.deadline)
    cut_short = budget < configured * FULL_BUDGET
    return Call(req, min(route.timeout, budget), run.activation, run.outbound(route), cut_short=cut_short)


@dataclass(slots=True)
class Settlement:
    chain: ChainState
    steps: list[StepRecord] = field(default_factory=list)
    failed_closed: tuple[str, str] | None = None
    """(upstream, failure class) of the fail-closed failure that ended the chain, if any."""
    parallel: bool = False
    upstream_wait: float = 0.0


@dataclass(slots=True)
class ChainRun:
    """Everything one intercept's chain needs, passed as one value."""

    snap: RuntimeConfig
    rid: Any
    version: str
    caps: dict[str, Any]
    """Capabilities narrowed for this event type (never wider than the harness's)."""
    deadline: float
    """Loop time by which every upstream must have answered."""
    activation: Activation | None
    outbound: Headers
    """Outbound headers (trace context) for one route's call."""
    sent: Callable[[Route], None]
    on_circuit: CircuitSink | None = None
    refs: Mapping[str, Any] | None = None
    """Per route key: harness attachment ref → that upstream's confirmed content reference."""
    unknown_refs: Callable[[Route, Any], None] | None = None
    """Told when an upstream that was sent re-uploaded refs answers 404 (it lost them)."""

    def refs_for(self, route: Route) -> Any:
        return self.refs.get(route.key) if self.refs else None

    def settled(self, route: Route, settled: Accepted | Failure) -> None:
        """A route's call settled: refs it reports unknown are not reused (protocol §13.2)."""
        if isinstance(settled, Failure) and self.unknown_refs is not None and reports_unknown(settled):
            refs = self.refs_for(route)
            if refs:
                self.unknown_refs(route, refs)


def request(
    snap: RuntimeConfig,
    route: Route,
    run_id: Any,
    version: str,
    event: dict[str, Any],
    caps: dict[str, Any],
    state: dict[str, Any],
    refs: Any = None,
) -> dict[str, Any]:
    """The JSON-RPC request one upstream receives (request id = event id); attachments are its
    own re-uploaded references (``refs``) or gaps."""
    view = project(event, snap.slots, route.selection, route.include_native, identity=route.identity, refs=refs)
    params = {"protocolVersion": version, "event": view, "capabilities": caps, "state": state}
    return jsonrpc.request(run_id, INTERCEPT, params)


def expectation(snap: RuntimeConfig, req: dict[str, Any], chain: ChainState) -> Expectation:
    params = req["params"]
    etype = chain.event["type"]
    return Expectation(
        request_id=req["id"],
        version=params["protocolVersion"],
        event_type=etype,
        caps=params["capabilities"],
        event=chain.event,
        sent_event=params["event"],
        remaining=chain.remaining,
        response_check=snap.schemas.response_for[etype],
        event_check=snap.schemas.event_for[etype],
    )


def fold(route: Route, settled: Accepted | Failure, chain: ChainState, record: StepRecord) -> tuple[str, str] | None:
    """Fold one settled answer into ``chain`` and ``record``; (upstream, failure class) when a
    fail-closed failure ends the chain."""
    if isinstance(settled, Failure):
        record.failure, record.detail = settled.kind.value, settled.detail
        log.warning(
            "upstream %s failed (%s: %s) under %s",
            route.hook_id,
            settled.kind.value,
            settled.detail,
            "fail-closed" if route.fail_closed or settled.kind is FailureClass.UNENFORCEABLE else "fail-open",
        )
        if route.fail_closed or settled.kind is FailureClass.UNENFORCEABLE:
            # An unenforceable deny is a decision, not a fault: fail-open must not drop it.
            record.outcome = StepOutcome.FAILED_CLOSED
            return route.hook_id, settled.kind.value
        record.outcome = StepOutcome.FAILED_OPEN
        return None
    record.effects = tuple(e["type"] for e in settled.effects)
    record.answer = settled.effects
    had_deny = chain.deny is not None
    chain.fold(settled, route.hook_id)
    if chain.deny is not None and not had_deny:
        record.outcome = StepOutcome.DENY
    elif chain.flow == "stop" and "flow" in record.effects:
        record.outcome = StepOutcome.STOP
    elif settled.effects:
        record.outcome = StepOutcome.EFFECTS
    return None


def _record(route: Route) -> StepRecord:
    return StepRecord(route.key, route.hook_id, route.upstream.kind, StepOutcome.NO_EFFECT)


def _skipped(settlement: Settlement, routes: list[Route], outcome: StepOutcome) -> None:
    for route in routes:
        settlement.steps.append(StepRecord(route.key, route.hook_id, route.upstream.kind, outcome))


async def run_serial(run: ChainRun, chain: ChainState, routes: list[Route]) -> Settlement:
    loop = asyncio.get_running_loop()
    settlement = Settlement(chain)
    snap = run.snap
    for index, route in enumerate(routes):
        record = _record(route)
        settlement.steps.append(record)
        now = loop.time()
        left = run.deadline - now
        if left < MIN_BUDGET:
            # Never reached: not this upstream's timeout, so neither its breaker nor its latency.
            record.called = False
            settled: Accepted | Failure = Failure(FailureClass.DEADLINE_EXHAUSTED, "intercept deadline spent")
        else:
            req = request(
                snap,
                route,
                run.rid,
                run.version,
                chain.event,
                with_remaining(run.caps, chain.remaining),
                chain.wire_state(),
                run.refs_for(route),
            )
            run.sent(route)
            call = _call(run, route, req, left)
            settled = await call_upstream(route, call, expectation(snap, req, chain), run.on_circuit)
            run.settled(route, settled)
            record.latency = loop.time() - now
            settlement.upstream_wait += record.latency
        failure = fold(route, settled, chain, record)
        if failure is not None or chain.halted:
            settlement.failed_closed = failure
            _skipped(settlement, routes[index + 1 :], StepOutcome.NOT_CALLED)
            break
    return settlement


async def run_parallel(run: ChainRun, chain: ChainState, routes: list[Route]) -> Settlement:
    """Calls start at once but settle in order; after the deciding upstream, answers are
    discarded and calls still running are cancelled (their breakers are not charged)."""
    loop = asyncio.get_running_loop()
    settlement = Settlement(chain, parallel=True)
    snap = run.snap
    state = chain.wire_state()
    started = loop.time()
    requests = [request(snap, r, run.rid, run.version, chain.event, run.caps, state, run.refs_for(r)) for r in routes]
    expectations = [expectation(snap, req, chain) for req in requests]
    tasks = []
    for route, req, exp in zip(routes, requests, expectations, strict=True):
        run.sent(route)
        call = _call(run, route, req, run.deadline - started)
        tasks.append(asyncio.ensure_future(call_upstream(route, call, exp, run.on_circuit)))
    try:
        for index, (route, task) in enumerate(zip(routes, tasks, strict=True)):
            settled = await task
            run.settled(route, settled)
            record = _record(route)
            record.latency = loop.time() - started
            settlement.steps.append(record)
            failure = fold(route, settled, chain, record)
            if failure is not None or chain.halted:
                settlement.failed_closed = failure
                for later, pending in zip(routes[index + 1 :], tasks[index + 1 :], strict=True):
                    _skipped(settlement, [later], StepOutcome.NOT_CALLED if pending.done() else StepOutcome.CANCELLED)
                break
        return settlement
    finally:
        settlement.upstream_wait = loop.time() - started
        for task in tasks:
            if not task.done():
                task.cancel()
