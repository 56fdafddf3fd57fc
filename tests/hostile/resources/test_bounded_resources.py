"""Resources a caller, an upstream or an observer can make the gateway hold stay bounded (issue
28): what is measured is the byte counters the code exposes, polled to a deadline."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
from typing import Any

import pytest
import yaml
from aiohttp import web

from gateway.binding import h1
from gateway.config.issues import ConfigError
from gateway.config.load import load
from tests.support.client import post, wait_for
from tests.support.config import gateway_config, hook
from tests.support.events import intercept, tool_before
from tests.support.fault_tools import close, raw_request, read_response

TOKEN = "bounded-resources-token-0123456789abcdef"
MIB = 1 << 20


def _tokens(tmp_path: Any) -> dict[str, Any]:
    tokens = tmp_path / "tokens.yaml"
    tokens.write_text(
        yaml.safe_dump([{"sha256": hashlib.sha256(TOKEN.encode()).hexdigest(), "principal": {"name": "ci"}}])
    )
    return {"auth": {"type": "bearer", "tokensFile": str(tokens)}}


def _head(length: int, token: str) -> bytes:
    """A fast-lane request head announcing ``length`` body bytes."""
    whole = raw_request(b"", headers={"Authorization": f"Bearer {token}"})
    return whole.replace(b"Content-Length: 0", b"Content-Length: %d" % length)


# ------------------------------------------------------------------ 1. the fast lane, §12
def test_a_skipped_body_is_discarded_as_it_comes_AHP_HTTP_001_section_12() -> None:
    """Sans-IO: once a head is refused, no byte of its body stays in the reader's buffer."""
    body = json.dumps(intercept(tool_before())).encode()
    data = raw_request(body)
    end = data.index(b"\r\n\r\n") + 4
    reader = h1.Reader(b"/")
    reader.feed(data[:end])
    assert isinstance(reader.next_event(len(body)), h1.Head)
    reader.skip()
    for offset in range(end, len(data) - 1):
        reader.feed(data[offset : offset + 1])
        assert reader.next_event(len(body)) is h1.NEED_BODY
        assert reader.buffered == 0
    reader.feed(data[-1:] + raw_request(b"{}"))
    assert reader.next_event(len(body)) == h1.SKIPPED
    event = reader.next_event(len(body))
    assert isinstance(event, h1.Request) and event.body == b"{}"


async def test_refused_callers_bodies_are_not_stored_section_12(gateway_factory, stub_factory, tmp_path):
    """Many connections with a wrong token each send all but the last byte of a 1 MiB body: the
    401 comes from the head and the bodies are read and discarded, so what the fast lane holds
    stays near zero, not connections × maxBodyBytes (it did: 300 connections added 301 MiB)."""
    stub = await stub_factory()
    cfg = gateway_config([hook("org.example.up", stub.url)], inbound=_tokens(tmp_path))
    cfg["limits"].update({"maxBodyBytes": 2 * MIB, "bodyTimeoutMs": 60000})
    server = await gateway_factory(cfg)
    lane = server.lane
    assert lane is not None
    count = 24
    conns = [await asyncio.open_connection("127.0.0.1", server.port) for _ in range(count)]
    try:
        for _reader, writer in conns:
            writer.write(_head(MIB, "wrong-token-value-000000000000"))
        for reader, _writer in conns:
            status, _headers, _body, _ = await read_response(reader, 20.0)
            assert status == 401
        sends = [asyncio.ensure_future(_send(writer, b"x" * (MIB - 1))) for _reader, writer in conns]
        await asyncio.wait_for(asyncio.gather(*sends), 60)
        await wait_for(lambda: len(lane.connections) == count, timeout=20)
        await wait_for(lambda: lane.buffered < MIB, timeout=30)  # was count × MiB: every body kept
        assert len(stub.received) == 0
    finally:
        for _reader, writer in conns:
            await close(writer)


