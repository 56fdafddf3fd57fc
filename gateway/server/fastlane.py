"""The fast lane: the harness-facing AHP endpoint served straight from the socket.

aiohttp's request machinery (request and response objects, router, writer, payload streams)
cost more CPU per hook call than the gateway's own work, and its large working set evicted the
pipeline from the CPU caches. The fast lane serves the one request shape that carries nearly all
traffic — ``POST <listen.path>``, ``Content-Type: application/json``, an exact
``Content-Length`` within ``maxBodyBytes``, no content or transfer coding, no ``Expect``, HTTP/1.1
— with llhttp (httptools) and a few writes, and hands every other request to aiohttp unchanged.

How the hand-off stays exact: llhttp accepts only CRLF line endings (no bare LF, no folding, no
duplicate ``Content-Length``), so the first ``CRLFCRLF`` in the buffer ends the request head llhttp
parsed, and the body is exactly ``Content-Length`` bytes after it. Whatever aiohttp might refuse (a
repeated header, no ``Host``, an upgrade, fields near its limits) is handed off too, so the fast
lane never serves a request aiohttp would refuse (tests/test_fastlane_hostile.py). A request is read
only to its head before it is judged, so a request that is not for the fast lane is still whole in
the buffer; an aiohttp handler is then connected to the transport, fed those bytes and every later
one, and answers as if it had read the connection from that request on (401/403, 404, 405, 413, 415,
400, uploads, native hooks, metadata). Requests on one connection are served one at a time, in
order, so the two never write at once.

Kept from the aiohttp path: authentication from the headers and TLS peer before the body is
used (protocol §12), bodies over ``maxBodyBytes`` never read (aiohttp answers 413 from the
headers), the header timeout (from :class:`~gateway.server.limits._Guarded`), the body timeout
(408, connection closed, counted), the idle timeout, cancellation of the pipeline when the
harness disconnects, bounded buffering (a pipelining client is paused ``AHEAD`` bytes ahead),
graceful drain (:meth:`Lane.drain`). ``listen.fastLane: false`` sends everything through aiohttp.
"""

from __future__ import annotations

import asyncio
import contextlib
import email.utils
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from dataclasses import dataclass, field
from typing import Any, cast

import httptools
from multidict import CIMultiDict

from gateway.config.models import Limits
from gateway.inbound.gate import Peer
from gateway.inbound.principal import Principal, Refusal
from gateway.pipeline.exchange import Exchange
from gateway.server.guard import refusal_text
from gateway.server.limits import ConnectionGuard, _Guarded, body_timeout_reason

log = logging.getLogger("ahp_gateway")

MAX_HEAD = 16384
"""A head longer than this goes to aiohttp, which applies its own line and field limits."""
AHEAD = 65536
"""Bytes a client may send ahead (pipelined) while one of its requests is served."""
_END = b"\r\n\r\n"
_JSON = "application/json"
_HANDS_OFF = frozenset({"transfer-encoding", "content-encoding", "expect", "upgrade", "sec-websocket-key1"})
"""Headers whose presence sends a request to aiohttp (it implements or refuses what they ask for)."""
MAX_FIELDS = 64
MAX_FIELD = 4096
"""A head with more header lines, or a longer name or value, goes to aiohttp, which applies its
own limits (128 lines, 8190 bytes a field): handing off below them keeps every answer aiohttp's."""
_OWS = b" \t"
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
    connections: set[FastLane] = field(default_factory=set)
    draining: bool = False
    _quiet: asyncio.Event | None = None

    def __post_init__(self) -> None:
        self.target = self.path.encode("latin-1")

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


_REASONS = {200: b"OK", 202: b"Accepted", 401: b"Unauthorized", 403: b"Forbidden", 408: b"Request Timeout"}
_REASONS[500] = b"Internal Server Error"
_TEXT = b"text/plain; charset=utf-8"
_date: dict[int, bytes] = {}


def _http_date() -> bytes:
    """RFC 9110 §6.6.1 ``Date``, formatted once per second."""
    now = int(time.time())
    found = _date.get(now)
    if found is None:
        _date.clear()
        found = _date[now] = email.utils.formatdate(now, usegmt=True).encode("ascii")
    return found


def response(status: int, body: bytes, content_type: bytes | None, *, close: bool, extra: bytes = b"") -> bytes:
    """One HTTP/1.1 response; ``extra`` is whole header lines."""
    head = b"HTTP/1.1 %d %s\r\n" % (status, _REASONS[status])
    if content_type is not None:
        head += b"Content-Type: " + content_type + b"\r\n"
    head += b"Content-Length: %d\r\n%s" % (len(body), extra)
    if close:
        head += b"Connection: close\r\n"
    return head + b"Date: " + _http_date() + b"\r\n\r\n" + body


