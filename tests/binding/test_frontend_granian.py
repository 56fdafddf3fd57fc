"""The opt-in granian front end (``listen.server: granian``) keeps the HTTP binding of the aiohttp
one (AHP-HTTP-001): POST + application/json only, 413 without reading an oversized body,
notifications 202 without a body, work cancelled when the harness disconnects, in-flight
requests finished on shutdown."""

from __future__ import annotations

import asyncio
import json
import socket

import pytest

from tests.support.client import post, wait_for
from tests.support.config import gateway_config, hook
from tests.support.events import intercept, result, tool_before

pytest.importorskip("granian")


def granian_config(hooks, **extra):
    cfg = gateway_config(hooks, **extra)
    cfg["listen"]["server"] = "granian"
    return cfg


@pytest.fixture
async def gw(gateway_factory, stub_factory):
    stub = await stub_factory()
    server = await gateway_factory(granian_config([hook("org.example.up", stub.url)]))
    server.stub = stub  # type: ignore[attr-defined]
    return server


@pytest.mark.spec("AHP-HTTP-001")
async def test_intercept_and_notification_over_granian(gw, http):
    req = intercept(tool_before())
    assert await post(http, gw.url, req) == (200, result(req, []))
    assert gw.stub.received[0]["params"]["event"]["id"] == req["params"]["event"]["id"]
    note = {"jsonrpc": "2.0", "method": "hooks/observe", "params": {"protocolVersion": "draft", "event": tool_before()}}
    assert await post(http, gw.url, note) == (202, None)
    status, body = await post(http, gw.url, b"{not json")
    assert status == 200 and body["error"]["code"] == -32700


@pytest.mark.spec("AHP-HTTP-001")
async def test_granian_rejects_other_methods_paths_and_media_types(gw, http):
    async with http.get(gw.url) as response:
        assert response.status == 405
    async with http.post(gw.url + "other", data=b"{}", headers={"Content-Type": "application/json"}) as response:
        assert response.status == 404
    for media in ("text/plain", "application/jsonx", "application/json-seq", ""):
        status, _ = await post(http, gw.url, intercept(tool_before()), content_type=media)
        assert status == 415, media
    for media in ("application/json; charset=utf-8", "Application/JSON"):
        status, _ = await post(http, gw.url, intercept(tool_before()), content_type=media)
        assert status == 200, media
    assert len(gw.stub.received) == 2


@pytest.mark.spec("AHP-HTTP-001")
async def test_granian_oversized_body_is_413_without_reading_it(gateway_factory, stub_factory, http):
    stub = await stub_factory()
    cfg = granian_config([hook("org.example.up", stub.url)])
    cfg["limits"]["maxBodyBytes"] = 2048
    server = await gateway_factory(cfg)
    big = intercept(tool_before("x" * 5000))
    assert (await post(http, server.url, big))[0] == 413

    async def chunks():  # no Content-Length: counted while reading
        yield json.dumps(big).encode()

    async with http.post(server.url, data=chunks(), headers={"Content-Type": "application/json"}) as response:
        assert response.status == 413

    # a declared 100 MB body: answered from the headers alone, the connection closed
    def declare_huge() -> bytes:
        with socket.create_connection(("127.0.0.1", server.port), timeout=5) as sock:
            sock.sendall(
                b"POST / HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100000000\r\n\r\n{"
            )
            answer = b""
            while chunk := sock.recv(4096):
                answer += chunk
            return answer

    answer = await asyncio.to_thread(declare_huge)
    assert answer.startswith(b"HTTP/1.1 413")
    assert stub.received == []


@pytest.mark.spec("AHP-HTTP-001")
async def test_granian_truncated_body_is_never_evaluated(gw):
    """A client that declares more bytes than it sends and half-closes gets 400, even when what
    it sent is a complete, valid intercept: granian ends the body stream quietly, so the front
    end compares the bytes read with the declared length."""
    body = json.dumps(intercept(tool_before())).encode()

    def truncated() -> bytes:
        with socket.create_connection(("127.0.0.1", gw.port), timeout=5) as sock:
            head = f"POST / HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {len(body) + 100}\r\n\r\n"
            sock.sendall(head.encode() + body)
            sock.shutdown(socket.SHUT_WR)
            answer = b""
            while chunk := sock.recv(4096):
                answer += chunk
            return answer

    answer = await asyncio.to_thread(truncated)
    assert answer.startswith(b"HTTP/1.1 400"), answer[:200]
    assert gw.stub.received == []


@pytest.mark.spec("AHP-HTTP-001")
async def test_granian_harness_disconnect_cancels_inflight_upstream_calls(gateway_factory, stub_factory, http):
    cancelled = asyncio.Event()

    async def hang(r):
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return result(r, [])

    a = await stub_factory(hang)
    cfg = granian_config([hook("org.example.a", a.url, timeout=10000)])
    cfg["limits"]["deadlineMs"] = 20000
    cfg["frontend"] = {"timeoutMs": 25000}
    gw = await gateway_factory(cfg)
    task = asyncio.ensure_future(post(http, gw.url, intercept(tool_before())))
    await wait_for(lambda: len(a.received) == 1)
    task.cancel()
    await asyncio.wait_for(cancelled.wait(), 5)


async def test_granian_stop_finishes_inflight_requests(gateway_factory, stub_factory, http):
    gate = asyncio.Event()

    async def slow(r):
        await gate.wait()
        return result(r, [])

    a = await stub_factory(slow)
    gw = await gateway_factory(granian_config([hook("org.example.a", a.url, timeout=5000)]))
    req = intercept(tool_before())
    inflight = asyncio.ensure_future(post(http, gw.url, req))
    await wait_for(lambda: len(a.received) == 1)
    port = gw.port
    stopping = asyncio.ensure_future(gw.stop())

    async def refused() -> bool:
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            return True
        writer.close()
        return False

    for _ in range(500):  # until the listener is closed; the request still waits on its upstream
        if await refused():
            break
        await asyncio.sleep(0.01)
    else:
        raise AssertionError("the listener kept accepting during shutdown")
    assert not inflight.done()
    gate.set()
    assert await asyncio.wait_for(inflight, 10) == (200, result(req, []))
    await asyncio.wait_for(stopping, 10)


async def test_granian_passes_headers_to_routing_and_tracing(gateway_factory, stub_factory, http):
    """Allow-listed headers reach CEL, others do not; the harness's traceparent continues upstream."""
    up = await stub_factory()
    cfg = granian_config(
        [hook("org.example.a", up.url, when='headers["x-tenant"] == "acme" && !("authorization" in headers)')],
        headers=["X-Tenant"],
    )
    cfg["tracing"] = {"propagate": True}
    gw = await gateway_factory(cfg)
    body = json.dumps(intercept(tool_before()))
    trace = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    for tenant in ("acme", "other"):
        async with http.post(
            gw.url,
            data=body,
            headers={
                "Content-Type": "application/json",
                "X-Tenant": tenant,
                "Authorization": "Bearer x",
                "traceparent": trace,
            },
        ) as resp:
            assert resp.status == 200
    assert len(up.received) == 1
    assert up.headers[0]["traceparent"].split("-")[1] == trace.split("-")[1]
