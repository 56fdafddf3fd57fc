"""The harness listener's fast lane (gateway/server/fastlane.py) against aiohttp serving the same
requests: every request, framed well or badly, gets the same status, media type and body from a
gateway with the fast lane as from one without it (AHP-HTTP-001, protocol §12 for the refusals);
a connection moves to aiohttp at the first request that is not for the fast lane and keeps its
order; a pipelining client cannot make it buffer without bound; the drain answers what is being
served. Raw sockets throughout, so each byte on the wire is the test's choice."""

from __future__ import annotations

import asyncio
import gzip
import hashlib
import json
from typing import Any

import pytest
import yaml

from gateway.server.fastlane import AHEAD, MAX_HEAD, FastLane
from tests.support import native_payloads
from tests.support.client import wait_for
from tests.support.config import gateway_config, hook
from tests.support.events import intercept, result, tool_before
from tests.support.fault_tools import close, raw_request, read_response, read_until_closed, status_of

TOKEN = "fast-lane-test-token-0123456789abcdef"


def _body(**extra: Any) -> bytes:
    return json.dumps(intercept(tool_before(**extra))).encode()


async def _pair(gateway_factory, stub_factory, limits: dict[str, Any] | None = None, **extra: Any):
    """Two gateways on the same upstream: the fast lane on, and off."""
    stub = await stub_factory()
    servers = []
    for fast in (True, False):
        cfg = gateway_config([hook("org.example.up", stub.url)], **extra)
        cfg["listen"]["fastLane"] = fast
        cfg["limits"]["maxBodyBytes"] = 65536
        cfg["limits"].update(limits or {})
        servers.append(await gateway_factory(cfg, name=f"gateway-{fast}.yaml"))
    return stub, servers