def _refusal(refusal: Refusal, close: bool) -> bytes:
    """The same answer as the aiohttp path's (:func:`gateway.server.guard.refusal_response`)."""
    extra = b"WWW-Authenticate: %s\r\n" % refusal.challenge.encode("latin-1") if refusal.challenge else b""
    return response(refusal.status, refusal_text(refusal).encode(), _TEXT, close=close, extra=extra)


class _Head:
    """llhttp callbacks for one request head, judging each header as it is parsed: ``refused``
    once anything in it is aiohttp's to answer (a repeated header, one that asks for what only
    aiohttp implements or refuses, a field near aiohttp's limits)."""

    __slots__ = ("complete", "content_type", "headers", "keep_alive", "length", "parser", "refused", "url")

    def __init__(self) -> None:
        self.url = b""
        self.headers: CIMultiDict[str] = CIMultiDict()
        self.complete = self.keep_alive = self.refused = False
        self.length = -1
        self.content_type = ""
        self.parser: httptools.HttpRequestParser | None = None
        """Set while a head is fed (and cleared after, so the two do not form a cycle)."""

    def on_url(self, url: bytes) -> None:
        self.url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        if len(name) > MAX_FIELD or len(value) > MAX_FIELD or len(self.headers) >= MAX_FIELDS:
            self.refused = True
            return
        key = name.decode("latin-1")
        lower = key.lower()
        if lower in _HANDS_OFF or lower in self.headers:
            self.refused = True
            return
        text = value.strip(_OWS).decode("utf-8", "surrogateescape")  # RFC 9110 §5.5, as aiohttp
        if lower == "content-length":
            if not (text.isascii() and text.isdigit()):
                self.refused = True
                return
            self.length = int(text)
        elif lower == "content-type":
            self.content_type = text
        self.headers.add(key, text)

    def on_headers_complete(self) -> None:
        self.complete = True
        # Read now: a head without a body completes the message, and llhttp resets its flags then.
        self.keep_alive = self.parser is not None and self.parser.should_keep_alive()


