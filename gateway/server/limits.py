"""Connection limits for the gateway's listeners: slow or greedy clients cannot exhaust it.

aiohttp bounds how long a connection may sit idle (``keepalive_timeout``) but not how long a
client may take to send its request headers, so a client dripping one header byte at a time held
a file descriptor for minutes, and enough of them starved both listeners. Here:

- **header timeout**: from the moment a connection is accepted, or the first byte of a later
  request on a kept-alive connection, the request headers must be complete within
  ``headerTimeoutMs``; bytes that trickle in do not extend it. Enforced at the protocol level
  (:class:`ConnectionGuard` wraps aiohttp's request handler), before aiohttp sees a request.
- **body timeout**: the whole body must arrive within ``bodyTimeoutMs`` of the headers
  (:func:`read_body`, used by the harness-facing handler; 408 and the connection closes).
- **idle timeout**: aiohttp's keep-alive timeout, from ``idleTimeoutSeconds``.
- **connection cap**: each listener has its own; a connection over the cap gets a bare 503 and is
  closed at once. The main listener's cap is clamped below the process's file-descriptor limit
  with a reserve for the admin listener and for upstream connections, so ``/healthz`` and
  ``/metrics`` keep answering while the main listener is flooded.

The guard reads no private attribute of aiohttp: it watches the bytes it passes to aiohttp's
request handler with its own llhttp parser (a request's first byte arms the header timer, its
complete head disarms it), makes handlers for the runner's public ``Server`` with the handler
options the gateway chose, and listens with ``loop.create_server`` (:class:`GuardedSite`).

:func:`read_body` reads an aiohttp request body within the body timeout and ``maxBodyBytes``,
decoding a content coding with :class:`gateway.binding.rules.Decoder` (limit on the decoded size).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import resource
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

import httptools
from aiohttp import StreamReader, hdrs, web
from aiohttp.http_exceptions import HttpProcessingError
from aiohttp.web_protocol import RequestHandler, RequestPayloadError

from gateway.binding.rules import BodyRejected, Decoder, body_timeout_reason, malformed
from gateway.config.models import Limits

log = logging.getLogger("ahp_gateway")

FD_RESERVE = 256
"""Descriptors kept free for upstream connections, stdio children, log and policy files."""
_REFUSAL = b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
_TIMEOUT = b"HTTP/1.1 408 Request Timeout\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
Reporter = Callable[[str, str], None]
"""``report(listener, reason)``: a connection was closed by a limit (``limit``, ``header_timeout``)."""


@dataclass(frozen=True, slots=True)
class ConnectionLimits:
    header_timeout: float
    """Seconds for the request line and headers."""
    max_connections: int


def descriptor_limit() -> int:
    """The soft RLIMIT_NOFILE of this process (a large number when unlimited)."""
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    return soft if soft != resource.RLIM_INFINITY else 1 << 20


@functools.lru_cache(maxsize=8)
def clamp_main_cap(configured: int, admin_cap: int, fd_limit: int | None = None) -> int:
    """The main listener's cap: never so high that accepted sockets can use the descriptors the
    admin listener and upstream calls need."""
    fd_limit = descriptor_limit() if fd_limit is None else fd_limit
    room = fd_limit - admin_cap - FD_RESERVE
    if configured > room:
        clamped = max(1, room)
        log.warning(
            "limits.maxConnections=%d exceeds what %d file descriptors allow; using %d", configured, fd_limit, clamped
        )
        return clamped
    return configured


class _ClientErrors(logging.Filter):
    """aiohttp logs every malformed request at ERROR with a traceback quoting the offending
    bytes, which may be an ``Authorization`` header: a client can flood the log or make it
    record a secret. Such records become one DEBUG line naming only the error class."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if not isinstance(exc, HttpProcessingError):
            return True
        record.msg, record.args = "malformed HTTP request rejected (%s)", (exc.__class__.__name__,)
        record.exc_info, record.exc_text = None, None
        record.levelno, record.levelname = logging.DEBUG, "DEBUG"
        return HTTP_LOG.isEnabledFor(logging.DEBUG)


HTTP_LOG = logging.getLogger("ahp_gateway.http")
HTTP_LOG.addFilter(_ClientErrors())


class _QuietHandler(RequestHandler):
    """aiohttp's request handler, except that an error answer never quotes the request: aiohttp
    answers a malformed request with its parser's message, which holds the offending bytes (an
    ``Authorization`` line, say). The answer is :func:`gateway.binding.rules.malformed`, the same
    text the fast lane's reader answers with: the status only, so no credential is ever echoed to
    a client (protocol §12); the error class goes to the DEBUG log (:class:`_ClientErrors`)."""

    __slots__ = ()

    def handle_error(
        self, request: Any, status: int = 500, exc: BaseException | None = None, message: str | None = None
    ) -> Any:
        if status != 500:
            message = malformed(status).body.decode()  # as the fast lane's reader answers
        return super().handle_error(request, status, exc, message)


