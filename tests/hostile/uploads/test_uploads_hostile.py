"""Hostile harnesses, tenants and upstream receivers against the upload binding (protocol §13.2,
README "Uploads"), end to end over loopback HTTP: storage exhaustion, integrity, isolation,
confusion on re-upload, and cancellation. Gauges and counters are read from the admin
listener's ``/metrics`` and polled with deadlines; files on disk are checked directly."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import json
import logging
import re
import socket
import stat
import struct
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml

from gateway.config.load import load
from gateway.server.app import GatewayServer
from tests.e2e.test_inbound_auth import TOKEN_A, TOKEN_B, tokens_file
from tests.e2e.test_uploads import PNG, image_part, model_request, upload_hook
from tests.support.config import gateway_config
from tests.support.events import intercept

UPLOAD_TOKEN = "hostile-upload-token-5e1d"
EVENT_TOKEN = "hostile-event-token-93ab"
TOKEN_U = "tok-unicode-team-4c2a1f"
"""A principal whose name is not ASCII (tokens files accept any non-empty string)."""
SECRETS = (TOKEN_A, TOKEN_B, TOKEN_U, UPLOAD_TOKEN, EVENT_TOKEN)
HOOK = "org.example.hostile"
MAX = 8192
MEMORY = 4096
TOTAL = 20000
BODY_TIMEOUT_MS = 500
DEADLINE_MS = 2000
STORED = 'ahp_gateway_uploads_total{outcome="stored"}'
MEM = 'ahp_gateway_upload_stored_bytes{tier="memory"}'
SPOOL = 'ahp_gateway_upload_stored_bytes{tier="spool"}'


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def outcome(name: str) -> str:
    return f'ahp_gateway_upstream_uploads_total{{outcome="{name}",upstream="{HOOK}"}}'


def uploads_total(name: str) -> str:
    return f'ahp_gateway_uploads_total{{outcome="{name}"}}'


# ------------------------------------------------------------------------------------------------
# metrics over the admin listener


async def scrape(gw: GatewayServer) -> dict[str, float]:
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"http://127.0.0.1:{gw.admin_port}/metrics") as response,
    ):
        assert response.status == 200
        text = await response.text()
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            out[name] = float(value)
    return out


async def settle_metrics(gw: GatewayServer, expected: dict[str, float], timeout: float = 5.0) -> dict[str, float]:
    """Poll ``/metrics`` until every series in ``expected`` has exactly its value."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        seen = await scrape(gw)
        wrong = {k: seen.get(k, 0.0) for k, v in expected.items() if seen.get(k, 0.0) != v}
        if not wrong:
            return seen
        if loop.time() > deadline:
            families = {k.split("{")[0] for k in expected}
            related = {k: v for k, v in seen.items() if v and k.split("{")[0] in families}
            raise AssertionError(f"metrics not settled: {wrong}, expected {expected}; non-zero: {related}")
        await asyncio.sleep(0.02)


async def until(predicate: Callable[[], bool], timeout: float = 5.0, what: str = "condition") -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not predicate():
        if loop.time() > deadline:
            raise AssertionError(f"{what} not reached before the deadline")
        await asyncio.sleep(0.01)


def store_of(gw: GatewayServer) -> Any:
    assert gw.guard is not None and gw.guard.store is not None
    return gw.guard.store


def reserved(gw: GatewayServer) -> int:
    return int(sum(store_of(gw).reserved.values()))


def spool_files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file() and not p.is_symlink())


# ------------------------------------------------------------------------------------------------
# raw HTTP, so that a harness can misbehave exactly


def upload_head(size: int, digest: str, token: str | None = TOKEN_A, extra: str = "", path: str = "/uploads") -> bytes:
    head = f"POST {path} HTTP/1.1\r\nHost: gw\r\nContent-Type: application/octet-stream\r\n"
    if token is not None:
        head += f"Authorization: Bearer {token}\r\n"
    if digest:
        head += f"AHP-Content-SHA256: {digest}\r\n"
    if size >= 0:
        head += f"Content-Length: {size}\r\n"
    return (head + extra + "\r\n").encode()


