"""Slow clients and connection floods on the harness-facing listener (issue: slow clients
exhausted the gateway): header, body and idle timeouts, per-listener connection caps, and the
admin listener (/healthz) staying up while the main listener is flooded. Raw sockets throughout:
an HTTP client library would never send a request this badly."""

from __future__ import annotations

import asyncio
import json
import os
import re
import resource
import subprocess
import sys
from pathlib import Path

import aiohttp
import pytest
import yaml

from gateway.server.limits import FD_RESERVE, clamp_main_cap
from tests.support.client import wait_for
from tests.support.config import gateway_config, hook
from tests.support.events import intercept, tool_before
from tests.support.fault_tools import close, healthz, metric, raw_request, read_response, read_until_closed, status_of
from tests.support.paths import ROOT

HEADER_TIMEOUT_MS = 400


def _limits(**extra: object) -> dict[str, object]:
    limits: dict[str, object] = {
        "maxBodyBytes": 65536,
        "deadlineMs": 2000,
        "headerTimeoutMs": HEADER_TIMEOUT_MS,
        "bodyTimeoutMs": 400,
        "idleTimeoutSeconds": 30,
    }
    limits.update(extra)
    return limits


@pytest.fixture
async def gw(gateway_factory, stub_factory):
    async def factory(**limits: object):
        stub = await stub_factory()
        return await gateway_factory(gateway_config([hook("org.example.up", stub.url)], limits=_limits(**limits)))

    return factory


