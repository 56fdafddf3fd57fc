"""The upstream HTTP/1.1 client of the hot path: one POST of bytes over pooled keep-alive
connections, parsed by httptools (llhttp, the parser of Node.js and uvicorn).

Why not aiohttp's client here: it cost about 95 µs of CPU per call, as much as the whole
pipeline (docs/design/performance.md, "HTTP layer A/B"). Why not pyreqwest: it cannot replace the trust store and
does not abort a cancelled call. This client keeps every guarantee of the HTTP binding:

- no redirects: a 3xx is an answer like any other, never followed;
- bounded answers: a ``Content-Length`` over the limit fails before a byte of the body is read,
  a body without one is counted as it arrives and fails the moment it passes the limit; a head
  is bounded on the wire as it arrives (an endless header line fails at once), and so is a
  body's framing (chunk extensions, trailers);
- only HTTP/1.x answers framed by ``Content-Length``, ``chunked`` or, over plain TCP, a clean
  close (a reset or, over TLS, any close cannot be told from a truncation);
- the TLS context of the endpoint (its own CA bundle replaces the platform trust store);
- a missed deadline or a cancellation (harness disconnect, a parallel deny) aborts the
  connection: the upstream sees the disconnect and the connection never returns to the pool;
- a connection is reused only after a complete answer the server agreed to keep alive, and is
  closed after ``keepalive`` seconds idle; at most ``limit_per_host`` connections per origin.

Header names and values are checked before anything is sent (no CR, LF or NUL: no header
injection from a credential or a trace header).
"""

from __future__ import annotations

import asyncio
import functools
import socket
import ssl
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

import httptools

from gateway.protocol import headers as header_syntax

MAX_HEADER_BYTES = 64 * 1024
"""Response header bytes accepted (names and values), like aiohttp's default field limits."""
MAX_HEAD_BYTES = MAX_HEADER_BYTES + 16 * 1024
"""Bytes a response head may take on the wire (status line, framing, names, values). Checked as
the bytes arrive: httptools buffers an unfinished line in Python, so an endless header field
would otherwise grow without bound until the deadline."""
FRAMING_ALLOWANCE = 2 * MAX_HEADER_BYTES
"""Bytes a body may take on the wire beyond twice the answer limit (chunk sizes, extensions,
trailers): what bounds an endless trailer or chunk extension, which never reach ``on_body``."""
KEPT_HEADERS = frozenset({b"content-length", b"transfer-encoding", b"www-authenticate"})
"""Response headers the gateway reads; the others are parsed and dropped."""


class AnswerTooLarge(Exception):
    """The answer's body is over the limit (announced or counted)."""


class ProtocolError(Exception):
    """The upstream's bytes are not an HTTP/1.1 response."""


@dataclass(frozen=True, slots=True)
class Response:
    status: int
    headers: Mapping[str, str]
    """Lower-case names, only :data:`KEPT_HEADERS`."""
    body: bytes | None
    """None when the caller did not want the body (an observe delivery)."""


def header_block(headers: Mapping[str, str]) -> bytes:
    """``Name: value\\r\\n`` lines, refused (ValueError, naming the header, never its value) if a
    name is not an HTTP token or a value holds CR, LF or NUL."""
    if type(headers) is header_syntax.HeaderLines:
        return headers.block
    lines = []
    for name, value in headers.items():
        if not header_syntax.NAME.fullmatch(name):
            raise ValueError(f"invalid header name {name!r}")
        if header_syntax.BAD_VALUE.search(value):
            raise ValueError(f"invalid value for header {name}")
        lines.append(f"{name}: {value}\r\n")
    return "".join(lines).encode("utf-8")


OriginKey = tuple[str, int, ssl.SSLContext | None]


@functools.cache
def default_tls() -> ssl.SSLContext:
    """The platform trust store, loaded once per process (an upstream without ``caFile``)."""
    return ssl.create_default_context()


class Target:
    """Where and how one upstream is posted to: its origin and its request head up to the
    per-call headers (request line, Host and the static headers), built once."""

    __slots__ = ("head", "host", "key", "port", "ssl")

    def __init__(self, url: str, headers: Mapping[str, str], ssl_context: ssl.SSLContext | None) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError("upstream URL must be http(s)://host[:port]/path")
        self.host = parts.hostname
        secure = parts.scheme == "https"
        self.port = parts.port or (443 if secure else 80)
        self.ssl = (ssl_context or default_tls()) if secure else None
        default = self.port == (443 if secure else 80)
        name = f"[{self.host}]" if ":" in self.host else self.host
        authority = name if default else f"{name}:{self.port}"
        path = parts.path or "/"
        if parts.query:
            path += "?" + parts.query
        if header_syntax.BAD_VALUE.search(path) or " " in path:
            raise ValueError("invalid upstream URL path")
        self.head = f"POST {path} HTTP/1.1\r\nHost: {authority}\r\n".encode() + header_block(headers)
        self.key: OriginKey = (self.host, self.port, self.ssl)
        """The context itself, not its id: a pooled connection is reused only under the trust it
        was verified with (an id can be reused by a later context with another CA)."""