class Raw:
    """One client connection to the gateway's listener."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    @classmethod
    async def open(cls, gw: GatewayServer) -> Raw:
        return cls(*await asyncio.open_connection("127.0.0.1", gw.port))

    async def send(self, data: bytes) -> None:
        self.writer.write(data)
        await self.writer.drain()

    async def response(self, timeout: float = 5.0) -> tuple[int, dict[str, str], bytes]:
        """The next response: status, headers (lower-cased names), body (by Content-Length)."""
        async with asyncio.timeout(timeout):
            head = await self.reader.readuntil(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            status = int(lines[0].split(" ", 2)[1])
            headers = {}
            for line in lines[1:]:
                if ":" in line:
                    name, value = line.split(":", 1)
                    headers[name.strip().lower()] = value.strip()
            if status < 200:
                return status, headers, b""
            body = await self.reader.readexactly(int(headers.get("content-length", "0")))
        return status, headers, body

    async def closed_by_peer(self, timeout: float = 5.0) -> bool:
        with contextlib.suppress(ConnectionError):
            async with asyncio.timeout(timeout):
                while await self.reader.read(65536):
                    pass
        return True

    def close(self) -> None:
        self.writer.close()

    @classmethod
    async def exchange(cls, gw: GatewayServer, data: bytes) -> tuple[int, dict[str, str], bytes]:
        """``data`` sent on a connection of its own, and the response to it."""
        conn = await cls.open(gw)
        try:
            await conn.send(data)
            return await conn.response()
        finally:
            conn.close()


async def raw_upload(gw: GatewayServer, data: bytes, token: str = TOKEN_A, extra: str = "") -> tuple[int, Any]:
    status, headers, body = await Raw.exchange(gw, upload_head(len(data), sha(data), token, extra) + data)
    return status, (json.loads(body) if headers.get("content-type", "").startswith("application/json") else body)


async def upload(http: aiohttp.ClientSession, gw: GatewayServer, data: bytes, token: str = TOKEN_A) -> tuple[int, Any]:
    headers = {
        "Content-Type": "application/octet-stream",
        "AHP-Content-SHA256": sha(data),
        "Authorization": f"Bearer {token}",
    }
    async with http.post(gw.url.rstrip("/") + "/uploads", data=data, headers=headers) as response:
        raw = await response.read()
        return response.status, (json.loads(raw) if response.content_type == "application/json" else raw)


async def call(
    http: aiohttp.ClientSession, gw: GatewayServer, event: dict[str, Any], token: str = TOKEN_A
) -> tuple[int, bytes, float]:
    """One intercept: status, raw body, seconds taken."""
    loop = asyncio.get_running_loop()
    started = loop.time()
    headers = {"Content-Type": "application/json", "Authorization": f"Bearer {token}"}
    async with http.post(gw.url, data=json.dumps(intercept(event)), headers=headers) as response:
        body = await response.read()
    return response.status, body, loop.time() - started


# ------------------------------------------------------------------------------------------------
# a hostile upstream upload receiver on loopback, scripted at the byte level

Behaviour = Callable[["RawReceiver", asyncio.StreamReader, asyncio.StreamWriter, bytes], Awaitable[None]]


def receipt_for(data: bytes, ref: str = "urn:hostile:1") -> bytes:
    return json.dumps({"ref": ref, "size": len(data), "sha256": sha(data)}).encode()


def answer(status: int, body: bytes = b"", content_type: str = "application/json", extra: str = "") -> bytes:
    head = f"HTTP/1.1 {status} X\r\nContent-Type: {content_type}\r\nContent-Length: {len(body)}\r\n{extra}\r\n"
    return head.encode() + body


class RawReceiver:
    def __init__(self, behaviour: Behaviour) -> None:
        self.behaviour = behaviour
        self.requests: list[tuple[bytes, bytes]] = []
        self.written = 0
        self.cancelled = asyncio.Event()
        self.release = asyncio.Event()
        self.url = ""
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[Any]] = set()

    async def start(self) -> RawReceiver:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        port = self._server.sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{port}/content?tenant=a"
        return self

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            match = re.search(rb"(?im)^content-length:\s*(\d+)", head)
            body = await reader.readexactly(int(match.group(1)) if match else 0)
            self.requests.append((head, body))
            await self.behaviour(self, reader, writer, body)
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            pass
        finally:
            writer.close()
            self._tasks.discard(task)

    async def write(self, writer: asyncio.StreamWriter, data: bytes) -> None:
        writer.write(data)
        await writer.drain()
        self.written += len(data)

    async def aclose(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(BaseException):
                await task


async def peer_closed(reader: asyncio.StreamReader, timeout: float) -> bool:
    """True when the gateway closes the connection within ``timeout``."""
    try:
        async with asyncio.timeout(timeout):
            return await reader.read(1) == b""
    except (TimeoutError, ConnectionError):
        return False


# ------------------------------------------------------------------------------------------------
# the gateway under attack


def config(
    endpoint: str | None,
    *,
    storage: dict[str, Any] | None = None,
    upload_timeout: int = 1000,
    limits: dict[str, Any] | None = None,
    event_url: str = "http://127.0.0.1:9/",
) -> dict[str, Any]:
    binding = None
    if endpoint is not None:
        binding = {
            "endpoint": endpoint,
            "timeoutMs": upload_timeout,
            "maxBytes": 65536,
            "auth": {"type": "bearer", "tokenEnv": "HOSTILE_UPLOAD_TOKEN"},
        }
    return gateway_config(
        [
            upload_hook(
                HOOK,
                event_url,
                binding,
                authentication={"type": "bearer", "tokenEnv": "HOSTILE_EVENT_TOKEN"},
            )
        ],
        inbound={"auth": {"type": "bearer", "tokensFile": "tokens.yaml"}},
        uploads={
            "path": "/uploads",
            "maxBytes": MAX,
            "storage": {"memoryBytes": MEMORY, "spoolDir": "spool", "totalBytes": TOTAL, **(storage or {})},
        },
        limits={
            "maxBodyBytes": 1048576,
            "deadlineMs": DEADLINE_MS,
            "bodyTimeoutMs": BODY_TIMEOUT_MS,
            **(limits or {}),
        },
        frontend={"timeoutMs": 6000},
    )


@pytest.fixture
def secrets_env(tmp_path, monkeypatch):
    monkeypatch.setenv("HOSTILE_UPLOAD_TOKEN", UPLOAD_TOKEN)
    monkeypatch.setenv("HOSTILE_EVENT_TOKEN", EVENT_TOKEN)
    tokens_file(
        tmp_path / "tokens.yaml",
        (TOKEN_A, "team-a", {"tenant": "a"}),
        (TOKEN_B, "team-b", {"tenant": "b"}),
        (TOKEN_U, "équipe-ü", {"tenant": "u"}),
    )


@pytest.fixture
async def receivers():
    made: list[RawReceiver] = []

    async def make(behaviour: Behaviour) -> RawReceiver:
        receiver = await RawReceiver(behaviour).start()
        made.append(receiver)
        return receiver

    yield make
    for receiver in made:
        await receiver.aclose()


@pytest.fixture
async def gw(gateway_factory, secrets_env):
    """A receiver with no upstream upload binding: storage and framing attacks."""
    return await gateway_factory(config(None))


async def confirming(receiver: RawReceiver, reader: Any, writer: asyncio.StreamWriter, body: bytes) -> None:
    await receiver.write(writer, answer(201, receipt_for(body, f"urn:hostile:{len(receiver.requests)}")))


@pytest.fixture
def no_secrets_logged(caplog):
    """Credentials never reach the log (asserted after the test body)."""
    caplog.set_level(logging.DEBUG)
    yield caplog
    text = caplog.text + "".join(str(r.args) for r in caplog.records)
    for secret in SECRETS:
        assert secret not in text


def assert_gap(event: dict[str, Any]) -> None:
    part = image_part(event)
    assert "body" not in part and part["gap"]["reason"], part
    assert PNG.hex()[:32] not in json.dumps(event) and "iVBOR" not in json.dumps(event), "never inline bytes"


# ================================================================================================
# (a) storage exhaustion


async def test_concurrent_declared_uploads_reserve_the_total_cap_and_release_it_exactly(gw, tmp_path):
    """README Uploads: ``totalBytes`` is reserved before the first byte is read; no room is 503 with
    Retry-After; a harness that gives up frees its reservation (protocol §13.2, bounded storage)."""
    size = 4000
    held = [await Raw.open(gw) for _ in range(TOTAL // size)]
    bodies = [bytes([65 + i]) * size for i in range(len(held))]
    try:
        for conn, body in zip(held, bodies, strict=True):
            await conn.send(upload_head(size, sha(body)))
        await until(lambda: reserved(gw) == TOTAL, what="every declared byte reserved")
        assert store_of(gw).reserved == {"memory": size, "spool": TOTAL - size}
        late = await Raw.open(gw)
        try:
            await late.send(upload_head(1, sha(b"x")))
            status, headers, _ = await late.response()
        finally:
            late.close()
        assert status == 503 and headers["retry-after"] == "5", "answered before its body, not queued"
        # two finish, three give up mid-body
        for conn, body in zip(held[:2], bodies[:2], strict=True):
            await conn.send(body)
            assert (await conn.response())[0] == 201
        for conn, body in zip(held[2:], bodies[2:], strict=True):
            await conn.send(body[:1000])
        await until(lambda: store_of(gw).reserved["spool"] == 3 * size, what="partial bodies read")
        for conn in held[2:]:
            conn.close()
        await until(lambda: reserved(gw) == 0, what="reservations released")
    finally:
        for conn in held:
            conn.close()
    await settle_metrics(gw, {MEM: size, SPOOL: size, STORED: 2, uploads_total("storage_full"): 1})
    assert [p.read_bytes() for p in spool_files(tmp_path / "spool")] == [bodies[1]], "partial spool files removed"
    room = TOTAL - 2 * size
    assert (await raw_upload(gw, b"r" * (room - 4000)))[0] == 201
    assert (await raw_upload(gw, b"s" * 4001))[0] == 503, "exactly the freed room, not a byte more"
    assert (await raw_upload(gw, b"s" * 4000))[0] == 201
    await settle_metrics(gw, {MEM: size, SPOOL: TOTAL - size, STORED: 4, uploads_total("storage_full"): 2})
    assert reserved(gw) == 0


async def test_many_small_concurrent_uploads_fill_memory_then_spool_then_stop_exactly(gw, tmp_path, http):
    """README Uploads: memory first, then the spool, bounded by ``totalBytes`` under concurrency
    (uploads large enough that the bytes, not the count of held uploads, are the bound)."""
    size = 1000
    datas = [i.to_bytes(2, "big") * (size // 2) for i in range(TOTAL // size + 10)]
    results = await asyncio.gather(*(upload(http, gw, d) for d in datas))
    statuses = [s for s, _ in results]
    assert statuses.count(201) == TOTAL // size and statuses.count(503) == 10
    await settle_metrics(
        gw,
        {
            MEM: (MEMORY // size) * size,
            SPOOL: TOTAL - (MEMORY // size) * size,
            STORED: TOTAL // size,
            uploads_total("storage_full"): 10,
        },
    )
    assert len(spool_files(tmp_path / "spool")) == TOTAL // size - MEMORY // size
    assert reserved(gw) == 0


async def test_zero_byte_uploads_are_bounded_too(gw, http):
    """README Uploads "Storage is bounded": the store holds at most one upload per 512 bytes of
    ``totalBytes`` (at least 64), so a flood of empty uploads meets 503 instead of growing the
    store's table without bound."""
    flood = TOTAL // 40
    statuses = [(await upload(http, gw, b""))[0] for _ in range(flood)]
    assert 503 in statuses, f"{statuses.count(201)} empty uploads held with totalBytes={TOTAL}"


