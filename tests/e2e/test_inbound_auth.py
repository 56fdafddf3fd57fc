"""Inbound authentication (protocol §12): bearer tokens from a hashed tokens file, JWT access
tokens from a real authorization server (authlib on loopback TLS), ``none`` on loopback only,
refusals before the body is read, the RFC 9728 document, and the principal in CEL and the
decision log. Every refusal is tried with the bypasses an attacker would use."""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import socket
import time
from typing import Any

import aiohttp
import pytest
import yaml
from joserfc import jwt as jose_jwt
from joserfc.jwk import ECKey, OctKey

from gateway.config.issues import ConfigError
from gateway.config.load import load
from gateway.inbound.gate import Gate, Peer
from gateway.inbound.principal import Refusal
from gateway.server.app import GatewayServer
from tests.support.client import metric, raw_exchange, wait_for
from tests.support.config import gateway_config, hook
from tests.support.events import intercept, tool_before
from tests.support.inbound import AUDIENCE, oauth_inbound, send
from tests.support.oauth_server import Client, LoopbackAuthServer
from tests.support.tokens import TOKEN_A, TOKEN_B, sha, tokens_file


def tenant_routes(a_url: str, b_url: str) -> list[dict[str, Any]]:
    """Per-tenant upstream chains chosen by a principal attribute (the README example)."""
    return [
        hook("org.example.tenant-a", a_url, when='principal.attributes.tenant == "a"'),
        hook("org.example.tenant-b", b_url, when='principal.attributes.tenant == "b"'),
    ]


@pytest.fixture
async def bearer_gateway(gateway_factory, stub_factory, tmp_path):
    tokens_file(tmp_path / "tokens.yaml", (TOKEN_A, "team-a", {"tenant": "a"}), (TOKEN_B, "team-b", {"tenant": "b"}))
    a, b = await stub_factory(), await stub_factory()
    cfg = gateway_config(
        tenant_routes(a.url, b.url),
        inbound={"auth": {"type": "bearer", "tokensFile": "tokens.yaml"}},
        log={"decisions": "decisions.jsonl"},
    )
    gw = await gateway_factory(cfg)
    return gw, a, b


# ------------------------------------------------------------------------------------------------
# bearer


async def test_bearer_token_maps_to_a_principal_that_routes_by_tenant_and_reaches_the_decision_log(
    bearer_gateway, http, tmp_path
):
    gw, a, b = bearer_gateway
    status, body, _ = await send(http, gw.url, intercept(tool_before()), {"Authorization": f"Bearer {TOKEN_A}"})
    assert status == 200 and body["result"]["effects"] == []
    status, _, _ = await send(http, gw.url, intercept(tool_before()), {"Authorization": f"bearer {TOKEN_B}"})
    assert status == 200
    assert len(a.received) == 1 and len(b.received) == 1
    assert all("Authorization" not in h for h in a.headers + b.headers), "inbound credentials must not be forwarded"
    log_file = tmp_path / "decisions.jsonl"
    await wait_for(lambda: log_file.exists() and len(log_file.read_text().splitlines()) == 2)
    principals = [json.loads(line)["principal"] for line in log_file.read_text().splitlines()]
    assert principals == ["team-a", "team-b"]
    assert TOKEN_A not in log_file.read_text() and sha(TOKEN_A) not in log_file.read_text()


@pytest.mark.spec("AHP-SEC-001")
@pytest.mark.parametrize(
    ("headers", "reason"),
    [
        ({}, "missing"),
        ({"Authorization": "Bearer tok-unknown"}, "unknown_token"),
        ({"Authorization": f"Bearer {TOKEN_A}x"}, "unknown_token"),
        ({"Authorization": f"Bearer {TOKEN_A[:-1]}"}, "unknown_token"),
        ({"Authorization": f"Basic {TOKEN_A}"}, "malformed"),
        ({"Authorization": f"Bearer {TOKEN_A} extra"}, "malformed"),
        ({"Authorization": f"Bearer\t{TOKEN_A}"}, "malformed"),
        ({"Authorization": f"Bearer {sha(TOKEN_A)}"}, "unknown_token"),
        ({"X-Api-Key": TOKEN_A}, "missing"),
        ({"Cookie": f"token={TOKEN_A}"}, "missing"),
    ],
)
async def test_bearer_refusals_are_401_counted_and_never_echo_the_token(bearer_gateway, http, headers, reason, caplog):
    gw, a, b = bearer_gateway
    before = metric(gw, f'ahp_gateway_auth_failures_total{{reason="{reason}"}}')
    status, body, response_headers = await send(http, gw.url, intercept(tool_before()), headers)
    assert status == 401
    assert response_headers["WWW-Authenticate"].startswith("Bearer")
    assert metric(gw, f'ahp_gateway_auth_failures_total{{reason="{reason}"}}') == before + 1
    assert a.received == [] and b.received == []
    for secret in (TOKEN_A, "tok-unknown"):
        assert secret not in str(body) and secret not in str(dict(response_headers)) and secret not in caplog.text