def _time_out(answer: asyncio.Future[Response]) -> None:
    if not answer.done():
        answer.set_exception(TimeoutError())


class _Connection(asyncio.Protocol):
    """One connection and the answer in flight on it (at most one: no pipelining)."""

    def __init__(self, origin: _Origin) -> None:
        self.origin = origin
        self.loop = asyncio.get_running_loop()
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.waiter: asyncio.Future[Response] | None = None
        self.limit = 0
        self.want_body = True
        self.lost = False
        self.complete = False
        self.idle: asyncio.TimerHandle | None = None
        """The idle-expiry timer; it may outlive an idle period and re-checks ``idle_since``."""
        self.idle_since = 0.0
        self.in_head = True
        """Bytes fed now belong to a response head (:data:`MAX_HEAD_BYTES` applies)."""
        self.fed = 0
        """Bytes fed to the parser for the current head, or for the body after it."""
        self._reset()

    def _reset(self) -> None:
        self.headers: dict[str, str] = {}
        self.header_bytes = 0
        self.chunks: list[bytes] = []
        self.size = 0
        self.until_close = False
        self.interim = False
        self.keep_alive = False

    # ---------------------------------------------------------------- asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's is not an asyncio.Transport subclass
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # one write per request: no Nagle wait

    def data_received(self, data: bytes) -> None:
        if self.waiter is None or self.complete:
            self.abort()  # bytes nobody asked for: the stream can no longer frame an answer
            return
        try:
            if self.in_head and len(data) <= MAX_HEAD_BYTES - self.fed:  # the usual case: a whole answer
                self.fed += len(data)
                self.parser.feed_data(data)
            else:
                self._feed(data)
        except httptools.HttpParserUpgrade:
            self._fail(ProtocolError("upgrade in an answer"))
        except httptools.HttpParserError as exc:
            raised = exc.__context__  # what one of the callbacks below raised, if one did
            if isinstance(raised, (AnswerTooLarge, ProtocolError)):
                self._fail(raised)
            else:
                self._fail(ProtocolError(str(exc) or exc.__class__.__name__))
        except (AnswerTooLarge, ProtocolError) as exc:
            self._fail(exc)

    def _head_open(self) -> bool:
        """Whether a head is still being read (the parser's callbacks change it while it runs)."""
        return self.in_head

    def _feed(self, data: bytes) -> None:
        """Feed ``data`` within the wire budgets: a head gets :data:`MAX_HEAD_BYTES` (a chunk
        that holds more is fed up to the budget first, so a head that ended within it goes on
        to its body or to the next head after a 1xx), a body twice the answer limit plus
        :data:`FRAMING_ALLOWANCE`. A head that begins inside a chunk counts from the next chunk,
        so one head holds at most twice its budget."""
        while self.in_head:
            room = MAX_HEAD_BYTES - self.fed
            if len(data) <= room:
                self.fed += len(data)
                self.parser.feed_data(data)
                return
            part, data = data[:room], data[room:]
            self.fed = MAX_HEAD_BYTES  # spent, unless a head completes within ``part`` (fed = 0)
            self.parser.feed_data(part)
            if self.fed == MAX_HEAD_BYTES and self._head_open():
                raise ProtocolError("answer headers too large")
        self.fed += len(data)
        if self.fed > 2 * self.limit + FRAMING_ALLOWANCE:
            raise AnswerTooLarge(f"answer framing over {2 * self.limit + FRAMING_ALLOWANCE} bytes")
        self.parser.feed_data(data)

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        if self.idle is not None:
            self.idle.cancel()
            self.idle = None
        self.origin.discard(self)  # if it was in the pool
        if self.waiter is not None and not self.complete:
            if self.until_close and not self.interim and exc is None:
                self._finish()  # a body delimited by a clean end of the connection (RFC 9112 §6.3)
            else:
                self._fail(ConnectionResetError("upstream closed the connection"))

    # ---------------------------------------------------------------- httptools callbacks
    def on_message_begin(self) -> None:
        if self.complete:
            raise ProtocolError("bytes after the answer")  # no pipelining: the stream is out of step
        self._reset()

    def on_header(self, name: bytes, value: bytes) -> None:
        self.header_bytes += len(name) + len(value)
        if self.header_bytes > MAX_HEADER_BYTES:
            raise ProtocolError("answer headers too large")
        lower = name.lower()
        if lower in KEPT_HEADERS:
            key = lower.decode("latin-1")
            text = value.decode("latin-1")
            self.headers[key] = f"{self.headers[key]}, {text}" if key in self.headers else text

    def on_headers_complete(self) -> None:
        status = self.parser.get_status_code()
        if status < 100 or self.parser.get_http_version() not in ("1.1", "1.0"):
            raise ProtocolError("not an HTTP/1.1 response")
        self.fed = 0
        if status < 200:
            self.interim = True  # 1xx: informational, the answer follows on the same stream
            return  # and its head, too, within the head budget
        self.in_head = False
        if status != 200:
            self.want_body = False  # only a 200 carries an AHP answer; others end at the headers
        length = self.headers.get("content-length")
        coding = self.headers.get("transfer-encoding")
        if coding is not None and coding.strip(" \t").lower() != "chunked":
            raise ProtocolError("a transfer coding other than chunked")  # none was offered (RFC 9112 §7)
        if length is not None:
            length = length.strip(" \t")  # optional whitespace around the value (RFC 9110 §5.5)
            if not length.isdigit():
                raise ProtocolError("invalid Content-Length")
            if self.want_body and int(length) > self.limit:
                raise AnswerTooLarge(f"answer of {int(length)} bytes")
        elif coding is None and status not in (204, 304):
            if self.want_body and self.origin.ssl is not None:
                # asyncio reports a TCP close without TLS's closure alert as a clean end, so a
                # truncated answer could not be told from a whole one (RFC 9112 §9.8).
                raise ProtocolError("an answer delimited by the connection's end over TLS")
            self.until_close = True
        if not self.want_body:
            self._resolve(Response(status, self.headers, None))

    def on_body(self, body: bytes) -> None:
        if not self.want_body:
            return  # an observe answer is never read; the connection is dropped unless it ended
        self.size += len(body)
        if self.size > self.limit:
            raise AnswerTooLarge(f"answer over {self.limit} bytes")
        self.chunks.append(body)

    def on_message_complete(self) -> None:
        if self.interim:
            self.interim = False
            return
        self.keep_alive = self.parser.should_keep_alive()  # llhttp forgets it once the callback returns
        self._finish()

    # ---------------------------------------------------------------- the exchange
    def send(self, data: bytes, limit: int, want_body: bool) -> asyncio.Future[Response]:
        assert self.transport is not None
        self.waiter = self.loop.create_future()
        self.limit, self.want_body, self.complete = limit, want_body, False  # the rest: on_message_begin
        self.in_head, self.fed = True, 0
        self.transport.write(data)
        return self.waiter

    def _finish(self) -> None:
        self.complete = True
        if self.want_body:
            self._resolve(Response(self.parser.get_status_code(), self.headers, b"".join(self.chunks)))

    def _resolve(self, response: Response) -> None:
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_result(response)

    def _fail(self, exc: Exception) -> None:
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_exception(exc)
        self.abort()

    def reusable(self) -> bool:
        return self.complete and self.keep_alive and not self.lost

    def abort(self) -> None:
        self.lost = True
        if self.transport is not None:
            self.transport.abort()


