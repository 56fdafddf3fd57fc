"""The engine's telemetry sink in production: metrics, decision log and tracing together."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from gateway.observability.decisions import DecisionLog
from gateway.observability.metrics import Metrics, event_label, method_label
from gateway.observability.tracing import Spans, TraceContext, child_headers, from_request
from gateway.protocol.methods import INTERCEPT
from gateway.settle.ledger import Decision, Outcome, StepOutcome

if TYPE_CHECKING:  # the pipeline sits above observability: only its type is needed here
    from gateway.pipeline.exchange import Exchange
NATIVE_SOURCE = "urn:ahp-adapter:"
NATIVE_HARNESSES = frozenset(("claude-code", "codex", "gemini", "copilot", "cursor", "windsurf"))
"""The native hook front ends (gateway.native.HARNESSES; a test keeps the two equal)."""
OBSERVE_STATUSES = frozenset(("queued", "invalid", "unrouted"))
"""``Exchange.observed`` values that are a status; any other is a drop reason."""


def native_harness(source: str) -> str | None:
    """The native front end an event came through (its adapter's ``source``), bounded to the
    known harness names so a client cannot mint label values."""
    if source.startswith(NATIVE_SOURCE):
        harness = source[len(NATIVE_SOURCE) :]
        if harness in NATIVE_HARNESSES:
            return harness
    return None


class Observability:
    def __init__(
        self,
        metrics: Metrics | None = None,
        decisions: DecisionLog | None = None,
        *,
        propagate: bool = True,
        spans: bool = False,
    ) -> None:
        self.metrics = metrics or Metrics()
        self.decisions = decisions
        self.propagate = propagate
        self.spans = Spans() if spans else None
        self._series: dict[tuple[str, str, str | None], tuple[Any, Any, Any, Any]] = {}
        """Per (event type label, outcome, native harness): a decision's four series (no label
        tuple built and looked up four times per decision; the keys are the labels, as bounded)."""
        self._steps: dict[tuple[str, str, str], tuple[Any, Any]] = {}
        """Per (upstream, transport, result): a called step's two series."""

    async def render(self) -> tuple[bytes, str]:
        return self.metrics.render()

    def close(self) -> None:
        if self.decisions is not None:
            self.decisions.close()

    # tracing
    def begin(self, headers: Mapping[str, str], event: Mapping[str, Any]) -> TraceContext | None:
        if not self.propagate:
            return None
        ctx = from_request(headers, event)
        if self.spans is not None:
            self.spans.start_request(ctx, f"ahp intercept {event.get('type')}")
        return ctx

    def outbound_headers(self, trace: Any, key: str, upstream: str) -> Mapping[str, str] | None:
        if trace is None:
            return None
        span_id = self.spans.start_upstream(trace, key, upstream) if self.spans is not None else None
        return child_headers(trace, span_id)

    # requests
    def exchanged(self, exchange: Exchange) -> None:
        """Everything one harness message counts, from the value the core returned (the
        methods below are its parts)."""
        decision = exchange.decision
        if decision is not None:  # an intercept that reached the chain stage: nearly every message
            for hook_id in exchange.routed:
                self.routed(hook_id)
            if exchange.parallel_fallback:
                self.parallel_fallback()
            self.settled(decision, exchange.trace)
            return
        if exchange.rejected is not None:
            self.rejected(exchange.method, exchange.rejected)
        elif exchange.discovery:
            self.discovery(exchange.method)
        elif exchange.observed is not None:
            if exchange.observed in OBSERVE_STATUSES:
                self.observe_received(exchange.observed)
            else:
                self.observe_dropped(exchange.observed)
        for hook_id in exchange.routed:
            self.routed(hook_id)
        if exchange.parallel_fallback:
            self.parallel_fallback()

    def settled(self, decision: Decision, trace: Any = None) -> None:
        m = self.metrics
        outcome = "error" if decision.rpc_error is not None else decision.outcome.value
        key = (event_label(decision.event_type), outcome, native_harness(decision.source))
        series = self._series.get(key)
        if series is None:
            series = self._series[key] = self._request_series(*key)
        requests, native, duration, overhead = series
        requests.inc()
        if native is not None:
            native.inc()
        duration.observe(decision.total)
        overhead.observe(max(0.0, decision.total - decision.upstream_wait))
        for step in decision.steps:
            if step.outcome in (StepOutcome.NOT_CALLED, StepOutcome.CANCELLED):
                continue
            if not step.called:  # deadline spent before its turn: not a call, not its latency
                if step.outcome is StepOutcome.FAILED_OPEN:
                    m.child(m.fail_open, step.hook_id, step.failure or "unknown").inc()
                continue
            result = step.failure or ("deny" if step.outcome is StepOutcome.DENY else "ok")
            calls = self._steps.get((step.hook_id, step.kind, result))
            if calls is None:
                calls = self._steps[(step.hook_id, step.kind, result)] = (
                    m.child(m.upstream_duration, step.hook_id, step.kind),
                    m.child(m.upstream_calls, step.hook_id, result),
                )
            calls[0].observe(step.latency)
            calls[1].inc()
            if step.outcome is StepOutcome.FAILED_OPEN:
                m.child(m.fail_open, step.hook_id, step.failure or "unknown").inc()
        if decision.outcome is Outcome.DENY and decision.decided_by:
            code = m.bounded_code(decision.decided_by, decision.code)
            m.child(m.denials, decision.decided_by, code, decision.kind or "explicit").inc()
        if trace is not None:
            decision.trace_id = trace.trace_id
            if self.spans is not None:
                self.spans.finish(
                    trace,
                    {
                        "ahp.event.type": decision.event_type,
                        "ahp.outcome": outcome,
                        "ahp.decided_by": decision.decided_by,
                    },
                    decision.steps,
                )
        if self.decisions is not None:
            decision.wall_time = time.time()
            self.decisions.write(decision)

    def _request_series(self, etype: str, outcome: str, harness: str | None) -> tuple[Any, Any, Any, Any]:
        """The series one decision counts in (:meth:`settled`), looked up once per key."""
        m = self.metrics
        return (
            m.child(m.requests, INTERCEPT, etype, outcome),
            m.child(m.native_requests, harness, etype, outcome) if harness is not None else None,
            m.child(m.duration, INTERCEPT, etype),
            m.child(m.overhead, INTERCEPT, etype),
        )

    def inflight(self, delta: int) -> None:
        self.metrics.inflight.inc(delta)

    def rejected(self, method: str, reason: str) -> None:
        m = self.metrics
        m.child(m.rejected, method_label(method), reason).inc()

    def discovery(self, method: str) -> None:
        m = self.metrics
        m.child(m.requests, method_label(method), "other", "ok").inc()

    def routed(self, hook_id: str) -> None:
        m = self.metrics
        m.child(m.route_matches, hook_id).inc()

    def cel_error(self, expression_id: str) -> None:
        m = self.metrics
        m.child(m.cel_errors, expression_id).inc()

    def parallel_fallback(self) -> None:
        self.metrics.parallel_fallbacks.inc()

    def shadow(self, hook_id: str, verdict: str) -> None:
        m = self.metrics
        m.child(m.shadow, hook_id, verdict).inc()

    # observe
    def observe_received(self, status: str) -> None:
        m = self.metrics
        m.child(m.observe_received, status).inc()

    def observe_dropped(self, reason: str) -> None:
        m = self.metrics
        m.child(m.observe_drops, reason).inc()
        m.child(m.observe_received, "dropped").inc()

    def observe_queue(self, depth: int) -> None:
        self.metrics.observe_queue.set(depth)

    def observe_delivered(self, hook_id: str, outcome: str) -> None:
        m = self.metrics
        m.child(m.observe_deliveries, hook_id, outcome).inc()

    def circuit(self, hook_id: str, is_open: bool) -> None:
        m = self.metrics
        m.child(m.circuit_open, hook_id).set(1 if is_open else 0)

    # configuration
    def reloaded(self, ok: bool) -> None:
        m = self.metrics
        m.child(m.reloads, "success" if ok else "failure").inc()
        m.config_ok.set(1 if ok else 0)
        if ok:
            m.last_reload.set(time.time())
