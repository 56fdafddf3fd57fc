"""Fixtures of the native evasion attacks: one gateway, one client session and a sender per test module."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import aiohttp
import pytest_asyncio

from gateway.config.load import load
from gateway.native import client, flow
from gateway.server.app import GatewayServer
from tests.hostile.native.helpers import (
    DEADLINE_S,
    Answer,
    Send,
)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def gateway() -> AsyncIterator[GatewayServer]:
    """One gateway with the bundled default configuration (`ahp-gateway serve` without flags)."""
    server = GatewayServer(load(None), port=0, admin_port=0)
    await server.start()
    yield server
    await server.stop()


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=DEADLINE_S)) as session:
        yield session


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def send(gateway: GatewayServer, http: aiohttp.ClientSession) -> Send:
    async def _send(channel: str, harness: str, raw: bytes, event: str | None) -> Answer:
        if channel == "http":
            query = f"?event={event}" if harness == "copilot" and event else ""
            url = f"{gateway.url.rstrip('/')}/native/{harness}{query}"
            async with http.post(url, data=raw, headers={"Content-Type": "application/json"}) as response:
                body = (await response.read()).decode("utf-8", "replace")
                return Answer(0, body, "") if response.status == 200 else Answer(response.status, "", body)
        codec = flow.codec_for(harness)
        # Claude Code, Codex, Gemini, Cursor and Windsurf read the event from the payload;
        # Copilot's installer passes --event (camelCase payloads carry none).
        prepared = flow.prepare(codec, raw, event if harness == "copilot" else None, "deny")
        if prepared.answer is not None:
            a = prepared.answer
            return Answer(a.exit_code, a.stdout, a.stderr)
        assert prepared.body is not None and prepared.tr is not None
        status, body = await asyncio.wait_for(
            asyncio.to_thread(
                client.post, gateway.url, prepared.body, deadline_s=DEADLINE_S, token=None, front_end=harness
            ),
            DEADLINE_S + 5,
        )
        a = flow.conclude(codec, prepared.tr, status, body, "deny")
        return Answer(a.exit_code, a.stdout, a.stderr)

    return _send
