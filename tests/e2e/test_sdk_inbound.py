"""The official SDK as a harness against a bearer-protected gateway: a registration with
``authentication: {type: bearer, tokenEnv}`` is served; the same harness with a token the
gateway does not know gets the gateway's refusal, which its fail-closed policy turns into a
deny, and nothing reaches the upstream (protocol §12)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.config import gateway_config, hook
from tests.support.events import result
from tests.support.sdk_peers import harness, registration, settled, tool_before
from tests.support.tokens import TOKEN_A, tokens_file


@pytest.mark.spec("AHP-AUTH-001")
async def test_sdk_harness_with_a_bearer_binding(gateway_factory, stub_factory, tmp_path, monkeypatch) -> None:
    tokens_file(tmp_path / "tokens.yaml", (TOKEN_A, "team-a", {"tenant": "a"}))
    deny = {"type": "deny", "reason": "tenant a may not push", "code": "org.example.no_push"}
    upstream = await stub_factory(lambda r: result(r, [deny]))
    entry = hook("org.example.tenant-a", upstream.url, when='principal.attributes.tenant == "a"')
    gw = await gateway_factory(
        gateway_config([entry], inbound={"auth": {"type": "bearer", "tokensFile": "tokens.yaml"}})
    )

    def reg(env: str) -> dict[str, Any]:
        document = registration([("org.example.gateway", gw.url, "fail-closed", 2500)])
        document["hooks"][0]["authentication"] = {"type": "bearer", "tokenEnv": env}
        return document

    monkeypatch.setenv("GW_TOKEN", TOKEN_A)
    monkeypatch.setenv("GW_WRONG", "not-a-known-token")
    async with harness(reg("GW_TOKEN")) as hooks:
        out = settled(await tool_before(hooks, "git push"))
    assert out["permission"] == "deny" and len(upstream.received) == 1
    async with harness(reg("GW_WRONG")) as hooks:
        out = settled(await tool_before(hooks, "git push"))
    assert out["permission"] == "deny", "fail-closed: an auth refusal is an operational failure"
    assert len(upstream.received) == 1, "the refused call never reached the upstream"