async def test_the_body_is_not_read_while_the_caller_is_authenticated_section_12(
    gateway_factory, stub_factory, tmp_path
):
    """Reading pauses at the head until authentication decides: a caller whose authentication
    is slow (an introspection endpoint) cannot have its body buffered meanwhile; refused, its
    body is discarded and the connection serves its next request."""
    stub = await stub_factory()
    cfg = gateway_config([hook("org.example.up", stub.url)], inbound=_tokens(tmp_path))
    cfg["limits"].update({"maxBodyBytes": 8 * MIB, "bodyTimeoutMs": 60000})
    server = await gateway_factory(cfg)
    lane = server.lane
    assert lane is not None and lane.authenticate is not None
    release = asyncio.Event()
    authenticate = lane.authenticate

    async def slow(headers: Any, peer: Any) -> Any:
        await release.wait()
        return await authenticate(headers, peer)

    lane.authenticate = slow
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    size = 8 * MIB - 1
    send = asyncio.ensure_future(_send(writer, _head(size + 1, "wrong-token-value-000000000000") + b"x" * size))
    try:
        await wait_for(lambda: lane.buffered > 0, timeout=10)
        for _ in range(30):
            await asyncio.sleep(0.02)
            assert lane.buffered <= MAX_READ  # one socket read beyond the head, at most
        assert not send.done()  # held back by TCP, not buffered by the gateway
        release.set()
        status, _headers, _body, _ = await read_response(reader, 20.0)
        assert status == 401
        await asyncio.wait_for(send, 60)
        await wait_for(lambda: lane.buffered == 0, timeout=20)
        lane.authenticate = authenticate
        body = json.dumps(intercept(tool_before())).encode()
        writer.write(b"x" + raw_request(body, headers={"Authorization": f"Bearer {TOKEN}"}))
        status, _headers, _body, _ = await read_response(reader, 20.0)
        assert status == 200
    finally:
        release.set()
        send.cancel()
        await close(writer)


MAX_READ = 262144 + 65536
"""One read of the socket (asyncio reads at most 256 KiB) plus a head."""


async def _send(writer: asyncio.StreamWriter, data: bytes) -> None:
    writer.write(data)
    await writer.drain()


# ------------------------------------------------------------------ 5. uploads.path, §13
async def test_uploads_path_equal_to_listen_path_is_a_config_issue_with_its_line_AHP_UPLOAD_section_13(
    gateway_factory, tmp_path
):
    """The two routes cannot share a path: ``check`` and ``serve`` share the loader, so it is an
    issue naming the file and the line of ``uploads.path``, not a traceback when serving."""
    cfg = gateway_config([hook("org.example.up", "http://127.0.0.1:9/")], uploads={"path": "/hooks"})
    cfg["listen"]["path"] = "/hooks"
    path = tmp_path / "gateway.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    with pytest.raises(ConfigError) as info:
        load(path)
    (issue,) = [i for i in info.value.issues if i.path == "$.uploads.path"]
    assert issue.file == str(path) and issue.severity == "error"
    lines = path.read_text().splitlines()
    assert issue.line is not None and "path: /hooks" in lines[issue.line - 1]
    assert lines[issue.line - 2].strip() == "uploads:"
    assert "listen.path" in issue.message


def test_uploads_path_on_a_native_hook_target_is_a_config_issue_AHP_UPLOAD_section_13(tmp_path):
    """``/native/<harness>`` is the native hooks' route: an upload receiver there would be served
    as a native hook by the fast lane and as an upload by aiohttp."""
    cfg = gateway_config([hook("org.example.up", "http://127.0.0.1:9/")], uploads={"path": "/native/files"})
    path = tmp_path / "gateway.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    with pytest.raises(ConfigError) as info:
        load(path)
    assert [i.path for i in info.value.issues] == ["$.uploads.path"]