async def test_an_upload_that_never_finishes_is_answered_within_the_body_timeout(gw, tmp_path):
    """README Failure behaviour (harness-facing listener): a body not complete within
    ``limits.bodyTimeoutMs`` is 408 and the connection closes; the reservation is released."""
    slow, waiting = await Raw.open(gw), await Raw.open(gw)
    try:
        await slow.send(upload_head(MAX, sha(b"z" * MAX)) + b"z" * 100)
        await waiting.send(upload_head(MAX, sha(b"z" * MAX), extra="Expect: 100-continue\r\n"))
        assert (await waiting.response())[0] == 100
        await until(lambda: reserved(gw) == 2 * MAX, what="both reserved")
        timeout = BODY_TIMEOUT_MS / 1000 + 3.0
        assert (await slow.response(timeout))[0] == 408
        assert (await waiting.response(timeout))[0] == 408
        assert reserved(gw) == 0 and spool_files(tmp_path / "spool") == []
        await settle_metrics(gw, {'ahp_gateway_connections_closed_total{listener="main",reason="body_timeout"}': 2})
    finally:
        slow.close()
        waiting.close()


async def test_a_failed_spooled_upload_leaves_no_file_and_no_bytes(gw, tmp_path):
    """README Uploads: a SHA-256 mismatch is 400 and nothing is kept (spool tier included)."""
    data = b"m" * (MEMORY + 1)  # does not fit in memory: spooled while read
    assert (await Raw.exchange(gw, upload_head(len(data), sha(b"other")) + data))[0] == 400
    await settle_metrics(gw, {MEM: 0, SPOOL: 0, STORED: 0, uploads_total("hash_mismatch"): 1})
    assert spool_files(tmp_path / "spool") == [] and reserved(gw) == 0 and len(store_of(gw)) == 0


