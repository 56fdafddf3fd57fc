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
from gateway.runtime import RuntimeConfig, RuntimeHolder
from gateway.telemetry import NullTelemetry, Telemetry
from gateway.uploads.forward import Forwarder

log = logging.getLogger("ahp_gateway")
OVERLOADED = str(int(RpcCode.BACKEND_UNAVAILABLE))
"""``ahp_gateway_rejected_requests_total`` code of intercepts refused by ``limits.maxInflight``
(the front end answers -32003 for nothing else)."""


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
    ) -> None:
        """``uploads``: per-upstream re-upload of attachments (docs/operations/uploads.md), when the
        gateway runs an upload receiver; ``capture``: ``log.capture``, the intercepts received
        with their answers, for ``ahp-gateway replay``."""
        self.holder = holder
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
            return await self.intercepts.run(snap, req, headers, principal)
        finally:
            self._running -= 1

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