# ------------------------------------------------------------------ 4. the observation queue, §8.3
def _note(text: str) -> dict[str, Any]:
    event = tool_before()
    event["items"] = [{"id": "p", "kind": "text", "mediaType": "text/plain", "selection": "body", "text": text}]
    return {"jsonrpc": "2.0", "method": "hooks/observe", "params": {"protocolVersion": "draft", "event": event}}


async def test_the_observation_queue_is_bounded_in_bytes_AHP_OBS_section_8_3(gateway_factory, stub_factory, http):
    """A slow observer and large notifications: what is queued stays within ``observe.queueBytes``
    (it grew with ``queueSize`` × body: 800 of 1 MiB held ~0.8 GiB); the rest is dropped and
    counted as ``queue_full``, and what was kept is delivered once the observer answers."""
    from tests.support.telemetry import Capture

    slow = await stub_factory()
    slow.observe_gate = asyncio.Event()
    capture = Capture()
    observer = {
        "id": "org.example.slow",
        "transport": {"type": "http", "url": slow.url},
        "subscriptions": [{"mode": "observe", "events": ["*"], "content": {"default": "body"}}],
    }
    limit = 2 * MIB
    cfg = gateway_config([observer], observe={"queueSize": 2048, "queueBytes": limit, "workers": 1})
    server = await gateway_factory(cfg, telemetry=capture)
    queue = server.gateway.observer
    peak = 0
    for _ in range(24):
        status, _ = await post(http, server.url, _note("x" * (256 * 1024)))
        assert status == 202
        peak = max(peak, queue.queued_bytes)
    assert peak <= limit
    dropped = [status for status in capture.observed if status != "queued"]
    assert dropped and set(dropped) == {"queue_full"}
    kept = capture.observed.count("queued")
    assert kept + len(dropped) == 24 and kept <= limit // (256 * 1024)
    slow.observe_gate.set()
    await wait_for(lambda: len(slow.observed) == kept, timeout=20)
    await wait_for(lambda: queue.queued_bytes == 0, timeout=20)


def test_observe_queue_bytes_is_validated_AHP_OBS_section_8_3(tmp_path):
    """``observe.queueBytes`` is a checked setting: too small is an error where it is written,
    below ``limits.maxBodyBytes`` a warning (such notifications could never be queued)."""
    cfg = gateway_config([hook("org.example.up", "http://127.0.0.1:9/")], observe={"queueBytes": 10})
    path = tmp_path / "gateway.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    with pytest.raises(ConfigError) as info:
        load(path)
    (issue,) = info.value.issues
    assert issue.path == "$.observe.queueBytes" and issue.line is not None
    cfg["observe"]["queueBytes"] = 4096
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    loaded = load(path)
    assert loaded.config.observe.queueBytes == 4096
    assert any(w.path == "$.observe.queueBytes" for w in loaded.warnings)


# ------------------------------------------------------------------ 2. re-upload, §13.2
def _rss() -> int:
    """Resident set size of this process, in bytes."""
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _attachments_event(refs: list[str], index: int) -> dict[str, Any]:
    """A model.request.before event whose one message carries every ref as an attachment."""
    from tests.support.uploads import model_request

    event = model_request(refs[0])
    event["id"] = f"evt-bounded-{index}"
    parts = event["items"][0]["parts"]
    template = parts[1]
    parts[1:] = [{**template, "id": f"image{n}", "body": {"ref": ref}} for n, ref in enumerate(refs)]
    return event


class _Hanging:
    """An upstream upload receiver that reads each body and never answers."""

    def __init__(self) -> None:
        self.started = 0
        self.gate = asyncio.Event()

    async def handle(self, request: web.Request) -> web.StreamResponse:
        self.started += 1
        await request.read()
        await self.gate.wait()
        return web.Response(status=500)


