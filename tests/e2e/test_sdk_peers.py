"""The official SDK as harness and as backends: SDK Hooks → gateway → SDK Handlers."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.config import gateway_config
from tests.support.sdk_peers import SdkBackend, harness, registration, serve_backends, settled, tool_before


def _deny_marker(ctx: Any) -> tuple[dict[str, Any], ...]:
    command = str((ctx.event.tool.input or {}).get("command", ""))
    if "--force" in command:
        return ({"type": "deny", "reason": "force push is not allowed", "code": "org.example.git.force"},)
    return ()


async def _via_gateway(gateway_factory, backends, policies=None, **cfg_extra):
    async with serve_backends(backends) as urls:
        hooks = [
            {
                "id": f"org.example.backend{i}",
                "transport": {"type": "http", "url": url},
                "subscriptions": [
                    {
                        "mode": "intercept",
                        "events": ["tool.before"],
                        "timeoutMs": 1000,
                        "failurePolicy": (policies or {}).get(i, "fail-closed"),
                        "content": {"default": "body"},
                    },
                    {"mode": "observe", "events": ["tool.before"], "content": {"default": "body"}},
                ],
            }
            for i, url in enumerate(urls)
        ]
        server = await gateway_factory(gateway_config(hooks, **cfg_extra))
        yield server


@pytest.mark.spec("AHP-COMP-001")
@pytest.mark.parametrize(
    ("behaviours", "command", "expected"),
    [
        ([_deny_marker], "git push --force origin main", {"permission": "deny", "messages": []}),
        ([_deny_marker], "git status", {"permission": "none", "messages": []}),
        (
            [lambda c: ({"type": "modify", "target": "input", "operation": "merge", "value": {"timeout": 5}},)],
            "ls",
            {"input": {"command": "ls", "timeout": 5}},
        ),
        (
            [lambda c: ({"type": "modify", "target": "input", "operation": "replace", "value": {"command": "ls -a"}},)],
            "ls",
            {"input": {"command": "ls -a"}},
        ),
        (
            [lambda c: ({"type": "message", "text": "hello"},), lambda c: ({"type": "message", "text": "world"},)],
            "ls",
            {"messages": ["hello", "world"]},
        ),
        ([lambda c: ({"type": "ask"},), lambda c: ({"type": "allow"},)], "ls", {"permission": "ask"}),
        ([lambda c: ({"type": "allow"},)], "ls", {"permission": "allow"}),
        (
            [lambda c: ({"type": "flow", "operation": "stop", "reason": "done"},), _deny_marker],
            "git push --force",
            {"flow": "stop", "permission": "none"},
        ),
        ([lambda c: ({"type": "return", "value": {"stdout": "cached"}},)], "ls", {"candidate": {"stdout": "cached"}}),
    ],
)
async def test_sdk_harness_through_gateway(gateway_factory, behaviours, command, expected):
    backends = [SdkBackend(b) for b in behaviours]
    async for server in _via_gateway(gateway_factory, backends):
        reg = registration([("org.example.gateway", server.url, "fail-closed", 3000)], observe=True)
        async with harness(reg) as hooks:
            out = settled(await tool_before(hooks, command))
    for key, value in expected.items():
        assert out[key] == value, (key, out)


async def test_deny_from_first_backend_skips_the_rest_and_observers_get_the_settled_event(gateway_factory):
    """Protocol §8.3-8.4: the uncalled interceptor subscription gets one settled observation
    through the harness's own hooks/observe to the gateway, the caller that decided gets none for
    its interceptor subscription, and explicit observe subscriptions are never deduplicated
    against interception (tracked by subscription, not backend)."""
    first, second = SdkBackend(_deny_marker), SdkBackend(lambda c: ())
    async for server in _via_gateway(gateway_factory, [first, second]):
        reg = registration([("org.example.gateway", server.url, "fail-closed", 3000)], observe=True)
        async with harness(reg) as hooks:
            out = settled(await tool_before(hooks, "git push --force"))
            assert out["permission"] == "deny"
        from tests.support.client import wait_for

        await wait_for(lambda: len(second.observations) == 2)
        await server.gateway.drain(2)  # every delivery finished, not just dequeued
        assert second.intercepts == []
        assert len(first.intercepts) == 1
        # second: its uncalled interceptor subscription and its observe subscription, one each
        assert len(second.observations) == 2
        # first was called for this event: only its explicit observe subscription gets a copy
        assert len(first.observations) == 1


async def test_gateway_is_one_backend_for_the_sdk_harness(gateway_factory):
    """hooks/configuration: an SDK harness whose registration omits subscriptions discovers them
    from the gateway and intercepts through it (no silent bypass)."""
    backend = SdkBackend(_deny_marker)
    async for server in _via_gateway(gateway_factory, [backend]):
        reg = {
            "protocolVersion": "draft",
            "hooks": [{"id": "org.example.gateway", "transport": {"type": "http", "url": server.url}}],
        }
        async with harness(reg) as hooks:
            out = settled(await tool_before(hooks, "git push --force"))
        assert out["permission"] == "deny"
        assert len(backend.intercepts) == 1
