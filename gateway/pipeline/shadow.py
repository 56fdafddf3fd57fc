"""Shadow routes (``mode: shadow``): upstreams that see the harness's event and are called
concurrently in the background; they never delay or change the answer. Their verdict — what
the harness would have seen had they been enforcing — is only counted and logged."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from gateway import tasks
from gateway.pipeline.call import call_upstream
from gateway.pipeline.chain import expectation, request
from gateway.pipeline.frontend import Intercept
from gateway.protocol.capabilities import remaining_continuations
from gateway.routing.cel import Activation
from gateway.runtime import Route, RuntimeConfig
from gateway.settle.fold import ChainState
from gateway.settle.ledger import outcome_of
from gateway.settle.reply import Failure
from gateway.telemetry import Telemetry
from gateway.upstream.base import Call

log = logging.getLogger("ahp_gateway")


class Shadows:
    """The shadow calls still running (drained on shutdown, cancelled on close)."""

    def __init__(self, telemetry: Telemetry) -> None:
        self.telemetry = telemetry
        self._running: set[asyncio.Task[Any]] = set()

    def __len__(self) -> int:
        return len(self._running)

    def launch(
        self,
        snap: RuntimeConfig,
        routes: list[Route],
        req: Intercept,
        caps: dict[str, Any],
        state: dict[str, Any],
        activation: Activation | None,
    ) -> None:
        """Call ``routes`` in the background with the harness's event, ``caps`` narrowed for it
        and its incoming ``state``."""
        chain = ChainState.start(req.event, state, remaining_continuations(caps))  # read-only here
        for route in routes:
            task = tasks.spawn(self._shadow(snap, route, req, caps, chain, activation), name=f"shadow-{route.key}")
            self._running.add(task)
            task.add_done_callback(self._running.discard)

    async def _shadow(
        self,
        snap: RuntimeConfig,
        route: Route,
        req: Intercept,
        caps: dict[str, Any],
        chain: ChainState,
        activation: Activation | None,
    ) -> None:
        request_ = request(snap, route, req.id, req.version, req.event, caps, chain.wire_state())
        call = Call(request_, min(route.timeout, snap.deadline), activation, None)
        settled = await call_upstream(route, call, expectation(snap, request_, chain), self.telemetry.circuit)
        verdict = "error" if isinstance(settled, Failure) else outcome_of(settled.effects).value
        self.telemetry.shadow(route.hook_id, verdict)
        log.info("shadow %s verdict=%s event=%s", route.hook_id, verdict, req.event["id"])

    async def drain(self, deadline: float) -> None:
        while self._running and time.monotonic() < deadline:
            await asyncio.sleep(0.01)

    async def aclose(self) -> None:
        running = list(self._running)
        for task in running:
            task.cancel()
        await asyncio.gather(*running, return_exceptions=True)