class _Origin:
    """The connections to one origin (host, port, TLS context): idle ones (last used first) and
    a count bounded by ``limit``; callers over the limit wait in order."""

    def __init__(
        self, target: Target, limit: int, keepalive: float, forget: Callable[[_Origin], None] | None = None
    ) -> None:
        self.host, self.port, self.ssl = target.host, target.port, target.ssl
        self.key = target.key
        self._forget = forget
        """Called once the origin holds no connection and no waiter (after a reload, the old
        TLS contexts' origins would otherwise stay in the client's table)."""
        self.limit = limit
        self.keepalive = keepalive
        self.idle: list[_Connection] = []
        self.count = 0
        self.waiters: deque[asyncio.Future[_Connection | None]] = deque()

    def take_idle(self) -> _Connection | None:
        """A pooled connection that is still open, if there is one (last used first)."""
        while self.idle:
            conn = self.idle.pop()  # its idle timer stays; it re-checks when it fires
            if not conn.lost:
                return conn
            if conn.idle is not None:
                conn.idle.cancel()
                conn.idle = None
            self.count -= 1
        return None

    async def acquire(self) -> _Connection:
        conn = self.take_idle()
        if conn is not None:
            return conn
        if self.count >= self.limit:
            waiter: asyncio.Future[_Connection | None] = asyncio.get_running_loop().create_future()
            self.waiters.append(waiter)
            try:
                handed = await waiter
            except asyncio.CancelledError:
                if waiter.done() and not waiter.cancelled():
                    self._pass_on(waiter.result())  # handed over as we were cancelled: pass it on
                raise
            if handed is not None:
                return handed
            # a slot was freed for us (count already holds it)
        else:
            self.count += 1
        try:
            loop = asyncio.get_running_loop()
            _, conn = await loop.create_connection(
                lambda: _Connection(self),
                self.host,
                self.port,
                ssl=self.ssl,
                server_hostname=self.host if self.ssl is not None else None,
            )
        except BaseException:
            self._pass_on(None)
            raise
        return conn

    def release(self, conn: _Connection) -> None:
        """A connection after its exchange: kept for reuse if it can be, else closed."""
        conn.waiter = None
        if not conn.reusable():
            conn.abort()
            self._pass_on(None)
            return
        if self._hand_over(conn):
            return
        conn.idle_since = conn.loop.time()
        if conn.idle is None:  # one timer per idle period, not per request
            conn.idle = conn.loop.call_at(conn.idle_since + self.keepalive, self._expire, conn)
        self.idle.append(conn)

    def discard(self, conn: _Connection) -> None:
        """An idle connection the server closed."""
        if conn in self.idle:
            self.idle.remove(conn)
            self._pass_on(None)

    def _expire(self, conn: _Connection) -> None:
        conn.idle = None
        if conn not in self.idle:
            return  # in use: its release sets the timer again
        due = conn.idle_since + self.keepalive
        if conn.loop.time() < due:
            conn.idle = conn.loop.call_at(due, self._expire, conn)  # used since: the rest of the period
            return
        self.idle.remove(conn)
        conn.abort()
        self._pass_on(None)

    def _hand_over(self, conn: _Connection) -> bool:
        while self.waiters:
            waiter = self.waiters.popleft()
            if not waiter.done():
                waiter.set_result(conn)
                return True
        return False

    def _pass_on(self, conn: _Connection | None) -> None:
        """A connection (or, with None, a slot) given back: to the next waiter, else the pool."""
        if conn is not None:
            self.release(conn)
            return
        while self.waiters:
            waiter = self.waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)  # the slot moves to the waiter: count unchanged
                return
        self.count -= 1
        if self.count == 0 and self._forget is not None:
            self._forget(self)

    def close(self) -> None:
        for conn in self.idle:
            if conn.idle is not None:
                conn.idle.cancel()
            conn.abort()
        self.idle.clear()