async def test_two_authorization_headers_are_refused(bearer_gateway, http):
    gw, a, _ = bearer_gateway
    raw = (
        "POST / HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        f"Authorization: Bearer tok-unknown\r\nAuthorization: Bearer {TOKEN_A}\r\nContent-Length: 2\r\n\r\n{{}}"
    )
    status, _ = await raw_exchange(gw.port, raw.encode())
    assert status == 401 and a.received == []


@pytest.mark.spec("AHP-SEC-001")
async def test_refused_before_the_body_is_read(bearer_gateway):
    """A huge declared body that is never sent: the refusal arrives anyway (nothing was read)."""
    gw, a, _ = bearer_gateway
    head = b"POST / HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 900000\r\n\r\n"
    status, _ = await raw_exchange(gw.port, head)
    assert status == 401
    expect = head.replace(b"\r\n\r\n", b"\r\nExpect: 100-continue\r\n\r\n")
    status, response = await raw_exchange(gw.port, expect)
    assert status == 401 and b"100 Continue" not in response
    ok = expect.replace(b"Host: x", f"Host: x\r\nAuthorization: Bearer {TOKEN_A}".encode())
    status, _ = await raw_exchange(gw.port, ok)
    assert status == 100, "an authenticated caller is told to continue"
    assert a.received == []


async def test_tokens_file_rotation_applies_without_restart(bearer_gateway, http, tmp_path):
    gw, a, _ = bearer_gateway
    rotated = "tok-team-a-rotated-55e1"
    tmp = tmp_path / "tokens.new"
    tokens_file(tmp, (rotated, "team-a", {"tenant": "a"}))
    tmp.replace(tmp_path / "tokens.yaml")  # atomic swap, as a Secret volume update does

    async def status_for(token: str) -> int:
        return (await send(http, gw.url, intercept(tool_before()), {"Authorization": f"Bearer {token}"}))[0]

    loop = asyncio.get_running_loop()
    deadline = loop.time() + 5
    while await status_for(rotated) != 200:
        assert loop.time() < deadline, "rotated token not accepted in time"
        await asyncio.sleep(0.05)
    assert await status_for(TOKEN_A) == 401, "the removed token is revoked"
    (tmp_path / "tokens.yaml").write_text("- {sha256: NOT-HEX, principal: {name: x}}\n")
    assert gw.guard is not None and gw.guard.gate.bearer is not None
    table = gw.guard.gate.bearer.table
    # private: the token table re-reads its file on a timer; the test makes the next check due now
    table._checked = -1e18  # the next request re-reads the file now
    assert await status_for(rotated) == 200, "a broken file keeps the last good table"
    assert table._stamp is None, "the broken file was read and rejected"


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("- {sha256: abc, principal: {name: a}}", "64 lowercase hex"),
        (f"- {{sha256: {sha('x').upper()}, principal: {{name: a}}}}", "64 lowercase hex"),
        (f"- {{sha256: {sha('x')}, principal: {{name: ''}}}}", "principal.name"),
        (
            f"- {{sha256: {sha('x')}, principal: {{name: a}}}}\n- {{sha256: {sha('x')}, principal: {{name: b}}}}",
            "duplicate",
        ),
        (f"- {{sha256: {sha('x')}, token: x, principal: {{name: a}}}}", "exactly the keys"),
        ("tokens: []", "list"),
    ],
)
async def test_a_malformed_tokens_file_fails_start(tmp_path, content, message):
    (tmp_path / "tokens.yaml").write_text(content)
    path = tmp_path / "gateway.yaml"
    cfg = gateway_config(
        [hook("org.example.a", "http://127.0.0.1:9/")],
        inbound={"auth": {"type": "bearer", "tokensFile": "tokens.yaml"}},
    )
    path.write_text(yaml.safe_dump(cfg))
    server = GatewayServer(load(path))
    with pytest.raises(Exception, match=message):
        await server.start()
    await server.stop()


