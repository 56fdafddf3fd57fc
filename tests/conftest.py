"""Shared fixtures: real loopback HTTP servers (the gateway, scripted upstreams, SDK backends).

Helpers the tests import live in tests/support/; this file holds only fixtures."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml
from aiohttp import web

from gateway.config.load import load
from gateway.server.app import GatewayServer
from tests.support.events import result
from tests.support.oauth_server import LoopbackAuthServer, start_auth_server
from tests.support.servers import Answer, Stub, start_app
from tests.support.uploads import UPLOAD_TOKEN, Receiver


@pytest.fixture
async def stub_factory() -> AsyncIterator[Callable[..., Awaitable[Stub]]]:
    runners: list[web.AppRunner] = []

    async def make(answer: Answer | None = None) -> Stub:
        stub = Stub(url="")
        stub.answer = answer

        async def handle(request: web.Request) -> web.StreamResponse:
            body = json.loads(await request.read())
            if body.get("method") == "hooks/observe":
                if stub.observe_gate is not None:
                    await stub.observe_gate.wait()
                stub.observed.append(body)
                stub.observe_event.set()
                return web.Response(status=202)
            stub.received.append(body)
            stub.headers.append(dict(request.headers))
            out = stub.answer(body) if stub.answer else result(body, [])
            if asyncio.iscoroutine(out):
                out = await out
            status, payload = out if isinstance(out, tuple) else (200, out)
            if isinstance(payload, bytes | str):
                return web.Response(status=status, body=payload, content_type="application/json")
            return web.Response(status=status, body=json.dumps(payload), content_type="application/json")

        app = web.Application()
        app.router.add_post("/", handle)
        runner, port = await start_app(app)
        runners.append(runner)
        stub.url = f"http://127.0.0.1:{port}/"
        return stub

    yield make
    for runner in runners:
        await runner.cleanup()


@pytest.fixture
async def gateway_factory(tmp_path: Path) -> AsyncIterator[Callable[..., Awaitable[GatewayServer]]]:
    servers: list[GatewayServer] = []

    async def make(config: dict[str, Any], *, name: str = "gateway.yaml", telemetry: Any = None) -> GatewayServer:
        path = tmp_path / name
        path.write_text(yaml.safe_dump(config, sort_keys=False))
        server = GatewayServer(load(path), telemetry=telemetry)
        await server.start()
        servers.append(server)
        return server

    yield make
    for server in servers:
        await server.stop()


@pytest.fixture
async def auth_server(tmp_path: Path) -> AsyncIterator[LoopbackAuthServer]:
    """A real OAuth authorization server (authlib) with a JWKS endpoint, on loopback TLS."""
    server = await start_auth_server(tmp_path)
    yield server
    assert server.runner is not None
    await server.runner.cleanup()


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


@pytest.fixture
async def receiver_factory():
    runners: list[web.AppRunner] = []

    async def make(token: str | None = UPLOAD_TOKEN) -> Receiver:
        receiver = Receiver(token)
        app = web.Application()
        app.router.add_post("/content", receiver.handle)
        runner, port = await start_app(app)
        runners.append(runner)
        receiver.url = f"http://127.0.0.1:{port}/content?tenant=a"
        return receiver

    yield make
    for runner in runners:
        await runner.cleanup()
