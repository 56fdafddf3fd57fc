"""The fast lane: the asyncio adapter of the harness-facing AHP endpoint, straight from the socket.

aiohttp's request machinery (request and response objects, router, writer, payload streams)
cost more CPU per hook call than the gateway's own work, and its large working set evicted the
pipeline from the CPU caches. The fast lane feeds a connection's bytes to the sans-IO
:class:`gateway.binding.h1.Reader`, serves the requests it returns (the shapes that carry nearly
all traffic: ``POST <listen.path>`` and ``POST /native/<harness>``) and writes
:func:`gateway.binding.rules.frame` of each answer. The first request the reader hands off, and
every byte after it, go to an aiohttp handler connected to the transport at that moment, which
answers as if it had read the connection from that request on (401/403, 404, 405, 413, 415,
uploads, other native targets, metadata). A head the reader finds malformed is answered here (400,
close, :data:`gateway.binding.rules.MALFORMED`): aiohttp is handed only whole heads llhttp
accepted. Requests on one connection are served one at a time, in order, so the two never write
at once.

Kept from the aiohttp path: authentication from the headers and TLS peer before the body is
read (reading pauses while it runs; a refused caller's body is discarded as it comes, never
stored: protocol §12), bodies over ``maxBodyBytes`` never read, the header timeout (from
:class:`~gateway.server.limits._Guarded`), the body timeout (408, connection closed, counted),
the idle timeout, cancellation of the pipeline when the harness disconnects, bounded buffering (a
pipelining client is paused ``AHEAD`` bytes ahead), graceful drain (:meth:`Lane.drain`).
``listen.fastLane: false`` sends everything through aiohttp.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from dataclasses import dataclass, field
from typing import Any, cast

from multidict import CIMultiDict

from gateway.binding import h1
from gateway.binding.h1 import MAX_HEAD, TEXT, response
from gateway.binding.rules import auth_denied_natively, body_timeout_reason, frame
from gateway.config.models import Limits
from gateway.inbound.gate import Peer
from gateway.inbound.principal import Principal, Refusal
from gateway.native.endpoint import handle_native, refused, unauthenticated
from gateway.pipeline.exchange import Exchange
from gateway.server.guard import refusal_text
from gateway.server.limits import HTTP_LOG, ConnectionGuard, _Guarded

log = logging.getLogger("ahp_gateway")

__all__ = ["AHEAD", "MAX_HEAD", "FastLane", "Lane"]

AHEAD = 65536
"""Bytes a client may send ahead (pipelined) while one of its requests is served."""
SILENT_GRACE = 1.0
"""Seconds a connection accepted before a drain began has to send its first bytes: its request
may be on its way (a loaded machine reads it late), so it is not closed at once as idle."""

Handle = Callable[[bytes, Mapping[str, str], Mapping[str, Any] | None], Awaitable[Exchange]]
Authenticate = Callable[[Mapping[str, str], Peer], Coroutine[Any, Any, Principal | Refusal]]


@dataclass(eq=False)
class Lane:
    """What the fast lane serves, and its connections (for the drain; a request being served is
    held by its connection)."""

    path: str
    handle: Handle
    limits: Callable[[], Limits]
    authenticate: Authenticate | None = None
    peer: Callable[[asyncio.Transport], Peer] = lambda transport: Peer(None)
    on_body_timeout: Callable[[], None] | None = None
    native: bool = False
    """Serve ``POST /native/<harness>`` too (the aiohttp app has that route)."""
    connections: set[FastLane] = field(default_factory=set)
    draining: bool = False
    _quiet: asyncio.Event | None = None

    def __post_init__(self) -> None:
        self.target = self.path.encode("latin-1")

    @property
    def buffered(self) -> int:
        """Bytes received and not yet consumed on the fast lane's connections (what a client can
        make the gateway hold; a refused caller's body is never part of it)."""
        return sum(connection._reader.buffered for connection in self.connections)

    async def drain(self, timeout: float) -> None:
        """Call once the listener stopped accepting. A connection idle after an answer closes
        now; a request being served is answered (within ``timeout``) with ``Connection: close``;
        a connection accepted before the listener closed gets its first request served the
        same way (it may be on its way: closing would lose a request the client already sent),
        or closes after :data:`SILENT_GRACE` if not a byte came (at its header timeout if a
        head has begun). Then the rest close. Connections handed to aiohttp are drained by
        aiohttp."""
        self.draining = True
        self._quiet = asyncio.Event()
        for connection in list(self.connections):
            connection.close_if_idle()
        self.settle()
        silent = asyncio.get_running_loop().call_later(min(timeout, SILENT_GRACE), self._close_silent)
        try:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._quiet.wait(), timeout)
        finally:
            silent.cancel()
        for connection in list(self.connections):
            connection.close()

    def _close_silent(self) -> None:
        for connection in list(self.connections):
            connection.close_if_silent()

    def settle(self) -> None:
        """A connection left the fast lane: during the drain, wake it when none is left."""
        if self._quiet is not None and not self.connections:
            self._quiet.set()


