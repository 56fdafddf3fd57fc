"""OAuth client credentials toward an upstream, against a real authorization server on loopback
(TLS with a test CA): metadata discovery (RFC 8414), resource-bound tokens (RFC 8707), caching,
refresh after a 401, and no unauthenticated fallback (capability-auth: no downgrade)."""

from __future__ import annotations

import base64
import ssl

import pytest
import trustme
from aiohttp import web

from tests.support.client import post
from tests.support.config import gateway_config
from tests.support.events import intercept, result, tool_before

RESOURCE = "https://policy.internal/ahp"


@pytest.fixture
async def token_server(tmp_path):
    """A hand-written token endpoint (metadata and client credentials) whose metadata a test may
    spoil (``token_endpoint``) and whose issued tokens it can count."""
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1")
    ca_file = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(ca_file))
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    cert.configure_cert(context)
    state = {"issued": [], "requests": [], "secret": "s3cr3t-client"}
    app = web.Application()

    async def metadata(request):
        endpoint = state.get("token_endpoint") or state["issuer"] + "/token"
        return web.json_response({"issuer": state["issuer"], "token_endpoint": endpoint})

    async def token(request):
        form = await request.post()
        state["requests"].append(dict(form))
        expected = "Basic " + base64.b64encode(f"gateway-client:{state['secret']}".encode()).decode()
        if request.headers.get("Authorization") != expected:
            return web.json_response({"error": "invalid_client"}, status=401)
        if form.get("grant_type") != "client_credentials" or form.get("resource") != RESOURCE:
            return web.json_response({"error": "invalid_request"}, status=400)
        value = f"tok-{len(state['issued']) + 1}"
        state["issued"].append(value)
        return web.json_response({"access_token": value, "token_type": "Bearer", "expires_in": 3600})

    app.router.add_get("/.well-known/oauth-authorization-server", metadata)
    app.router.add_post("/token", token)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=context)
    await site.start()
    state["issuer"] = f"https://127.0.0.1:{runner.addresses[0][1]}"
    state["ca_file"] = str(ca_file)
    yield state
    await runner.cleanup()


def oauth_hook(url, token_server, policy="fail-closed"):
    return {
        "id": "org.example.protected",
        "transport": {"type": "http", "url": url},
        "caFile": token_server["ca_file"],
        "authentication": {
            "type": "oauth",
            "resource": RESOURCE,
            "issuer": token_server["issuer"],
            "clientId": "gateway-client",
            "clientSecretRef": "env:TEST_OAUTH_SECRET",
            "flow": "client_credentials",
            "scopes": ["ahp.intercept"],
        },
        "subscriptions": [
            {
                "mode": "intercept",
                "events": ["tool.before"],
                "timeoutMs": 2000,
                "failurePolicy": policy,
                "content": {"default": "body"},
            }
        ],
    }


@pytest.mark.spec("AHP-AUTH-001")
async def test_tokens_are_fetched_once_bound_to_the_resource_and_reused(
    gateway_factory, stub_factory, http, token_server, monkeypatch
):
    monkeypatch.setenv("TEST_OAUTH_SECRET", token_server["secret"])
    valid = {"Bearer tok-1"}
    upstream = await stub_factory(lambda r: result(r, []))
    gw = await gateway_factory(
        gateway_config(
            [oauth_hook(upstream.url, token_server)], limits={"deadlineMs": 4000}, frontend={"timeoutMs": 5000}
        )
    )
    for _ in range(3):
        _, body = await post(http, gw.url, intercept(tool_before()))
        assert body["result"]["effects"] == []
    assert {h["Authorization"] for h in upstream.headers} == valid
    assert token_server["issued"] == ["tok-1"]
    assert token_server["requests"][0] == {
        "grant_type": "client_credentials",
        "resource": RESOURCE,
        "scope": "ahp.intercept",
    }


async def test_a_401_drops_the_token_and_the_next_call_gets_a_new_one(
    gateway_factory, stub_factory, http, token_server, monkeypatch
):
    monkeypatch.setenv("TEST_OAUTH_SECRET", token_server["secret"])

    def answer(r):
        return result(r, []) if len(token_server["issued"]) > 1 else (401, {"error": "expired"})

    upstream = await stub_factory(answer)
    gw = await gateway_factory(
        gateway_config(
            [oauth_hook(upstream.url, token_server, policy="fail-open")],
            limits={"deadlineMs": 4000},
            frontend={"timeoutMs": 5000},
        )
    )
    await post(http, gw.url, intercept(tool_before()))  # 401: auth failure under fail-open
    _, body = await post(http, gw.url, intercept(tool_before()))
    assert body["result"]["effects"] == []
    assert [h["Authorization"] for h in upstream.headers] == ["Bearer tok-1", "Bearer tok-2"]


async def test_failed_token_acquisition_never_sends_unauthenticated(
    gateway_factory, stub_factory, http, token_server, monkeypatch, caplog
):
    monkeypatch.setenv("TEST_OAUTH_SECRET", "wrong-secret-value")
    upstream = await stub_factory()
    gw = await gateway_factory(
        gateway_config(
            [oauth_hook(upstream.url, token_server)], limits={"deadlineMs": 4000}, frontend={"timeoutMs": 5000}
        )
    )
    _, body = await post(http, gw.url, intercept(tool_before()))
    assert body["result"]["effects"][0]["code"] == "org.example.gateway.upstream_unavailable"
    assert body["result"]["effects"][0]["extensions"]["org.example.gateway"]["failure"] == "auth"
    assert upstream.received == []
    assert "wrong-secret-value" not in caplog.text and "wrong-secret-value" not in str(body)


@pytest.mark.spec("AHP-SEC-001")
async def test_a_discovered_token_endpoint_with_credentials_is_never_called(
    gateway_factory, stub_factory, http, token_server, monkeypatch, caplog
):
    monkeypatch.setenv("TEST_OAUTH_SECRET", token_server["secret"])
    token_server["token_endpoint"] = token_server["issuer"].replace("https://", "https://admin:planted-pw@") + "/token"
    upstream = await stub_factory()
    gw = await gateway_factory(
        gateway_config(
            [oauth_hook(upstream.url, token_server)], limits={"deadlineMs": 4000}, frontend={"timeoutMs": 5000}
        )
    )
    _, body = await post(http, gw.url, intercept(tool_before()))
    assert body["result"]["effects"][0]["code"] == "org.example.gateway.upstream_unavailable"
    assert token_server["requests"] == [] and upstream.received == []
    assert "planted-pw" not in caplog.text
