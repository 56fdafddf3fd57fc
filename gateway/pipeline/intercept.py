"""One ``hooks/intercept``, top to bottom: CEL activation → route selection → shadow launch →
chain run → verdict, returned as an :class:`~gateway.pipeline.exchange.Exchange` (the answer with
its decision, for telemetry to record once).

No subscription for the event (after ``when``) means no decision step at all (AHP-REG-002):
``effects: []`` at once. An incoming ``state`` that already denies or stops is final: no upstream
is called and nothing is re-emitted.
"""

from __future__ import annotations

import asyncio
import logging
import operator
import time
from collections.abc import Callable, Mapping
from typing import Any

from gateway.pipeline.chain import ChainRun, Settlement, run_parallel, run_serial
from gateway.pipeline.exchange import Exchange
from gateway.pipeline.frontend import Intercept
from gateway.pipeline.observe import Observer
from gateway.pipeline.shadow import Shadows
from gateway.pipeline.verdict import verdict
from gateway.protocol.capabilities import narrow, parallel_safe, remaining_continuations
from gateway.protocol.methods import INTERCEPT
from gateway.routing.cel import EvalError, Program
from gateway.routing.select import ErrorSink, select
from gateway.runtime import Route, RuntimeConfig
from gateway.settle.fold import ChainState
from gateway.telemetry import Telemetry
from gateway.uploads.forward import Forwarder

log = logging.getLogger("ahp_gateway")
DEFAULT_STATE: dict[str, Any] = {"permission": "none", "candidate": None}


def cel_error_sink(telemetry: Telemetry) -> ErrorSink:
    """Count and log a routing expression that failed to evaluate (its ``onError`` decides)."""

    def sink(program: Program, error: EvalError) -> None:
        telemetry.cel_error(program.id)
        log.warning("CEL evaluation error in %s: %s", program.id, error.message)

    return sink


_HOOK_ID = operator.attrgetter("hook_id")
"""A route's hook id (``map`` with it runs in C: no generator per intercept)."""


class Intercepts:
    """What intercepts share across requests: telemetry, the observer's ledger, shadow calls."""

    def __init__(
        self, telemetry: Telemetry, observer: Observer, shadows: Shadows, uploads: Forwarder | None = None
    ) -> None:
        self.telemetry = telemetry
        self.observer = observer
        self.shadows = shadows
        self.uploads = uploads
        self.cel_error = cel_error_sink(telemetry)

    async def run(
        self,
        snap: RuntimeConfig,
        req: Intercept,
        headers: Mapping[str, str] | None,
        principal: Mapping[str, Any] | None,
    ) -> Exchange:
        started = time.perf_counter()
        telemetry = self.telemetry
        event, etype = req.event, req.event_type
        trace = telemetry.begin(headers or {}, event)
        activation = snap.cel.for_intercept(event, req.version, req.capabilities, headers, principal, req.body)
        selected, dropped = select(snap.intercept_routes.get(etype, ()), activation, self.cel_error)
        for route in dropped:
            self.observer.served(event, route.key)  # deliberately not routed: never "uncalled"
        caps = narrow(req.capabilities, etype)
        state0 = req.state or DEFAULT_STATE
        shadows = snap.shadow_routes.get(etype)
        if shadows:
            chosen = select(shadows, activation, self.cel_error)[0]
            if chosen:
                self.shadows.launch(snap, chosen, req, caps, state0, activation)
        settlement: Settlement | None = None
        fallback = False
        if selected and state0["permission"] != "deny" and state0.get("flow") != "stop":
            parallel = snap.parallel and len(selected) > 1
            if parallel and not parallel_safe(caps):
                fallback, parallel = True, False
            settlement = await self._chain(snap, req, selected, caps, state0, activation, trace, principal, parallel)
        body, decision = verdict(snap, req, settlement, started, principal)
        return Exchange(
            body, INTERCEPT, decision, routed=tuple(map(_HOOK_ID, selected)), parallel_fallback=fallback, trace=trace
        )

    def _unknown_refs(self, snap: RuntimeConfig) -> Callable[[Route, Any], None] | None:
        """Refs an upstream answers 404 for are not reused (protocol §13.2)."""
        uploads = self.uploads
        if uploads is None:
            return None
        return lambda route, refs: uploads.forget(snap.loaded, route.key, refs)

    async def _chain(
        self,
        snap: RuntimeConfig,
        req: Intercept,
        routes: list[Route],
        caps: dict[str, Any],
        state0: dict[str, Any],
        activation: Any,
        trace: Any,
        principal: Mapping[str, Any] | None,
        parallel: bool,
    ) -> Settlement:
        telemetry = self.telemetry
        event = req.event
        deadline = asyncio.get_running_loop().time() + snap.deadline
        refs = None  # per-upstream re-uploads, before the chain and inside its deadline (protocol §13.2)
        if self.uploads is not None:
            owner = principal.get("name", "") if principal else ""
            refs = await self.uploads.prepare(snap.loaded, snap.slots, event, routes, owner, deadline)
        run = ChainRun(
            snap=snap,
            rid=req.id,
            version=req.version,
            caps=caps,
            deadline=deadline,
            refs=refs,
            unknown_refs=self._unknown_refs(snap),
            activation=activation,
            outbound=lambda route: telemetry.outbound_headers(trace, route.key, route.hook_id),
            sent=lambda route: self.observer.served(event, route.key),
            on_circuit=telemetry.circuit,
        )
        chain = ChainState.start(event, state0, remaining_continuations(caps))
        return await (run_parallel if parallel else run_serial)(run, chain, routes)