class ConnectionGuard:
    """A protocol factory for ``loop.create_server``: wraps each aiohttp request handler in a
    :class:`_Guarded` protocol that enforces the header timeout, and refuses connections over the cap.

    ``settings`` is called per connection, so a reload changes the limits for new connections.
    """

    def __init__(self, listener: str, settings: Callable[[], ConnectionLimits], report: Reporter | None = None) -> None:
        self.listener = listener
        self.settings = settings
        self.report = report
        self.open = 0
        self.server: Any = None
        self.options: dict[str, Any] = {}
        self.on_change: Callable[[int], None] | None = None
        self.fast: Callable[[float], asyncio.Protocol] | None = None
        """The main listener's fast lane (:mod:`gateway.server.fastlane`), given the header timeout."""

    def bind(self, server: web.Server, options: dict[str, Any]) -> None:
        """``server`` is the runner's aiohttp ``Server`` (itself a protocol factory); ``options``
        the request-handler options the runner was given (:meth:`Listeners.runner_options`)."""
        self.server = server
        self.options = options

    def handler(self) -> Any:
        """A new aiohttp request handler, whose error answers never quote the request."""
        return _QuietHandler(self.server, loop=asyncio.get_running_loop(), **self.options)

    def __call__(self) -> asyncio.Protocol:
        limits = self.settings()
        if self.open >= limits.max_connections:
            return _Refused(self)
        if self.fast is not None:
            return self.fast(limits.header_timeout)
        return _Guarded(self, self.handler(), limits.header_timeout)

    def closed_by_limit(self, reason: str) -> None:
        if self.report is not None:
            self.report(self.listener, reason)

    def count(self, delta: int) -> None:
        self.open += delta
        if self.on_change is not None:
            self.on_change(self.open)


class Listeners:
    """The two guards of one gateway process and the aiohttp runner options that go with them.

    ``limits`` returns the live ``limits`` block, so a reload applies to new connections (the
    idle timeout is fixed when the listener starts). ``metrics`` (optional) receives the counts.
    """

    def __init__(self, limits: Callable[[], Limits], metrics: Any | None = None) -> None:
        self._limits = limits
        self._metrics = metrics
        report = self._report if metrics is not None else None
        self.main = ConnectionGuard("main", self._main, report)
        self.admin = ConnectionGuard("admin", self._admin, report)
        if metrics is not None:
            for guard in (self.main, self.admin):
                gauge = metrics.child(metrics.connections_open, guard.listener)
                gauge.set(0)
                guard.on_change = gauge.set
                metrics.child(metrics.connections_closed, guard.listener, "limit")
                metrics.child(metrics.connections_closed, guard.listener, "header_timeout")
            metrics.child(metrics.connections_closed, "main", "body_timeout")

    def _main(self) -> ConnectionLimits:
        cfg = self._limits()
        cap = clamp_main_cap(cfg.maxConnections, cfg.adminMaxConnections)
        return ConnectionLimits(cfg.headerTimeoutMs / 1000, cap)

    def _admin(self) -> ConnectionLimits:
        cfg = self._limits()
        return ConnectionLimits(cfg.headerTimeoutMs / 1000, cfg.adminMaxConnections)

    def _report(self, listener: str, reason: str) -> None:
        metrics = self._metrics
        assert metrics is not None
        metrics.child(metrics.connections_closed, listener, reason).inc()

    def body_timeout(self) -> None:
        if self._metrics is not None:
            self._report("main", "body_timeout")

    def runner_options(self, *, main: bool) -> dict[str, Any]:
        """``web.AppRunner`` keyword arguments: the idle timeout, a lingering close bounded by the
        body timeout, and (main listener) no transparent decompression: :func:`read_body`
        decodes with the limit applied to the decoded size."""
        cfg = self._limits()
        options: dict[str, Any] = {
            "access_log": None,
            "logger": HTTP_LOG,
            "keepalive_timeout": cfg.idleTimeoutSeconds,
            "lingering_time": min(10.0, cfg.bodyTimeoutMs / 1000),
        }
        if main:
            options["auto_decompress"] = False
        return options


class _Refused(asyncio.Protocol):
    """Over the cap: a bare 503 and close, without ever reading the request."""

    def __init__(self, guard: ConnectionGuard) -> None:
        self._guard = guard

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport = cast(asyncio.Transport, transport)  # uvloop's transports are not subclasses
        with contextlib.suppress(Exception):
            transport.write(_REFUSAL)
        transport.close()
        self._guard.closed_by_limit("limit")


class _HeadWatch:
    """llhttp callbacks over the bytes passed to aiohttp: a request's first byte arms the header
    timer (unless it runs already: a connection's first request is timed from the accept), its
    complete head disarms it."""

    __slots__ = ("guarded",)

    def __init__(self, guarded: _Guarded) -> None:
        self.guarded = guarded

    def on_message_begin(self) -> None:
        if self.guarded._timer is None:
            self.guarded._arm()

    def on_headers_complete(self) -> None:
        self.guarded._disarm()  # the body timeout takes over


