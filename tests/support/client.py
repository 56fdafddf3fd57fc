"""Talking to a gateway from a test: one JSON POST, and polling until a condition holds."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import aiohttp

from gateway.server.app import GatewayServer


async def post(
    session: aiohttp.ClientSession, url: str, body: Any, *, content_type: str = "application/json"
) -> tuple[int, Any]:
    data = body if isinstance(body, bytes | str) else json.dumps(body)
    async with session.post(url, data=data, headers={"Content-Type": content_type}) as response:
        raw = await response.read()
        if not raw:
            return response.status, None
        try:
            return response.status, json.loads(raw)
        except ValueError:
            return response.status, raw


async def wait_for(predicate: Callable[[], bool], timeout: float = 5.0) -> None:
    """Poll ``predicate`` until true or fail after ``timeout`` (no fixed sleeps in tests)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not predicate():
        if loop.time() > deadline:
            raise AssertionError("condition not reached before the deadline")
        await asyncio.sleep(0.01)


def metric(gw: GatewayServer, needle: str) -> float:
    assert gw.observability is not None
    for line in gw.observability.metrics.render()[0].decode().splitlines():
        if line.startswith(needle + " "):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


async def raw_exchange(port: int, data: bytes) -> tuple[int, bytes]:
    """Send ``data`` on a fresh connection and read the status line (bounded by a deadline)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(data)
        await writer.drain()
        async with asyncio.timeout(5):
            head = await reader.readuntil(b"\r\n\r\n")
        return int(head.split(b" ", 2)[1]), head
    finally:
        writer.close()