async def _upload_gateway(
    gateway_factory, stub_factory, tmp_path, monkeypatch, receiver_url, timeout_ms, reuse_seconds=300.0
):
    from tests.support.tokens import TOKEN_A, tokens_file
    from tests.support.uploads import upload_hook

    tokens_file(tmp_path / "tokens.yaml", (TOKEN_A, "team-a", {"tenant": "a"}))
    upstream = await stub_factory()
    binding = {"endpoint": receiver_url, "timeoutMs": timeout_ms, "maxBytes": 16 * MIB}
    cfg = gateway_config(
        [upload_hook("org.example.with-upload", upstream.url, binding)],
        inbound={"auth": {"type": "bearer", "tokensFile": "tokens.yaml"}},
        uploads={
            "path": "/uploads",
            "maxBytes": 16 * MIB,
            "reuseSeconds": reuse_seconds,
            "storage": {"memoryBytes": 1024, "spoolDir": "spool", "totalBytes": 64 * MIB},
        },
        limits={"maxBodyBytes": 1048576, "deadlineMs": timeout_ms + 2000},
        frontend={"timeoutMs": timeout_ms + 3000},
    )
    return await gateway_factory(cfg), upstream


async def test_re_upload_streams_shares_and_bounds_what_is_in_flight_AHP_UPLOAD_section_13_2(
    gateway_factory, stub_factory, tmp_path, monkeypatch, http
):
    """Spooled uploads, a receiver that never answers, many concurrent intercepts referring to all
    of them: one transfer per (attachment, receiver) at a time, within the in-flight byte cap,
    streamed from the spool (it was one whole copy per intercept and attachment: 8 × 8 MiB and 16
    intercepts took RSS from 100 MiB to 1.9 GiB)."""
    from gateway.uploads import forward
    from tests.support.servers import start_app as _start
    from tests.support.tokens import TOKEN_A
    from tests.support.upload_calls import call, upload

    monkeypatch.setattr(forward, "IN_FLIGHT_BYTES", 4 * MIB)
    calls: list[asyncio.Future[Any]] = []
    hanging = _Hanging()
    app = web.Application(client_max_size=32 * MIB)
    app.router.add_post("/content", hanging.handle)
    runner, port = await _start(app)
    try:
        server, upstream = await _upload_gateway(
            gateway_factory, stub_factory, tmp_path, monkeypatch, f"http://127.0.0.1:{port}/content", 4000
        )
        forwarder = server.assembly.forwarder
        assert forwarder is not None
        refs = []
        for n in range(8):
            status, receipt = await upload(http, server, bytes([n]) * MIB, token=TOKEN_A)
            assert status == 201
            refs.append(receipt["ref"])
        before = _rss()
        calls += [asyncio.ensure_future(call(http, server, _attachments_event(refs, i))) for i in range(16)]
        await wait_for(lambda: hanging.started >= 4, timeout=20)
        for _ in range(40):
            await asyncio.sleep(0.025)
            assert hanging.started <= 4  # 4 MiB in flight: four of the eight transfers, shared by all
            assert forwarder.in_flight_bytes <= 4 * MIB
        assert _rss() - before < 48 * MIB
        answers = await asyncio.wait_for(asyncio.gather(*calls), 30)
        assert all("result" in answer for answer in answers)
        assert hanging.started <= 8
        assert len(upstream.received) == 16
    finally:
        for pending in calls:
            pending.cancel()
        hanging.gate.set()
        await runner.cleanup()