async def _exchange(
    port: int, data: bytes, count: int = 1, timeout: float = 5.0
) -> list[tuple[int, dict[str, str], bytes]]:
    """Send ``data`` on one connection; read ``count`` responses (status, headers, body)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(data)
    await writer.drain()
    out = []
    try:
        for _ in range(count):
            status, headers, body, _ = await read_response(reader, timeout)
            out.append((status, headers, body))
    finally:
        await close(writer)
    return out


async def _answer(reader: asyncio.StreamReader) -> int:
    """Read one response on a kept-alive connection; its status."""
    return (await read_response(reader)).status


def _comparable(answers: list[tuple[int, dict[str, str], bytes]]) -> list[tuple[int, str | None, bytes]]:
    return [(status, headers.get("content-type"), body) for status, headers, body in answers]


def _head(path: str = "/", method: str = "POST", version: str = "1.1", **headers: str) -> bytes:
    lines = [f"{method} {path} HTTP/{version}", "Host: 127.0.0.1", *(f"{k}: {v}" for k, v in headers.items())]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


BODY = _body()
CASES: dict[str, bytes] = {
    "intercept": raw_request(BODY),
    "json with charset": _head(**{"Content-Type": "application/json; charset=utf-8", "Content-Length": str(len(BODY))})
    + BODY,
    "notification": raw_request(json.dumps({"jsonrpc": "2.0", "method": "hooks/observe", "params": {}}).encode()),
    "parse error": raw_request(b"{not json"),
    "empty body": raw_request(b""),
    "text/plain": _head(**{"Content-Type": "text/plain", "Content-Length": str(len(BODY))}) + BODY,
    "no content type": _head(**{"Content-Length": str(len(BODY))}) + BODY,
    "over maxBodyBytes (never sent)": _head(**{"Content-Type": "application/json", "Content-Length": "70000"}),
    "gzip": _head(
        **{
            "Content-Type": "application/json",
            "Content-Encoding": "gzip",
            "Content-Length": str(len(gzip.compress(BODY))),
        }
    )
    + gzip.compress(BODY),
    "chunked": _head(**{"Content-Type": "application/json", "Transfer-Encoding": "chunked"})
    + b"%x\r\n" % len(BODY)
    + BODY
    + b"\r\n0\r\n\r\n",
    "query string": raw_request(BODY, path="/?x=1"),
    "other path": raw_request(BODY, path="/nowhere"),
    "GET": _head(method="GET"),
    "HTTP/1.0": _head(version="1.0", **{"Content-Type": "application/json", "Content-Length": str(len(BODY))}) + BODY,
    "two Content-Length": _head(**{"Content-Type": "application/json", "Content-Length": str(len(BODY))}).replace(
        b"\r\n\r\n", f"\r\nContent-Length: {len(BODY)}\r\n\r\n".encode()
    )
    + BODY,
    "Content-Length and Transfer-Encoding": _head(
        **{"Content-Type": "application/json", "Content-Length": "5", "Transfer-Encoding": "chunked"}
    )
    + b"0\r\n\r\n",
    "signed Content-Length": _head(**{"Content-Type": "application/json", "Content-Length": "+" + str(len(BODY))})
    + BODY,
    "bare LF": _head(**{"Content-Type": "application/json", "Content-Length": str(len(BODY))}).replace(b"\r\n", b"\n")
    + BODY,
    "two Content-Type": _head(**{"Content-Type": "application/json", "Content-Length": str(len(BODY))}).replace(
        b"\r\n\r\n", b"\r\nContent-Type: text/plain\r\n\r\n"
    )
    + BODY,
}
NATIVE = json.dumps(native_payloads.CLAUDE["PreToolUse/Bash"]).encode()
COPILOT = json.dumps(native_payloads.COPILOT["preToolUse/bash"]).encode()
CASES.update(
    {
        "native claude-code": raw_request(NATIVE, path="/native/claude-code"),
        "native copilot with event": raw_request(COPILOT, path="/native/copilot?event=preToolUse"),
        "native without a content type": _head("/native/claude-code", **{"Content-Length": str(len(NATIVE))}) + NATIVE,
        "native text/plain": _head(
            "/native/claude-code", **{"Content-Type": "text/plain", "Content-Length": str(len(NATIVE))}
        )
        + NATIVE,
        "native unknown harness": raw_request(NATIVE, path="/native/nobody"),
        "native unreadable payload": raw_request(b"{not json", path="/native/claude-code"),
        "native percent-encoded harness": raw_request(NATIVE, path="/native/claude%2Dcode"),
        "native other parameters": raw_request(COPILOT, path="/native/copilot?event=preToolUse&x=1"),
        "native over maxBodyBytes (never sent)": _head(
            "/native/claude-code", **{"Content-Type": "application/json", "Content-Length": "70000"}
        ),
    }
)
CLOSING = {
    "parse error",
    "bare LF",
    "two Content-Length",
    "Content-Length and Transfer-Encoding",
    "signed Content-Length",
}
"""Requests after which a server may close the connection; read one answer, then nothing more."""


@pytest.mark.parametrize("case", sorted(CASES))
async def test_fast_lane_answers_exactly_as_aiohttp_does_AHP_HTTP_001(gateway_factory, stub_factory, case):
    _stub, (fast, plain) = await _pair(gateway_factory, stub_factory)
    data = CASES[case]
    got = _comparable(await _exchange(fast.port, data))
    want = _comparable(await _exchange(plain.port, data))
    assert got == want
    if case == "intercept":
        assert got[0][0] == 200 and json.loads(got[0][2])["result"]["effects"] == []


async def test_fast_lane_serves_plain_requests_and_aiohttp_the_rest(gateway_factory, stub_factory):
    """The fast lane is really in use (its answers carry no ``Server`` header; aiohttp's do),
    and ``listen.fastLane: false`` turns it off."""
    _stub, (fast, plain) = await _pair(gateway_factory, stub_factory)
    [(status, headers, _)] = await _exchange(fast.port, CASES["intercept"])
    assert status == 200 and "server" not in headers and headers["content-type"] == "application/json"
    assert "date" in headers
    [(status, headers, _)] = await _exchange(fast.port, CASES["text/plain"])
    assert status == 415 and "server" in headers
    [(status, headers, _)] = await _exchange(plain.port, CASES["intercept"])
    assert status == 200 and "server" in headers
    for case in ("native claude-code", "native copilot with event", "native unknown harness"):
        [(status, headers, _)] = await _exchange(fast.port, CASES[case])
        assert "server" not in headers, case  # native HTTP hooks are hot too: served by the fast lane
    [(status, headers, _)] = await _exchange(fast.port, CASES["native percent-encoded harness"])
    assert "server" in headers


async def test_a_connection_moves_to_aiohttp_at_the_first_other_request_and_keeps_order(gateway_factory, stub_factory):
    """Fast, other, fast, sent pipelined in one segment and then one by one: answered in order."""
    stub, (fast, _plain) = await _pair(gateway_factory, stub_factory)
    first, second = _body(command="echo one"), _body(command="echo two")
    data = raw_request(first) + CASES["text/plain"] + raw_request(second)
    answers = await _exchange(fast.port, data, count=3)
    assert [a[0] for a in answers] == [200, 415, 200]
    assert "server" not in answers[0][1] and "server" in answers[2][1]  # aiohttp owns the rest
    commands = [r["params"]["event"]["tool"]["input"]["command"] for r in stub.received]
    assert commands == ["echo one", "echo two"]

    reader, writer = await asyncio.open_connection("127.0.0.1", fast.port)
    try:
        for data, status in ((raw_request(first), 200), (CASES["GET"], 405), (raw_request(second), 200)):
            writer.write(data)
            assert await _answer(reader) == status
    finally:
        await close(writer)


async def test_a_head_split_across_segments_is_served(gateway_factory, stub_factory):
    _stub, (fast, _plain) = await _pair(gateway_factory, stub_factory)
    data = raw_request(BODY)
    reader, writer = await asyncio.open_connection("127.0.0.1", fast.port)
    try:
        for cut in (3, 20, data.index(b"\r\n\r\n") + 2, data.index(b"\r\n\r\n") + 4, len(data) - 1):
            writer.write(data[:cut])
            await writer.drain()
            await asyncio.sleep(0)
            writer.write(data[cut:])
            assert await _answer(reader) == 200, cut
    finally:
        await close(writer)


async def test_an_oversized_head_goes_to_aiohttp_which_refuses_it(gateway_factory, stub_factory):
    _stub, (fast, plain) = await _pair(gateway_factory, stub_factory)
    data = _head(**{"Content-Type": "application/json", "X-Filler": "a" * (MAX_HEAD + 10)})
    got = await _exchange(fast.port, data)
    want = await _exchange(plain.port, data)
    assert _comparable(got) == _comparable(want) and got[0][0] in (400, 431)


@pytest.mark.parametrize("token, status", [(None, 401), ("wrong-token-value-000000000000", 401), (TOKEN, 200)])
async def test_bearer_refusals_match_aiohttp_section_12(gateway_factory, stub_factory, tmp_path, token, status):
    """Authentication from the headers before the body is used, with the same answer and
    ``WWW-Authenticate`` challenge as the aiohttp routes (protocol §12)."""
    tokens = tmp_path / "tokens.yaml"
    tokens.write_text(
        yaml.safe_dump([{"sha256": hashlib.sha256(TOKEN.encode()).hexdigest(), "principal": {"name": "ci"}}])
    )
    _stub, (fast, plain) = await _pair(
        gateway_factory, stub_factory, inbound={"auth": {"type": "bearer", "tokensFile": str(tokens)}}
    )
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    data = raw_request(BODY, headers=headers)
    got = await _exchange(fast.port, data)
    want = await _exchange(plain.port, data)
    assert got[0][0] == status
    assert _comparable(got) == _comparable(want)
    assert got[0][1].get("www-authenticate") == want[0][1].get("www-authenticate")


async def test_pipelining_cannot_make_the_fast_lane_buffer_without_bound(gateway_factory, stub_factory):
    """While a slow request is served, reading pauses once the client is ``AHEAD`` bytes ahead:
    what sits in the buffer stays under that plus one socket read, however much it sends."""
    stub, server, release = await _held(gateway_factory, stub_factory, limits={"maxBodyBytes": 65536})
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    flood = raw_request(BODY) * 20000  # ~46 MB of pipelined requests: more than loopback socket buffers hold
    send = asyncio.ensure_future(_send_all(writer, flood))
    try:
        await wait_for(lambda: len(stub.received) == 1)
        lane = server.lane
        assert lane is not None
        assert len(lane.connections) == 1
        for _ in range(20):
            await asyncio.sleep(0.02)
            assert lane.buffered <= AHEAD + 262144  # one read of the socket at most
        assert not send.done()  # the client is held back by TCP, not buffered in the gateway
    finally:
        release.set()
        send.cancel()
        await close(writer)


async def _held(gateway_factory, stub_factory, *, limits: dict[str, Any] | None = None, **extra: Any):
    """A gateway whose one upstream holds every answer until ``release`` is set."""
    release = asyncio.Event()

    async def slow(request):
        await release.wait()
        return result(request, [])

    stub = await stub_factory(slow)
    cfg = gateway_config([hook("org.example.up", stub.url, timeout=10000)], **extra)
    cfg["limits"].update({"deadlineMs": 20000, **(limits or {})})
    return stub, await gateway_factory(cfg), release


async def _send_all(writer: asyncio.StreamWriter, data: bytes) -> None:
    writer.write(data)
    await writer.drain()


async def test_drain_answers_the_request_being_served_and_closes_the_connection(gateway_factory, stub_factory):
    stub, server, release = await _held(
        gateway_factory, stub_factory, shutdown={"drainDelaySeconds": 0, "drainTimeoutSeconds": 5}
    )
    idle_reader, idle_writer = await asyncio.open_connection("127.0.0.1", server.port)
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    writer.write(raw_request(BODY))
    await writer.drain()
    await wait_for(lambda: len(stub.received) == 1)
    stopping = asyncio.ensure_future(server.stop())
    assert await read_until_closed(idle_reader, timeout=5.0) == b""  # idle: closed at once, no answer
    assert not stopping.done()
    release.set()
    answer = await read_until_closed(reader, timeout=5.0)
    assert answer is not None and status_of(answer) == 200
    assert b"Connection: close" in answer
    await asyncio.wait_for(stopping, 10)
    await close(writer)
    await close(idle_writer)


async def test_a_handed_off_connection_is_not_the_fast_lanes_any_more(gateway_factory, stub_factory):
    _stub, (fast, _plain) = await _pair(gateway_factory, stub_factory)
    reader, writer = await asyncio.open_connection("127.0.0.1", fast.port)
    try:
        writer.write(CASES["GET"])
        await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
        lane = fast.lane
        assert lane is not None
        assert not any(isinstance(c, FastLane) and not c.handed_off for c in lane.connections)
    finally:
        await close(writer)


async def test_a_body_still_on_its_way_is_authenticated_from_the_head_section_12(
    gateway_factory, stub_factory, tmp_path
):
    """A refused caller is answered without the gateway waiting for its body; as on aiohttp, the
    body is then read and skipped and the connection serves the next request (closing with the
    body in flight could reset the connection before the client read its 401). A body that never
    comes closes the connection at the body timeout, without a second answer. An accepted
    caller's body is awaited."""
    tokens = tmp_path / "tokens.yaml"
    tokens.write_text(
        yaml.safe_dump([{"sha256": hashlib.sha256(TOKEN.encode()).hexdigest(), "principal": {"name": "ci"}}])
    )
    stub, (fast, _plain) = await _pair(
        gateway_factory,
        stub_factory,
        limits={"bodyTimeoutMs": 1500},
        inbound={"auth": {"type": "bearer", "tokensFile": str(tokens)}},
    )
    head = raw_request(BODY)[: -len(BODY)]
    reader, writer = await asyncio.open_connection("127.0.0.1", fast.port)
    try:
        writer.write(head)  # no Authorization, body not sent yet
        assert await _answer(reader) == 401
        writer.write(BODY + raw_request(BODY, headers={"Authorization": f"Bearer {TOKEN}"}))
        assert await _answer(reader) == 200
    finally:
        await close(writer)
    assert len(stub.received) == 1

    reader, writer = await asyncio.open_connection("127.0.0.1", fast.port)
    writer.write(head)  # the body never comes
    answer = await read_until_closed(reader, timeout=10.0)
    assert answer is not None and status_of(answer) == 401 and b" 408 " not in answer
    await close(writer)

    authorized = raw_request(BODY, headers={"Authorization": f"Bearer {TOKEN}"})
    cut = authorized.index(b"\r\n\r\n") + 4
    reader, writer = await asyncio.open_connection("127.0.0.1", fast.port)
    try:
        writer.write(authorized[:cut])
        await writer.drain()
        await wait_for(lambda: bool(fast.lane and any(c.authenticating for c in fast.lane.connections)))
        assert len(stub.received) == 1  # the authenticated request above, and not this one yet
        writer.write(authorized[cut:])
        head_bytes = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
        assert status_of(head_bytes) == 200
    finally:
        await close(writer)
    assert len(stub.received) == 2


async def test_idle_timeout_counts_from_the_last_answer(gateway_factory, stub_factory):
    """One idle timer per idle period: a connection used again is closed a whole
    ``idleTimeoutSeconds`` after its last answer, not after its first."""
    stub = await stub_factory()
    cfg = gateway_config([hook("org.example.up", stub.url)])
    cfg["limits"]["idleTimeoutSeconds"] = 1.0
    server = await gateway_factory(cfg)
    loop = asyncio.get_running_loop()
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    try:
        for pause in (0.0, 0.5):
            await asyncio.sleep(pause)
            writer.write(raw_request(_body()))
            assert await _answer(reader) == 200
            answered = loop.time()
        closed = asyncio.ensure_future(reader.read())
        done, _ = await asyncio.wait({closed}, timeout=0.8)
        if loop.time() < answered + 1.0:
            assert not done, "closed before a whole idle period after the last answer"
        assert await asyncio.wait_for(closed, 5) == b""
        assert loop.time() >= answered + 1.0
    finally:
        await close(writer)