class _Guarded(asyncio.Protocol):
    """Forwards every protocol callback to aiohttp's handler; closes the connection when a
    request's headers are not complete within the header timeout."""

    def __init__(self, guard: ConnectionGuard, handler: Any, header_timeout: float) -> None:
        self._guard = guard
        self._handler = handler
        self._timeout = header_timeout
        self._timer: asyncio.TimerHandle | None = None
        self._transport: asyncio.Transport | None = None
        self._watch: httptools.HttpRequestParser | None = None
        """Parses what aiohttp is given, for the header timer (made at the first bytes)."""
        self._watching = True

    # -- header timer
    def _arm(self) -> None:
        self._timer = asyncio.get_running_loop().call_later(self._timeout, self._expired)

    def _disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _expired(self) -> None:
        self._timer = None
        transport = self._transport
        if transport is not None and not transport.is_closing():
            with contextlib.suppress(Exception):
                transport.write(_TIMEOUT)
            transport.close()
            self._guard.closed_by_limit("header_timeout")

    # -- asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport = cast(asyncio.Transport, transport)
        self._transport = transport
        self._guard.count(1)
        self._arm()
        self._handler.connection_made(transport)

    def data_received(self, data: bytes) -> None:
        if self._watching:
            watch = self._watch
            if watch is None:
                watch = self._watch = httptools.HttpRequestParser(_HeadWatch(self))
            try:
                watch.feed_data(data)
            except (httptools.HttpParserError, httptools.HttpParserUpgrade):
                # aiohttp answers 400 and closes, or serves the upgrade: nothing more to time.
                self._watching, self._watch = False, None
        self._handler.data_received(data)

    def eof_received(self) -> bool | None:
        result: bool | None = self._handler.eof_received()
        return result

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        self._transport = None
        self._watch = None
        self._guard.count(-1)
        self._handler.connection_lost(exc)

    def pause_writing(self) -> None:
        self._handler.pause_writing()

    def resume_writing(self) -> None:
        self._handler.resume_writing()


class GuardedSite:
    """The listener of a runner, with ``loop.create_server``: its connections go through a
    :class:`ConnectionGuard`, which makes aiohttp handlers for the runner's ``Server``."""

    def __init__(
        self,
        runner: web.BaseRunner,
        host: str,
        port: int,
        *,
        guard: ConnectionGuard,
        options: dict[str, Any],
        backlog: int = 128,
        reuse_port: bool | None = None,
        ssl_context: Any = None,
    ) -> None:
        self.runner = runner
        self.host = host
        self.port = port
        self.guard = guard
        self.options = options
        self.backlog = backlog
        self.reuse_port = reuse_port
        self.ssl_context = ssl_context
        self.listener: asyncio.Server | None = None

    async def start(self) -> None:
        server = self.runner.server
        assert server is not None, "runner.setup() first"
        self.guard.bind(server, self.options)
        self.listener = await asyncio.get_running_loop().create_server(
            self.guard, self.host, self.port, backlog=self.backlog, reuse_port=self.reuse_port, ssl=self.ssl_context
        )

    def close_listener(self) -> None:
        """Stop accepting connections (the drain starts); the runner's cleanup closes the rest."""
        if self.listener is not None:
            self.listener.close()

    @property
    def bound_port(self) -> int:
        sockets = self.listener.sockets if self.listener is not None else ()
        return int(sockets[0].getsockname()[1]) if sockets else self.port


# ---------------------------------------------------------------------------------------------
# Request bodies


async def read_body(stream: StreamReader, *, limit: int, coding: str | None, timeout: float) -> bytes:
    """The request body, decoded, at most ``limit`` bytes on the wire and after decoding, read
    within ``timeout`` seconds; otherwise :class:`BodyRejected`."""
    if coding is None and stream.is_eof():
        # The whole body is already buffered (the common case for a hook request): nothing to
        # wait for, so no timer; the size is checked on what arrived.
        try:
            body = await stream.read()
        except RequestPayloadError:
            raise BodyRejected(400, "malformed request body framing") from None
        if len(body) > limit:
            raise BodyRejected(413, f"body exceeds {limit} bytes")
        return body
    decoder = Decoder(coding, limit) if coding is not None else None
    chunks: list[bytes] = []
    size = 0
    try:
        async with asyncio.timeout(timeout):
            async for chunk in stream.iter_chunked(65536):
                size += len(chunk)
                if size > limit:
                    raise BodyRejected(413, f"body exceeds {limit} bytes")
                if decoder is not None:
                    decoder.feed(chunk)
                else:
                    chunks.append(chunk)
    except TimeoutError:
        raise BodyRejected(408, body_timeout_reason(timeout)) from None
    except RequestPayloadError:
        raise BodyRejected(400, "malformed request body framing") from None
    return decoder.finish() if decoder is not None else b"".join(chunks)


SERVER = "ahp-gateway"
"""The ``Server`` header of every aiohttp answer: aiohttp's default names Python's and its own
version, which tells an attacker which known flaws to try."""


def without_versions(app: web.Application) -> web.Application:
    """``app`` with ``Server: ahp-gateway`` on every answer (the fast lane sends no ``Server``)."""

    async def name_only(_request: web.Request, response: web.StreamResponse) -> None:
        response.headers[hdrs.SERVER] = SERVER

    app.on_response_prepare.append(name_only)
    return app
