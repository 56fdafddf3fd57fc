"""Bare one-hop forwarders, the floors the gateway is measured against. Each reads the request
body, POSTs the bytes upstream with one pooled client, and returns the upstream's status and
bytes. No parsing, no validation.

Server stacks (``--server``):

- ``aiohttp``: ``aiohttp.web`` on uvloop (S1 with the aiohttp client; the gateway's stack today);
- ``granian``: granian's RSGI interface in worker mode (granian's own process supervisor, one
  worker process, Rust HTTP server, the Python handler on a uvloop loop in the worker);
- ``fastlane``: the gateway's own harness-facing server (:mod:`gateway.server.fastlane`, llhttp
  straight from the socket; anything it does not serve would go to aiohttp);
- ``granian-embed``: granian's embedded server (``granian.server.embed.Server``) started inside
  an asyncio (uvloop) loop this process owns, the way an application keeps its own lifecycle.

Upstream clients (``--client``): ``aiohttp`` (one ``ClientSession``), ``pyreqwest`` (one
``pyreqwest`` client, Rust reqwest/hyper) or ``h1`` (the gateway's own pooled HTTP/1.1 client on
httptools, :mod:`gateway.upstream.h1`).

    python -m bench.forwarder --port 9000 --upstream http://127.0.0.1:9001/ [--server S] [--client C]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
from collections.abc import Awaitable, Callable
from typing import Any

_JSON = "application/json"
_ENV_UPSTREAM = "BENCH_FORWARDER_UPSTREAM"
_ENV_CLIENT = "BENCH_FORWARDER_CLIENT"

Forward = Callable[[bytes], Awaitable[tuple[int, bytes]]]


def aiohttp_client(upstream: str) -> tuple[Forward, Callable[[], Awaitable[None]]]:
    import aiohttp

    session = aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=0, limit_per_host=256, keepalive_timeout=30.0),
        auto_decompress=False,
        skip_auto_headers=("User-Agent", "Accept-Encoding"),
    )
    headers = {"Content-Type": _JSON, "Accept": _JSON}

    async def forward(body: bytes) -> tuple[int, bytes]:
        async with session.post(upstream, data=body, headers=headers, allow_redirects=False) as response:
            return response.status, await response.read()

    return forward, session.close


def pyreqwest_client(upstream: str) -> tuple[Forward, Callable[[], Awaitable[None]]]:
    from pyreqwest.client import ClientBuilder

    client = (
        ClientBuilder()
        .follow_redirects(False)
        .gzip(False)
        .brotli(False)
        .zstd(False)
        .deflate(False)
        .pool_max_idle_per_host(256)
        .build()
    )
    headers = {"Content-Type": _JSON, "Accept": _JSON}

    async def forward(body: bytes) -> tuple[int, bytes]:
        response = await client.post(upstream).headers(headers).body_bytes(body).build().send()
        return response.status, bytes(await response.bytes())

    return forward, client.close


def h1_client(upstream: str) -> tuple[Forward, Callable[[], Awaitable[None]]]:
    """The gateway's own upstream client (``gateway.upstream.h1``)."""
    from gateway.upstream.h1 import H1Client, Target

    client = H1Client(limit_per_host=256, keepalive=30.0)
    target = Target(upstream, {"Content-Type": _JSON, "Accept": _JSON}, None)

    async def forward(body: bytes) -> tuple[int, bytes]:
        response = await client.post(target, b"", body, limit=64 * 1024 * 1024)
        return response.status, response.body or b""

    async def close() -> None:
        client.close()

    return forward, close


CLIENTS = {"aiohttp": aiohttp_client, "pyreqwest": pyreqwest_client, "h1": h1_client}


# ------------------------------------------------------------------------------------ aiohttp
async def serve_aiohttp(host: str, port: int, upstream: str, client: str) -> None:
    from aiohttp import web

    forward, close = CLIENTS[client](upstream)

    async def handle(request: web.Request) -> web.Response:
        status, answer = await forward(await request.read())
        if not answer:
            return web.Response(status=status)
        return web.Response(status=status, body=answer, content_type=_JSON)

    app = web.Application()
    app.router.add_post("/", handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, host, port, backlog=1024).start()
    await _wait_for_signal()
    await runner.cleanup()
    await close()


