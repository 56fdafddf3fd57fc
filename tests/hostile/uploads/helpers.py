"""Helpers of the upload attacks: admin metrics, raw HTTP, a byte-level hostile receiver, the gateway under attack."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import re
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp

from gateway.server.app import GatewayServer
from tests.support.config import gateway_config
from tests.support.events import intercept
from tests.support.tokens import TOKEN_A, TOKEN_B
from tests.support.uploads import PNG, image_part, upload_hook

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


async def confirming(receiver: RawReceiver, reader: Any, writer: asyncio.StreamWriter, body: bytes) -> None:
    await receiver.write(writer, answer(201, receipt_for(body, f"urn:hostile:{len(receiver.requests)}")))


def assert_gap(event: dict[str, Any]) -> None:
    part = image_part(event)
    assert "body" not in part and part["gap"]["reason"], part
    assert PNG.hex()[:32] not in json.dumps(event) and "iVBOR" not in json.dumps(event), "never inline bytes"