async def test_an_expired_spooled_upload_is_removed_by_the_next_upload_and_is_a_gap(
    gateway_factory, secrets_env, stub_factory, receivers, tmp_path, http
):
    """README Uploads: uploads expire after ``storage.ttlSeconds``; an expired ref is a gap
    (protocol §13.2) and its spool file is deleted."""
    stub = await stub_factory()
    receiver = await receivers(confirming)
    gw = await gateway_factory(config(receiver.url, storage={"ttlSeconds": 0.5}, event_url=stub.url))
    data = b"e" * (MEMORY + 10)
    status, receipt = await raw_upload(gw, data)
    assert status == 201 and len(spool_files(tmp_path / "spool")) == 1
    await settle_metrics(gw, {SPOOL: len(data)})
    expires = store_of(gw)._items[receipt["ref"]].expires
    loop = asyncio.get_running_loop()
    await until(lambda: loop.time() > expires + 0.05, what="ttl elapsed")
    assert (await raw_upload(gw, b"tiny"))[0] == 201  # sweeps on the way in
    await settle_metrics(gw, {SPOOL: 0, MEM: 4})
    assert spool_files(tmp_path / "spool") == []
    event = model_request(receipt["ref"])
    status, _, _ = await call(http, gw, event)
    assert status == 200 and receiver.requests == []
    assert_gap(stub.received[0]["params"]["event"])


async def test_an_expired_spooled_upload_is_removed_without_further_traffic(gateway_factory, secrets_env, tmp_path):
    """README Uploads: uploads expire after ``storage.ttlSeconds``: the bytes must not stay on disk
    (and in ``ahp_gateway_upload_stored_bytes``) after that just because no one uploads again."""
    gw = await gateway_factory(config(None, storage={"ttlSeconds": 0.5}))
    status, _ = await raw_upload(gw, b"e" * (MEMORY + 10))
    assert status == 201
    await settle_metrics(gw, {SPOOL: 0}, timeout=4.0)
    assert spool_files(tmp_path / "spool") == []


# ================================================================================================
# (b) integrity


DIGEST = sha(PNG)


@pytest.mark.parametrize(
    ("lines", "why"),
    [
        ("AHP-Content-SHA256: sha-256=:" + base64.b64encode(bytes.fromhex(DIGEST)).decode() + ":\r\n", "sf"),
        ("AHP-Content-SHA256: " + base64.b64encode(bytes.fromhex(DIGEST)).decode() + "\r\n", "base64"),
        ("AHP-Content-SHA256: sha256:" + DIGEST + "\r\n", "prefixed"),
        ("AHP-Content-SHA256: " + hashlib.sha512(PNG).hexdigest() + "\r\n", "sha512 hex"),
        ("AHP-Content-SHA256: " + hashlib.sha1(PNG).hexdigest() + "\r\n", "sha1 hex"),
        ("AHP-Content-SHA256: " + DIGEST[:32] + DIGEST[32:].upper() + "\r\n", "mixed case hex"),
        ("AHP-Content-SHA256: " + DIGEST + ", " + DIGEST + "\r\n", "a list in one header"),
        ("AHP-Content-SHA256: " + DIGEST + "\r\nahp-content-sha256: " + DIGEST + "\r\n", "twice, other case"),
        ("AHP-Content-SHA256: " + DIGEST + "0\r\n", "65 hex digits"),
        ("Digest: SHA-256=" + DIGEST + "\r\n", "only another digest header"),
        ("Repr-Digest: sha-256=:" + DIGEST + ":\r\n", "only an RFC 9530 header"),
    ],
    ids=lambda v: v if len(v) < 40 else None,
)
async def test_a_digest_in_another_algorithm_case_or_encoding_is_400_and_nothing_is_kept(gw, lines, why):
    """protocol §13.1/§13.2: ``AHP-Content-SHA256`` is exactly one 64-lowercase-hex SHA-256."""
    status, _, body = await Raw.exchange(gw, upload_head(len(PNG), "", extra=lines) + PNG)
    assert status == 400, why
    assert b"AHP-Content-SHA256" in body
    assert len(store_of(gw)) == 0
    await settle_metrics(gw, {uploads_total("bad_request"): 1, STORED: 0, MEM: 0})


async def test_header_names_are_case_insensitive_and_foreign_digests_are_ignored(gw):
    """protocol §13.2 with RFC 9110 §5.1: a lower-case header name is the same header; other digest
    headers (even wrong ones) neither replace nor weaken the check."""
    extra = f"ahp-content-sha256: {DIGEST}\r\nDigest: SHA-256={sha(b'x')}\r\nContent-MD5: AAAA\r\n"
    status, _, body = await Raw.exchange(gw, upload_head(len(PNG), "", extra=extra) + PNG)
    assert status == 201 and json.loads(body)["sha256"] == DIGEST


async def test_a_body_longer_than_content_length_stores_exactly_the_declared_bytes(gw):
    """protocol §13.2: exact ``Content-Length``; what follows is the next request on the connection,
    never part of the upload (here garbage: 400 and the connection closes)."""
    data = b"L" * 1000
    conn = await Raw.open(gw)
    try:
        await conn.send(upload_head(len(data), sha(data)) + data)
        status, _, body = await conn.response()
        assert status == 201
        ref = json.loads(body)["ref"]
        await conn.send(b"EXTRA BYTES\r\n\r\n")
        assert (await conn.response())[0] == 400
        assert await conn.closed_by_peer()
    finally:
        conn.close()
    stored = store_of(gw)._items[ref]
    assert stored.size == 1000 and stored.sha256 == sha(data) and store_of(gw).read(stored) == data
    assert len(store_of(gw)) == 1
    await settle_metrics(gw, {MEM: 1000, STORED: 1})


