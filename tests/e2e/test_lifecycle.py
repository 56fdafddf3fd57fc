"""Process behaviour a cluster needs: hot reload (no lost request, no mixed configs), graceful
shutdown under load, several workers on one port, readiness and circuit details."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request

import aiohttp
import pytest
import yaml

from gateway.config.load import load
from gateway.server.app import GatewayServer
from tests.support.client import post
from tests.support.config import gateway_config, hook
from tests.support.events import intercept, result, tool_before
from tests.support.fault_tools import read_response
from tests.support.paths import ROOT
from tests.support.processes import admin_ready, free_port, wait_ready


def _answer(text):
    return lambda r: result(r, [{"type": "message", "text": text}])


async def test_reload_under_load_never_mixes_configs_or_loses_requests(stub_factory, http, tmp_path):
    stubs = {name: await stub_factory(_answer(name)) for name in ("A1", "A2", "B1", "B2")}
    versions = {
        v: gateway_config(
            [
                hook(f"org.example.{v.lower()}1", stubs[f"{v}1"].url),
                hook(f"org.example.{v.lower()}2", stubs[f"{v}2"].url),
            ],
            reload={"watch": False},
        )
        for v in "AB"
    }
    path = tmp_path / "gateway.yaml"
    path.write_text(yaml.safe_dump(versions["A"]))
    server = GatewayServer(load(path))
    await server.start()
    seen: list[list[str]] = []
    failures: list[object] = []
    stop = asyncio.Event()

    async def client():
        while not stop.is_set():
            status, body = await post(http, server.url, intercept(tool_before(), {"effects": ["deny", "message"]}))
            if status != 200 or "result" not in body:
                failures.append(body)
            else:
                seen.append([e["text"] for e in body["result"]["effects"]])

    clients = [asyncio.ensure_future(client()) for _ in range(8)]
    try:
        for round_ in range(10):
            path.write_text(yaml.safe_dump(versions["B" if round_ % 2 == 0 else "A"]))
            assert await server.reload()
            await asyncio.sleep(0.05)
    finally:
        stop.set()
        await asyncio.gather(*clients)
        await server.stop()
    assert failures == []
    assert len(seen) > 50
    assert {tuple(s) for s in seen} <= {("A1", "A2"), ("B1", "B2")}
    assert {tuple(s) for s in seen} == {("A1", "A2"), ("B1", "B2")}


async def test_bad_reload_keeps_the_last_good_config(stub_factory, http, tmp_path, caplog):
    stub = await stub_factory(_answer("good"))
    path = tmp_path / "gateway.yaml"
    path.write_text(yaml.safe_dump(gateway_config([hook("org.example.a", stub.url)], reload={"watch": False})))
    server = GatewayServer(load(path))
    await server.start()
    try:
        path.write_text("id: org.example.gateway\nhooks: [{id: broken}]\n")
        assert await server.reload() is False
        assert "reload rejected" in caplog.text and "$.hooks[0].transport" in caplog.text
        _, body = await post(http, server.url, intercept(tool_before(), {"effects": ["message"]}))
        assert body["result"]["effects"] == [{"type": "message", "text": "good"}]
        metrics = server.observability.metrics.render()[0].decode()
        assert 'ahp_gateway_config_reloads_total{result="failure"} 1.0' in metrics
        assert "ahp_gateway_config_last_reload_successful 0.0" in metrics
    finally:
        await server.stop()


@pytest.mark.parametrize("section", [{"log": {"decisions": "off"}}, {"metrics": {"enabled": False}}])
async def test_a_reload_changing_a_restart_only_section_is_refused_not_half_applied(
    stub_factory, http, tmp_path, caplog, section
):
    """issue 28 item 8: a reload that changes a section only a restart applies (``inbound``,
    ``log``, ``uploads``, ...) used to report success while that section stayed as it was (a
    revoked token kept working). It is refused whole: the old configuration keeps serving, the
    reason names the section, and the reload metrics say failure."""
    good, other = await stub_factory(_answer("good")), await stub_factory(_answer("other"))
    path = tmp_path / "gateway.yaml"
    path.write_text(yaml.safe_dump(gateway_config([hook("org.example.a", good.url)], reload={"watch": False})))
    server = GatewayServer(load(path))
    await server.start()
    try:
        changed = gateway_config([hook("org.example.a", other.url)], reload={"watch": False}) | section
        path.write_text(yaml.safe_dump(changed))
        assert await server.reload() is False
        assert "reload rejected" in caplog.text and next(iter(section)) in caplog.text
        _, body = await post(http, server.url, intercept(tool_before(), {"effects": ["message"]}))
        assert body["result"]["effects"] == [{"type": "message", "text": "good"}]  # nothing of it applied
        metrics = server.observability.metrics.render()[0].decode()
        assert 'ahp_gateway_config_reloads_total{result="failure"} 1.0' in metrics
    finally:
        await server.stop()


async def test_file_change_triggers_reload_through_a_symlink_swap(stub_factory, http, tmp_path):
    """Kubernetes ConfigMap volumes update by swapping a ..data symlink."""
    one, two = await stub_factory(_answer("one")), await stub_factory(_answer("two"))
    for name, stub in (("v1", one), ("v2", two)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "gateway.yaml").write_text(
            yaml.safe_dump(gateway_config([hook("org.example.a", stub.url)], reload={"intervalSeconds": 0.1}))
        )
    (tmp_path / "..data").symlink_to("v1")
    (tmp_path / "gateway.yaml").symlink_to("..data/gateway.yaml")
    server = GatewayServer(load(tmp_path / "gateway.yaml"))
    await server.start()
    try:
        (tmp_path / "..data_tmp").symlink_to("v2")
        os.replace(tmp_path / "..data_tmp", tmp_path / "..data")
        import shutil

        shutil.rmtree(tmp_path / "v1")
        texts: list[str] = []

        async def latest():
            _, body = await post(http, server.url, intercept(tool_before(), {"effects": ["message"]}))
            texts.append(body["result"]["effects"][0]["text"])

        loop = asyncio.get_running_loop()
        deadline = loop.time() + 10
        while not texts or texts[-1] != "two":
            assert loop.time() < deadline, texts
            await latest()
            await asyncio.sleep(0.05)
    finally:
        await server.stop()


async def test_readyz_reports_open_circuits_without_flipping_readiness(gateway_factory, http):
    cfg = gateway_config(
        [
            hook(
                "org.example.down",
                "http://127.0.0.1:9/",
                policy="fail-open",
                circuitBreaker={"failureThreshold": 2, "openSeconds": 30},
            )
        ]
    )
    gw = await gateway_factory(cfg)
    for _ in range(3):
        _, body = await post(http, gw.url, intercept(tool_before()))
        assert body["result"]["effects"] == []
    async with http.get(f"http://127.0.0.1:{gw.admin_port}/readyz") as resp:
        details = await resp.json()
        assert resp.status == 200
    assert details["openCircuits"] == ["org.example.down"]
    metrics = gw.observability.metrics.render()[0].decode()
    assert 'ahp_gateway_upstream_calls_total{outcome="circuit_open",upstream="org.example.down"} 1.0' in metrics
    assert 'ahp_gateway_upstream_circuit_open{upstream="org.example.down"} 1.0' in metrics


def _serve(upstream: str, tmp_path, drain_delay: float) -> tuple[subprocess.Popen[bytes], int, int]:
    """``gateway serve`` in its own process on one upstream: (process, port, admin port)."""
    port, admin = free_port(), free_port()
    cfg = gateway_config(
        [hook("org.example.a", upstream)],
        shutdown={"drainDelaySeconds": drain_delay, "drainTimeoutSeconds": 10},
        log={"decisions": "off"},
    )
    cfg["listen"]["port"], cfg["admin"]["port"] = port, admin
    (tmp_path / "gateway.yaml").write_text(yaml.safe_dump(cfg))
    proc = subprocess.Popen(
        [sys.executable, "-m", "gateway", "serve", "--config", str(tmp_path / "gateway.yaml")], cwd=ROOT
    )
    return proc, port, admin


async def test_sigterm_drains_under_load_and_loses_no_request(stub_factory, tmp_path):
    async def slow(r):
        await asyncio.sleep(0.2)
        return result(r, [])

    stub = await stub_factory(slow)
    proc, port, admin = _serve(stub.url, tmp_path, drain_delay=2.0)
    try:
        await asyncio.to_thread(wait_ready, proc, admin)
        url = f"http://127.0.0.1:{port}/"
        ok, refused, broken = [], [], []
        stop = asyncio.Event()

        async def client():
            async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True)) as session:
                while not stop.is_set():
                    try:
                        status, body = await post(session, url, intercept(tool_before()))
                        (ok if status == 200 and body["result"]["effects"] == [] else broken).append(status)
                    except aiohttp.ClientConnectorError:
                        refused.append(time.monotonic())
                        await asyncio.sleep(0.02)
                    except aiohttp.ClientOSError as exc:
                        if "Can not write request body" not in str(exc):
                            broken.append(repr(exc))
                        else:  # reset in the accept backlog as the listener closed: never reached the gateway
                            refused.append(time.monotonic())
                            await asyncio.sleep(0.02)
                    except aiohttp.ClientError as exc:  # a request that was accepted and then lost
                        broken.append(repr(exc))

        clients = [asyncio.ensure_future(client()) for _ in range(6)]
        await asyncio.sleep(0.5)
        sent_at = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 1.5
        while await asyncio.to_thread(admin_ready, admin) != 503:  # not ready at once...
            assert loop.time() < deadline
            await asyncio.sleep(0.02)
        before = len(ok)
        while len(ok) == before:  # ...but still serving during the drain delay
            assert loop.time() < deadline + 1
            await asyncio.sleep(0.02)
        code = await asyncio.to_thread(proc.wait, 30)
        stop.set()
        await asyncio.gather(*clients)
        assert code == 0
        assert broken == []
        assert refused and min(refused) >= sent_at + 1.9  # the listener closed only after the delay
    finally:
        if proc.poll() is None:
            proc.kill()


@pytest.mark.parametrize("sent_before", [0, 20], ids=["nothing yet", "part of the head"])
async def test_a_connection_accepted_before_the_listener_closed_has_its_request_served(
    stub_factory, tmp_path, sent_before
):
    """Drain: a connection the gateway accepted whose request had not arrived yet (a client that
    connects and then writes, or a loaded machine reading late), or had only partly arrived, is
    not closed as idle when the listener closes; its first request is answered, with
    ``Connection: close``. A connection idle after an answer closes at once."""
    stub = await stub_factory()
    proc, port, admin = _serve(stub.url, tmp_path, drain_delay=0.2)
    try:
        await asyncio.to_thread(wait_ready, proc, admin)
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        body = json.dumps(intercept(tool_before())).encode()
        head = f"POST / HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
        writer.write(head.encode() + body)  # served before the signal: the connection has been accepted
        await writer.drain()
        await read_response(reader, 10)
        second_reader, second_writer = await asyncio.open_connection("127.0.0.1", port)
        request = head.encode() + body
        second_writer.write(request[:sent_before])
        await second_writer.drain()
        proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 10
        while True:  # wait until the listener is closed
            try:
                probe = socket.create_connection(("127.0.0.1", port), timeout=1)
            except OSError:
                break
            probe.close()
            assert time.monotonic() < deadline, "the listener never closed"
            await asyncio.sleep(0.02)
        assert await asyncio.wait_for(reader.read(), 10) == b""  # idle after its answer: closed
        second_writer.write(request[sent_before:])
        await second_writer.drain()
        answer = await read_response(second_reader, 10)
        assert answer.head.startswith(b"HTTP/1.1 200")
        assert answer.headers.get("connection") == "close"
        assert json.loads(answer.body)["result"]["effects"] == []
        assert await asyncio.wait_for(second_reader.read(), 10) == b""  # then closed
        writer.close()
        second_writer.close()
        assert await asyncio.to_thread(proc.wait, 30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()


async def test_workers_share_the_port_and_aggregate_metrics(stub_factory, tmp_path):
    stub = await stub_factory()
    port, admin = free_port(), free_port()
    cfg = gateway_config([hook("org.example.a", stub.url)], shutdown={"drainDelaySeconds": 0}, log={"decisions": "off"})
    cfg["listen"]["port"], cfg["admin"]["port"] = port, admin
    (tmp_path / "gateway.yaml").write_text(yaml.safe_dump(cfg))
    env = {k: v for k, v in os.environ.items() if k != "PROMETHEUS_MULTIPROC_DIR"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "gateway", "serve", "--workers", "2", "--config", str(tmp_path / "gateway.yaml")],
        cwd=ROOT,
        env=env,
    )
    try:
        await asyncio.to_thread(wait_ready, proc, admin)
        pids = set()
        deadline = time.monotonic() + 20
        while len(pids) < 2:
            assert time.monotonic() < deadline, pids
            with urllib.request.urlopen(f"http://127.0.0.1:{admin}/readyz", timeout=2) as resp:
                pids.add(json.loads(resp.read())["pid"])
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True)) as session:
            for _ in range(40):
                status, _ = await post(session, f"http://127.0.0.1:{port}/", intercept(tool_before()))
                assert status == 200
        with urllib.request.urlopen(f"http://127.0.0.1:{admin}/metrics", timeout=2) as resp:
            text = resp.read().decode()
        line = next(
            x for x in text.splitlines() if x.startswith("ahp_gateway_requests_total{") and 'outcome="no_effect"' in x
        )
        assert float(line.split()[-1]) == 40.0
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.to_thread(proc.wait, 30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()


async def test_reload_keeps_circuit_gauges_truthful(stub_factory, http, tmp_path):
    """The gauge follows breaker state across reloads and disappears with its upstream."""
    path = tmp_path / "gateway.yaml"
    down = hook(
        "org.example.down",
        "http://127.0.0.1:9/",
        policy="fail-open",
        circuitBreaker={"failureThreshold": 1, "openSeconds": 60},
    )
    stub = await stub_factory()
    path.write_text(yaml.safe_dump(gateway_config([down, hook("org.example.up", stub.url)], reload={"watch": False})))
    server = GatewayServer(load(path))
    await server.start()
    try:
        await post(http, server.url, intercept(tool_before()))
        metrics = server.observability.metrics
        assert 'ahp_gateway_upstream_circuit_open{upstream="org.example.down"} 1.0' in metrics.render()[0].decode()
        assert await server.reload()
        assert 'ahp_gateway_upstream_circuit_open{upstream="org.example.down"} 1.0' in metrics.render()[0].decode()
        path.write_text(yaml.safe_dump(gateway_config([hook("org.example.up", stub.url)], reload={"watch": False})))
        assert await server.reload()
        text = metrics.render()[0].decode()
        assert (
            'upstream="org.example.down"'
            not in text.split("ahp_gateway_upstream_circuit_open", 1)[1].split("# HELP", 1)[0]
        )
        assert 'ahp_gateway_upstream_circuit_open{upstream="org.example.up"} 0.0' in text
    finally:
        await server.stop()


@pytest.mark.parametrize("start", [{"watch": False}, {"intervalSeconds": 60}], ids=["watch-off", "slow-interval"])
async def test_a_reload_applies_the_reload_section_too(stub_factory, http, tmp_path, start):
    """issue 28 item 8 ("apply every section on reload, or refuse it"): ``reload.watch`` and
    ``reload.intervalSeconds`` were read once at start, so a SIGHUP that turned watching on or
    shortened the interval reported success and changed nothing. Now the watcher follows the
    live configuration: after that reload, a file change alone is picked up within seconds."""
    one, two = await stub_factory(_answer("one")), await stub_factory(_answer("two"))
    path = tmp_path / "gateway.yaml"
    path.write_text(yaml.safe_dump(gateway_config([hook("org.example.a", one.url)], reload=start)))
    server = GatewayServer(load(path))
    await server.start()
    try:
        fast = {"watch": True, "intervalSeconds": 0.1}
        path.write_text(yaml.safe_dump(gateway_config([hook("org.example.a", one.url)], reload=fast)))
        assert await server.reload() is True  # SIGHUP
        path.write_text(yaml.safe_dump(gateway_config([hook("org.example.a", two.url)], reload=fast)))
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 10
        while True:
            _, body = await post(http, server.url, intercept(tool_before(), {"effects": ["message"]}))
            if body["result"]["effects"][0]["text"] == "two":
                break
            assert loop.time() < deadline, "the file change was not picked up by the watcher"
            await asyncio.sleep(0.05)
    finally:
        await server.stop()
