"""The official AHP Python SDK (agenthooksprotocol==0.10.1) as real peers: ``Hooks`` as the
harness, ``server.hooks.Handlers`` as backends served over loopback HTTP by aiohttp."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

from agenthooksprotocol import Hooks, capability, event
from agenthooksprotocol.server import hooks as sdk_hooks
from aiohttp import web

Behaviour = Callable[[Any], Any]
"""Given the SDK ToolBeforeContext, return a tuple of effect dicts (or raise / sleep)."""


class SdkBackend:
    def __init__(self, behaviour: Behaviour) -> None:
        self.behaviour = behaviour
        self.intercepts: list[dict[str, Any]] = []
        self.observations: list[Any] = []
        self.raw: Callable[[dict[str, Any]], Any] | None = None
        """When set, the HTTP route answers with this instead of the SDK engine (malformed peers)."""

        async def on_tool_before(ctx: Any) -> Any:
            self.intercepts.append({"input": dict(ctx.event.tool.input or {}), "state": ctx.state})
            effects = self.behaviour(ctx)
            if inspect.isawaitable(effects):
                effects = await effects
            return sdk_hooks.ToolBeforeReply(effects=tuple(typed(e) for e in effects))

        self.handlers = sdk_hooks.Handlers(
            intercept=sdk_hooks.InterceptHandlers(tool_before=on_tool_before),
            observe=sdk_hooks.ObserveHandlers(any=lambda ctx: self.observations.append(ctx.event.id)),
        )


@asynccontextmanager
async def serve_backends(backends: list[SdkBackend]) -> AsyncIterator[list[str]]:
    import json

    runners = []
    urls = []
    for backend in backends:

        async def post(request: web.Request, backend: SdkBackend = backend) -> web.StreamResponse:
            body = await request.read()
            if backend.raw is not None:
                message = json.loads(body)
                if "id" in message:
                    out = backend.raw(message)
                    if inspect.isawaitable(out):
                        out = await out
                    status, payload = out
                    return web.Response(status=status, body=payload, content_type="application/json")
            reply = await backend.handlers(body)
            return web.Response(status=204) if reply is None else web.json_response(reply)

        app = web.Application()
        app.router.add_post("/", post)
        runner = web.AppRunner(app, access_log=None, handler_cancellation=True, shutdown_timeout=0.5)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        runners.append(runner)
        urls.append(f"http://127.0.0.1:{runner.addresses[0][1]}/")
    try:
        yield urls
    finally:
        for runner in runners:
            await runner.cleanup()


_MODELS = {
    "deny": "DenyEffect",
    "allow": "AllowEffect",
    "ask": "AskEffect",
    "message": "MessageEffect",
    "modify": "ToolBeforeModifyEffect",
    "return": "ReturnToolEffect",
    "flow": "StopFlowEffect",
    "inject": "InjectEffect",
}


def typed(effect_dict: dict[str, Any]) -> Any:
    """SDK backends answer with typed effect models, built here from plain dicts."""
    from agenthooksprotocol import _models

    return getattr(_models, _MODELS[effect_dict["type"]]).from_dict(effect_dict)


def registration(entries: list[tuple[str, str, str, int]], *, observe: bool = False) -> dict[str, Any]:
    """(id, url, failurePolicy, timeoutMs) per backend, in chain order."""
    hooks = []
    for hook_id, url, policy, timeout in entries:
        subs: list[dict[str, Any]] = [
            {
                "events": ["tool.before"],
                "mode": "intercept",
                "timeoutMs": timeout,
                "failurePolicy": policy,
                "content": {"default": "body"},
            }
        ]
        if observe:
            subs.append({"events": ["tool.before"], "mode": "observe", "content": {"default": "body"}})
        hooks.append({"id": hook_id, "transport": {"type": "http", "url": url}, "subscriptions": subs})
    return {"protocolVersion": "draft", "hooks": hooks}


def host_capabilities(*, full: bool = True) -> Any:
    intercept = capability.ToolBeforeIntercept(
        deny=True,
        allow=full,
        ask=full,
        message=True,
        return_result=full,
        modify_input=capability.Modify.REPLACE_AND_MERGE if full else None,
        flow=capability.FlowStop() if full else None,
        inject_context=capability.InjectContext(deliver_at=(capability.Delivery.NOW, capability.Delivery.NEXT_TURN))
        if full
        else None,
    )
    return capability.HostCapabilities(tool_before=capability.ToolBeforeCapabilities(intercept=intercept, observe=True))


@asynccontextmanager
async def harness(reg: dict[str, Any], *, full: bool = True, read_timeout: float | None = None) -> AsyncIterator[Any]:
    """The SDK as a harness. ``read_timeout`` (one HTTP backend only) replaces the SDK's HTTP
    client default of 5 s between bytes, for a gateway answering a long serial chain."""
    transport = None
    if read_timeout is not None:
        import httpx
        from agenthooksprotocol.transports.http import HTTPTransport

        [backend] = reg["hooks"]
        client = httpx.AsyncClient(follow_redirects=False, timeout=read_timeout)
        transport = HTTPTransport(backend["transport"]["url"], client=client)
    try:
        async with Hooks(
            reg,
            source="urn:example:test-harness",
            harness=event.Harness(name="test-harness", version="1.0"),
            capabilities=host_capabilities(full=full),
            transport=transport,
        ) as hooks:
            yield hooks
    finally:
        if transport is not None:
            # private, of the SDK: its stdio transport has no public close for the process it started
            await transport._ready().aclose()


async def tool_before(hooks: Any, command: str, call_id: str = "call-1") -> Any:
    async with asyncio.timeout(20):
        return await hooks.tool_before(
            event.ToolBeforeInput(
                call_id=call_id, path="native", name="shell", origin="native", input={"command": command}
            )
        )


def settled(result: Any) -> dict[str, Any]:
    """The harness-visible outcome compared by the differential test."""
    candidate = result.candidate
    return {
        "permission": str(result.permission.value if hasattr(result.permission, "value") else result.permission),
        "input": result.input,
        "candidate": None if candidate is None else candidate.value,
        "messages": [m.text for m in result.messages],
        "injections": [dict(i) for i in result.injections],
        "flow": None
        if result.flow is None
        else str(result.flow.value if hasattr(result.flow, "value") else result.flow),
    }
