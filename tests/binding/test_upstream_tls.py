"""Per-endpoint CA bundles toward https upstreams: ``caFile`` *replaces* the platform trust for
that endpoint instead of adding to it, so a certificate the platform trusts but the configured
bundle does not is refused (a compromised or over-broad platform store cannot vouch for a policy
backend pinned to its own CA). The platform store is simulated with ``SSL_CERT_FILE``, which
OpenSSL reads whenever default trust is loaded; the control shows that a client on default
trust really accepts the upstream. Any replacement of the upstream HTTP client must keep this
test green."""

from __future__ import annotations

import ssl
from pathlib import Path

import pytest
import trustme
from aiohttp import web

from tests.support.client import post
from tests.support.config import gateway_config, hook
from tests.support.events import intercept, result, tool_before


@pytest.fixture
def cas(tmp_path: Path) -> dict[str, str]:
    out = {}
    for name in ("platform", "pinned"):
        ca = trustme.CA()
        path = tmp_path / f"{name}.pem"
        ca.cert_pem.write_to_path(str(path))
        out[name] = str(path)
        out[name + "_ca"] = ca  # type: ignore[assignment]
    return out


@pytest.fixture
async def https_upstream(cas):
    """An https AHP backend whose certificate is issued by the *platform* CA."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    cas["platform_ca"].issue_cert("127.0.0.1").configure_cert(context)  # type: ignore[attr-defined]
    received: list[dict] = []

    async def handle(request: web.Request) -> web.Response:
        body = await request.json()
        received.append(body)
        return web.json_response(result(body, []))

    app = web.Application()
    app.router.add_post("/", handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=context)
    await site.start()
    port = runner.addresses[0][1]
    yield f"https://127.0.0.1:{port}/", received
    await runner.cleanup()


@pytest.mark.spec("AHP-HTTP-001")
@pytest.mark.parametrize(
    ("bundle", "reached"),
    [
        ("platform", True),  # the bundle holding the issuer
        ("pinned", False),  # a bundle without the issuer: refused although the platform trusts it
    ],
)
async def test_ca_file_replaces_platform_trust(
    gateway_factory, http, https_upstream, cas, monkeypatch, bundle, reached
):
    monkeypatch.setenv("SSL_CERT_FILE", cas["platform"])
    url, received = https_upstream
    # control: default (platform) trust, loaded now, accepts the upstream's certificate
    async with http.post(url, json=intercept(tool_before()), ssl=ssl.create_default_context()) as response:
        assert response.status == 200
    received.clear()
    entry = hook("org.example.pinned", url, policy="fail-closed")
    entry["caFile"] = cas[bundle]
    gw = await gateway_factory(gateway_config([entry]))
    status, answer = await post(http, gw.url, intercept(tool_before()))
    assert status == 200
    effects = answer["result"]["effects"]
    if reached:
        assert len(received) == 1 and effects == []
    else:
        assert received == []
        assert [e["type"] for e in effects] == ["deny"]  # fail-closed: a TLS failure never allows
