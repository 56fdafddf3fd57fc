"""Observation fan-out (protocol §8.3): ``hooks/observe`` notifications are validated, queued
(raw bodies, bounded) and delivered by a few workers, never delaying an intercept.

Each observation goes to the observe subscriptions of its event type and to intercept
subscriptions that were *not* called for that event id, once per (event, subscription): the
:class:`~gateway.settle.deliveries.DeliveryLedger` remembers what was served, and the chain run
marks a subscription served when its call is sent.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from gateway import tasks
from gateway.config.models import ObserveOptions
from gateway.protocol import jsonrpc, wire
from gateway.protocol.content import project
from gateway.protocol.events import ALL_EVENTS_SET
from gateway.protocol.methods import OBSERVE
from gateway.routing.select import ErrorSink, select
from gateway.runtime import RuntimeConfig
from gateway.settle.deliveries import DeliveryLedger
from gateway.telemetry import Telemetry
from gateway.uploads.forward import Forwarder

log = logging.getLogger("ahp_gateway")
Release = Callable[[], None]
Principal = Mapping[str, Any] | None


class Observer:
    def __init__(
        self,
        options: ObserveOptions,
        telemetry: Telemetry,
        on_cel_error: ErrorSink | None = None,
        uploads: Forwarder | None = None,
    ) -> None:
        self.telemetry = telemetry
        self._on_cel_error = on_cel_error
        self._uploads = uploads
        # Queued observations keep the raw body (a few KB) rather than the parsed event (several
        # times larger as Python objects): a full queue must not dominate a worker's memory.
        self._queue: asyncio.Queue[tuple[RuntimeConfig, bytes, Principal, Release]] = asyncio.Queue(options.queueSize)
        self.ledger = DeliveryLedger(options.dedupEntries, options.dedupTtlSeconds, time.monotonic)
        self._count = options.workers
        self._workers: list[asyncio.Task[None]] = []

    def served(self, event: dict[str, Any], key: str) -> None:
        """Subscription ``key`` has this event (called, or deliberately not routed to)."""
        self.ledger.add((event["source"], event["id"], key))

    def start(self) -> None:
        if not self._workers:
            self._workers = [tasks.spawn(self._work(), name=f"observe-worker-{i}") for i in range(self._count)]

    def pending(self) -> int:
        return self._queue.qsize()

    def accept(
        self,
        snap: RuntimeConfig,
        msg: dict[str, Any],
        body: bytes,
        hold: Callable[[], Release],
        principal: Principal = None,
    ) -> str:
        """Validate and queue one notification; ``hold`` keeps ``snap`` alive until delivered.
        Returns its status (queued, invalid, unrouted) or the reason it was dropped, for the
        exchange telemetry records."""
        params = msg["params"]
        if params.get("protocolVersion") not in snap.versions or not snap.schemas.observe_notification.ok(msg):
            return "invalid"
        etype = params["event"]["type"]
        if etype not in ALL_EVENTS_SET or etype not in snap.observe_routes:
            return "unrouted"
        release = hold()
        try:
            self._queue.put_nowait((snap, body, principal, release))
        except asyncio.QueueFull:
            release()
            return "queue_full"
        self.telemetry.observe_queue(self._queue.qsize())  # a live gauge, the workers set it too
        return "queued"

    async def _work(self) -> None:
        while True:
            snap, body, principal, release = await self._queue.get()
            try:
                params = wire.loads(body)["params"]
                await self.deliver(snap, params["event"], params["protocolVersion"], principal)
            except asyncio.CancelledError:
                raise
            except Exception:  # never let one bad delivery stop the worker
                log.exception("observe delivery failed")
            finally:
                release()
                self._queue.task_done()
                self.telemetry.observe_queue(self._queue.qsize())

    async def deliver(
        self, snap: RuntimeConfig, event: dict[str, Any], version: str, principal: Principal = None
    ) -> None:
        routes = snap.observe_routes.get(event["type"], ())
        activation = snap.cel.for_observe(event, version, principal)
        if activation is not None:
            routes = tuple(select(routes, activation, self._on_cel_error)[0])
        ident = (event["source"], event["id"])
        pending = [route for route in routes if (*ident, route.key) not in self.ledger]
        refs = None  # uploads finish before the observation is published (protocol §13.2)
        if self._uploads is not None and pending:
            owner = principal.get("name", "") if principal else ""
            deadline = asyncio.get_running_loop().time() + snap.observe_timeout
            refs = await self._uploads.prepare(snap.loaded, snap.slots, event, pending, owner, deadline)
        for route in pending:
            key = (*ident, route.key)
            if key in self.ledger:
                continue
            self.ledger.add(key)
            view = project(
                event,
                snap.slots,
                route.selection,
                route.include_native,
                identity=route.identity,
                refs=refs.get(route.key) if refs else None,
            )
            note = jsonrpc.notification(OBSERVE, {"protocolVersion": version, "event": view})
            failure = await route.upstream.observe(note, snap.observe_timeout)
            self.telemetry.observe_delivered(route.hook_id, failure.kind.value if failure else "ok")
            if failure is not None:
                log.warning("observe delivery to %s failed (%s: %s)", route.hook_id, failure.kind.value, failure.detail)

    async def drain(self, deadline: float) -> None:
        """Until every queued observation is delivered (not just taken), or ``deadline``."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._queue.join(), max(0.0, deadline - time.monotonic()))

    async def aclose(self) -> None:
        for task in self._workers:
            task.cancel()
        await asyncio.gather(*self._workers, return_exceptions=True)
        self._workers = []
