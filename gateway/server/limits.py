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

The guard reads three attributes of aiohttp's ``RequestHandler`` (``_waiter``, ``_messages``,
``_request_count``) to tell "waiting for a request" from "serving one", makes handlers from the
runner's ``Server`` (``_loop``, ``_kwargs``) and listens with a ``TCPSite``'s settings. A listener
checks that the installed aiohttp still has each of them before it accepts a connection
(:func:`missing_internals`) and refuses to start if one is gone: an aiohttp upgrade that renamed
one would otherwise lose a limit silently (a header timeout never re-armed, never disarmed). An
attribute that keeps its name but changes its meaning cannot be seen at start;
tests/test_slow_clients.py and tests/test_fastlane.py fail on it.

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
from http import HTTPStatus
from typing import Any, cast

import aiohttp
from aiohttp import StreamReader, web
from aiohttp.http_exceptions import HttpProcessingError
from aiohttp.web_protocol import RequestHandler, RequestPayloadError

from gateway.binding.rules import BodyRejected, Decoder, body_timeout_reason
from gateway.config.models import Limits

log = logging.getLogger("ahp_gateway")

FD_RESERVE = 256
"""Descriptors kept free for upstream connections, stdio children, log and policy files."""
_REFUSAL = b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
_TIMEOUT = b"HTTP/1.1 408 Request Timeout\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
Reporter = Callable[[str, str], None]
"""``report(listener, reason)``: a connection was closed by a limit (``limit``, ``header_timeout``)."""


_INTERNALS = {
    "RequestHandler": ("_waiter", "_messages", "_request_count"),
    "Server": ("_loop", "_kwargs"),
    "TCPSite": ("_runner", "_host", "_port", "_backlog", "_reuse_address", "_reuse_port", "_ssl_context", "_server"),
}
"""The private aiohttp attributes this module reads, by the class that has them."""


class IncompatibleAiohttp(RuntimeError):
    """The installed aiohttp lacks an internal the connection guard reads (see the module
    docstring): the gateway refuses to serve rather than serve without a limit."""

    def __init__(self, missing: list[str]) -> None:
        self.missing = missing
        super().__init__(
            f"aiohttp {aiohttp.__version__} is not supported: the connection limits read "
            f"{', '.join(missing)}, which it does not have; install an aiohttp release that has them"
        )


def missing_internals(site: object, server: object, handler: object | None) -> list[str]:
    """``Class.attribute`` of every internal in :data:`_INTERNALS` that the real objects lack
    (``handler`` None: none could be made, which the server's own missing internals explain)."""
    objects = {"RequestHandler": handler, "Server": server, "TCPSite": site}
    return [
        f"{cls}.{name}"
        for cls, names in _INTERNALS.items()
        if objects[cls] is not None
        for name in names
        if not hasattr(objects[cls], name)
    ]


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
    ``Authorization`` line, say). The answer names the status and the error class only, so no
    credential is ever echoed to a client (protocol §12)."""

    __slots__ = ()

    def handle_error(
        self, request: Any, status: int = 500, exc: BaseException | None = None, message: str | None = None
    ) -> Any:
        if status != 500:
            try:
                phrase = HTTPStatus(status).phrase
            except ValueError:
                phrase = "Error"
            message = f"{status} {phrase} ({exc.__class__.__name__ if exc is not None else 'malformed request'})\n"
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
        self.on_change: Callable[[int], None] | None = None
        self.fast: Callable[[float], asyncio.Protocol] | None = None
        """The main listener's fast lane (:mod:`gateway.server.fastlane`), given the header timeout."""

    def bind(self, server: Any) -> None:
        """``server`` is the runner's aiohttp ``Server`` (itself a protocol factory)."""
        self.server = server

    def handler(self) -> Any:
        """A new aiohttp request handler, whose error answers never quote the request (as the
        runner's ``Server`` makes its handlers, from its loop and handler arguments)."""
        server = self.server
        return _QuietHandler(server, loop=server._loop, **server._kwargs)

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


class _Guarded(asyncio.Protocol):
    """Forwards every protocol callback to aiohttp's handler; closes the connection when a
    request's headers are not complete within the header timeout."""

    def __init__(self, guard: ConnectionGuard, handler: Any, header_timeout: float) -> None:
        self._guard = guard
        self._handler = handler
        self._timeout = header_timeout
        self._timer: asyncio.TimerHandle | None = None
        self._transport: asyncio.Transport | None = None

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

    def _idle(self) -> bool:
        """aiohttp's handler is waiting for the next request (no request being read or served)."""
        handler = self._handler
        return getattr(handler, "_waiter", None) is not None and not getattr(handler, "_messages", None)

    # -- asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport = cast(asyncio.Transport, transport)
        self._transport = transport
        self._guard.count(1)
        self._arm()
        self._handler.connection_made(transport)

    def data_received(self, data: bytes) -> None:
        handler = self._handler
        starting = self._timer is None and self._idle()  # first bytes of a next request on a kept-alive connection
        before = getattr(handler, "_request_count", 0)
        handler.data_received(data)
        if getattr(handler, "_request_count", 0) != before:
            self._disarm()  # headers complete; the body timeout takes over
        elif starting:
            self._arm()

    def eof_received(self) -> bool | None:
        result: bool | None = self._handler.eof_received()
        return result

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        self._transport = None
        self._guard.count(-1)
        self._handler.connection_lost(exc)

    def pause_writing(self) -> None:
        self._handler.pause_writing()

    def resume_writing(self) -> None:
        self._handler.resume_writing()


class GuardedSite(web.TCPSite):
    """A TCP site whose connections go through a :class:`ConnectionGuard`."""

    def __init__(self, runner: web.BaseRunner, host: str, port: int, *, guard: ConnectionGuard, **kwargs: Any) -> None:
        super().__init__(runner, host, port, **kwargs)
        self.guard = guard

    async def start(self) -> None:
        server = getattr(getattr(self, "_runner", None), "server", None)
        self.guard.bind(server)
        makes_handlers = all(hasattr(server, name) for name in _INTERNALS["Server"])
        missing = missing_internals(self, server, self.guard.handler() if makes_handlers else None)
        if missing:
            raise IncompatibleAiohttp(missing)  # before the site registers with its runner
        await web.BaseSite.start(self)
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            self.guard,
            self._host,
            self._port,
            backlog=self._backlog,
            reuse_address=self._reuse_address,
            reuse_port=self._reuse_port,
            ssl=self._ssl_context,
        )

    def close_listener(self) -> None:
        """Stop accepting connections (the drain starts); ``stop`` still runs on cleanup."""
        if self._server is not None:
            self._server.close()

    @property
    def bound_port(self) -> int:
        server = self._server
        sockets = getattr(server, "sockets", None)
        return int(sockets[0].getsockname()[1]) if sockets else self._port


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