# ------------------------------------------------------------------------------------------------
# none


async def test_none_is_refused_off_loopback_unless_explicitly_allowed(tmp_path, caplog):
    path = tmp_path / "gateway.yaml"
    cfg = gateway_config([hook("org.example.a", "http://127.0.0.1:9/")])
    path.write_text(yaml.safe_dump(cfg))
    server = GatewayServer(load(path), host="0.0.0.0")
    with pytest.raises(ConfigError, match="allowUnauthenticated"):
        await server.start()
    await server.stop()
    cfg["inbound"] = {"allowUnauthenticated": True}
    path.write_text(yaml.safe_dump(cfg))
    server = GatewayServer(load(path), host="0.0.0.0", port=0)
    with caplog.at_level(logging.WARNING, logger="ahp_gateway"):
        await server.start()
    await server.stop()
    assert "UNAUTHENTICATED" in caplog.text


async def test_none_serves_loopback_peers_only_and_ignores_certificate_headers(tmp_path):
    path = tmp_path / "gateway.yaml"
    path.write_text(yaml.safe_dump(gateway_config([hook("org.example.a", "http://127.0.0.1:9/")])))
    gate = Gate(load(path).config, tmp_path)
    headers = {"X-Client-Cert": "CN=admin", "X-Forwarded-For": "127.0.0.1"}
    assert isinstance(await gate.authenticate(headers, Peer("10.1.2.3")), Refusal)
    assert isinstance(await gate.authenticate(headers, Peer("::ffff:10.1.2.3")), Refusal)
    assert not (await gate.authenticate(headers, Peer("127.0.0.1"))).authenticated  # type: ignore[union-attr]
    assert not (await gate.authenticate({}, Peer("::1"))).authenticated  # type: ignore[union-attr]


# ------------------------------------------------------------------------------------------------
# oauth


@pytest.fixture
def auth_server(auth_server: LoopbackAuthServer) -> LoopbackAuthServer:
    """The shared authorization server, with this module's harness client registered."""
    auth_server.clients["harness-1"] = Client("harness-1", "harness-secret-9d2", (AUDIENCE,))
    auth_server.extra_claims["harness-1"] = {"tenant": "a"}
    return auth_server


async def client_credentials(http: aiohttp.ClientSession, auth_server: LoopbackAuthServer, resource: str) -> Any:
    import ssl

    context = ssl.create_default_context(cafile=auth_server.ca_file)
    async with http.post(
        auth_server.issuer + "/token",
        data={"grant_type": "client_credentials", "scope": "ahp.hooks", "resource": resource},
        headers={"Authorization": "Basic " + base64.b64encode(b"harness-1:harness-secret-9d2").decode()},
        ssl=context,
    ) as response:
        return response.status, await response.json()


@pytest.fixture
async def oauth_gateway(gateway_factory, stub_factory, auth_server):
    a, b = await stub_factory(), await stub_factory()
    cfg = gateway_config(tenant_routes(a.url, b.url), inbound=oauth_inbound(auth_server))
    return await gateway_factory(cfg), a


async def test_jwt_from_the_client_credentials_grant_is_accepted_and_carries_claims_to_cel(
    oauth_gateway, http, auth_server
):
    gw, a = oauth_gateway
    status, grant = await client_credentials(http, auth_server, AUDIENCE)
    assert status == 200, grant
    status, body, _ = await send(
        http, gw.url, intercept(tool_before()), {"Authorization": "Bearer " + grant["access_token"]}
    )
    assert status == 200 and body["result"]["effects"] == []
    assert len(a.received) == 1, "the tenant claim routed the call"
    status, denied = await client_credentials(http, auth_server, "https://other.example/")
    assert status == 400 and denied["error"] == "invalid_target"