async def test_trailing_bytes_in_the_same_segment_refuse_the_upload_and_keep_nothing_extra(gw):
    """protocol §13.2 (exact ``Content-Length``) with README "The fast lane": aiohttp answers one 400
    for a good request sharing a segment with a malformed one; whatever it did with the upload,
    no stored upload holds a byte past ``Content-Length``."""
    data = b"L" * 1000
    conn = await Raw.open(gw)
    try:
        await conn.send(upload_head(len(data), sha(data)) + data + b"EXTRA BYTES\r\n\r\n")
        assert (await conn.response())[0] == 400
        assert await conn.closed_by_peer()
    finally:
        conn.close()
    store = store_of(gw)
    assert all(s.size == 1000 and store.read(s) == data for s in store._items.values())
    await until(lambda: reserved(gw) == 0, what="released")
    seen = await scrape(gw)
    assert seen.get(MEM, 0) == 1000 * len(store) and seen.get(STORED, 0) == len(store)


async def test_a_body_longer_than_content_length_cannot_pass_the_digest_of_the_whole(gw):
    """protocol §13.2: only the declared ``Content-Length`` bytes are the upload: a digest of more
    bytes than declared is a mismatch (400, nothing kept), and the surplus is not an upload."""
    data = b"L" * 1000
    conn = await Raw.open(gw)
    try:
        await conn.send(upload_head(500, sha(data)) + data[:500])
        status, _, body = await conn.response()
        assert status == 400 and b"does not match" in body
        await conn.send(data[500:])
        assert (await conn.response())[0] == 400
        assert await conn.closed_by_peer()
    finally:
        conn.close()
    await settle_metrics(gw, {uploads_total("hash_mismatch"): 1, STORED: 0, MEM: 0})
    assert len(store_of(gw)) == 0 and reserved(gw) == 0


async def test_a_body_shorter_than_content_length_then_half_close_keeps_nothing(gw, tmp_path):
    """README Uploads: a body shorter than ``Content-Length`` keeps nothing (spool tier, the
    harness half-closes: no answer can be framed, the connection closes)."""
    conn = await Raw.open(gw)
    try:
        await conn.send(upload_head(MAX, sha(b"q" * MAX)) + b"q" * 100)
        await until(lambda: reserved(gw) == MAX, what="reserved")
        conn.writer.write_eof()
        assert await conn.closed_by_peer()
    finally:
        conn.close()
    await until(lambda: reserved(gw) == 0, what="released")
    assert spool_files(tmp_path / "spool") == [] and len(store_of(gw)) == 0
    await settle_metrics(gw, {MEM: 0, SPOOL: 0, STORED: 0})


@pytest.mark.parametrize(
    ("extra", "body"),
    [
        ("Transfer-Encoding: chunked\r\n", b"%x\r\n" % (MAX + 1) + b"c" * (MAX + 1) + b"\r\n0\r\n\r\n"),
        ("Transfer-Encoding: chunked\r\nExpect: 100-continue\r\n", b""),
        ("Transfer-Encoding: gzip, chunked\r\n", b"0\r\n\r\n"),
    ],
    ids=["past-the-limit", "expect-continue", "coded"],
)
async def test_chunked_uploads_past_the_limit_are_refused_before_the_body(gw, extra, body):
    """README Uploads: ``Transfer-Encoding`` is 400 (protocol §13.2: no chunking), decided from the
    head: no ``100 Continue``, nothing kept, whatever the chunks would have carried."""
    status, _, _ = await Raw.exchange(gw, upload_head(-1, sha(b"c" * (MAX + 1)), extra=extra) + body)
    assert status == 400
    assert len(store_of(gw)) == 0 and reserved(gw) == 0
    await settle_metrics(gw, {STORED: 0, MEM: 0, SPOOL: 0})


async def test_content_length_with_transfer_encoding_is_refused(gw):
    """protocol §13.2 / RFC 9112 §6.3: a request smuggling both framings is never stored."""
    conn = await Raw.open(gw)
    try:
        frame = b"3\r\nabc\r\n0\r\n\r\n"
        await conn.send(upload_head(len(frame), sha(frame), extra="Transfer-Encoding: chunked\r\n") + frame)
        assert (await conn.response())[0] == 400
    finally:
        conn.close()
    assert len(store_of(gw)) == 0
    await settle_metrics(gw, {STORED: 0})


# ================================================================================================
# (c) isolation


@pytest.fixture
async def tenant_gateway(gateway_factory, secrets_env, stub_factory, receivers):
    stub = await stub_factory()
    receiver = await receivers(confirming)
    gw = await gateway_factory(config(receiver.url, event_url=stub.url))
    return gw, stub, receiver


def normalized(body: bytes) -> Any:
    answer = json.loads(body)
    answer.pop("id", None)
    return answer


async def test_another_principals_ref_is_indistinguishable_from_an_unknown_one(tenant_gateway, http, no_secrets_logged):
    """README Uploads: refs are usable only by the principal that uploaded; another principal's
    ref is a gap, never an error that confirms it exists (protocol §13.2, refs scoped to the
    verified credentials)."""
    gw, stub, receiver = tenant_gateway
    status, receipt = await upload(http, gw, PNG, token=TOKEN_A)
    assert status == 201
    ref = receipt["ref"]
    guesses = [ref, ref.upper(), ref + "=", ref[:-1], " " + ref, "upl_" + "A" * 43]
    answers = []
    for guess in guesses:
        status, body, _ = await call(http, gw, model_request(guess), token=TOKEN_B)
        assert status == 200
        answers.append(normalized(body))
    assert all(a == answers[-1] for a in answers), "the owner's ref answers like any unknown ref"
    for sent in stub.received:
        assert_gap(sent["params"]["event"])
    assert receiver.requests == []
    seen = await scrape(gw)
    assert not any(k.startswith("ahp_gateway_upstream_uploads_total") and v for k, v in seen.items())
    # the owner still can use it
    status, _, _ = await call(http, gw, model_request(ref), token=TOKEN_A)
    assert status == 200 and len(receiver.requests) == 1 and receiver.requests[0][1] == PNG
    assert image_part(stub.received[-1]["params"]["event"])["body"] == {"ref": "urn:hostile:1"}
    assert ref not in json.dumps(stub.received) and ref not in receiver.requests[0][0].decode()