def _refusal(refusal: Refusal, close: bool, native: h1.Native | None = None) -> bytes:
    """The same answer as the aiohttp path's (:func:`gateway.server.guard.refusal_response`; on
    ``/native/<harness>``, :func:`gateway.server.http.native_unauthenticated`)."""
    extra = b"WWW-Authenticate: %s\r\n" % refusal.challenge.encode("latin-1") if refusal.challenge else b""
    if native is not None and auth_denied_natively(refusal.status):
        denial = unauthenticated(native.harness, native.event, refusal.status)
        if denial is not None:
            return response(denial[0], denial[1], _JSON, close=close, extra=extra)
    return response(refusal.status, refusal_text(refusal).encode(), TEXT, close=close, extra=extra)


class FastLane(_Guarded):
    """One connection of the main listener: fast-lane requests are served here; the first other
    request and everything after it go to an aiohttp handler created at that moment (aiohttp's
    own idle timer must not run while the fast lane serves the connection)."""

    def __init__(self, guard: ConnectionGuard, header_timeout: float, lane: Lane) -> None:
        super().__init__(guard, None, header_timeout)
        self._lane = lane
        self._reader = h1.Reader(lane.target, lane.native)
        self._busy = False
        self._paused = False
        self._body_timer: asyncio.TimerHandle | None = None
        self._idle_timer: asyncio.TimerHandle | None = None
        self._idle_since = 0.0
        self._loop = asyncio.get_running_loop()
        self._task: asyncio.Task[None] | None = None
        self._auth: asyncio.Task[Principal | Refusal] | None = None
        """Authentication started from the head while the body is on its way."""
        self._refused = False
        """The request being read was refused from its head and answered: its body is skipped."""
        self._served = False
        """A request was answered on this connection (so, idle, it may close in a drain)."""
        self._peer: Peer | None = None

    # -- asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)
        self._guard.count(1)
        self._lane.connections.add(self)
        self._arm()

    def data_received(self, data: bytes) -> None:
        if self._handler is not None:
            super().data_received(data)
            return
        self._reader.feed(data)
        if not self._busy:
            self._advance()
            if self._timer is None and self._head_pending():
                self._arm()  # its header timeout runs from its first byte
        self._bound()

    def eof_received(self) -> bool | None:
        if self._handler is not None:
            return super().eof_received()
        return None  # as aiohttp: the transport closes, a request being served is cancelled

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_body()
        self._cancel_idle()
        self._lane.connections.discard(self)
        self._lane.settle()
        if self._task is not None:
            self._task.cancel()  # the harness is gone: stop its upstream calls
        if self._auth is not None:
            self._auth.cancel()
        if self._handler is not None:
            super().connection_lost(exc)
            return
        self._disarm()
        self._transport = None
        self._guard.count(-1)

    def pause_writing(self) -> None:
        self._paused = True
        if self._handler is not None:
            self._handler.pause_writing()

    def resume_writing(self) -> None:
        self._paused = False
        if self._handler is not None:
            self._handler.resume_writing()
        elif not self._busy and self._reader.buffered:
            self._advance()
            self._bound()

    @property
    def handed_off(self) -> bool:
        """The connection is aiohttp's now (a request that was not the fast lane's came)."""
        return self._handler is not None

    @property
    def authenticating(self) -> bool:
        """The caller is being authenticated from a head whose body has not all come."""
        return self._auth is not None

    def _head_pending(self) -> bool:
        """A request head has begun and is not complete, and nothing is being served."""
        return self._reader.in_head and not self._busy and self._handler is None

    # -- for the drain
    def close_if_idle(self) -> None:
        """Close when idle after an answer; a connection that has not had its first request, or
        has part of a request, is left to finish it."""
        if self._served and not self._busy and not self._reader.buffered and self._transport is not None:
            self._transport.close()

    def close_if_silent(self) -> None:
        """Close when not a byte of a first request has come."""
        if not self._served and not self._busy and not self._reader.buffered and self._transport is not None:
            self._transport.close()

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()

    # -- reading
    def _bound(self) -> None:
        """Bound what sits in the buffer: while a request is served, a client may send up to
        ``AHEAD`` bytes before reading pauses (reading stays on below that, so a disconnect is
        seen at once and cancels the request); while a request is read, one head and body."""
        transport = self._transport
        if transport is None or self._handler is not None:
            return
        buffered = self._reader.buffered
        if not buffered:  # nothing held (nearly always, between requests): read on
            pause = False
        elif self._auth is not None and not self._auth.done():
            pause = True  # the caller is not authenticated yet: its body is not read until it is
        else:
            pause = buffered > (AHEAD if self._busy else self._lane.limits().maxBodyBytes + MAX_HEAD)
        try:
            if pause:
                transport.pause_reading()
            else:
                transport.resume_reading()
        except Exception:  # noqa: BLE001 - a closing transport: nothing left to bound
            return

    def _advance(self) -> None:
        """Act on the reader's next event: serve a whole request, hand off one that is not ours."""
        if self._paused or self._transport is None:
            return
        event = self._reader.next_event(self._lane.limits().maxBodyBytes)
        if type(event) is h1.Request:  # the common case first
            self._disarm()  # head complete
            self._cancel_body()
            self._busy = True
            auth, self._auth = self._auth, None
            self._task = self._loop.create_task(self._serve(event, auth))
        elif isinstance(event, h1.NeedData):
            if event.in_body:
                self._arm_body()
        elif isinstance(event, h1.HandOff):
            self._hand_off(event.data)  # the header timer running for that request stays
        elif isinstance(event, h1.Malformed):
            self._malformed(event)
        elif isinstance(event, h1.Head):
            self._disarm()  # head complete: the body timeout takes over
            self._authenticate_early(event.headers)
            self._arm_body()
        else:  # Skipped
            self._cancel_body()
            self._refused, self._served = False, True
            self._next()

    def _malformed(self, event: h1.Malformed) -> None:
        """A head no HTTP/1.1 parser accepts: 400 and close, answered here (aiohttp never sees
        it), logged as aiohttp's are (:class:`~gateway.server.limits._ClientErrors`): one DEBUG
        line naming the error class, never the bytes."""
        self._disarm()
        self._cancel_body()
        self._cancel_idle()
        HTTP_LOG.debug("malformed HTTP request rejected (%s)", event.reason)
        refusal = event.refusal
        self._write(response(refusal.status, refusal.body, TEXT, close=True), True)

    def _hand_off(self, data: bytes) -> None:
        """From here on the connection is aiohttp's: its handler reads the handed-off request from
        the first byte, and the header timer already running for that request stays."""
        self._cancel_body()
        self._cancel_idle()
        self._lane.connections.discard(self)
        self._lane.settle()
        transport = self._transport
        assert transport is not None
        self._handler = handler = self._guard.handler()
        handler.connection_made(transport)
        with contextlib.suppress(Exception):
            transport.resume_reading()
        if self._paused:
            handler.pause_writing()
        if data:
            super().data_received(data)

    # -- serving
    def _authenticate_early(self, headers: CIMultiDict[str]) -> None:
        """The body is still on its way: authenticate from the head now, so a refused caller is
        answered without waiting for (or reading) a body it may never send (protocol §12)."""
        lane, transport = self._lane, self._transport
        if lane.authenticate is None or transport is None:
            return
        task = self._loop.create_task(lane.authenticate(headers, self._caller()))
        self._auth = task
        task.add_done_callback(self._early_outcome)

    def _early_outcome(self, task: asyncio.Task[Principal | Refusal]) -> None:
        if self._auth is not task or task.cancelled():
            return  # dispatched already (the request awaits it), or gone
        if task.exception() is not None:
            self._bound()  # the body is read again; the error surfaces when the request is served
            return
        outcome = task.result()
        if isinstance(outcome, Refusal):
            # Answered now, as aiohttp does; the body is then read and skipped (within the body
            # timeout) and the connection kept. Closing with the body in flight could reset the
            # connection before the client read its 401.
            self._auth = None
            close = self._lane.draining
            self._write(_refusal(outcome, close, self._reader.pending_native), close)
            if not close:
                self._refused = True
                self._reader.skip()
                if not self._busy:
                    self._advance()  # discard what came of the body already
        self._bound()  # read on: an accepted body is buffered, a refused one discarded

    async def _serve(self, request: h1.Request, auth: asyncio.Task[Principal | Refusal] | None) -> None:
        lane = self._lane
        headers, close = request.headers, not request.keep_alive
        try:
            principal = None
            if lane.authenticate is not None and self._transport is not None:
                outcome = await (auth if auth is not None else lane.authenticate(headers, self._caller()))
                if isinstance(outcome, Refusal):
                    close = close or lane.draining
                    self._write(_refusal(outcome, close, request.native), close)
                    return
                principal = outcome.as_cel() if outcome.authenticated else None
            if request.native is None:  # the one call of the pipeline on this binding
                status, content_type, payload = frame((await lane.handle(request.body, headers, principal)).answer)
                media = _MEDIA.get(content_type) if content_type is not None else None
            else:
                status, payload = await self._native(request.native, request.body, headers, principal)
                media = _JSON if status == 200 else _PLAIN
            close = close or lane.draining
            self._write(response(status, payload, media, close=close), close)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("error while serving a request")
            self._write(response(500, b"500 Internal Server Error\n", TEXT, close=True), True)
        finally:
            self._task = None
            self._busy = False
            self._served = True
            self._next()

    def _caller(self) -> Peer:
        """The caller's address and verified certificate: one per connection, read once."""
        peer = self._peer
        if peer is None:
            transport = self._transport
            assert transport is not None
            peer = self._peer = self._lane.peer(transport)
        return peer

    async def _native(
        self, native: h1.Native, body: bytes, headers: Mapping[str, str], principal: Mapping[str, Any] | None
    ) -> tuple[int, bytes]:
        """``POST /native/<harness>``, as :mod:`gateway.server.http` serves it."""

        async def decide(message: bytes, forwarded: Mapping[str, str]) -> tuple[int, bytes | None]:
            status, _, payload = frame((await self._lane.handle(message, forwarded, principal)).answer)
            return status, payload if status == 200 else None

        return await handle_native(native.harness, body, headers, decide, event=native.event)

    def _write(self, data: bytes, close: bool) -> None:
        transport = self._transport
        if transport is None or transport.is_closing():
            return
        transport.write(data)
        if close:
            transport.close()

    def _next(self) -> None:
        """After an answer: the next pipelined request, or the idle timer."""
        transport = self._transport
        if transport is None or transport.is_closing():
            return
        if self._reader.buffered:
            if self._timer is None and self._reader.in_head:
                self._arm()
            self._advance()
        else:
            self._arm_idle()
        self._bound()

    # -- timers
    def _arm_body(self) -> None:
        if self._body_timer is None:
            timeout = self._lane.limits().bodyTimeoutMs / 1000
            self._body_timer = self._loop.call_later(timeout, self._body_expired)

    def _cancel_body(self) -> None:
        if self._body_timer is not None:
            self._body_timer.cancel()
            self._body_timer = None

    def _body_expired(self) -> None:
        """As :func:`gateway.server.limits.read_body`: 408, and the connection closes."""
        self._body_timer = None
        if self._refused:  # already answered: no 408 for a body nobody waits for
            self.close()
            return
        reason = body_timeout_reason(self._lane.limits().bodyTimeoutMs / 1000)
        native = self._reader.pending_native
        if native is not None:  # a native hook proceeds on a 408: its own denial (as on aiohttp)
            status, payload = refused(native.harness, native.event, reason)
            self._write(response(status, payload, _JSON if status == 200 else _PLAIN, close=True), True)
        else:
            self._write(response(408, (reason + "\n").encode(), TEXT, close=True), True)
        if self._lane.on_body_timeout is not None:
            self._lane.on_body_timeout()

    def _arm_idle(self) -> None:
        """The idle timeout from now. One timer per idle period, not per request: a timer that
        fires on a connection used since then is set again for the rest of the period."""
        self._idle_since = self._loop.time()
        if self._idle_timer is None:
            self._idle_timer = self._loop.call_at(
                self._idle_since + self._lane.limits().idleTimeoutSeconds, self._idle_expired
            )

    def _cancel_idle(self) -> None:
        if self._idle_timer is not None:
            self._idle_timer.cancel()
            self._idle_timer = None

    def _idle_expired(self) -> None:
        self._idle_timer = None
        if self._busy or self._reader.in_request:
            return  # in use: the answer sets the timer again
        due = self._idle_since + self._lane.limits().idleTimeoutSeconds
        if self._loop.time() < due:
            self._idle_timer = self._loop.call_at(due, self._idle_expired)
        else:
            self.close()


_JSON = b"application/json"
_PLAIN = b"text/plain"
_MEDIA = {"application/json": _JSON}