class FromNow(int):
    """A time claim in seconds from when the token is minted: a time computed when the tests
    are collected would drift into the past on a slow run (a ``nbf`` 600 s ahead is past after
    ten minutes of other tests)."""


def _at_mint(overrides: dict[str, object]) -> dict[str, object]:
    now = int(time.time())
    return {k: now + v if isinstance(v, FromNow) else v for k, v in overrides.items()}


@pytest.mark.parametrize(
    ("overrides", "reason", "code"),
    [
        ({"exp": FromNow(-120)}, "expired", 401),
        ({"aud": "https://other.example/"}, "wrong_audience", 401),
        ({"aud": ["https://other.example/", "https://gw.example"]}, "wrong_audience", 401),
        ({"iss": "https://evil.example"}, "wrong_issuer", 401),
        ({"exp": None}, "invalid_token", 401),
        ({"exp": True}, "invalid_token", 401),
        ({"nbf": FromNow(600)}, "invalid_token", 401),
        ({"scope": "ahp.upload"}, "insufficient_scope", 403),
        ({"scope": "ahp.hooksx"}, "insufficient_scope", 403),
    ],
)
async def test_jwt_claims_are_enforced(oauth_gateway, http, auth_server, overrides, reason, code):
    gw, a = oauth_gateway
    token = auth_server.mint(auth_server.claims(AUDIENCE, **_at_mint(overrides)))
    status, _, headers = await send(http, gw.url, intercept(tool_before()), {"Authorization": "Bearer " + token})
    assert status == code
    assert 'resource_metadata="https://gw.example/.well-known/oauth-protected-resource"' in headers["WWW-Authenticate"]
    assert metric(gw, f'ahp_gateway_auth_failures_total{{reason="{reason}"}}') == 1
    assert a.received == []


async def test_expiry_allows_a_small_clock_skew(oauth_gateway, http, auth_server):
    gw, _ = oauth_gateway
    token = auth_server.mint(auth_server.claims(AUDIENCE, exp=int(time.time()) - 5, aud=[AUDIENCE, "x"]))
    assert (await send(http, gw.url, intercept(tool_before()), {"Authorization": "Bearer " + token}))[0] == 200


async def test_forged_signatures_and_algorithms_are_refused(oauth_gateway, http, auth_server):
    gw, _ = oauth_gateway
    claims = auth_server.claims(AUDIENCE)
    stranger = ECKey.generate_key("P-256", parameters={"kid": "key-1"})  # same kid, other key
    public = json.dumps(auth_server.signing_key.as_dict(private=False))
    forged = [
        auth_server.mint(claims, key=stranger),
        jose_jwt.encode({"alg": "HS256", "kid": "key-1"}, claims, OctKey.import_key(public.encode())),
        auth_server.mint(claims, header={"typ": "JWE"}),
    ]
    header, payload, _ = auth_server.mint(claims).split(".")
    forged.append(f"{header}.{payload}.")
    none_header = base64.urlsafe_b64encode(b'{"alg":"none","kid":"key-1"}').rstrip(b"=").decode()
    forged.append(f"{none_header}.{payload}.")
    for token in forged:
        status, _, _ = await send(http, gw.url, intercept(tool_before()), {"Authorization": "Bearer " + token})
        assert status == 401, token


async def test_unknown_kid_refetches_the_jwks_once_rate_limited(gateway_factory, stub_factory, http, auth_server):
    upstream = await stub_factory()
    gw = await gateway_factory(
        gateway_config(
            [hook("org.example.a", upstream.url)], inbound=oauth_inbound(auth_server, jwksRefetchSeconds=3600)
        )
    )
    ok = auth_server.mint(auth_server.claims(AUDIENCE))
    assert (await send(http, gw.url, intercept(tool_before()), {"Authorization": "Bearer " + ok}))[0] == 200
    assert auth_server.jwks_fetches == 1
    auth_server.rotate("key-2")
    rotated = auth_server.mint(auth_server.claims(AUDIENCE))
    # the first unknown kid within the interval cannot refetch: refused, and no fetch storm
    for _ in range(3):
        assert (await send(http, gw.url, intercept(tool_before()), {"Authorization": "Bearer " + rotated}))[0] == 401
    assert auth_server.jwks_fetches == 1
    assert metric(gw, 'ahp_gateway_auth_failures_total{reason="unknown_key"}') == 3