async def test_a_principal_name_that_is_not_ascii_neither_breaks_nor_reveals_refs(tenant_gateway, http):
    """README Uploads / protocol §13.2: principal names are arbitrary strings; another principal's
    ref is a gap, never an error that confirms it exists, and the owner's own ref works."""
    gw, stub, receiver = tenant_gateway
    status, receipt = await upload(http, gw, PNG, token=TOKEN_U)
    assert status == 201
    unknown = await call(http, gw, model_request("upl_" + "B" * 43), token=TOKEN_B)
    probe = await call(http, gw, model_request(receipt["ref"]), token=TOKEN_B)
    assert probe[0] == unknown[0] == 200
    assert normalized(probe[1]) == normalized(unknown[1]), "existence must not be observable"
    own = await call(http, gw, model_request(receipt["ref"]), token=TOKEN_U)
    assert own[0] == 200 and "error" not in json.loads(own[1])
    assert len(receiver.requests) == 1 and receiver.requests[0][1] == PNG


async def test_path_like_and_odd_refs_never_reach_the_filesystem(tenant_gateway, http, tmp_path, no_secrets_logged):
    """protocol §13.2: refs are opaque and receiver-allocated; a caller-chosen ref (a path, the
    spool file's own name, a URL, control characters) is an unknown ref: a gap, nothing read."""
    gw, stub, receiver = tenant_gateway
    status, _ = await upload(http, gw, b"s" * (MEMORY + 1))  # a real spool file to aim at
    assert status == 201
    (victim,) = spool_files(tmp_path / "spool")
    outside = tmp_path / "outside.bin"
    outside.write_bytes(PNG)
    refs = [
        str(victim),
        victim.name,
        f"../{victim.parent.name}/{victim.name}",
        "../../../../" + str(outside).lstrip("/"),
        "file://" + str(outside),
        "upl_/../../outside.bin",
        "upl_\x00" + victim.name,
        "upl_\r\nX-Injected: 1",
        "%2e%2e%2f" * 20 + "outside.bin",
        "upl_" + "é" * 40,
        "x" * 10000,
    ]
    for ref in refs:
        status, _, _ = await call(http, gw, model_request(ref))
        assert status == 200, ref
    assert len(stub.received) == len(refs)
    for sent in stub.received:
        assert_gap(sent["params"]["event"])
    assert receiver.requests == [], "nothing was read and re-uploaded"
    assert not any(r.levelno >= logging.ERROR for r in no_secrets_logged.records)


async def test_client_chosen_names_never_name_a_file_and_the_spool_is_private(gw, tmp_path):
    """README Uploads: spooled uploads go to a private directory under ``storage.spoolDir``; no
    header, query or path a harness sends chooses a file name."""
    before = set(tmp_path.rglob("*"))
    data = b"n" * (MEMORY + 1)
    extra = 'Content-Disposition: attachment; filename="../../escape.bin"\r\nX-Ref: ../../escape.bin\r\n'
    conn = await Raw.open(gw)
    try:
        head = upload_head(len(data), sha(data), extra=extra, path="/uploads?name=../../escape.bin&ref=../x")
        await conn.send(head + data)
        status, _, body = await conn.response()
    finally:
        conn.close()
    assert status == 201 and "escape" not in json.loads(body)["ref"]
    for path in ("/uploads/..%2f..%2fescape.bin", "/uploads%2F..%2Fescape.bin", "/uploads/../escape.bin/"):
        conn = await Raw.open(gw)
        try:
            await conn.send(upload_head(len(data), sha(data), path=path) + data)
            assert (await conn.response())[0] == 404, path
        finally:
            conn.close()
    created = set(tmp_path.rglob("*")) - before
    (private,) = [p for p in created if p.is_dir() and p.parent == tmp_path / "spool"]
    (spooled,) = [p for p in created if p.is_file()]
    assert spooled.parent == private and spooled.read_bytes() == data
    assert created <= {tmp_path / "spool", private, spooled}
    assert "escape" not in " ".join(str(p) for p in tmp_path.rglob("*"))
    assert stat.S_IMODE(private.stat().st_mode) == 0o700 and stat.S_IMODE(spooled.stat().st_mode) == 0o600


async def test_symlinks_in_the_spool_are_never_followed(secrets_env, tmp_path):
    """README Uploads (private spool directory): a symlink planted in ``spoolDir`` or in the
    gateway's private directory is neither written through nor followed when the spool is removed."""
    outside = tmp_path / "outside"
    outside.mkdir()
    keep = outside / "keep.txt"
    keep.write_text("not the gateway's")
    spool = tmp_path / "spool"
    spool.mkdir()
    (spool / "ahp-uploads-planted").symlink_to(outside, target_is_directory=True)
    path = tmp_path / "gateway.yaml"
    path.write_text(yaml.safe_dump(config(None), sort_keys=False))
    gw = GatewayServer(load(path))
    await gw.start()
    try:
        for i in range(3):
            assert (await raw_upload(gw, bytes([i]) * (MEMORY + 1)))[0] == 201
        (private,) = [p for p in spool.iterdir() if not p.is_symlink()]
        assert len(list(private.iterdir())) == 3
        (private / "planted").symlink_to(outside, target_is_directory=True)
        (private / "planted-file").symlink_to(keep)
    finally:
        await gw.stop()
    assert not private.exists(), "the private spool directory is removed on stop"
    assert sorted(p.name for p in outside.iterdir()) == ["keep.txt"] and keep.read_text() == "not the gateway's"
    assert (spool / "ahp-uploads-planted").is_symlink()


# ================================================================================================
# (d) confusion on re-upload


def redirect_to(target: RawReceiver) -> Behaviour:
    async def behave(receiver: RawReceiver, reader: Any, writer: asyncio.StreamWriter, body: bytes) -> None:
        await receiver.write(writer, answer(307, b"", extra=f"Location: {target.url}\r\n"))

    return behave