class FastLane(_Guarded):
    """One connection of the main listener: fast-lane requests are served here; the first other
    request and everything after it go to an aiohttp handler created at that moment (aiohttp's
    own idle timer must not run while the fast lane serves the connection)."""

    def __init__(self, guard: ConnectionGuard, header_timeout: float, lane: Lane) -> None:
        super().__init__(guard, None, header_timeout)
        self._lane = lane
        self._buf = bytearray()
        self._busy = False
        self._paused = False
        self._head_len = 0
        self._need = -1
        """Body bytes of the request whose head was read; -1 while reading a head."""
        self._headers: CIMultiDict[str] | None = None
        self._close = False
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
        self._buf += data
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
        elif not self._busy and self._buf:
            self._advance()
            self._bound()

    def _head_pending(self) -> bool:
        """A request head has begun and is not complete, and nothing is being served."""
        return self._need < 0 and bool(self._buf) and not self._busy and self._handler is None

    # -- for the drain
    def close_if_idle(self) -> None:
        """Close when idle after an answer; a connection that has not had its first request, or
        has part of a request, is left to finish it."""
        if self._served and not self._busy and not self._buf and self._transport is not None:
            self._transport.close()

    def close_if_silent(self) -> None:
        """Close when not a byte of a first request has come."""
        if not self._served and not self._busy and not self._buf and self._transport is not None:
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
        limit = AHEAD if self._busy else self._lane.limits().maxBodyBytes + MAX_HEAD
        with contextlib.suppress(Exception):
            if len(self._buf) > limit:
                transport.pause_reading()
            else:
                transport.resume_reading()

    def _advance(self) -> None:
        """Serve the next request in the buffer once it is complete; hand off one that is not ours."""
        if self._paused or self._transport is None:
            return
        buf = self._buf
        if self._need < 0:
            if len(buf) >= 5 and buf[:5] != b"POST ":
                self._hand_off()
                return
            end = buf.find(_END, 0, MAX_HEAD + 4)
            if end < 0:
                if len(buf) >= MAX_HEAD + 4 or buf.count(b"\n") != buf.count(b"\r\n"):
                    self._hand_off()  # too long, or a bare LF: aiohttp's parser decides at once
                return
            need = self._judge(bytes(buf[: end + 4]))
            if need is None:
                self._hand_off()
                return
            self._disarm()  # head complete: the body timeout takes over
            self._head_len = end + 4
            self._need = need
            if len(buf) < self._head_len + need:
                self._authenticate_early()
        total = self._head_len + self._need
        if len(buf) < total:
            self._arm_body()
            return
        self._cancel_body()
        if self._refused:  # answered from its head: its body frames nothing, the connection goes on
            del buf[:total]
            self._need, self._headers, self._refused, self._served = -1, None, False, True
            self._next()
            return
        body = bytes(buf[self._head_len : total])
        del buf[:total]
        self._need = -1
        headers, self._headers = self._headers, None
        assert headers is not None
        self._busy = True
        auth, self._auth = self._auth, None
        task = self._loop.create_task(self._serve(body, headers, self._close, auth))
        self._task = task

    def _judge(self, head: bytes) -> int | None:
        """The body length of a fast-lane request, or None: hand it to aiohttp. Anything unusual
        in the head is aiohttp's to answer (see :class:`_Head`; a missing ``Host`` too), so the
        fast lane never serves a request aiohttp would refuse."""
        parsed = _Head()
        parser = parsed.parser = httptools.HttpRequestParser(parsed)
        try:
            parser.feed_data(head)
        except (httptools.HttpParserError, httptools.HttpParserUpgrade):
            return None  # aiohttp answers 400 for it, or serves the upgrade request
        finally:
            parsed.parser = None
        if (
            parsed.refused
            or not parsed.complete
            or parsed.url != self._lane.target
            or parser.get_http_version() != "1.1"
            or "host" not in parsed.headers  # 400 from aiohttp (RFC 9112 §3.2)
        ):
            return None
        length = parsed.length
        if length < 0 or length > self._lane.limits().maxBodyBytes:
            return None  # aiohttp answers from the headers, without reading the body
        if parsed.content_type.split(";", 1)[0].strip().lower() != _JSON:
            return None  # 415 from aiohttp
        self._close = not parsed.keep_alive
        self._headers = parsed.headers
        return length

    def _hand_off(self) -> None:
        """From here on the connection is aiohttp's: its handler reads the buffered request from
        the first byte, and the header timer already running for that request stays."""
        self._cancel_body()
        self._cancel_idle()
        self._lane.connections.discard(self)
        self._lane.settle()
        transport = self._transport
        assert transport is not None
        self._handler = handler = self._guard.handler()
        handler.connection_made(transport)
        data, self._buf = bytes(self._buf), bytearray()
        with contextlib.suppress(Exception):
            transport.resume_reading()
        if self._paused:
            handler.pause_writing()
        if data:
            super().data_received(data)

    # -- serving
    def _authenticate_early(self) -> None:
        """The body is still on its way: authenticate from the head now, so a refused caller is
        answered without waiting for (or reading) a body it may never send (protocol §12)."""
        lane, transport, headers = self._lane, self._transport, self._headers
        if lane.authenticate is None or transport is None or headers is None:
            return
        task = self._loop.create_task(lane.authenticate(headers, lane.peer(transport)))
        self._auth = task
        task.add_done_callback(self._early_outcome)

    def _early_outcome(self, task: asyncio.Task[Principal | Refusal]) -> None:
        if self._auth is not task or task.cancelled() or task.exception() is not None:
            return  # dispatched already (the request awaits it), or gone; an error surfaces there
        outcome = task.result()
        if isinstance(outcome, Refusal):
            # Answered now, as aiohttp does; the body is then read and skipped (within the body
            # timeout) and the connection kept. Closing with the body in flight could reset the
            # connection before the client read its 401.
            self._auth = None
            close = self._lane.draining
            self._write(_refusal(outcome, close), close)
            self._refused = not close

    async def _serve(
        self, body: bytes, headers: CIMultiDict[str], close: bool, auth: asyncio.Task[Principal | Refusal] | None
    ) -> None:
        lane = self._lane
        try:
            principal = None
            if lane.authenticate is not None and self._transport is not None:
                outcome = await (auth if auth is not None else lane.authenticate(headers, lane.peer(self._transport)))
                if isinstance(outcome, Refusal):
                    close = close or lane.draining
                    self._write(_refusal(outcome, close), close)
                    return
                principal = outcome.as_cel() if outcome.authenticated else None
            answer = (await lane.handle(body, headers, principal)).answer
            close = close or lane.draining
            if answer is None:
                self._write(response(202, b"", None, close=close), close)
            else:
                self._write(response(200, answer, b"application/json", close=close), close)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("error while serving a request")
            self._write(response(500, b"500 Internal Server Error\n", _TEXT, close=True), True)
        finally:
            self._task = None
            self._busy = False
            self._served = True
            self._next()

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
        if self._buf:
            if self._timer is None and self._need < 0:
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
        text = (body_timeout_reason(self._lane.limits().bodyTimeoutMs / 1000) + "\n").encode()
        self._write(response(408, text, _TEXT, close=True), True)
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
        if self._busy or self._buf or self._need >= 0:
            return  # in use: the answer sets the timer again
        due = self._idle_since + self._lane.limits().idleTimeoutSeconds
        if self._loop.time() < due:
            self._idle_timer = self._loop.call_at(due, self._idle_expired)
        else:
            self.close()
