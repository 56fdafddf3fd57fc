"""``uploads.storage.type: redis`` with a real redis-server: a ref received by one replica is
usable through another, by the same principal only (protocol §12: a ref alone never grants
access; §13.2 re-upload), the total cap holds however replicas race, and Redis failing is never
hidden (503 with Retry-After, gaps, ``/readyz`` says why, recovery without restart).

Each replica is a whole gateway (its own assembly, Redis pool and upload store) sharing nothing
but Redis; one test runs the second as a real ``ahp-gateway serve`` process."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml

from tests.support.client import metric, wait_for
from tests.support.config import gateway_config
from tests.support.events import intercept
from tests.support.paths import ROOT
from tests.support.redis_server import RedisServer, free_port, redis_server, tls_files
from tests.support.tokens import TOKEN_A, TOKEN_B, tokens_file
from tests.support.uploads import PNG, UPLOAD_TOKEN, image_part, model_request, upload_hook


@pytest.fixture
def redis(tmp_path: Path):
    with redis_server(tmp_path / "redis") as server:
        yield server


def shared_config(receiver_url: str, upstream_url: str, redis_url: str, **storage: Any) -> dict[str, Any]:
    return gateway_config(
        [
            upload_hook(
                "org.example.with-upload",
                upstream_url,
                {
                    "endpoint": receiver_url,
                    "timeoutMs": 1000,
                    "maxBytes": 65536,
                    "auth": {"type": "bearer", "tokenEnv": "A_UPLOAD_TOKEN"},
                },
            )
        ],
        inbound={"auth": {"type": "bearer", "tokensFile": "tokens.yaml"}},
        uploads={
            "path": "/uploads",
            "maxBytes": 8192,
            "storage": {"type": "redis", "totalBytes": 20000, **storage},
        },
        # 1 s for a Redis round trip: 40 uploads racing in one loop on a loaded machine took over 200 ms
        state={"redis": {"url": redis_url, "keyPrefix": "test-gw:", "timeoutMs": 1000}},
        limits={"maxBodyBytes": 1048576, "deadlineMs": 3000},
        frontend={"timeoutMs": 4000},
    )


@pytest.fixture
async def replicas(gateway_factory, stub_factory, receiver_factory, redis, tmp_path, monkeypatch):
    monkeypatch.setenv("A_UPLOAD_TOKEN", UPLOAD_TOKEN)
    tokens_file(tmp_path / "tokens.yaml", (TOKEN_A, "team-a", {}), (TOKEN_B, "team-b", {}))
    upstream = await stub_factory()
    receiver = await receiver_factory()
    cfg = shared_config(receiver.url, upstream.url, redis.url)
    one = await gateway_factory(cfg, name="one.yaml")
    two = await gateway_factory(cfg, name="two.yaml")
    return one, two, upstream, receiver


async def upload(http: aiohttp.ClientSession, base: str, data: bytes, token: str = TOKEN_A) -> tuple[int, Any, Any]:
    headers = {
        "Content-Type": "application/octet-stream",
        "AHP-Content-SHA256": hashlib.sha256(data).hexdigest(),
        "Authorization": f"Bearer {token}",
    }
    async with http.post(base.rstrip("/") + "/uploads", data=data, headers=headers) as response:
        raw = await response.read()
        body = json.loads(raw) if response.content_type == "application/json" else raw
        return response.status, body, response.headers


async def call(http: aiohttp.ClientSession, base: str, event: dict[str, Any], token: str = TOKEN_A) -> dict[str, Any]:
    headers = {"Content-Type": "application/json", "Authorization": f"Bearer {token}"}
    async with http.post(base, data=json.dumps(intercept(event)), headers=headers) as response:
        assert response.status == 200
        return await response.json()  # type: ignore[no-any-return]


@pytest.mark.spec("AHP-CONTENT-002")
async def test_a_ref_uploaded_to_one_replica_is_reuploaded_through_the_other(replicas, http, redis):
    """Protocol §13.2: the upstream gets its own receiver's ref, whichever replica the intercept
    lands on; the bytes are stored once, in Redis, with the TTL."""
    one, two, upstream, receiver = replicas
    status, receipt, _ = await upload(http, one.url, PNG)
    assert status == 201 and receipt["size"] == len(PNG)
    await call(http, two.url, model_request(receipt["ref"]))
    assert [data for _, data in receiver.requests] == [PNG]
    assert image_part(upstream.received[0]["params"]["event"])["body"] == {"ref": "urn:receiver:1"}
    ttl = int(redis.command("PTTL", f"test-gw:upload:{receipt['ref']}").strip(b":\r\n"))
    assert 0 < ttl <= 600_000, "the bytes leave Redis with ttlSeconds"


@pytest.mark.spec("AHP-SEC-001")
async def test_another_principals_ref_is_a_gap_through_the_other_replica(replicas, http):
    """Protocol §12: a ref alone never grants access, across replicas too."""
    one, two, upstream, receiver = replicas
    _, receipt, _ = await upload(http, one.url, PNG, token=TOKEN_A)
    await call(http, two.url, model_request(receipt["ref"]), token=TOKEN_B)
    assert receiver.requests == []
    assert "gap" in image_part(upstream.received[0]["params"]["event"])
    unknown = "upl_" + "A" * 43
    await call(http, two.url, model_request(unknown))
    assert "gap" in image_part(upstream.received[1]["params"]["event"]) and receiver.requests == []


async def test_racing_uploads_through_both_replicas_never_exceed_total_bytes(replicas, http, redis):
    """40 concurrent 1000-byte uploads split over two replicas against totalBytes 20000: exactly
    20 fit, the rest are 503 storage full, and the shared accounting says 20000."""
    one, two, *_ = replicas
    blobs = [bytes([i]) * 1000 for i in range(40)]
    results = await asyncio.gather(*(upload(http, (one, two)[i % 2].url, blob) for i, blob in enumerate(blobs)))
    statuses = sorted(status for status, _, _ in results)
    assert statuses.count(201) == 20 and statuses.count(503) == 20, statuses
    assert int(redis.command("GET", "test-gw:uploads:bytes").split(b"\r\n")[1]) == 20000
    assert (
        metric(one, 'ahp_gateway_uploads_total{outcome="storage_full"}')
        + metric(two, 'ahp_gateway_uploads_total{outcome="storage_full"}')
        == 20
    )


async def test_redis_down_uploads_503_refs_are_gaps_readyz_says_why_and_it_recovers(replicas, http, redis):
    one, two, upstream, receiver = replicas
    _, receipt, _ = await upload(http, one.url, PNG)
    redis.stop()
    status, _, headers = await upload(http, one.url, PNG)
    assert status == 503 and headers.get("Retry-After"), "never stored elsewhere silently"
    assert metric(one, 'ahp_gateway_uploads_total{outcome="storage_unavailable"}') == 1
    await call(http, two.url, model_request(receipt["ref"]))
    assert "gap" in image_part(upstream.received[0]["params"]["event"]) and receiver.requests == []
    assert metric(two, 'ahp_gateway_state_errors_total{op="upload_get"}') >= 1
    async with http.get(f"http://127.0.0.1:{one.admin_port}/readyz") as response:
        ready = await response.json()
    assert ready["stateRedis"]["reachable"] is False and ready["stateRedis"]["error"]
    redis.start()  # the same port: every replica finds it again, no restart

    async def stored() -> bool:
        return (await upload(http, one.url, PNG))[0] == 201

    deadline = asyncio.get_running_loop().time() + 10
    while not await stored():
        assert asyncio.get_running_loop().time() < deadline, "uploads did not recover"
        await asyncio.sleep(0.1)
    await wait_for(lambda: one.assembly is not None and one.assembly.state is not None and one.assembly.state.healthy)


async def test_an_upload_that_fails_midway_gives_its_room_back(replicas, redis):
    one, *_ = replicas
    assert one.assembly is not None and one.assembly.store is not None
    store = one.assembly.store

    async def chunks() -> Any:
        yield b"x" * 10
        raise ConnectionResetError("client went away")

    with pytest.raises(ConnectionResetError):
        await store.receive(chunks(), 5000, "0" * 64, "team-a")
    assert redis.command("GET", "test-gw:uploads:bytes").split(b"\r\n")[1] == b"0"
    assert redis.command("ZCARD", "test-gw:uploads:held").strip() == b":0"


def _serve(config: Path) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if k != "PROMETHEUS_MULTIPROC_DIR"}
    return subprocess.Popen(
        [sys.executable, "-m", "gateway", "--log-level", "WARNING", "serve", "--config", str(config)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )


async def test_two_gateway_processes_share_uploads(
    gateway_factory, stub_factory, receiver_factory, redis: RedisServer, tmp_path, monkeypatch, http
):
    """The second replica is a real ``ahp-gateway serve`` process: nothing but Redis is shared."""
    monkeypatch.setenv("A_UPLOAD_TOKEN", UPLOAD_TOKEN)
    tokens_file(tmp_path / "tokens.yaml", (TOKEN_A, "team-a", {}), (TOKEN_B, "team-b", {}))
    upstream = await stub_factory()
    receiver = await receiver_factory()
    cfg = shared_config(receiver.url, upstream.url, redis.url)
    one = await gateway_factory(cfg, name="one.yaml")
    port, admin = free_port(), free_port()
    other = {**cfg, "listen": {**cfg["listen"], "port": port}, "admin": {"host": "127.0.0.1", "port": admin}}
    other["reload"] = {"watch": False}
    other["log"] = {"decisions": "off"}
    path = tmp_path / "process.yaml"
    path.write_text(yaml.safe_dump(other))
    proc = _serve(path)
    try:
        deadline = asyncio.get_running_loop().time() + 20
        while True:
            assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else "exited"
            try:
                async with http.get(f"http://127.0.0.1:{admin}/readyz") as response:
                    if response.status == 200:
                        break
            except aiohttp.ClientError:
                pass
            assert asyncio.get_running_loop().time() < deadline, "the process did not become ready"
            await asyncio.sleep(0.05)
        status, receipt, _ = await upload(http, f"http://127.0.0.1:{port}/", PNG)
        assert status == 201
        await call(http, one.url, model_request(receipt["ref"]))
        assert [data for _, data in receiver.requests] == [PNG]
        _, mine, _ = await upload(http, one.url, PNG, token=TOKEN_B)
        await call(http, f"http://127.0.0.1:{port}/", model_request(mine["ref"]), token=TOKEN_A)
        assert "gap" in image_part(upstream.received[1]["params"]["event"])
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)


async def test_the_upload_count_is_shared_too(replicas, http, redis):
    """At most one upload per 512 bytes of totalBytes (at least 64) for the whole deployment:
    empty uploads through both replicas cannot grow Redis without bound."""
    one, two, *_ = replicas
    statuses = [(await upload(http, (one, two)[i % 2].url, b""))[0] for i in range(66)]
    assert statuses.count(201) == 64 and statuses[64:] == [503, 503]
    assert redis.command("ZCARD", "test-gw:uploads:held").strip() == b":64"


@pytest.mark.spec("AHP-SEC-001")
async def test_a_password_from_a_file_and_a_wrong_one_never_shown(
    gateway_factory, stub_factory, receiver_factory, tmp_path, monkeypatch, http, caplog
):
    """passwordFile authenticates; with a wrong password uploads are 503 and /readyz says why,
    and the password appears in neither the answer, /readyz, the metrics nor the log."""
    secret, wrong = "s3cret-redis-pass-4e1f", "not-the-password-9a7c"
    monkeypatch.setenv("A_UPLOAD_TOKEN", UPLOAD_TOKEN)
    tokens_file(tmp_path / "tokens.yaml", (TOKEN_A, "team-a", {}))
    (tmp_path / "redis-password").write_text(secret + "\n")
    (tmp_path / "wrong-password").write_text(wrong)
    upstream, receiver = await stub_factory(), await receiver_factory()
    with redis_server(tmp_path / "redis", password=secret) as redis:
        good = shared_config(receiver.url, upstream.url, redis.url)
        good["state"]["redis"]["passwordFile"] = "redis-password"
        one = await gateway_factory(good, name="one.yaml")
        assert (await upload(http, one.url, PNG))[0] == 201
        bad = shared_config(receiver.url, upstream.url, redis.url)
        bad["state"]["redis"]["passwordFile"] = "wrong-password"
        two = await gateway_factory(bad, name="two.yaml")
        status, body, _ = await upload(http, two.url, PNG)
        assert status == 503
        async with http.get(f"http://127.0.0.1:{two.admin_port}/readyz") as response:
            ready = await response.text()
        assert '"reachable": false' in ready
        async with http.get(f"http://127.0.0.1:{two.admin_port}/metrics") as response:
            metrics = await response.text()
        for text in (str(body), ready, metrics, caplog.text):
            assert secret not in text and wrong not in text


async def test_rediss_with_a_private_ca(gateway_factory, stub_factory, receiver_factory, tmp_path, monkeypatch, http):
    """rediss:// with caFile: the gateway trusts exactly that CA (without it, platform trust
    refuses the self-signed server and uploads are 503)."""
    files = tls_files(tmp_path)
    monkeypatch.setenv("A_UPLOAD_TOKEN", UPLOAD_TOKEN)
    tokens_file(tmp_path / "tokens.yaml", (TOKEN_A, "team-a", {}))
    upstream, receiver = await stub_factory(), await receiver_factory()
    with redis_server(tmp_path / "redis", tls=files) as redis:
        assert redis.url.startswith("rediss://")
        trusted = shared_config(receiver.url, upstream.url, redis.url)
        trusted["state"]["redis"]["caFile"] = "ca.pem"
        one = await gateway_factory(trusted, name="one.yaml")
        status, receipt, _ = await upload(http, one.url, PNG)
        assert status == 201
        untrusted = await gateway_factory(shared_config(receiver.url, upstream.url, redis.url), name="two.yaml")
        assert (await upload(http, untrusted.url, PNG))[0] == 503
        await call(http, one.url, model_request(receipt["ref"]))
        assert [data for _, data in receiver.requests] == [PNG]


async def test_one_process_holds_at_most_memory_bytes_while_receiving(replicas, redis):
    """Uploads are read whole before they are written to Redis: memoryBytes bounds one process
    (a slow sender cannot make a pod hold totalBytes); the room taken in Redis is given back."""
    one, *_ = replicas
    store = one.assembly.store
    store.memory_limit = 3000
    gate = asyncio.Event()

    async def slow() -> Any:
        yield b"x" * 10
        await gate.wait()
        yield b"x" * 1990

    digest = hashlib.sha256(b"x" * 2000).hexdigest()
    first = asyncio.ensure_future(store.receive(slow(), 2000, digest, "team-a"))
    while store.receiving == 0:
        await asyncio.sleep(0.01)
    from gateway.uploads.store import StoreFull

    with pytest.raises(StoreFull):
        await store.receive(slow(), 2000, digest, "team-a")
    gate.set()
    assert (await first).size == 2000 and store.receiving == 0
    assert redis.command("GET", "test-gw:uploads:bytes").split(b"\r\n")[1] == b"2000"
