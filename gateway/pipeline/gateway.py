"""The gateway's one request path, shared by every server binding (HTTP, stdio, native hooks):
request bytes in, an :class:`~gateway.pipeline.exchange.Exchange` out (``.answer`` is None for a
notification, which is never answered).

Linear, like OPA's handler: acquire the live snapshot → the pure front-end check → answer a
rejection or a discovery request, queue an observation, or run the intercept → release the
snapshot → hand the exchange to telemetry and capture, once, here (as OPA's data handler hands
its result to the decision logger). How bytes are framed (HTTP status codes, stdio lines) is the
binding's business.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping
from typing import Any, Protocol

from gateway.observability.capture import Capture
from gateway.pipeline import frontend
from gateway.pipeline.exchange import Exchange
from gateway.pipeline.intercept import Intercepts, cel_error_sink
from gateway.pipeline.observe import Observer
from gateway.pipeline.shadow import Shadows
from gateway.pipeline.versions import VersionBridge, maybe_v01
from gateway.protocol import v01, wire
from gateway.protocol.errors import RpcCode
from gateway.protocol.methods import CAPABILITIES, INTERCEPT, OBSERVE
from gateway.ratelimit import Limited, RateLimiter
from gateway.runtime import RuntimeConfig, RuntimeHolder
from gateway.telemetry import NullTelemetry, Telemetry
from gateway.uploads.forward import Forwarder

log = logging.getLogger("ahp_gateway")
OVERLOADED = str(int(RpcCode.BACKEND_UNAVAILABLE))
"""``ahp_gateway_rejected_requests_total`` code of intercepts refused by ``limits.maxInflight``
and by ``rateLimits`` (the front end answers -32003 for nothing else)."""
RATE_LIMITED = "rate_limited"
"""Drop reason of an observation a rate limit refused (``ahp_gateway_observe_drops_total``)."""


class Handler(Protocol):
    """What a server binding calls: request bytes in, the exchange (``.answer``: the bytes to
    send, None for no answer) out."""

    async def handle(
        self, body: bytes, headers: Mapping[str, str] | None = None, principal: Mapping[str, Any] | None = None
    ) -> Exchange: ...


class Gateway:
    def __init__(
        self,
        holder: RuntimeHolder,
        telemetry: Telemetry | None = None,
        uploads: Forwarder | None = None,
        capture: Capture | None = None,
        limiter: RateLimiter | None = None,
    ) -> None:
        """``uploads``: per-upstream re-upload of attachments (docs/operations/uploads.md), when the
        gateway runs an upload receiver; ``capture``: ``log.capture``, the intercepts received
        with their answers, for ``ahp-gateway replay``; ``limiter``: ``rateLimits``
        (docs/operations/rate-limits.md), checked before the chain when the snapshot has any."""
        self.holder = holder
        self.limiter = limiter
        self.capture = capture
        self.telemetry: Telemetry = telemetry or NullTelemetry()
        cfg = holder.current.loaded.config
        self.shadows = Shadows(self.telemetry)
        self.observer = Observer(cfg.observe, self.telemetry, cel_error_sink(self.telemetry), uploads)
        self.intercepts = Intercepts(self.telemetry, self.observer, self.shadows, uploads)
        self._running = 0
        """Intercepts in flight (``limits.maxInflight``)."""
        self._bridge = VersionBridge(self.handle_draft, preload=v01.VERSION in holder.current.versions)
        """Harnesses on protocol 0.1 (docs/design/protocol.md, "Protocol versions")."""

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        self.observer.start()

    async def drain(self, timeout: float) -> None:
        """Let queued observations and shadow calls finish, within ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        await self.observer.drain(deadline)
        await self.shadows.drain(deadline)

    async def aclose(self) -> None:
        await self.observer.aclose()
        await self.shadows.aclose()

    # ------------------------------------------------------------------ the request path
    async def handle(
        self, body: bytes, headers: Mapping[str, str] | None = None, principal: Mapping[str, Any] | None = None
    ) -> Exchange:
        """One harness message: its answer and what happened, recorded once by telemetry."""
        if v01.VERSION in self.holder.current.versions and maybe_v01(body):
            exchange = await self._bridge.handle(body, headers, principal)
        else:
            exchange = await self.handle_draft(body, headers, principal)
        try:
            self.telemetry.exchanged(exchange)
        except Exception:  # telemetry must never turn a settled decision into an error
            log.exception("recording a decision failed")
        if self.capture is not None:
            self.capture.record(body, headers, exchange.answer)
        return exchange

    async def handle_draft(
        self, body: bytes, headers: Mapping[str, str] | None = None, principal: Mapping[str, Any] | None = None
    ) -> Exchange:
        holder = self.holder
        snap = holder.acquire()  # the whole request runs on this snapshot
        self.telemetry.inflight(1)
        try:
            checked = frontend.check(body, snap.versions, snap.schemas)
            if type(checked) is frontend.Intercept:
                return await self._intercept(snap, checked, headers, principal)
            if (
                snap.rate_limits
                and type(checked) is frontend.Notification
                and checked.observe is not None
                and await self._observe_limited(snap, checked, headers, principal)
            ):
                return Exchange(None, OBSERVE, observed=RATE_LIMITED)
            return self._other(snap, checked, principal)
        finally:
            self.telemetry.inflight(-1)
            holder.release(snap)

    async def _intercept(
        self,
        snap: RuntimeConfig,
        req: frontend.Intercept,
        headers: Mapping[str, str] | None,
        principal: Mapping[str, Any] | None,
    ) -> Exchange:
        limit = snap.max_inflight
        if limit and self._running >= limit:
            # Answer at once instead of queueing into the deadline: the harness applies its own
            # failure policy for the gateway (protocol §9).
            return Exchange(wire.error_body(req.id, RpcCode.BACKEND_UNAVAILABLE), INTERCEPT, rejected=OVERLOADED)
        self._running += 1
        try:
            if snap.rate_limits and self.limiter is not None:
                return await self._limited(snap, req, headers, principal, self.limiter)
            return await self.intercepts.run(snap, req, headers, principal)
        finally:
            self._running -= 1

    async def _limited(
        self,
        snap: RuntimeConfig,
        req: frontend.Intercept,
        headers: Mapping[str, str] | None,
        principal: Mapping[str, Any] | None,
        limiter: RateLimiter,
    ) -> Exchange:
        """``rateLimits`` before the chain: over a limit, -32003 at once, naming it (the
        harness applies its failure policy for the gateway, protocol §9)."""
        activation = snap.cel.for_limits(
            INTERCEPT, req.event, req.version, req.capabilities, headers, principal, req.body, snap.limits_read_event
        )
        deadline = asyncio.get_running_loop().time() + snap.deadline
        outcome = await limiter.check(snap.rate_limits, activation, deadline)
        if isinstance(outcome, Limited):
            answer = wire.error_body(req.id, RpcCode.BACKEND_UNAVAILABLE, outcome.data, outcome.message)
            return Exchange(answer, INTERCEPT, rejected=OVERLOADED)
        try:
            return await self.intercepts.run(snap, req, headers, principal)
        finally:
            outcome()

    async def _observe_limited(
        self,
        snap: RuntimeConfig,
        checked: frontend.Notification,
        headers: Mapping[str, str] | None,
        principal: Mapping[str, Any] | None,
    ) -> bool:
        """Whether a rate limit drops this observation (counted, never answered)."""
        if self.limiter is None or checked.observe is None:
            return False
        params = checked.observe.get("params")
        event = params.get("event") if isinstance(params, dict) else None
        if not isinstance(event, dict) or not isinstance(params, dict):
            return False  # invalid: the observer refuses it anyway
        version = params.get("protocolVersion")
        activation = snap.cel.for_limits(
            OBSERVE, event, str(version), {}, headers, principal, checked.body, snap.limits_read_event
        )
        deadline = asyncio.get_running_loop().time() + snap.deadline
        outcome = await self.limiter.check(snap.rate_limits, activation, deadline)
        if isinstance(outcome, Limited):
            return True
        outcome()  # an observation holds no in-flight slot (it is queued, not served)
        return False

    def _other(self, snap: RuntimeConfig, checked: frontend.Checked, principal: Mapping[str, Any] | None) -> Exchange:
        if isinstance(checked, frontend.Rejected):
            answer = wire.error_body(checked.id, checked.code, checked.data, checked.message)
            return Exchange(answer, checked.method, rejected=str(int(checked.code)))
        if isinstance(checked, frontend.Notification):
            if checked.observe is not None:
                status = self.observer.accept(
                    snap, checked.observe, checked.body, lambda: self.holder.hold(snap), principal
                )
                return Exchange(None, OBSERVE, observed=status)
            if checked.reason is not None:
                return Exchange(None, checked.reason, rejected="notification")
            return Exchange(None)
        assert isinstance(checked, frontend.Discovery)
        if checked.method == CAPABILITIES:
            result = {"protocolVersion": checked.version, "manifest": snap.manifest}
        else:
            result = {"protocolVersion": checked.version, "configuration": snap.configuration}
        return Exchange(wire.result_body(checked.id, result), checked.method, discovery=True)