async def drip(receiver: RawReceiver, reader: Any, writer: asyncio.StreamWriter, body: bytes) -> None:
    data = receipt_for(body)
    await receiver.write(writer, answer(201, data)[: -len(data)])
    for byte in data:
        await receiver.write(writer, bytes([byte]))
        if await peer_closed(reader, 0.2):
            return


async def hang_after_head(receiver: RawReceiver, reader: Any, writer: asyncio.StreamWriter, body: bytes) -> None:
    await receiver.write(
        writer, b"HTTP/1.1 201 Created\r\nContent-Type: application/json\r\nContent-Length: 200\r\n\r\n"
    )
    await peer_closed(reader, 10)


async def huge_body(receiver: RawReceiver, reader: Any, writer: asyncio.StreamWriter, body: bytes) -> None:
    size = 64 * 1024 * 1024
    await receiver.write(
        writer, f"HTTP/1.1 201 Created\r\nContent-Type: application/json\r\nContent-Length: {size}\r\n\r\n".encode()
    )
    chunk = b" " * 65536
    while receiver.written < size:
        await receiver.write(writer, chunk)


async def huge_head(receiver: RawReceiver, reader: Any, writer: asyncio.StreamWriter, body: bytes) -> None:
    data = receipt_for(body)
    await receiver.write(writer, answer(201, data, extra="X-Pad: " + "p" * 200_000 + "\r\n"))


async def other_bytes(receiver: RawReceiver, reader: Any, writer: asyncio.StreamWriter, body: bytes) -> None:
    await receiver.write(writer, answer(201, receipt_for(PNG[::-1] + b"!", "urn:hostile:replayed")))


def typed(**fields: Any) -> Behaviour:
    async def behave(receiver: RawReceiver, reader: Any, writer: asyncio.StreamWriter, body: bytes) -> None:
        receipt = {"ref": "urn:hostile:1", "size": len(body), "sha256": sha(body), **fields}
        await receiver.write(writer, answer(201, json.dumps(receipt).encode()))

    return behave


async def reset(receiver: RawReceiver, reader: Any, writer: asyncio.StreamWriter, body: bytes) -> None:
    transport = writer.transport
    sock = transport.get_extra_info("socket")
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    transport.abort()


HOSTILE: dict[str, tuple[Any, str]] = {
    "slow-drip": (drip, "timeout"),
    "hang-after-head": (hang_after_head, "timeout"),
    "huge-body": (huge_body, "receipt"),
    "huge-head": (huge_head, "unavailable"),
    "receipt-for-other-bytes": (other_bytes, "receipt"),
    "size-as-bool": (typed(size=True), "receipt"),
    "size-as-float": (typed(size=float(len(PNG))), "receipt"),
    "size-as-string": (typed(size=str(len(PNG))), "receipt"),
    "sha-uppercase": (typed(sha256=sha(PNG).upper()), "receipt"),
    "ref-not-a-string": (typed(ref=1), "receipt"),
    "reset": (reset, "unavailable"),
}


@pytest.mark.parametrize(
    "name",
    list(HOSTILE),
)
async def test_a_hostile_upload_receiver_leaves_a_gap_within_the_deadline(
    gateway_factory, secrets_env, stub_factory, receivers, http, name, no_secrets_logged
):
    """README Uploads (per-upstream re-upload) / protocol §13.2: only a ``201`` receipt with exactly
    the size and SHA-256 sent confirms; anything else (slow, huge, malformed, for other bytes)
    leaves that upstream a schema-valid gap, never inline bytes, and the intercept still settles
    within ``limits.deadlineMs``."""
    behaviour, expected = HOSTILE[name]
    receiver = await receivers(behaviour)
    stub = await stub_factory()
    # 1 s for the re-upload: the receipts that answer at once must arrive within it even on a
    # loaded machine (400 ms was once exceeded by a stall), and the slow receivers take 20 s or more
    gw = await gateway_factory(config(receiver.url, upload_timeout=1000, event_url=stub.url))
    status, receipt = await upload(http, gw, PNG)
    assert status == 201
    status, body, took = await call(http, gw, model_request(receipt["ref"]))
    assert status == 200 and json.loads(body)["result"]["effects"] == []
    assert took < DEADLINE_MS / 1000 + 1.0, f"settled in {took:.2f}s"
    assert len(receiver.requests) == 1 and receiver.requests[0][1] == PNG
    assert f"Authorization: Bearer {UPLOAD_TOKEN}".lower() in receiver.requests[0][0].decode().lower()
    assert_gap(stub.received[0]["params"]["event"])
    assert stub.headers[0]["Authorization"] == f"Bearer {EVENT_TOKEN}"
    await settle_metrics(gw, {outcome(expected): 1, outcome("ok"): 0})
    if name == "huge-body":
        assert receiver.written < 16 * 1024 * 1024, "the gateway stopped reading a huge receipt"
    for secret in SECRETS:
        assert secret.encode() not in body


async def test_a_redirecting_receiver_is_not_followed_and_never_sees_the_credential_again(
    gateway_factory, secrets_env, stub_factory, receivers, http, no_secrets_logged
):
    """protocol §13.2: POST to the exact endpoint, no redirects: a 307/308 to a receiver that would
    confirm is a failure (gap), and the redirect target receives neither bytes nor credential."""
    good = await receivers(confirming)
    hostile = await receivers(redirect_to(good))
    stub = await stub_factory()
    gw = await gateway_factory(config(hostile.url, event_url=stub.url))
    _, receipt = await upload(http, gw, PNG)
    status, _, took = await call(http, gw, model_request(receipt["ref"]))
    assert status == 200 and took < DEADLINE_MS / 1000 + 1.0
    assert len(hostile.requests) == 1 and good.requests == []
    assert_gap(stub.received[0]["params"]["event"])
    await settle_metrics(gw, {outcome("status"): 1, outcome("ok"): 0})