async def test_a_spooled_upload_is_streamed_to_the_upstream_receiver_AHP_UPLOAD_section_13_2(
    gateway_factory, stub_factory, tmp_path, monkeypatch, http
):
    """The spool file is sent in chunks with an exact Content-Length (never chunked coding, never
    read whole into memory) and the upstream's receipt is verified as before."""
    from gateway.uploads.store import UploadStore
    from tests.support.servers import start_app as _start
    from tests.support.tokens import TOKEN_A
    from tests.support.upload_calls import call, upload
    from tests.support.uploads import Receiver, image_part

    def whole(stored: Any) -> bytes:
        raise AssertionError("a spooled upload was read whole")

    monkeypatch.setattr(UploadStore, "read", staticmethod(whole))
    receiver = Receiver(None)
    app = web.Application(client_max_size=32 * MIB)
    app.router.add_post("/content", receiver.handle)
    runner, port = await _start(app)
    try:
        server, upstream = await _upload_gateway(
            gateway_factory, stub_factory, tmp_path, monkeypatch, f"http://127.0.0.1:{port}/content", 4000
        )
        data = os.urandom(3 * MIB + 17)
        status, receipt = await upload(http, server, data, token=TOKEN_A)
        assert status == 201
        await call(http, server, _attachments_event([receipt["ref"]], 0))
        [(headers, sent)] = receiver.requests
        assert sent == data and headers["Content-Length"] == str(len(data))
        assert "Transfer-Encoding" not in headers and "Content-Disposition" not in headers
        [request] = upstream.received
        assert image_part(request["params"]["event"])["body"]["ref"] == "urn:receiver:1"
    finally:
        await runner.cleanup()


# ------------------------------------------------------------------ 3. reuse of confirmed refs, §13.2
async def _reuse_setup(gateway_factory, stub_factory, tmp_path, monkeypatch, http, reuse_seconds):
    from tests.support.servers import start_app as _start
    from tests.support.uploads import Receiver

    receiver = Receiver(None)
    app = web.Application()
    app.router.add_post("/content", receiver.handle)
    runner, port = await _start(app)
    server, upstream = await _upload_gateway(
        gateway_factory, stub_factory, tmp_path, monkeypatch, f"http://127.0.0.1:{port}/content", 2000, reuse_seconds
    )
    return runner, receiver, server, upstream


def _sent_ref(upstream: Any, index: int) -> str:
    from tests.support.uploads import image_part

    ref: str = image_part(upstream.received[index]["params"]["event"])["body"]["ref"]
    return ref


async def test_a_confirmed_ref_is_reused_only_for_reuse_seconds_AHP_UPLOAD_section_13_2(
    gateway_factory, stub_factory, tmp_path, monkeypatch, http
):
    """There is no expiry protocol and the receiver's retention is its own: a confirmed ref is
    reused for ``uploads.reuseSeconds``, then the same bytes are uploaded again (it was reused
    forever, long after the receiver had let it go)."""
    from tests.support.tokens import TOKEN_A
    from tests.support.upload_calls import call, upload
    from tests.support.uploads import PNG

    runner, receiver, server, upstream = await _reuse_setup(
        gateway_factory, stub_factory, tmp_path, monkeypatch, http, 60.0
    )
    try:
        forwarder = server.assembly.forwarder
        assert forwarder is not None
        now = [1000.0]
        # private: the served forwarder's clock (its constructor takes one); waiting reuseSeconds for real is slow
        forwarder._clock = lambda: now[0]
        _, receipt = await upload(http, server, PNG, token=TOKEN_A)
        await call(http, server, _attachments_event([receipt["ref"]], 0))
        await call(http, server, _attachments_event([receipt["ref"]], 1))
        assert len(receiver.requests) == 1 and _sent_ref(upstream, 1) == "urn:receiver:1"
        now[0] += 59.0
        await call(http, server, _attachments_event([receipt["ref"]], 2))
        assert len(receiver.requests) == 1
        now[0] += 2.0  # confirmed 61 s ago
        await call(http, server, _attachments_event([receipt["ref"]], 3))
        assert len(receiver.requests) == 2 and receiver.requests[1][1] == PNG
        assert _sent_ref(upstream, 3) == "urn:receiver:2"
    finally:
        await runner.cleanup()


