"""A hostile or broken upstream (or a man in the middle on plain HTTP) against the hot-path
HTTP/1.1 client (gateway.upstream.h1), end to end through a real gateway on loopback.

Upstream answers are untrusted input. Whatever bytes come back, no answer may be attributed to
the wrong request (cross-request confusion through a reused connection), no call may outlive its
per-call timeout, memory stays bounded, a broken answer is never partly salvaged (it is one
classified Failure that the subscription's failure policy handles: fail-closed gives the
synthetic deny, fail-open skips the upstream; AHP-FAIL-001, AHP-FAIL-002, protocol §6.3-6.4), and
no poisoned connection stays in the pool: the connection that carried a broken answer is closed
and the next request gets its own answer on a new connection (AHP-HTTP-001).

The scripted upstream counts its connections and notes on which one every request arrives; it
keeps reading after a broken answer, so a connection the gateway wrongly kept would show up as a
second request on the first connection. The failure class is read where operators see it: the
synthetic deny's extension and ``ahp_gateway_upstream_calls_total{outcome=...}``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import ssl
import struct
import tracemalloc
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from gateway.upstream.h1 import AnswerTooLarge, H1Client, ProtocolError, Target
from tests.binding.test_upstream_h1 import Scripted, ok, read_request
from tests.support.client import post, wait_for
from tests.support.config import gateway_config, hook
from tests.support.events import intercept, tool_before
from tests.support.fault_tools import sample, scrape

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


@pytest.fixture
async def rig(gateway_factory: Any) -> AsyncIterator[Callable[..., Awaitable[tuple[Any, Upstream]]]]:
    made: list[Upstream] = []

    async def make(
        policy: str = "fail-closed", timeout_ms: int = TIMEOUT_MS, url: str | None = None
    ) -> tuple[Any, Upstream]:
        upstream = Upstream()
        await upstream.server.__aenter__()
        made.append(upstream)
        entry = hook(
            HOOK,
            url or upstream.url,
            policy=policy,
            timeout=timeout_ms,
            circuitBreaker={"enabled": False},  # every call reaches the upstream
        )
        config = gateway_config(
            [entry],
            limits={"deadlineMs": 5000, "maxResponseBytes": LIMIT, "maxBodyBytes": 1048576},
            log={"decisions": "off"},
        )
        return await gateway_factory(config), upstream

    yield make
    for upstream in made:
        await upstream.server.__aexit__(None, None, None)


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


# ------------------------------------------------------------------------------------------------
# Broken answers: one classified failure, fail-closed, and the connection is dropped.

BROKEN: list[Any] = [
    pytest.param(
        send(lambda rid: b"HTTP/1.1 200 OK\r\nContent-Length: -5\r\n\r\n" + answer(rid, own(rid))),
        "invalid_response",
        id="cl-negative",
    ),
    pytest.param(
        send(lambda rid: b"HTTP/1.1 200 OK\r\nContent-Length: +%d\r\n\r\n" % len(answer(rid, [])) + answer(rid, [])),
        "invalid_response",
        id="cl-plus-sign",
    ),
    pytest.param(
        send(
            lambda rid: (
                b"HTTP/1.1 200 OK\r\nContent-Length: %d, %d\r\n\r\n" % ((len(answer(rid, [])),) * 2) + answer(rid, [])
            )
        ),
        "invalid_response",
        id="cl-list",
    ),
    pytest.param(
        send(lambda rid: ok(answer(rid, []), b"Content-Length: %d\r\n" % len(answer(rid, [])))),
        "invalid_response",
        id="cl-twice-same",
    ),
    pytest.param(
        send(lambda rid: ok(answer(rid, []) + b" ", b"Content-Length: %d\r\n" % len(answer(rid, [])))),
        "invalid_response",
        id="cl-twice-different",
    ),
    pytest.param(
        send(lambda rid: chunked(answer(rid, [])).replace(b"\r\n\r\n", b"\r\nContent-Length: 5\r\n\r\n", 1)),
        "invalid_response",
        id="chunked-and-cl",
    ),
    pytest.param(
        send(lambda rid: b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % (2**70) + answer(rid, [])),
        "invalid_response",
        id="cl-over-2**64",
    ),
    pytest.param(
        send(
            lambda rid: b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n %d\r\n\r\n" % len(answer(rid, [])) + answer(rid, [])
        ),
        "invalid_response",
        id="cl-obs-fold",
    ),
    pytest.param(
        send(lambda rid: chunked(answer(rid, []), size_line=b"1" + b"0" * 17)),
        "invalid_response",
        id="chunk-size-over-2**64",
    ),
    pytest.param(
        send(lambda rid: chunked(answer(rid, []), size_line=b"-5")), "invalid_response", id="chunk-size-negative"
    ),
    pytest.param(send(lambda rid: chunked(answer(rid, []), size_line=b"0x5")), "invalid_response", id="chunk-size-0x"),
    pytest.param(
        send(lambda rid: chunked(answer(rid, [])).replace(b"\r\n0\r\n", b"0\r\n", 1)),
        "invalid_response",
        id="chunk-without-crlf",
    ),
    pytest.param(
        send(
            lambda rid: chunked(
                answer(rid, []), trailer=b"".join(b"X-Trailer-%d: %s\r\n" % (i, b"t" * 1000) for i in range(80))
            )
        ),
        "invalid_response",
        id="trailer-flood",
    ),
    pytest.param(
        send(lambda rid: chunked(answer(rid, []), trailer=b"Content-Length: 1\r\n")),
        "invalid_response",
        id="framing-header-in-trailer",
    ),
    pytest.param(
        send(lambda rid: b"HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n"),
        "invalid_response",
        id="101-upgrade",
    ),
    pytest.param(
        send(
            lambda rid: b"HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: h2c\r\n\r\n" + honest(rid)
        ),
        "invalid_response",
        id="101-then-valid-200",
    ),
    pytest.param(send(lambda rid: answer(rid, own(rid))), "invalid_response", id="http-0.9-body-without-status-line"),
    pytest.param(
        send(lambda rid: honest(rid).replace(b"\r\n", b"\n")),
        "invalid_response",
        id="bare-lf-line-ends",
    ),
    pytest.param(send(lambda rid: ok(answer(rid, []), b"X-A: a\x00b\r\n")), "invalid_response", id="nul-in-header"),
    pytest.param(
        send(lambda rid: b"HTTP/1.1 2000 OK\r\nContent-Length: 0\r\n\r\n"), "invalid_response", id="status-4-digits"
    ),
    pytest.param(
        send(lambda rid: b"HTTP/1.1 500 Internal Server Error\r\nContent-Length: 999999999999\r\n\r\n" + forged(rid)),
        "http_status",
        id="500-announcing-a-huge-body",
    ),
    pytest.param(
        stream(
            b"HTTP/1.1 500 Internal Server Error\r\nTransfer-Encoding: chunked\r\n\r\n",
            b"4000\r\n" + b"x" * 0x4000 + b"\r\n",
        ),
        "http_status",
        id="500-with-an-endless-chunked-body",
    ),
    pytest.param(
        send(lambda rid: b"HTTP/1.1 204 No Content\r\nContent-Length: 5\r\n\r\n" + forged(rid)),
        "http_status",
        id="204-with-body",
    ),
    pytest.param(
        send(lambda rid: b"HTTP/1.1 304 Not Modified\r\nContent-Length: 5\r\n\r\n" + forged(rid)),
        "http_status",
        id="304-with-body",
    ),
    pytest.param(
        send(
            lambda rid: (
                b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % (len(answer(rid, [])) + 100) + answer(rid, [])
            ),
            close=True,
        ),
        "connect",
        id="cl-longer-than-body-then-close",
    ),
    pytest.param(
        send(
            lambda rid: chunked(answer(rid, [{"type": "deny", "reason": "partial"}])).removesuffix(b"0\r\n\r\n"),
            close=True,
        ),
        "connect",
        id="chunked-without-last-chunk-then-close",
    ),
    pytest.param(
        send(lambda rid: b"HTTP/1.1 200 OK\r\n\r\n" + answer(rid, []) + b" " * LIMIT, close=True),
        "too_large",
        id="close-delimited-over-the-limit",
    ),
    pytest.param(
        send(
            lambda rid: (
                b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n" % (4 * LIMIT) + b" " * (2 * LIMIT)
            )
        ),
        "too_large",
        id="chunk-size-over-the-limit",
    ),
]


@pytest.mark.spec("AHP-HTTP-001")
@pytest.mark.parametrize(("act", "failure"), BROKEN)
async def test_a_broken_answer_is_one_failure_and_its_connection_is_dropped(rig, http, act, failure):
    """AHP-HTTP-001, AHP-FAIL-001, protocol §6.3-6.4: Content-Length and chunked framing
    variants, upgrades, bodies on bodiless statuses, truncations and over-limit bodies. Each is
    the failure class named, applied by fail-closed as the synthetic deny (nothing of the answer
    salvaged, not even a valid deny), well before the call timeout; the connection is closed and
    the next request gets its own answer on a new one."""
    gateway, upstream = await rig()
    upstream.acts.append(act)
    _, effects, _ = await ask(http, gateway)
    assert effects == synthetic(failure)  # (not "timeout": the broken answer itself ended the call)
    await next_request_is_answered_on_a_new_connection(http, gateway, upstream)
    await recorded(http, gateway, **{failure: 1, "ok": 1})


# ------------------------------------------------------------------------------------------------
# Answers that are not HTTP/1.1 as the gateway asked for it, and framing at its edges.


@pytest.mark.spec("AHP-HTTP-001")
async def test_an_http_2_0_status_line_is_not_an_http_1_1_answer(rig, http):
    """AHP-HTTP-001: h1 promises ProtocolError for bytes that are not an HTTP/1.1 response; an
    ``HTTP/2.0`` status line (HTTP/2 has none) carrying a valid deny must not be accepted."""
    gateway, upstream = await rig()
    upstream.acts.append(send(lambda rid: forged(rid).replace(b"HTTP/1.1", b"HTTP/2.0", 1)))
    _, effects, _ = await ask(http, gateway)
    assert effects == synthetic("invalid_response")
    await next_request_is_answered_on_a_new_connection(http, gateway, upstream)


@pytest.mark.spec("AHP-HTTP-001")
@pytest.mark.parametrize("status", [b"000", b"099"])
async def test_a_status_below_100_is_a_final_answer_not_an_interim_one(rig, http, status):
    """AHP-HTTP-001, RFC 9110 §15: a status outside 100..599 is invalid and is handled like a
    5xx; it ends the call at once as a status failure instead of waiting out the timeout."""
    gateway, upstream = await rig(timeout_ms=SHORT_MS)
    upstream.acts.append(send(lambda rid: b"HTTP/1.1 " + status + b" Odd\r\nContent-Length: 0\r\n\r\n"))
    _, effects, _ = await ask(http, gateway)
    assert effects[0].get("extensions", {}).get(GATEWAY, {}).get("failure") in ("http_status", "invalid_response")
    await next_request_is_answered_on_a_new_connection(http, gateway, upstream)


@pytest.mark.spec("AHP-HTTP-001")
async def test_an_unrequested_transfer_coding_is_an_invalid_answer(rig, http):
    """AHP-HTTP-001, RFC 9112 §6.1/§7: the gateway sends no TE, so a transfer coding other than
    chunked is a protocol violation: invalid_response, not a connection failure."""
    gateway, upstream = await rig()
    upstream.acts.append(
        send(lambda rid: b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n" + answer(rid, []), close=True)
    )
    _, effects, _ = await ask(http, gateway)
    assert effects == synthetic("invalid_response")
    await next_request_is_answered_on_a_new_connection(http, gateway, upstream)


# ------------------------------------------------------------------------------------------------
# Answers that never end: they end at the call timeout (AHP-FAIL-002), memory bounded.

ENDLESS: list[Any] = [
    pytest.param(stream(b"", b"HTTP/1.1 100 Continue\r\n\r\n" * 64), id="endless-100-continue"),
    pytest.param(
        stream(
            b"",
            b"HTTP/1.1 103 Early Hints\r\n"
            + b"".join(b"Link: <%d%s>\r\n" % (i, b"y" * 1000) for i in range(60))
            + b"\r\n",
        ),
        id="endless-103-each-with-60k-headers",
    ),
    pytest.param(
        stream(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", b"1\r\n \r\n", pause=0.01),
        id="endless-1-byte-chunks-slowly",
    ),
    pytest.param(drip(honest), id="headers-drip-one-byte-per-100ms"),
    pytest.param(
        stream(b"HTTP/1.1 200 OK\r\n", b"X-Slow: 1\r\n", pause=0.05),
        id="headers-that-never-end-slowly",
    ),
]


@pytest.mark.spec("AHP-FAIL-002")
@pytest.mark.parametrize("act", ENDLESS)
async def test_an_answer_that_never_ends_fails_at_the_call_timeout(rig, http, act):
    """AHP-FAIL-002, AHP-HTTP-001: interim answers streamed forever (the header budget is per
    message, so only the timeout can end them), bytes that never complete a head, a chunk or a
    drip: the call ends at its timeoutMs as a timeout failure, never later, and the connection is
    dropped."""
    gateway, upstream = await rig(timeout_ms=SHORT_MS)
    upstream.acts.append(act)
    _, effects, elapsed = await ask(http, gateway)
    assert effects == synthetic("timeout")
    assert SHORT_MS / 1000 * 0.9 <= elapsed < SHORT_MS / 1000 + SLACK
    await next_request_is_answered_on_a_new_connection(http, gateway, upstream)
    await recorded(http, gateway, timeout=1, ok=1)


@pytest.mark.spec("AHP-FAIL-002")
@pytest.mark.parametrize(
    ("act", "failure"),
    [
        pytest.param(stream(b"", b"\r\n" * 4096), "invalid_response", id="endless-empty-lines-before-the-status"),
        pytest.param(stream(b"HTTP/1.1 200 ", b"O" * 4096), "invalid_response", id="endless-reason-phrase"),
        pytest.param(
            stream(b"HTTP/1.1 200 OK\r\nX-A:", b" " * 4096), "invalid_response", id="endless-whitespace-before-a-value"
        ),
        pytest.param(
            stream(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5;", b"e" * 4096),
            "too_large",
            id="endless-chunk-extension",
        ),
    ],
)
async def test_a_head_or_framing_that_never_ends_fails_at_its_wire_budget(rig, http, act, failure):
    """AHP-FAIL-002, AHP-HTTP-001 bounded answers: bytes that never complete a head (counted
    against the head's wire budget as they arrive) or a chunk's framing (against the body's) fail
    as soon as the budget is spent, before the call's timeout, and the connection is dropped."""
    gateway, upstream = await rig(timeout_ms=SHORT_MS)
    upstream.acts.append(act)
    _, effects, elapsed = await ask(http, gateway)
    assert effects == synthetic(failure)
    assert elapsed < SHORT_MS / 1000 + SLACK
    await next_request_is_answered_on_a_new_connection(http, gateway, upstream)
    await recorded(http, gateway, **{failure: 1, "ok": 1})


# ------------------------------------------------------------------------------------------------
# Memory: the h1 client itself, under tracemalloc, against answers sent as fast as loopback allows.

FLOOD_SECONDS = 0.6
"""The h1 deadline of a flood (what ends it when nothing else does)."""
HEADER_FLOODS: list[Any] = [
    pytest.param(
        b"",
        b"HTTP/1.1 100 Continue\r\n" + b"X-I: " + b"i" * 60000 + b"\r\n\r\n",
        TimeoutError,
        id="1xx-headers-near-the-budget",
    ),
    pytest.param(b"HTTP/1.1 200 ", b"O" * 65536, ProtocolError, id="reason-phrase"),
    pytest.param(
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5;", b"e" * 65536, AnswerTooLarge, id="chunk-extension"
    ),
]


async def _flood(head: bytes, unit: bytes, deadline: float) -> tuple[BaseException | None, int]:
    """Send ``head`` then ``unit`` repeatedly (up to 16 MiB) to an h1 client; (what the client
    raised, the peak bytes allocated while it ran)."""
    upstream = Upstream()
    upstream.acts.append(stream(head, unit, total=16 << 20))
    async with upstream.server:
        client = H1Client()
        tracemalloc.start()
        try:
            loop = asyncio.get_running_loop()
            await client.post(
                Target(upstream.url, {}, None), b"", b'{"id":"e1"}', limit=LIMIT, deadline=loop.time() + deadline
            )
            raised: BaseException | None = None
        except (ProtocolError, AnswerTooLarge, TimeoutError, OSError) as exc:
            raised = exc
        finally:
            peak = tracemalloc.get_traced_memory()[1]
            tracemalloc.stop()
            client.close()
        await wait_for(lambda: upstream.ended == 1)
    return raised, peak


@pytest.mark.parametrize(("head", "unit", "expected"), HEADER_FLOODS)
async def test_answer_heads_streamed_at_full_speed_keep_memory_bounded(head, unit, expected):
    """AHP-HTTP-001 bounded answers: a flood of interim answers whose headers each stay just
    under the budget (the budget is per message, so only the deadline ends it), an endless
    reason phrase or chunk extension (ended by the head's or the body's wire budget): peak
    memory stays far below the megabytes sent."""
    raised, peak = await _flood(head, unit, FLOOD_SECONDS)
    assert isinstance(raised, expected), raised
    assert peak < 4 << 20, f"peak {peak} bytes"


@pytest.mark.parametrize(
    "head",
    [
        pytest.param(b"HTTP/1.1 200 OK\r\nX-Endless: ", id="one-header-value"),
        pytest.param(b"HTTP/1.1 200 OK\r\nX-", id="one-header-name"),
        pytest.param(
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nX-Trailer: ",
            id="one-trailer-value",
        ),
    ],
)
async def test_one_endless_header_field_is_refused_at_the_header_budget(head):
    """AHP-HTTP-001 bounded answers: one header field that never ends (value, name or trailer)
    must fail once it passes its wire budget ('answer headers too large' for the head; for a
    trailer, the body's framing budget: too large), with memory bounded, not be buffered until
    the deadline."""
    raised, peak = await _flood(head, b"a" * 65536, FLOOD_SECONDS)
    # a trailer comes after the head: the body's framing budget ends it (as too large)
    assert isinstance(raised, AnswerTooLarge if b"X-Trailer" in head else ProtocolError), raised
    assert peak < 4 << 20, f"peak {peak} bytes"


# ------------------------------------------------------------------------------------------------
# Cross-request confusion through a reused connection.


@pytest.mark.spec("AHP-HTTP-001")
@pytest.mark.parametrize(
    "extra",
    [
        pytest.param(lambda nxt: forged(nxt), id="a-second-complete-answer"),
        pytest.param(lambda nxt: b"GARBAGE\r\n\r\n", id="garbage"),
        pytest.param(lambda nxt: b"HTTP/1.1 200 OK\r\nContent-", id="half-a-head"),
        pytest.param(lambda nxt: b"HTTP/1.1 100 Continue\r\n\r\n", id="a-late-interim"),
        pytest.param(lambda nxt: b"X", id="one-byte"),
    ],
)
async def test_bytes_after_a_complete_answer_in_the_same_segment_never_reach_the_next_request(rig, http, extra):
    """AHP-HTTP-001 (no pipelining): the answer is complete (Content-Length shorter than what was
    written) and is the answer to its request; whatever follows in the same segment, even a
    valid deny carrying the next request's id, is never read as the next answer: the connection
    is dropped and the next request gets its own answer on a new one."""
    gateway, upstream = await rig()
    first, second = tool_before(), tool_before()
    upstream.acts.append(send(lambda rid: honest(rid) + extra(second["id"])))
    rid, effects, _ = await ask(http, gateway, first)
    assert effects == own(rid)
    await wait_for(lambda: upstream.ended == 1)
    rid, effects, _ = await ask(http, gateway, second)
    assert effects == own(rid)
    assert upstream.connection_of(rid) == 2
    await recorded(http, gateway, ok=2, deny=0)


@pytest.mark.spec("AHP-HTTP-001")
@pytest.mark.parametrize(
    "unsolicited",
    [
        pytest.param(lambda nxt: forged(nxt), id="a-forged-answer-for-the-next-id"),
        pytest.param(lambda nxt: b"HTTP/1.1 100 Continue\r\n\r\n", id="an-interim-answer"),
        pytest.param(lambda nxt: b"\r\n", id="an-empty-line"),
    ],
)
async def test_bytes_on_an_idle_pooled_connection_drop_it_before_the_next_request(rig, http, unsolicited):
    """AHP-HTTP-001: an answer (or anything) the upstream sends while its connection sits idle
    in the pool is not kept for the next request: the gateway closes that connection, and the
    next request gets its own answer on a new one, never the forged deny."""
    gateway, upstream = await rig()
    first, second = tool_before(), tool_before()
    answered, wrote = asyncio.Event(), asyncio.Event()

    async def act(request: dict[str, Any], reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(honest(request["id"]))
        await writer.drain()
        await asyncio.wait_for(answered.wait(), 5)  # the harness has its answer: the connection is idle
        writer.write(unsolicited(second["id"]))
        await writer.drain()
        wrote.set()

    upstream.acts.append(act)
    rid, effects, _ = await ask(http, gateway, first)
    assert effects == own(rid)
    answered.set()
    await asyncio.wait_for(wrote.wait(), 5)
    await wait_for(lambda: upstream.ended == 1)  # closed by the gateway, before any next request
    rid, effects, _ = await ask(http, gateway, second)
    assert effects == own(rid)
    assert upstream.connection_of(rid) == 2


@pytest.mark.spec("AHP-HTTP-001")
@pytest.mark.parametrize("policy", ["fail-closed", "fail-open"])
async def test_a_stale_answer_ahead_of_the_real_one_is_rejected_not_attributed(rig, http, policy):
    """AHP-HTTP-001, protocol §6.3 (a mismatched id is an operational failure): on a reused
    connection the upstream puts a valid deny for the previous request ahead of the real answer.
    The stale answer is not attributed to the new request (invalid_response under the policy),
    the real answer behind it is not salvaged either, and the connection is dropped."""
    gateway, upstream = await rig(policy)
    first, second = tool_before(), tool_before()
    rid, effects, _ = await ask(http, gateway, first)
    assert effects == own(rid)
    upstream.acts.append(send(lambda rid: forged(first["id"]) + honest(rid)))
    rid, effects, _ = await ask(http, gateway, second)
    assert upstream.connection_of(rid) == 1  # the pool did reuse the healthy connection
    assert effects == handled(policy, "invalid_response")
    await next_request_is_answered_on_a_new_connection(http, gateway, upstream)
    await recorded(http, gateway, invalid_response=1, ok=2, deny=0)


@pytest.mark.spec("AHP-FAIL-002")
async def test_a_late_answer_to_a_timed_out_call_never_reaches_the_next_request(rig, http):
    """AHP-FAIL-002 ("MUST ignore any later response"): the call times out; the upstream then
    answers it (a deny) on the same connection. The next request must not read that answer: the
    connection was dropped at the timeout and the next request gets its own on a new one."""
    gateway, upstream = await rig(timeout_ms=SHORT_MS)
    late_written = asyncio.Event()

    async def act(request: dict[str, Any], reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        await asyncio.sleep(SHORT_MS / 1000 + 0.1)
        with contextlib.suppress(ConnectionError):
            writer.write(forged(request["id"]))
            await writer.drain()
        late_written.set()
        return False  # and keep reading: a reused connection would bring the next request here

    upstream.acts.append(act)
    _, effects, _ = await ask(http, gateway)
    assert effects == synthetic("timeout")
    await asyncio.wait_for(late_written.wait(), 5)
    await next_request_is_answered_on_a_new_connection(http, gateway, upstream)


# ------------------------------------------------------------------------------------------------
# Odd but valid framing: the answer is accepted; the connection is reused only when allowed.

VALID: list[Any] = [
    pytest.param(
        lambda rid: ok(answer(rid, own(rid))).replace(b"Content-Length: ", b"Content-Length: 000", 1),
        True,
        id="cl-leading-zeros",
    ),
    pytest.param(
        lambda rid: chunked(answer(rid, own(rid)), size_line=b'%x;ext=1;q="a b"' % len(answer(rid, own(rid)))),
        True,
        id="chunk-extensions",
    ),
    pytest.param(
        lambda rid: chunked(answer(rid, own(rid)), trailer=b"X-Checksum: 1\r\n"),
        True,
        id="trailers",
    ),
    pytest.param(lambda rid: b"HTTP/1.1 103 Early Hints\r\nLink: </x>\r\n\r\n" + honest(rid), True, id="103-then-200"),
    pytest.param(lambda rid: honest(rid).replace(b"HTTP/1.1", b"HTTP/1.0", 1), False, id="http-1.0-without-keep-alive"),
    pytest.param(lambda rid: ok(answer(rid, own(rid)), b"Connection: close\r\n"), False, id="connection-close"),
    pytest.param(
        lambda rid: ok(answer(rid, own(rid)), b"Connection: keep-alive, close\r\n"),
        False,
        id="connection-keep-alive-close",
    ),
]


@pytest.mark.spec("AHP-HTTP-001")
@pytest.mark.parametrize(("build", "reusable"), VALID)
async def test_odd_but_valid_framing_is_accepted_and_reused_only_when_allowed(rig, http, build, reusable):
    """AHP-HTTP-001: valid HTTP/1.1 framing variants are answers like any other; a connection
    the server did not keep alive is never reused."""
    gateway, upstream = await rig()
    upstream.acts.append(send(build))
    rid, effects, _ = await ask(http, gateway)
    assert effects == own(rid)
    if reusable:
        rid, effects, _ = await ask(http, gateway)
        assert effects == own(rid) and upstream.connection_of(rid) == 1
    else:
        await next_request_is_answered_on_a_new_connection(http, gateway, upstream)


@pytest.mark.spec("AHP-HTTP-001")
async def test_a_close_delimited_answer_is_accepted_and_not_reused(rig, http):
    """AHP-HTTP-001, RFC 9112 §6.3: no Content-Length, no chunked: the body ends when the upstream
    closes the connection."""
    gateway, upstream = await rig()
    upstream.acts.append(send(lambda rid: b"HTTP/1.1 200 OK\r\n\r\n" + answer(rid, own(rid)), close=True))
    rid, effects, _ = await ask(http, gateway)
    assert effects == own(rid)
    await next_request_is_answered_on_a_new_connection(http, gateway, upstream)


@pytest.mark.spec("AHP-HTTP-001")
async def test_content_length_with_trailing_whitespace_is_valid(rig, http):
    """AHP-HTTP-001, RFC 9112 §5 (field-line = name ":" OWS value OWS): trailing OWS is not part
    of the value, so this answer is valid and must be accepted."""
    gateway, upstream = await rig()
    upstream.acts.append(send(lambda rid: honest(rid).replace(b"\r\n\r\n", b" \r\n\r\n", 1)))
    rid, effects, _ = await ask(http, gateway)
    assert effects == own(rid)


@pytest.mark.spec("AHP-HTTP-001")
async def test_a_redirect_is_a_status_failure_and_its_location_is_never_contacted(rig, http):
    """AHP-HTTP-001 ("Redirects MUST NOT be followed"): a 307 to a server that would answer
    allow is an http_status failure; that server never sees a connection."""
    elsewhere = Upstream()
    async with elsewhere.server:
        gateway, upstream = await rig()
        location = elsewhere.url.encode()
        for status in (b"301 Moved Permanently", b"307 Temporary Redirect", b"308 Permanent Redirect"):
            upstream.acts.append(
                send(lambda rid, s=status: b"HTTP/1.1 %s\r\nLocation: %s\r\nContent-Length: 0\r\n\r\n" % (s, location))
            )
            _, effects, _ = await ask(http, gateway)
            assert effects == synthetic("http_status")
        rid, effects, _ = await ask(http, gateway)
        assert effects == own(rid)
        assert elsewhere.connections == 0
        assert upstream.connections == 1  # a complete 3xx may keep its connection: nothing was left unread
        await recorded(http, gateway, http_status=3, ok=1)


# ------------------------------------------------------------------------------------------------
# Fail-open: the same failures skip the upstream (AHP-FAIL-001).

FAIL_OPEN: list[Any] = [
    pytest.param(
        send(lambda rid: chunked(answer(rid, [])).replace(b"\r\n\r\n", b"\r\nContent-Length: 5\r\n\r\n", 1)),
        "invalid_response",
        id="chunked-and-cl",
    ),
    pytest.param(
        send(lambda rid: b"HTTP/1.1 200 OK\r\n\r\n" + b" " * (2 * LIMIT), close=True),
        "too_large",
        id="close-delimited-over-the-limit",
    ),
    pytest.param(
        send(
            lambda rid: (
                b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % (len(forged(rid)) + 100)
                + answer(rid, [{"type": "deny", "reason": "truncated"}])
            ),
            close=True,
        ),
        "connect",
        id="valid-deny-in-a-truncated-body",
    ),
    pytest.param(stream(b"", b"HTTP/1.1 100 Continue\r\n\r\n" * 64), "timeout", id="endless-100-continue"),
    pytest.param(
        send(lambda rid: b"HTTP/1.1 204 No Content\r\nContent-Length: 5\r\n\r\n" + forged(rid)),
        "http_status",
        id="204-with-body",
    ),
]


@pytest.mark.spec("AHP-FAIL-001")
@pytest.mark.parametrize(("act", "failure"), FAIL_OPEN)
async def test_under_fail_open_a_broken_answer_is_skipped_whole(rig, http, act, failure):
    """AHP-FAIL-001, protocol §6.4 ("do not salvage even a valid deny"): under fail-open a broken
    answer is skipped, never partly applied; the skip is counted under its failure class."""
    gateway, upstream = await rig("fail-open", timeout_ms=SHORT_MS if failure == "timeout" else TIMEOUT_MS)
    upstream.acts.append(act)
    _, effects, elapsed = await ask(http, gateway)
    assert effects == []
    assert elapsed < TIMEOUT_MS / 1000 + SLACK
    await next_request_is_answered_on_a_new_connection(http, gateway, upstream)
    await recorded(http, gateway, **{failure: 1, "ok": 1})
    samples = await scrape(http, gateway.admin_port)
    assert sample(samples, "ahp_gateway_fail_open_skips_total", upstream=HOOK, reason=failure) == 1


# ------------------------------------------------------------------------------------------------
# A close-delimited answer cut by the transport (the h1 client itself).


def _reset(writer: asyncio.StreamWriter) -> None:
    """End the connection with a TCP RST."""
    sock = writer.get_extra_info("socket")
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


def _no_close_notify(writer: asyncio.StreamWriter) -> None:
    """End a TLS connection without its closure alert (what a man in the middle can do)."""
    writer.transport.abort()


@pytest.mark.spec("AHP-HTTP-001")
@pytest.mark.parametrize(
    ("cut", "tls"),
    [pytest.param(_reset, False, id="tcp-reset"), pytest.param(_no_close_notify, True, id="tls-without-close-notify")],
)
async def test_a_close_delimited_answer_cut_by_the_transport_is_not_complete(monkeypatch, cut, tls):
    """AHP-HTTP-001, RFC 9112 §8 and §9.8: a body delimited by the close is complete only if the
    connection ended without error, and over TLS only with a closure alert; a reset or a bare TCP
    close of a TLS connection (a man in the middle truncating it) must be a failure."""
    from gateway.upstream import h1

    server_ctx = client_ctx = None
    if tls:
        trustme = pytest.importorskip("trustme")
        ca = trustme.CA()
        server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ca.issue_cert("127.0.0.1").configure_cert(server_ctx)
        client_ctx = ssl.create_default_context()
        ca.configure_trust(client_ctx)
    body = answer("e1", [])
    received = asyncio.Event()
    seen = bytearray()
    data_received = h1._Connection.data_received

    def noting(self: Any, data: bytes) -> None:
        seen.extend(data)
        data_received(self, data)
        if seen.endswith(body):
            received.set()

    monkeypatch.setattr(h1._Connection, "data_received", noting)

    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\n\r\n" + body)
        await writer.drain()
        await asyncio.wait_for(received.wait(), 5)  # the client has every byte of the body
        cut(writer)

    server = await asyncio.start_server(script, "127.0.0.1", 0, ssl=server_ctx)
    port = server.sockets[0].getsockname()[1]
    client = H1Client()
    try:
        target = Target(f"{'https' if tls else 'http'}://127.0.0.1:{port}/", {}, client_ctx)
        with pytest.raises((OSError, ProtocolError)):
            await asyncio.wait_for(client.post(target, b"", b"{}", limit=LIMIT), 5)
    finally:
        client.close()
        server.close()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(server.wait_closed(), 2)