async def split_receipt(receiver: RawReceiver, reader: Any, writer: asyncio.StreamWriter, body: bytes) -> None:
    """A valid receipt whose body arrives in two writes: the second is held until the gateway
    either gives up on the connection (a bug) or has waited a while (correct)."""
    data = receipt_for(body)
    await receiver.write(writer, answer(201, data)[: -len(data) // 2])
    await peer_closed(reader, 0.3)
    with contextlib.suppress(ConnectionError):
        await receiver.write(writer, data[-len(data) // 2 :])


async def test_a_valid_receipt_that_arrives_in_pieces_is_confirmed(
    gateway_factory, secrets_env, stub_factory, receivers, http
):
    """protocol §13.2: a 201 JSON receipt with exactly the size and SHA-256 sent confirms the upload,
    however its bytes are segmented on the wire."""
    receiver = await receivers(split_receipt)
    stub = await stub_factory()
    gw = await gateway_factory(config(receiver.url, upload_timeout=1500, event_url=stub.url))
    _, receipt = await upload(http, gw, PNG)
    status, _, _ = await call(http, gw, model_request(receipt["ref"]))
    assert status == 200
    assert image_part(stub.received[0]["params"]["event"])["body"] == {"ref": "urn:hostile:1"}
    await settle_metrics(gw, {outcome("ok"): 1})


# ================================================================================================
# (e) cancellation


@pytest.mark.parametrize("tier", ["memory", "spool", "spool-after-100-continue"])
async def test_a_harness_disconnecting_mid_upload_leaves_no_reservation(gw, tmp_path, tier):
    """README Uploads / protocol §13.2 (nothing kept on failure): a harness that disconnects
    mid-body leaves no reservation, no spool file, no counted outcome, and gauges at baseline."""
    await raw_upload(gw, b"base")  # a baseline that is not all zeros
    baseline = await settle_metrics(gw, {MEM: 4, SPOOL: 0, STORED: 1})
    size = 1000 if tier == "memory" else MAX
    conn = await Raw.open(gw)
    try:
        extra = "Expect: 100-continue\r\n" if "continue" in tier else ""
        await conn.send(upload_head(size, sha(b"d" * size), extra=extra))
        if extra:
            assert (await conn.response())[0] == 100
        await conn.send(b"d" * (size // 2))
        await until(lambda: reserved(gw) == size, what="reserved")
        if tier != "memory":
            await until(lambda: len(spool_files(tmp_path / "spool")) == 1, what="partial spool file")
    finally:
        conn.close()
    await until(lambda: reserved(gw) == 0, what="reservation released")
    counters = {k: v for k, v in baseline.items() if k.startswith("ahp_gateway_uploads_total")}
    await settle_metrics(gw, {MEM: 4, SPOOL: 0, **counters})
    assert spool_files(tmp_path / "spool") == [] and len(store_of(gw)) == 1
    for fill in (MAX, MAX, TOTAL - 4 - 2 * MAX):
        assert (await raw_upload(gw, b"f" * fill))[0] == 201, "all the room is back"
    assert (await raw_upload(gw, b"g"))[0] == 503 and reserved(gw) == 0


async def test_a_harness_disconnecting_mid_intercept_cancels_the_re_upload(
    gateway_factory, secrets_env, stub_factory, receivers, http, no_secrets_logged
):
    """README Failure behaviour (the harness disconnects) with protocol §13.2: a re-upload in flight
    is cancelled and its connection closed, no outcome or decision is recorded, storage gauges are
    unchanged, and the next intercept re-uploads afresh (no stale confirmation)."""
    calls: list[str] = []

    async def held(receiver: RawReceiver, reader: Any, writer: asyncio.StreamWriter, body: bytes) -> None:
        calls.append("start")
        if not receiver.release.is_set():
            if await peer_closed(reader, 10):
                receiver.cancelled.set()
                return
        await confirming(receiver, reader, writer, body)

    receiver = await receivers(held)
    stub = await stub_factory()
    gw = await gateway_factory(config(receiver.url, upload_timeout=1800, event_url=stub.url))
    _, receipt = await upload(http, gw, PNG)
    before = await settle_metrics(gw, {MEM: len(PNG), SPOOL: 0, STORED: 1})
    request = intercept(model_request(receipt["ref"]))
    conn = await Raw.open(gw)
    payload = json.dumps(request).encode()
    head = (
        f"POST / HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer {TOKEN_A}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(payload)}\r\n\r\n"
    )
    await conn.send(head.encode() + payload)
    await until(lambda: calls == ["start"], what="re-upload in flight")
    conn.close()
    await asyncio.wait_for(receiver.cancelled.wait(), 5)
    assert stub.received == [], "the event is never published without its upload"
    await settle_metrics(gw, {MEM: len(PNG), SPOOL: 0, STORED: 1, outcome("ok"): 0, outcome("timeout"): 0})
    seen = await scrape(gw)
    assert {k: v for k, v in seen.items() if k.startswith("ahp_gateway_upstream_uploads_total")} == {
        k: v for k, v in before.items() if k.startswith("ahp_gateway_upstream_uploads_total")
    }
    assert reserved(gw) == 0
    receiver.release.set()
    status, _, _ = await call(http, gw, model_request(receipt["ref"]))
    assert status == 200 and len(receiver.requests) == 2
    assert image_part(stub.received[0]["params"]["event"])["body"] == {"ref": "urn:hostile:2"}
    await settle_metrics(gw, {outcome("ok"): 1, outcome("reused"): 0})


async def test_refused_uploads_are_counted_with_or_without_100_continue(gw):
    """README Observability: ``ahp_gateway_uploads_total{outcome}`` counts uploads refused by inbound
    authentication as ``unauthorized``; a harness choosing ``Expect: 100-continue`` must not
    hide its refusals from the counter."""
    for extra in ("", "Expect: 100-continue\r\n"):
        conn = await Raw.open(gw)
        try:
            await conn.send(upload_head(10, sha(b"0" * 10), token="tok-not-known", extra=extra))
            assert (await conn.response())[0] == 401
        finally:
            conn.close()
    await settle_metrics(gw, {uploads_total("unauthorized"): 2}, timeout=2.0)