# ------------------------------------------------------------------------------------ fast lane
async def serve_fastlane(host: str, port: int, upstream: str, client: str) -> None:
    """The gateway's fast lane with no pipeline behind it: the bytes go straight upstream."""
    from aiohttp import web

    from gateway.config.models import Limits
    from gateway.pipeline.exchange import Exchange
    from gateway.server.fastlane import FastLane, Lane
    from gateway.server.limits import ConnectionGuard, ConnectionLimits

    forward, close = CLIENTS[client](upstream)

    async def handle(body: bytes, headers: Any, principal: Any) -> Exchange:
        _status, answer = await forward(body)
        return Exchange(answer or None)

    limits = Limits()
    lane = Lane("/", handle, lambda: limits)
    guard = ConnectionGuard("main", lambda: ConnectionLimits(limits.headerTimeoutMs / 1000, limits.maxConnections))
    guard.fast = lambda header_timeout: FastLane(guard, header_timeout, lane)

    async def other(request: web.BaseRequest) -> web.Response:
        return web.Response(status=404)

    guard.bind(web.Server(other), {})  # requests the fast lane hands off (none in the benchmark)
    server = await asyncio.get_running_loop().create_server(guard, host, port, backlog=1024)
    await _wait_for_signal()
    server.close()
    await close()


# ------------------------------------------------------------------------------------ granian
class RsgiForwarder:
    """The RSGI application; the client is built on the first request, inside the worker's
    running loop (aiohttp needs one)."""

    def __init__(self, upstream: str, client: str) -> None:
        self.upstream = upstream
        self.client = client
        self.forward: Forward | None = None
        self.close: Callable[[], Awaitable[None]] | None = None

    async def __rsgi__(self, scope: Any, proto: Any) -> None:
        if self.forward is None:
            self.forward, self.close = CLIENTS[self.client](self.upstream)
        status, answer = await self.forward(await proto())
        if not answer:
            proto.response_empty(status, [])
        else:
            proto.response_bytes(status, [("content-type", _JSON)], answer)


def rsgi_app() -> RsgiForwarder:
    """Factory for granian worker mode: the upstream and client come from the environment."""
    return RsgiForwarder(os.environ[_ENV_UPSTREAM], os.environ.get(_ENV_CLIENT, "pyreqwest"))


def serve_granian(host: str, port: int, upstream: str, client: str) -> None:
    from granian import Granian
    from granian.constants import Interfaces, Loops

    os.environ[_ENV_UPSTREAM] = upstream
    os.environ[_ENV_CLIENT] = client
    server = Granian(
        "bench.forwarder:rsgi_app",
        address=host,
        port=port,
        interface=Interfaces.RSGI,
        workers=1,
        loop=Loops.uvloop,
        backlog=1024,
        log_access=False,
        factory=True,
        websockets=False,
    )
    server.serve()


async def serve_granian_embedded(host: str, port: int, upstream: str, client: str) -> None:
    from granian.constants import Interfaces
    from granian.server.embed import Server

    server = Server(
        RsgiForwarder(upstream, client),
        address=host,
        port=port,
        interface=Interfaces.RSGI,
        backlog=1024,
        websockets=False,
    )
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, server.stop)
    await server.serve()


async def _wait_for_signal() -> None:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--upstream", required=True)
    parser.add_argument("--server", choices=("aiohttp", "fastlane", "granian", "granian-embed"), default="aiohttp")
    parser.add_argument("--client", choices=tuple(CLIENTS), default="aiohttp")
    args = parser.parse_args(argv)
    if args.server == "granian":
        serve_granian(args.host, args.port, args.upstream, args.client)
        return 0
    import uvloop

    uvloop.install()
    serve = {"aiohttp": serve_aiohttp, "fastlane": serve_fastlane}.get(args.server, serve_granian_embedded)
    asyncio.run(serve(args.host, args.port, args.upstream, args.client))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