async def test_unknown_kid_after_rotation_is_fetched_and_accepted(gateway_factory, stub_factory, http, auth_server):
    upstream = await stub_factory()
    gw = await gateway_factory(
        gateway_config([hook("org.example.a", upstream.url)], inbound=oauth_inbound(auth_server, jwksRefetchSeconds=0))
    )
    first = auth_server.mint(auth_server.claims(AUDIENCE))
    assert (await send(http, gw.url, intercept(tool_before()), {"Authorization": "Bearer " + first}))[0] == 200
    auth_server.rotate("key-2")
    rotated = auth_server.mint(auth_server.claims(AUDIENCE))
    assert (await send(http, gw.url, intercept(tool_before()), {"Authorization": "Bearer " + rotated}))[0] == 200
    assert auth_server.jwks_fetches == 2
    unknown = auth_server.mint(auth_server.claims(AUDIENCE), key=ECKey.generate_key("P-256", parameters={"kid": "k9"}))
    assert (await send(http, gw.url, intercept(tool_before()), {"Authorization": "Bearer " + unknown}))[0] == 401


async def test_protected_resource_metadata_document(gateway_factory, stub_factory, http, auth_server):
    upstream = await stub_factory()
    inbound = oauth_inbound(auth_server)
    inbound["auth"]["audience"] = "https://gw.example/ahp"
    gw = await gateway_factory(gateway_config([hook("org.example.a", upstream.url)], inbound=inbound))
    base = gw.url.rstrip("/")
    for path in ("/.well-known/oauth-protected-resource", "/.well-known/oauth-protected-resource/ahp"):
        async with http.get(base + path) as response:
            assert response.status == 200
            document = await response.json()
    assert document == {
        "resource": "https://gw.example/ahp",
        "authorization_servers": [auth_server.issuer],
        "bearer_methods_supported": ["header"],
        "scopes_supported": ["ahp.hooks"],
    }
    _, _, headers = await send(http, gw.url, intercept(tool_before()))
    assert (
        headers["WWW-Authenticate"]
        == 'Bearer resource_metadata="https://gw.example/.well-known/oauth-protected-resource/ahp"'
    )


async def test_an_unreachable_issuer_refuses_and_never_serves(gateway_factory, stub_factory, http, auth_server):
    upstream = await stub_factory()
    inbound = oauth_inbound(auth_server)
    inbound["auth"]["jwksUri"] = "https://127.0.0.1:9/jwks"
    gw = await gateway_factory(gateway_config([hook("org.example.a", upstream.url)], inbound=inbound))
    token = auth_server.mint(auth_server.claims(AUDIENCE))
    status, _, _ = await send(http, gw.url, intercept(tool_before()), {"Authorization": "Bearer " + token})
    assert status == 401 and upstream.received == []
    assert metric(gw, 'ahp_gateway_auth_failures_total{reason="issuer_unavailable"}') == 1


def test_symmetric_algorithms_are_a_config_error(tmp_path):
    path = tmp_path / "gateway.yaml"
    cfg = gateway_config(
        [hook("org.example.a", "http://127.0.0.1:9/")],
        inbound={
            "auth": {"type": "oauth", "issuer": "https://as.example", "audience": AUDIENCE, "algorithms": ["HS256"]}
        },
    )
    path.write_text(yaml.safe_dump(cfg))
    with pytest.raises(ConfigError, match="asymmetric"):
        load(path)


# ------------------------------------------------------------------------------------------------
# check and explain