async def _connect(port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection("127.0.0.1", port)


async def _drip(writer: asyncio.StreamWriter, data: bytes, every: float) -> None:
    """One byte per ``every`` seconds until the peer closes or the data runs out."""
    for index in range(len(data)):
        if writer.is_closing():
            return
        try:
            writer.write(data[index : index + 1])
            await writer.drain()
        except (ConnectionError, RuntimeError):
            return
        await asyncio.sleep(every)


def _request_bytes() -> bytes:
    return raw_request(json.dumps(intercept(tool_before())).encode())


async def test_header_drip_is_cut_at_the_header_timeout_although_bytes_keep_coming(gw, http):
    server = await gw()
    reader, writer = await _connect(server.port)
    header = b"POST / HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: " + b"a" * 400  # 400 bytes at 20 ms each = 8 s
    started = asyncio.get_running_loop().time()
    dripper = asyncio.ensure_future(_drip(writer, header, 0.02))
    answer = await read_until_closed(reader, timeout=5.0)
    elapsed = asyncio.get_running_loop().time() - started
    assert answer is not None, "a dripping client kept its connection past the header timeout"
    assert not dripper.done() or elapsed < 8, "the connection must close while bytes are still arriving"
    assert elapsed >= HEADER_TIMEOUT_MS / 1000 * 0.9
    assert status_of(answer) in (None, 408)
    dripper.cancel()
    await close(writer)
    assert (
        await metric(
            http, server.admin_port, "ahp_gateway_connections_closed_total", listener="main", reason="header_timeout"
        )
        == 1
    )


async def test_silent_connection_is_closed_at_the_header_timeout(gw):
    server = await gw()
    reader, writer = await _connect(server.port)
    assert await read_until_closed(reader, timeout=3.0) is not None
    await close(writer)


async def test_next_request_on_a_kept_alive_connection_has_its_own_header_timeout(gw):
    server = await gw()
    reader, writer = await _connect(server.port)
    writer.write(_request_bytes())
    await writer.drain()
    assert (await read_response(reader)).status == 200
    await asyncio.sleep(
        HEADER_TIMEOUT_MS / 1000 * 1.5
    )  # idle longer than the header timeout: still open (idle is 30 s)
    assert not reader.at_eof()
    dripper = asyncio.ensure_future(_drip(writer, b"POST / HTTP/1.1\r\nX-Slow: " + b"a" * 400, 0.02))
    assert await read_until_closed(reader, timeout=5.0) is not None
    dripper.cancel()
    await close(writer)


async def test_headers_in_several_segments_within_the_timeout_and_slow_upstreams_are_served(
    gateway_factory, stub_factory, http
):
    async def slow(request):
        await asyncio.sleep(HEADER_TIMEOUT_MS / 1000 * 1.5)  # longer than the header timeout: not a client delay
        return {"jsonrpc": "2.0", "id": request["id"], "result": {"protocolVersion": "draft", "effects": []}}

    stub = await stub_factory(slow)
    server = await gateway_factory(gateway_config([hook("org.example.up", stub.url)], limits=_limits()))
    reader, writer = await _connect(server.port)
    data = _request_bytes()
    for part in (data[:10], data[10:40], data[40:]):
        writer.write(part)
        await writer.drain()
        await asyncio.sleep(0.05)
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
    assert status_of(head) == 200
    await close(writer)


async def test_body_drip_gets_408_at_the_body_timeout(gw, http):
    server = await gw()
    reader, writer = await _connect(server.port)
    body = json.dumps(intercept(tool_before())).encode()
    head = raw_request(body)[: -len(body)]
    writer.write(head)
    await writer.drain()
    dripper = asyncio.ensure_future(_drip(writer, body, 0.05))
    answer = await read_until_closed(reader, timeout=5.0)
    assert answer is not None and status_of(answer) == 408
    dripper.cancel()
    await close(writer)
    assert (
        await metric(
            http, server.admin_port, "ahp_gateway_connections_closed_total", listener="main", reason="body_timeout"
        )
        == 1
    )


async def test_idle_keep_alive_connection_is_closed(gw):
    server = await gw(idleTimeoutSeconds=0.3)
    reader, writer = await _connect(server.port)
    writer.write(_request_bytes())
    await writer.drain()
    answer = await read_until_closed(reader, timeout=5.0)
    assert answer is not None and status_of(answer) == 200
    await close(writer)


async def test_flood_over_the_cap_is_refused_at_once_and_healthz_stays_up(gw, http):
    server = await gw(maxConnections=20, adminMaxConnections=4, headerTimeoutMs=20_000)
    held = [await _connect(server.port) for _ in range(20)]
    await wait_for(lambda: server_guard_open(server) == 20)
    refused = []
    for _ in range(30):
        reader, writer = await _connect(server.port)
        refused.append(await read_until_closed(reader, timeout=2.0))
        await close(writer)
    assert all(r is not None and status_of(r) == 503 for r in refused), refused[:3]
    assert await healthz(server.admin_port) == 200
    assert (
        await metric(http, server.admin_port, "ahp_gateway_connections_closed_total", listener="main", reason="limit")
        == 30
    )
    assert await metric(http, server.admin_port, "ahp_gateway_open_connections", listener="main") == 20
    for _, writer in held:
        await close(writer)
    await wait_for(lambda: server_guard_open(server) == 0)
    async with http.post(
        server.url, data=json.dumps(intercept(tool_before())), headers={"Content-Type": "application/json"}
    ) as r:
        assert r.status == 200


async def test_admin_flood_is_capped_separately_and_the_main_listener_serves(gw, http):
    server = await gw(maxConnections=50, adminMaxConnections=3, headerTimeoutMs=20_000)
    held = [await _connect(server.admin_port) for _ in range(3)]
    reader, writer = await _connect(server.admin_port)
    assert status_of(await read_until_closed(reader, timeout=2.0) or b"") == 503
    await close(writer)
    async with http.post(
        server.url, data=json.dumps(intercept(tool_before())), headers={"Content-Type": "application/json"}
    ) as r:
        assert r.status == 200
    for _, w in held:
        await close(w)


def server_guard_open(server) -> int:
    return server.guards.main.open


def test_main_cap_is_clamped_below_the_descriptor_limit():
    assert clamp_main_cap(4096, 64, fd_limit=1024) == 1024 - 64 - FD_RESERVE
    assert clamp_main_cap(100, 64, fd_limit=1024) == 100
    assert clamp_main_cap(4096, 64, fd_limit=100) == 1


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_flood_to_the_descriptor_limit_leaves_healthz_answering(tmp_path: Path, stub_factory):
    """A real process with a 512-descriptor limit and the default cap: 400 idle connections hit
    the clamped cap (512 - 64 - 256 = 192), not the descriptor limit, and /healthz answers."""
    stub = await stub_factory()
    port, admin = _free_port(), _free_port()
    cfg = gateway_config([hook("org.example.up", stub.url)])
    cfg["listen"]["port"], cfg["admin"]["port"] = port, admin
    cfg["log"] = {"decisions": "off"}
    path = tmp_path / "gateway.yaml"
    path.write_text(yaml.safe_dump(cfg))

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (512, 512))

    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "gateway", "serve", "--config", str(path)],
        preexec_fn=limit,  # noqa: PLW1509 - only sets a resource limit
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    held: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []
    try:

        async def up() -> bool:
            try:
                return await healthz(admin, timeout=1) == 200
            except aiohttp.ClientError:
                return False

        deadline = asyncio.get_running_loop().time() + 20
        while not await up():
            assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else ""
            assert asyncio.get_running_loop().time() < deadline, "gateway did not start"
            await asyncio.sleep(0.1)
        for _ in range(400):
            held.append(await _connect(port))
        await asyncio.sleep(0)
        assert await healthz(admin) == 200
        reader, writer = await _connect(port)
        assert status_of(await read_until_closed(reader, timeout=3.0) or b"") == 503
        await close(writer)
        assert proc.poll() is None
    finally:
        for _, writer in held:
            await close(writer)
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def test_readme_configuration_lists_every_limit_with_its_default():
    """The configuration reference shows every ``limits`` key with its real default."""
    from gateway.config.models import Limits

    text = (ROOT / "docs" / "configuration.md").read_text()
    block = text.split("```yaml", 1)[1].split("```", 1)[0]
    documented = yaml.safe_load(block)["limits"]
    defaults = {name: field.default for name, field in Limits.model_fields.items()}
    assert documented == defaults