async def test_a_ref_the_upstream_reports_unknown_is_not_reused_AHP_UPLOAD_section_13_2(
    gateway_factory, stub_factory, tmp_path, monkeypatch, http
):
    """An event receiver may answer 404 for referenced content it does not have: the refs it was
    sent are dropped and the next delivery uploads the same bytes again."""
    from tests.support.events import result
    from tests.support.tokens import TOKEN_A
    from tests.support.upload_calls import call, upload
    from tests.support.uploads import PNG

    runner, receiver, server, upstream = await _reuse_setup(
        gateway_factory, stub_factory, tmp_path, monkeypatch, http, 300.0
    )
    try:
        answers = iter([(404, "not found"), None])

        def answer(body: dict[str, Any]) -> Any:
            planned = next(answers, None)
            return planned if planned is not None else result(body, [])

        upstream.answer = answer
        _, receipt = await upload(http, server, PNG, token=TOKEN_A)
        await call(http, server, _attachments_event([receipt["ref"]], 0))
        assert len(receiver.requests) == 1 and _sent_ref(upstream, 0) == "urn:receiver:1"
        await call(http, server, _attachments_event([receipt["ref"]], 1))
        assert len(receiver.requests) == 2 and receiver.requests[1][1] == PNG
        assert _sent_ref(upstream, 1) == "urn:receiver:2"
        await call(http, server, _attachments_event([receipt["ref"]], 2))
        assert len(receiver.requests) == 2 and _sent_ref(upstream, 2) == "urn:receiver:2"  # reused again
    finally:
        await runner.cleanup()


async def test_an_observer_answering_404_has_its_refs_dropped_too_AHP_UPLOAD_section_13_2(
    gateway_factory, stub_factory, tmp_path, monkeypatch, http
):
    """Observations are re-uploaded the same way: an observer that answers 404 to an observation
    carrying re-uploaded refs gets the bytes uploaded again with the next one."""
    from tests.support.servers import start_app as _start
    from tests.support.tokens import TOKEN_A, tokens_file
    from tests.support.upload_calls import upload
    from tests.support.uploads import PNG, Receiver, image_part

    receiver = Receiver(None)
    seen: list[dict[str, Any]] = []

    async def observe(request: web.Request) -> web.StreamResponse:
        seen.append(json.loads(await request.read()))
        return web.Response(status=404 if len(seen) == 1 else 202)

    app = web.Application()
    app.router.add_post("/content", receiver.handle)
    app.router.add_post("/", observe)
    runner, port = await _start(app)
    try:
        tokens_file(tmp_path / "tokens.yaml", (TOKEN_A, "team-a", {"tenant": "a"}))
        binding = {"endpoint": f"http://127.0.0.1:{port}/content", "timeoutMs": 2000, "maxBytes": MIB}
        sub = {"mode": "observe", "events": ["*"], "content": {"default": "body"}, "upload": binding}
        hook_ = {"id": "org.example.audit", "transport": {"type": "http", "url": f"http://127.0.0.1:{port}/"}}
        cfg = gateway_config(
            [{**hook_, "subscriptions": [sub]}],
            inbound={"auth": {"type": "bearer", "tokensFile": "tokens.yaml"}},
            uploads={"path": "/uploads", "maxBytes": MIB},
        )
        server = await gateway_factory(cfg)
        _, receipt = await upload(http, server, PNG, token=TOKEN_A)
        headers = {"Content-Type": "application/json", "Authorization": f"Bearer {TOKEN_A}"}
        for index in range(3):
            note = {
                "jsonrpc": "2.0",
                "method": "hooks/observe",
                "params": {"protocolVersion": "draft", "event": _attachments_event([receipt["ref"]], index)},
            }
            async with http.post(server.url, data=json.dumps(note), headers=headers) as response:
                assert response.status == 202
            await wait_for(lambda index=index: len(seen) == index + 1, timeout=10)
        refs = [image_part(note["params"]["event"])["body"]["ref"] for note in seen]
        assert refs == ["urn:receiver:1", "urn:receiver:2", "urn:receiver:2"]
        assert len(receiver.requests) == 2
    finally:
        await runner.cleanup()