def test_check_refuses_an_unauthenticated_listener_off_loopback_and_says_how_callers_are_served(tmp_path, capsys):
    from gateway.cli import main

    path = tmp_path / "gateway.yaml"
    with socket.socket() as probe:  # a free port: `check` binds nothing, but names no port a user runs on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    cfg = gateway_config([hook("org.example.a", "http://127.0.0.1:9/")], listen={"host": "0.0.0.0", "port": port})
    path.write_text(yaml.safe_dump(cfg))
    assert main(["check", "--config", str(path)]) == 1
    assert "inbound.auth" in capsys.readouterr().err
    cfg["inbound"] = {"allowUnauthenticated": True}
    path.write_text(yaml.safe_dump(cfg))
    assert main(["check", "--config", str(path)]) == 0
    assert "inbound: UNAUTHENTICATED" in capsys.readouterr().out
    tokens_file(tmp_path / "tokens.yaml", (TOKEN_A, "team-a", {}))
    cfg["inbound"] = {"auth": {"type": "bearer", "tokensFile": "tokens.yaml"}}
    path.write_text(yaml.safe_dump(cfg))
    assert main(["check", "--config", str(path)]) == 0
    out = capsys.readouterr().out
    assert "inbound: bearer tokens from tokens.yaml" in out and sha(TOKEN_A) not in out
    cfg["uploads"] = {"maxBytes": 4096}
    path.write_text(yaml.safe_dump(cfg))
    assert main(["check", "--config", str(path)]) == 0
    assert "uploads: receiver at /uploads, at most 4096 bytes each" in capsys.readouterr().out


def test_explain_with_a_principal_shows_the_tenant_route(tmp_path, capsys):
    from gateway.cli import main

    path = tmp_path / "gateway.yaml"
    path.write_text(yaml.safe_dump(gateway_config(tenant_routes("http://127.0.0.1:9/", "http://127.0.0.1:10/"))))
    event = tmp_path / "event.json"
    event.write_text(json.dumps(tool_before()))
    principal = '{"name": "team-b", "attributes": {"tenant": "b"}}'
    assert main(["explain", "--config", str(path), "--event", str(event), "--principal", principal]) == 0
    out = capsys.readouterr().out
    assert "org.example.tenant-a#0 (http, fail-closed): subscription matches tool.before; not selected" in out
    assert "org.example.tenant-b#0 (http, fail-closed): subscription matches tool.before; selected" in out
    assert main(["explain", "--config", str(path), "--event", str(event), "--principal", "{bad"]) == 1


def test_the_manual_tenant_example_is_a_valid_configuration() -> None:
    from gateway.config.models import GatewayConfig
    from gateway.routing.cel import Engine
    from tests.support.paths import ROOT

    section = (ROOT / "docs" / "operations" / "authentication.md").read_text()
    block = section.split("```yaml\n", 1)[1].split("```", 1)[0]
    cfg = GatewayConfig.model_validate({"id": "org.example.gateway", **yaml.safe_load(block)})
    assert cfg.inbound.auth.type == "bearer"
    engine = Engine()
    for entry in cfg.hooks or []:
        if entry.when:
            engine.compile(entry.when, entry.id)


async def test_an_unreachable_issuer_is_not_asked_again_for_every_caller(
    gateway_factory, stub_factory, http, auth_server
):
    upstream = await stub_factory()
    inbound = oauth_inbound(auth_server, jwksRefetchSeconds=3600)
    inbound["auth"]["jwksUri"] = auth_server.issuer + "/missing-jwks"
    gw = await gateway_factory(gateway_config([hook("org.example.a", upstream.url)], inbound=inbound))
    token = auth_server.mint(auth_server.claims(AUDIENCE))
    for _ in range(5):
        status, _, _ = await send(http, gw.url, intercept(tool_before()), {"Authorization": "Bearer " + token})
        assert status == 401
    assert gw.guard is not None and gw.guard.gate.jwt is not None
    assert gw.guard.gate.jwt.attempts == 1


async def test_a_key_removed_from_the_jwks_stops_working_after_the_cache_time(
    gateway_factory, stub_factory, http, auth_server
):
    upstream = await stub_factory()
    inbound = oauth_inbound(auth_server, jwksCacheSeconds=0, jwksRefetchSeconds=3600)
    gw = await gateway_factory(gateway_config([hook("org.example.a", upstream.url)], inbound=inbound))
    old = auth_server.mint(auth_server.claims(AUDIENCE))
    assert (await send(http, gw.url, intercept(tool_before()), {"Authorization": "Bearer " + old}))[0] == 200
    compromised = auth_server.keys.pop(0)
    auth_server.rotate("key-2")
    assert compromised.kid == "key-1"
    status, _, _ = await send(http, gw.url, intercept(tool_before()), {"Authorization": "Bearer " + old})
    assert status == 401 and len(upstream.received) == 1
