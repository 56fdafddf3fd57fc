"""Shared fixtures: real loopback HTTP servers (the gateway, scripted upstreams, SDK backends)."""

from __future__ import annotations

import asyncio
import copy
import itertools
import json
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml
from aiohttp import web

from gateway.config.load import load
from gateway.server.app import GatewayServer
from tests.oauth_server import LoopbackAuthServer, start_auth_server

ROOT = Path(__file__).resolve().parent.parent
VECTORS = ROOT / "tests" / "vectors"
"""Vendored upstream test vectors (see tests/vectors/README.md)."""
HARNESS = {"name": "test-harness", "version": "1.0"}
_ids = itertools.count(1)


def tool_before(command: str = "ls -la", **extra: Any) -> dict[str, Any]:
    """A valid tool.before event (SDK 0.10.1 schema: harness block required)."""
    n = next(_ids)
    event: dict[str, Any] = {
        "id": f"evt-{n}",
        "source": "urn:example:harness",
        "type": "tool.before",
        "time": "2026-11-30T10:00:00Z",
        "harness": dict(HARNESS),
        "session": {"id": "sess-1", "cwd": "/home/dev/project", "workspaceRoots": ["/home/dev/project"]},
        "call": {"id": f"call-{n}"},
        "path": "native",
        "tool": {"name": "shell", "origin": "native", "input": {"command": command}},
    }
    event.update(extra)
    return event


ALL_TOOL_BEFORE_CAPS: dict[str, Any] = {
    "effects": ["deny", "allow", "ask", "modify", "message", "return", "flow", "inject"],
    "modify": {"input": {"replace": True, "merge": True}},
    "flow": {"operations": ["stop"]},
    "inject": {"context": {"append": True, "deliverAt": ["now", "next_turn"]}},
}


def intercept(
    event: dict[str, Any], caps: dict[str, Any] | None = None, state: dict[str, Any] | None = None, rid: Any = None
) -> dict[str, Any]:
    params: dict[str, Any] = {
        "protocolVersion": "draft",
        "event": event,
        "capabilities": copy.deepcopy(caps or {"effects": ["deny"]}),
    }
    if state is not None:
        params["state"] = state
    return {"jsonrpc": "2.0", "id": event["id"] if rid is None else rid, "method": "hooks/intercept", "params": params}


def result(request: dict[str, Any], effects: list[dict[str, Any]]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request["id"], "result": {"protocolVersion": "draft", "effects": effects}}


Answer = Callable[[dict[str, Any]], Any]


@dataclass
class Stub:
    """A scripted upstream on loopback. ``answer(request)`` returns a dict (JSON 200), a
    (status, bytes|dict) pair, or an awaitable of either."""

    url: str
    received: list[dict[str, Any]] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)
    answer: Answer | None = None
    observed: list[dict[str, Any]] = field(default_factory=list)
    observe_event: asyncio.Event = field(default_factory=asyncio.Event)
    observe_gate: asyncio.Event | None = None
    """When set, observe notifications are held until the event is set (a slow observer)."""


async def _start(app: web.Application) -> tuple[web.AppRunner, int]:
    runner = web.AppRunner(app, access_log=None, handler_cancellation=True, shutdown_timeout=0.5)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    return runner, port


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
        runner, port = await _start(app)
        runners.append(runner)
        stub.url = f"http://127.0.0.1:{port}/"
        return stub

    yield make
    for runner in runners:
        await runner.cleanup()


def hook(
    hook_id: str,
    url: str,
    *,
    policy: str = "fail-closed",
    timeout: int = 1000,
    events: list[str] | None = None,
    **extra: Any,
) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "id": hook_id,
        "transport": {"type": "http", "url": url},
        "subscriptions": [
            {
                "mode": "intercept",
                "events": events or ["tool.before"],
                "timeoutMs": timeout,
                "failurePolicy": policy,
                "content": {"default": "body"},
            }
        ],
    }
    entry.update(extra)
    return entry


def stdio_argv(config: Any, *args: str) -> list[str]:
    """The command line of ``ahp-gateway [args] stdio --config <config>`` in this interpreter."""
    return [sys.executable, "-m", "gateway", *args, "stdio", "--config", str(config)]


def gateway_config(hooks: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    cfg: dict[str, Any] = {
        "id": "org.example.gateway",
        "listen": {"host": "127.0.0.1", "port": 0, "path": "/"},
        "admin": {"host": "127.0.0.1", "port": 0},
        "limits": {"maxBodyBytes": 1048576, "deadlineMs": 2000},
        "hooks": hooks,
    }
    cfg.update(extra)
    return cfg


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


async def post(
    session: aiohttp.ClientSession, url: str, body: Any, *, content_type: str = "application/json"
) -> tuple[int, Any]:
    data = body if isinstance(body, bytes | str) else json.dumps(body)
    async with session.post(url, data=data, headers={"Content-Type": content_type}) as response:
        raw = await response.read()
        if not raw:
            return response.status, None
        try:
            return response.status, json.loads(raw)
        except ValueError:
            return response.status, raw


async def wait_for(predicate: Callable[[], bool], timeout: float = 5.0) -> None:
    """Poll ``predicate`` until true or fail after ``timeout`` (no fixed sleeps in tests)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not predicate():
        if loop.time() > deadline:
            raise AssertionError("condition not reached before the deadline")
        await asyncio.sleep(0.01)
