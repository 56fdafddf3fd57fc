"""Minimal AHP upstream stub: answers every ``hooks/intercept`` with no effects and every
``hooks/observe`` notification with 202.

The answer for the benchmark's fixed event id is precomputed; any other id is parsed and echoed.
``--no-read`` (aiohttp) answers every POST with the fixed no-effect answer without reading the
request (the reference for the local-policy target). ``GET /stats`` returns the counts of intercepts and observations received (used to check that
observe fan-out really delivered). ``--delay-ms`` delays every intercept answer.

Two implementations: ``aiohttp`` (default; the same server stack as the gateway) and ``raw``
(a bare asyncio protocol, for a cheaper upstream when the stub's own CPU use matters).

    python -m bench.stub --port 9001 [--delay-ms 20] [--impl aiohttp|raw]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
from typing import Any

from bench.payloads import EVENT_ID, stub_answer

FIXED_PREFIX = b'{"jsonrpc":"2.0","id":' + json.dumps(EVENT_ID).encode() + b","
FIXED_ANSWER = stub_answer(EVENT_ID)


class Counters:
    def __init__(self) -> None:
        self.intercept = 0
        self.observe = 0
        self.other = 0

    def as_json(self) -> bytes:
        return json.dumps({"intercept": self.intercept, "observe": self.observe, "other": self.other}).encode()


def classify(body: bytes, counters: Counters) -> bytes | None:
    """The answer body for an intercept, or None for a notification (202)."""
    if body.startswith(FIXED_PREFIX):
        counters.intercept += 1
        return FIXED_ANSWER
    try:
        message: Any = json.loads(body)
    except ValueError:
        counters.other += 1
        return b'{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"Parse error"}}'
    if not isinstance(message, dict) or "id" not in message:
        counters.observe += 1
        return None
    counters.intercept += 1
    return stub_answer(message["id"])


async def serve_aiohttp(host: str, port: int, delay: float, counters: Counters, no_read: bool = False) -> None:
    from aiohttp import web

    async def handle(request: web.Request) -> web.Response:
        if no_read:  # the cheapest answer an aiohttp server can give: the body is never read
            counters.intercept += 1
            return web.Response(body=FIXED_ANSWER, content_type="application/json")
        body = await request.read()
        answer = classify(body, counters)
        if answer is None:
            return web.Response(status=202)
        if delay:
            await asyncio.sleep(delay)
        return web.Response(body=answer, content_type="application/json")

    async def stats(_: web.Request) -> web.Response:
        return web.Response(body=counters.as_json(), content_type="application/json")

    app = web.Application()
    app.router.add_post("/", handle)
    app.router.add_get("/stats", stats)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, host, port, backlog=1024).start()
    await _wait_for_signal()
    await runner.cleanup()


class _RawHttp(asyncio.Protocol):
    """HTTP/1.1 keep-alive with Content-Length bodies only; pipelined requests answered in order."""

    def __init__(self, delay: float, counters: Counters) -> None:
        self.delay = delay
        self.counters = counters
        self.buffer = bytearray()
        self.transport: asyncio.Transport | None = None
        self.tail: asyncio.Future[None] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while True:
            end = self.buffer.find(b"\r\n\r\n")
            if end < 0:
                return
            head = bytes(self.buffer[:end]).lower()
            length = 0
            at = head.find(b"\r\ncontent-length:")
            if at >= 0:
                stop = head.find(b"\r\n", at + 2)
                length = int(head[at + 17 : stop if stop >= 0 else len(head)])
            total = end + 4 + length
            if len(self.buffer) < total:
                return
            body = bytes(self.buffer[end + 4 : total])
            del self.buffer[:total]
            self._respond(head, body)

    def _respond(self, head: bytes, body: bytes) -> None:
        assert self.transport is not None
        if head.startswith(b"get /stats"):
            self._write(b"200 OK", self.counters.as_json())
            return
        answer = classify(body, self.counters)
        if answer is None:
            self._write(b"202 Accepted", None)
        elif self.delay:
            asyncio.get_running_loop().call_later(self.delay, self._write, b"200 OK", answer)
        else:
            self._write(b"200 OK", answer)

    def _write(self, status: bytes, body: bytes | None) -> None:
        if self.transport is None or self.transport.is_closing():
            return
        if body is None:
            self.transport.write(b"HTTP/1.1 " + status + b"\r\nContent-Length: 0\r\n\r\n")
        else:
            self.transport.write(
                b"HTTP/1.1 "
                + status
                + b"\r\nContent-Type: application/json\r\nContent-Length: "
                + str(len(body)).encode()
                + b"\r\n\r\n"
                + body
            )

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None


async def serve_raw(host: str, port: int, delay: float, counters: Counters) -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: _RawHttp(delay, counters), host, port, backlog=1024)
    await _wait_for_signal()
    server.close()


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
    parser.add_argument("--delay-ms", type=float, default=0.0, help="delay every intercept answer")
    parser.add_argument("--impl", choices=("aiohttp", "raw"), default="aiohttp")
    parser.add_argument("--no-read", action="store_true", help="aiohttp: answer every POST without reading it")
    args = parser.parse_args(argv)
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    counters = Counters()
    if args.impl == "aiohttp":
        asyncio.run(serve_aiohttp(args.host, args.port, args.delay_ms / 1000, counters, args.no_read))
    else:
        asyncio.run(serve_raw(args.host, args.port, args.delay_ms / 1000, counters))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
