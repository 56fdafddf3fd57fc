"""Helpers of the hostile upstream attacks: scripted byte-level upstreams and the gateway in front of them."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any

from tests.support.client import post, wait_for
from tests.support.events import intercept, tool_before
from tests.support.fault_tools import sample, scrape
from tests.support.scripted_h1 import Scripted, ok, read_request

GATEWAY = "org.example.gateway"

HOOK = "org.example.hostile"

CAPS = {"effects": ["deny", "message"]}

TIMEOUT_MS = 1000
"""The per-call timeout of the hostile upstream's subscription (timeoutMs)."""

SHORT_MS = 300
"""The per-call timeout where a test waits it out (an answer that never ends)."""

LIMIT = 65536
"""limits.maxResponseBytes."""

SLACK = 1.0
"""Seconds a loaded machine may add past a timeout; a hang would exceed any bound."""

CALLS = "ahp_gateway_upstream_calls_total"

CLOSE = True
"""What an act returns to end its connection (else the upstream keeps reading requests on it)."""

Act = Callable[[dict[str, Any], asyncio.StreamReader, asyncio.StreamWriter], Awaitable[bool | None]]


def answer(rid: Any, effects: list[dict[str, Any]]) -> bytes:
    """A well-formed intercept answer body for request id ``rid``."""
    return json.dumps(
        {"jsonrpc": "2.0", "id": rid, "result": {"protocolVersion": "draft", "effects": effects}}
    ).encode()


def own(rid: Any) -> list[dict[str, Any]]:
    """The effects of the honest answer to ``rid``: it names the request it answers."""
    return [{"type": "message", "text": f"answer to {rid}"}]


def forged(rid: Any) -> bytes:
    """A complete, valid-looking 200 answer denying ``rid`` (the answer an attacker wants read)."""
    return ok(answer(rid, [{"type": "deny", "reason": "forged"}]))


def honest(rid: Any) -> bytes:
    return ok(answer(rid, own(rid)))


def chunked(body: bytes, *, size_line: bytes | None = None, trailer: bytes = b"") -> bytes:
    return (
        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
        + (size_line if size_line is not None else b"%x" % len(body))
        + b"\r\n"
        + body
        + b"\r\n0\r\n"
        + trailer
        + b"\r\n"
    )


async def honest_act(request: dict[str, Any], reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    writer.write(honest(request["id"]))
    await writer.drain()


def send(build: Callable[[Any], bytes], *, close: bool = False) -> Act:
    """Write ``build(request id)`` at once; keep the connection open (and reading) unless ``close``."""

    async def act(request: dict[str, Any], reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        writer.write(build(request["id"]))
        await writer.drain()
        return close

    return act


def stream(head: bytes, unit: bytes, *, pause: float = 0.0, total: int = 8 << 20) -> Act:
    """Write ``head``, then ``unit`` again and again (every ``pause`` seconds) until the gateway
    goes away or ``total`` bytes were sent; then hold the connection until the gateway closes it."""

    async def act(request: dict[str, Any], reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        writer.write(head)
        sent = 0
        while sent < total and not reader.at_eof():
            writer.write(unit)
            sent += len(unit)
            await writer.drain()
            if pause:
                await asyncio.sleep(pause)
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(reader.read(), 10)
        return CLOSE

    return act


def drip(build: Callable[[Any], bytes], pause: float = 0.1) -> Act:
    """A valid answer, one byte every ``pause`` seconds (headers included)."""

    async def act(request: dict[str, Any], reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        for byte in build(request["id"]):
            if reader.at_eof():
                break
            writer.write(bytes([byte]))
            await writer.drain()
            await asyncio.sleep(pause)
        return CLOSE

    return act


class Upstream:
    """A scripted AHP upstream on loopback. Each request is noted with the number of the
    connection it came on and answered by the next queued act (an honest answer when none is
    queued); after an act the connection keeps reading requests unless the act closed it."""

    def __init__(self) -> None:
        self.acts: deque[Act] = deque()
        self.seen: list[tuple[int, Any]] = []
        self.server = Scripted(self._script)
        self._opened = 0

    async def _script(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._opened += 1
        number = self._opened
        while True:
            _, body = await read_request(reader)
            request = json.loads(body)
            self.seen.append((number, request["id"]))
            act = self.acts.popleft() if self.acts else honest_act
            if await act(request, reader, writer):
                return

    @property
    def url(self) -> str:
        return self.server.url

    @property
    def connections(self) -> int:
        return self.server.connections

    @property
    def ended(self) -> int:
        return self.server.ended

    def connection_of(self, rid: Any) -> int:
        return next(number for number, seen in self.seen if seen == rid)


async def ask(http: Any, gateway: Any, event: dict[str, Any] | None = None) -> tuple[Any, list[dict[str, Any]], float]:
    """One harness intercept: (event id, the settled effects, seconds it took)."""
    event = event or tool_before()
    loop = asyncio.get_running_loop()
    started = loop.time()
    status, body = await post(http, gateway.url, intercept(event, CAPS))
    elapsed = loop.time() - started
    assert status == 200 and "result" in body, body
    return event["id"], body["result"]["effects"], elapsed


def synthetic(failure: str) -> list[dict[str, Any]]:
    return [
        {
            "type": "deny",
            "reason": "Required policy backend unavailable",
            "code": f"{GATEWAY}.upstream_unavailable",
            "extensions": {GATEWAY: {"upstream": HOOK, "kind": "synthetic", "failure": failure}},
        }
    ]


def handled(policy: str, failure: str) -> list[dict[str, Any]]:
    """What the harness gets for an operational failure of the only upstream (AHP-FAIL-001)."""
    return synthetic(failure) if policy == "fail-closed" else []


async def recorded(http: Any, gateway: Any, **expected: float) -> None:
    """Poll /metrics until ``ahp_gateway_upstream_calls_total`` of the hostile upstream reads
    exactly ``expected`` (outcome → count) for each outcome named."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 5
    while True:
        samples = await scrape(http, gateway.admin_port)
        got = {outcome: sample(samples, CALLS, upstream=HOOK, outcome=outcome) for outcome in expected}
        if got == expected:
            return
        assert loop.time() < deadline, f"{CALLS}: {got} != {expected}"
        await asyncio.sleep(0.02)


async def next_request_is_answered_on_a_new_connection(http: Any, gateway: Any, upstream: Upstream) -> None:
    """No poisoned connection in the pool: the attacked connection is closed by the gateway and
    the next request, on a connection of its own, gets its own answer."""
    first = upstream.connections
    await wait_for(lambda: upstream.ended >= first)  # the gateway closed it (the upstream kept reading)
    rid, effects, _ = await ask(http, gateway)
    assert effects == own(rid)
    assert upstream.connection_of(rid) == first + 1