async def test_pipelined_requests_in_one_segment_are_all_served(gw):
    """The guard's header timer must not disturb HTTP/1.1 pipelining."""
    server = await gw()
    reader, writer = await _connect(server.port)
    writer.write(_request_bytes() + _request_bytes() + _request_bytes())
    await writer.drain()
    for _ in range(3):
        assert (await read_response(reader)).status == 200
    await close(writer)


async def test_a_reload_changes_the_cap_for_new_connections(gw):
    server = await gw(maxConnections=50, headerTimeoutMs=20_000)
    held = [await _connect(server.port) for _ in range(3)]
    await wait_for(lambda: server_guard_open(server) == 3)
    cfg = yaml.safe_load(server.loaded.path.read_text())
    cfg["limits"]["maxConnections"] = 3
    server.loaded.path.write_text(yaml.safe_dump(cfg))
    assert await server.reload()
    reader, writer = await _connect(server.port)
    assert status_of(await read_until_closed(reader, timeout=2.0) or b"") == 503
    await close(writer)
    for _, w in held:
        await close(w)


_PRIVATE = re.compile(
    r"(?<!self)\._(?:waiter|messages|request_count|kwargs|loop|runner|server|host|port|backlog|reuse_address"
    r"|reuse_port|ssl_context|app|handle|make_request|manager|connections|payload_parser|request_parser)\b"
    r"|getattr\([^,()]+,\s*[\"']_"
)


def test_the_gateway_reads_no_private_attribute_of_aiohttp() -> None:
    """The limits hold on any aiohttp release that keeps its public API: no module of the gateway
    that imports aiohttp reads one of its ``_``-prefixed attributes (the header timer watches the
    bytes itself, handlers come from the runner's public ``Server``, the listener is ours)."""
    found = []
    for path in sorted((ROOT / "gateway").rglob("*.py")):
        text = path.read_text()
        if "aiohttp" not in text:
            continue
        found += [f"{path.relative_to(ROOT)}: {m.group(0)}" for m in _PRIVATE.finditer(text)]
    assert found == []


@pytest.mark.parametrize("listener", ["main", "admin"])
async def test_the_aiohttp_path_times_each_head_from_its_first_byte(gw, http, listener):
    """A connection aiohttp serves (handed off by the fast lane, or on the admin listener) keeps
    the header timeout without any aiohttp internal: a kept-alive connection idle longer than the
    timeout stays open, a quick next request is served, and a next head that drips is cut."""
    server = await gw()
    port = server.port if listener == "main" else server.admin_port
    reader, writer = await _connect(port)
    ask = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
    writer.write(ask)
    await writer.drain()
    assert (await read_response(reader)).status == (404 if listener == "main" else 200)
    await asyncio.sleep(HEADER_TIMEOUT_MS / 1000 * 1.5)  # idle, not a head: still open
    assert not reader.at_eof()
    writer.write(ask)
    await writer.drain()
    assert (await read_response(reader)).status == (404 if listener == "main" else 200)
    started = asyncio.get_running_loop().time()
    dripper = asyncio.ensure_future(_drip(writer, b"GET /healthz HTTP/1.1\r\nX-Slow: " + b"a" * 400, 0.02))
    assert await read_until_closed(reader, timeout=5.0) is not None
    assert asyncio.get_running_loop().time() - started < 5
    dripper.cancel()
    await close(writer)
    assert (
        await metric(
            http, server.admin_port, "ahp_gateway_connections_closed_total", listener=listener, reason="header_timeout"
        )
        == 1
    )