class H1Client:
    """Pooled HTTP/1.1 POSTs, one pool of connections per origin."""

    def __init__(self, *, limit_per_host: int = 256, keepalive: float = 30.0) -> None:
        self._limit = limit_per_host
        self._keepalive = keepalive
        self._origins: dict[OriginKey, _Origin] = {}

    async def post(
        self,
        target: Target,
        headers: bytes,
        body: bytes,
        *,
        limit: int,
        want_body: bool = True,
        deadline: float | None = None,
    ) -> Response:
        """POST ``body`` with the target's head plus ``headers`` (a :func:`header_block`).
        The body of the answer is read (within ``limit``) only for a 200 when ``want_body``;
        any other answer resolves at its headers, and its connection is dropped unless the
        answer had ended. ``deadline`` (loop time) bounds the whole exchange, a connect
        included: TimeoutError, and the connection is dropped. Raises OSError (connect, TLS,
        reset), :class:`AnswerTooLarge`, :class:`ProtocolError`."""
        origin = self._origins.get(target.key)
        if origin is None:
            origin = self._origins[target.key] = _Origin(target, self._limit, self._keepalive, self._forget)
        conn = origin.take_idle()
        if conn is None:
            if deadline is None:
                conn = await origin.acquire()
            else:
                async with asyncio.timeout_at(deadline):  # a connect or a wait for a free slot
                    conn = await origin.acquire()
        try:
            data = b"".join((target.head, headers, b"Content-Length: %d\r\n\r\n" % len(body), body))
            answer = conn.send(data, limit, want_body)
            if deadline is None:
                return await answer
            # A timer on the answer itself: asyncio.timeout's task bookkeeping costs more than
            # the rest of this call; the answer fails with TimeoutError, nothing is cancelled.
            timer = conn.loop.call_at(deadline, _time_out, answer)
            try:
                return await answer
            finally:
                timer.cancel()
        finally:
            origin.release(conn)  # aborted unless the answer completed and may be kept alive

    def pool(self) -> dict[OriginKey, tuple[int, int]]:
        """Per origin the client holds: (connections open, idle ones). An origin with no
        connection and no waiter is forgotten, so it is not listed."""
        return {key: (origin.count, len(origin.idle)) for key, origin in self._origins.items()}

    def _forget(self, origin: _Origin) -> None:
        if self._origins.get(origin.key) is origin:
            del self._origins[origin.key]

    def close(self) -> None:
        for origin in list(self._origins.values()):
            origin.close()
        self._origins.clear()
