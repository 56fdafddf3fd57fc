"""Helpers shared by the fault, fuzz, slow-client and soak tests: raw loopback sockets, reading
the admin listener's /metrics, counting this process's file descriptors."""

from __future__ import annotations

import asyncio
import contextlib
import os
from typing import Any, NamedTuple

import aiohttp
from prometheus_client.parser import text_string_to_metric_families


async def scrape(
    session: aiohttp.ClientSession, admin_port: int
) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of the admin listener's /metrics, keyed by (name, sorted labels)."""
    async with session.get(f"http://127.0.0.1:{admin_port}/metrics") as response:
        assert response.status == 200
        text = await response.text()
    out: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


def sample(samples: dict[Any, float], name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


async def metric(session: aiohttp.ClientSession, admin_port: int, name: str, **labels: str) -> float:
    return sample(await scrape(session, admin_port), name, **labels)


async def healthz(admin_port: int, timeout: float = 5.0) -> int:
    """The status of GET /healthz on a fresh connection (its own session: no pooled socket)."""
    async with (
        aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout)) as session,
        session.get(f"http://127.0.0.1:{admin_port}/healthz") as response,
    ):
        return response.status


async def read_until_closed(reader: asyncio.StreamReader, timeout: float) -> bytes | None:
    """Everything the peer sends until it closes; None if it is still open after ``timeout``."""
    data = b""
    try:
        async with asyncio.timeout(timeout):
            while True:
                try:
                    chunk = await reader.read(65536)
                except (ConnectionResetError, BrokenPipeError):
                    return data
                if not chunk:
                    return data
                data += chunk
    except TimeoutError:
        return None


async def close(writer: asyncio.StreamWriter) -> None:
    writer.close()
    with contextlib.suppress(Exception):
        await writer.wait_closed()


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def raw_request(body: bytes, *, path: str = "/", headers: dict[str, str] | None = None) -> bytes:
    lines = [
        f"POST {path} HTTP/1.1",
        "Host: 127.0.0.1",
        "Content-Type: application/json",
        f"Content-Length: {len(body)}",
    ]
    lines.extend(f"{k}: {v}" for k, v in (headers or {}).items())
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


def status_of(response: bytes) -> int | None:
    """The status code of the first HTTP response in ``response`` (None if there is none)."""
    if not response.startswith(b"HTTP/"):
        return None
    try:
        return int(response.split(b" ", 2)[1])
    except (IndexError, ValueError):
        return None


class Response(NamedTuple):
    status: int
    headers: dict[str, str]
    """Lower-cased names."""
    body: bytes
    head: bytes
    """The status line and header lines as received."""


async def read_response(reader: asyncio.StreamReader, timeout: float = 5.0) -> Response:
    """One response from a kept-alive connection, its body ``Content-Length`` bytes; each read
    bounded by ``timeout``."""
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout)
    headers = {}
    for line in head.decode("latin-1").split("\r\n")[1:]:
        if ":" in line:
            name, value = line.split(":", 1)
            headers[name.strip().lower()] = value.strip()
    body = await asyncio.wait_for(reader.readexactly(int(headers.get("content-length", "0"))), timeout)
    return Response(status_of(head) or 0, headers, body, head)
