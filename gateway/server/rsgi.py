"""Opt-in harness-facing listener on granian (``listen.server: granian``): the same HTTP binding
as :mod:`gateway.server.http` (AHP-HTTP-001) on granian's Rust HTTP server, embedded in the
gateway's own asyncio loop, so reload, drain, the admin listener and ``--workers`` (one
embedded server per worker process; granian binds with SO_REUSEPORT on Linux) work unchanged.

The binding, as in the aiohttp front end: POST only, ``Content-Type: application/json``, a body
over ``maxBodyBytes`` is refused with 413 from its Content-Length before a byte of it is read (a
chunked body as soon as the running count passes the limit; the connection is closed either
way); when the harness disconnects, the request's work is cancelled (upstream calls included).
What granian does not offer is listed in bench/README.md ("Front end on granian").
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping
from typing import Any

from gateway.pipeline.exchange import Exchange

log = logging.getLogger("ahp_gateway")

_JSON = "application/json"
_TEXT = [("content-type", "text/plain; charset=utf-8")]
_JSON_HEADERS = [("content-type", _JSON)]

Handle = Callable[[bytes, Mapping[str, str]], Awaitable[Exchange]]
"""The one call the front end makes: the JSON-RPC answer for a request body (sent with HTTP 200,
errors included), or None for a notification (HTTP 202, no body)."""


def _media_type(value: str | None) -> str:
    return (value or "").split(";", 1)[0].strip().lower()


class GatewayRsgi:
    """The RSGI application: bound the body, call ``handle``, write status and bytes."""

    def __init__(self, handle: Handle, path: str, max_body: Callable[[], int]) -> None:
        self._handle = handle
        self._path = path
        self._max_body = max_body

    async def __rsgi__(self, scope: Any, proto: Any) -> None:
        if scope.proto != "http":
            return
        if scope.path != self._path:
            proto.response_str(404, _TEXT, "404: Not Found")
            return
        if scope.method != "POST":
            proto.response_str(405, [*_TEXT, ("allow", "POST")], "405: Method Not Allowed")
            return
        headers = scope.headers
        if _media_type(headers.get("content-type")) != _JSON:
            proto.response_str(415, _TEXT, "AHP over HTTP requires Content-Type: application/json\n")
            return
        limit = self._max_body()
        declared = headers.get("content-length")
        length = 0
        if declared is not None:
            try:
                length = int(declared)
            except ValueError:
                proto.response_str(400, _TEXT, "invalid Content-Length\n")
                return
            if length > limit:
                proto.response_str(413, [*_TEXT, ("connection", "close")], f"body exceeds {limit} bytes\n")
                return
        body = await _read_bounded(proto, limit)
        if body is None:
            proto.response_str(413, [*_TEXT, ("connection", "close")], f"body exceeds {limit} bytes\n")
            return
        if declared is not None and len(body) != length:
            # granian ends the body stream without an error when the client stops sending early:
            # a truncated body must never be evaluated as if it were the request
            proto.response_str(400, [*_TEXT, ("connection", "close")], "body shorter than its Content-Length\n")
            return
        # The harness hanging up cancels this request's task, and with it every upstream call.
        task = asyncio.current_task()
        gone = asyncio.ensure_future(proto.client_disconnect())

        def hung_up(_: object) -> None:
            if task is not None:
                task.cancel()

        gone.add_done_callback(hung_up)
        try:
            payload = (await self._handle(body, _Headers(headers))).answer
        except asyncio.CancelledError:
            if gone.done() and not gone.cancelled():
                return  # nobody is left to answer
            raise
        finally:
            gone.remove_done_callback(hung_up)
            gone.cancel()
        if payload is None:
            proto.response_empty(202, [])
        else:
            proto.response_bytes(200, _JSON_HEADERS, payload)


class _Headers(Mapping[str, str]):
    """The request headers as a case-insensitive read-only mapping, without copying them
    (granian hands them over lower-cased)."""

    __slots__ = ("_raw",)

    def __init__(self, raw: Any) -> None:
        self._raw = raw

    def __getitem__(self, key: str) -> str:
        value = self._raw.get(key.lower())
        if value is None:
            raise KeyError(key)
        return str(value)

    def get(self, key: str, default: Any = None) -> Any:
        return self._raw.get(key.lower(), default)

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and key.lower() in self._raw

    def __iter__(self) -> Iterator[str]:
        return iter(self._raw.keys())

    def __len__(self) -> int:
        return len(self._raw.keys())


async def _read_bounded(proto: Any, limit: int) -> bytes | None:
    """The whole body, or None as soon as it exceeds ``limit`` bytes (never buffered beyond)."""
    chunks: list[bytes] = []
    size = 0
    async for chunk in proto:
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
    return b"".join(chunks)


class GranianListener:
    """granian's embedded server on the running loop; :meth:`stop` stops accepting, lets
    in-flight requests finish within ``drain_timeout`` seconds, then cancels what is left."""

    def __init__(self, app: GatewayRsgi, host: str, port: int, *, drain_timeout: float) -> None:
        try:
            from granian.constants import HTTPModes, Interfaces
            from granian.log import LogLevels
            from granian.server.embed import Server
        except ImportError:
            raise RuntimeError(
                "listen.server: granian needs the granian package (pip install 'ahp-gateway[granian]')"
            ) from None

        # granian's worker binds its own socket from the address, so an ephemeral port is
        # chosen here (tests); in production the configured port is used as is.
        self.host = host
        self.port = port or _free_port(host)
        self._drain_timeout = drain_timeout
        self._server: Any = Server(
            app,
            address=host,
            port=self.port,
            interface=Interfaces.RSGI,
            http=HTTPModes.http1,  # as the aiohttp front end: HTTP/1.1 only, no h2c surface
            websockets=False,
            backlog=1024,
            # granian logs to stdout by default, where the decision log goes: route its records
            # to the gateway's handlers instead, errors only (it warns "experimental" at start).
            log_level=LogLevels.error,
            log_dictconfig={"loggers": {"_granian": {"handlers": [], "propagate": True}}},
        )
        self._task: asyncio.Task[None] | None = None

    async def start(self, deadline: float = 10.0) -> None:
        self._task = asyncio.ensure_future(self._server.serve())
        end = time.monotonic() + deadline
        while not await _accepts(self.host, self.port):  # ready only once it accepts connections
            if self._task.done():
                self._task.result()  # raise the start-up error
                raise RuntimeError("granian stopped during start-up")
            if time.monotonic() > end:
                raise RuntimeError(f"granian did not listen on {self.host}:{self.port} within {deadline:.0f} s")
            await asyncio.sleep(0.01)

    async def stop(self) -> None:
        if self._task is None:
            return
        self._server.stop()
        try:
            await asyncio.wait_for(asyncio.shield(self._task), self._drain_timeout)
        except TimeoutError:
            log.warning("requests still running after %.1f s of drain; cancelling them", self._drain_timeout)
            for worker in list(self._server.wrks):
                worker.kill()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
        self._task = None


def _free_port(host: str) -> int:
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


async def _accepts(host: str, port: int) -> bool:
    try:
        _, writer = await asyncio.open_connection(host, port)
    except OSError:
        return False
    writer.close()
    with contextlib.suppress(OSError):
        await writer.wait_closed()
    return True


async def serve(
    handle: Handle, path: str, max_body: Callable[[], int], host: str, port: int, *, drain_timeout: float
) -> GranianListener:
    """Start the granian front end; the caller stops it with ``await listener.stop()``."""
    listener = GranianListener(GatewayRsgi(handle, path, max_body), host, port, drain_timeout=drain_timeout)
    await listener.start()
    return listener
