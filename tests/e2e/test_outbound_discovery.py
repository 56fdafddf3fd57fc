"""Outbound credentials: RFC 9728 discovery for upstreams without a binding (trusted issuers
only, resource-bound tokens, one retry), the destination policy on every discovered URL and
redirect, no downgrade for explicit bindings, and OAuth client authentication by
``client_secret_post`` and ``private_key_jwt`` against a real authlib authorization server."""

from __future__ import annotations

import hashlib
import json
import ssl
from pathlib import Path
from typing import Any

import pytest
import trustme
from aiohttp import web
from joserfc import jwt
from joserfc.jwk import ECKey, KeySet

from gateway.credentials.bearer import CredentialUnavailable
from gateway.credentials.discovery import DestinationPolicy, metadata_candidates, resource_matches
from tests.support.client import post
from tests.support.config import gateway_config
from tests.support.events import intercept, result, tool_before
from tests.support.oauth_server import Client, LoopbackAuthServer

SECRET = "discovery-client-secret-6a1f"


class Resource:
    """A protected AHP upstream on loopback TLS that accepts only JWTs for its own resource."""

    def __init__(self, auth: LoopbackAuthServer) -> None:
        self.auth = auth
        self.url = ""
        self.base = ""
        self.received: list[dict[str, str]] = []
        self.metadata_hits: list[str] = []
        self.challenge: str | None = None
        self.documents: dict[str, Any] = {}
        self.redirects: dict[str, str] = {}
        self.runner: web.AppRunner | None = None
        self.ca_file = ""
        self.uploads: list[dict[str, str]] = []
        self.last_event: Any = None

    def valid(self, header: str | None) -> bool:
        if not header or not header.startswith("Bearer "):
            return False
        try:
            token = jwt.decode(header[7:], KeySet(list(self.auth.keys)), algorithms=["ES256"])
        except Exception:
            return False
        return token.claims.get("aud") == self.url

    async def intercept(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.received.append(dict(request.headers))
        self.last_event = body["params"]["event"]
        if not self.valid(request.headers.get("Authorization")):
            challenge = (
                self.challenge
                if self.challenge is not None
                else (f'Bearer resource_metadata="{self.base}/.well-known/oauth-protected-resource/ahp"')
            )
            return web.Response(status=401, headers={"WWW-Authenticate": challenge} if challenge else {})
        return web.json_response(result(body, []))

    async def upload(self, request: web.Request) -> web.StreamResponse:
        data = await request.read()
        self.uploads.append(dict(request.headers))
        header = request.headers.get("Authorization")
        upload_url = self.base + "/upload"
        try:
            token = jwt.decode((header or "")[7:], KeySet(list(self.auth.keys)), algorithms=["ES256"])
            ok = token.claims.get("aud") == upload_url
        except Exception:
            ok = False
        if not ok:
            challenge = f'Bearer resource_metadata="{self.base}/.well-known/oauth-protected-resource/upload"'
            return web.Response(status=401, headers={"WWW-Authenticate": challenge})
        digest = hashlib.sha256(data).hexdigest()
        return web.json_response({"ref": "res-upload-1", "size": len(data), "sha256": digest}, status=201)

    async def metadata(self, request: web.Request) -> web.StreamResponse:
        self.metadata_hits.append(request.path)
        if request.path in self.redirects:
            raise web.HTTPFound(self.redirects[request.path])
        document = self.documents.get(request.path)
        if document is None:
            return web.Response(status=404)
        return web.json_response(document)


@pytest.fixture
async def resource(auth_server: LoopbackAuthServer, tmp_path: Path) -> Any:
    res = Resource(auth_server)
    ca = trustme.CA()
    ca_file = tmp_path / "resource-ca.pem"
    ca.cert_pem.write_to_path(str(ca_file))
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(context)
    app = web.Application()
    app.router.add_post("/ahp", res.intercept)
    app.router.add_post("/upload", res.upload)
    app.router.add_get("/.well-known/{tail:.*}", res.metadata)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=context)
    await site.start()
    res.base = f"https://127.0.0.1:{runner.addresses[0][1]}"
    res.url = res.base + "/ahp"
    res.ca_file = str(ca_file)
    res.runner = runner
    res.documents["/.well-known/oauth-protected-resource/ahp"] = {
        "resource": res.url,
        "authorization_servers": [auth_server.issuer],
        "scopes_supported": ["ahp.hooks"],
    }
    auth_server.clients["gateway"] = Client("gateway", SECRET, (res.url,))
    yield res
    await runner.cleanup()


def upstream_hook(res: Resource, **extra: Any) -> dict[str, Any]:
    return {
        "id": "org.example.discovered",
        "transport": {"type": "http", "url": res.url},
        "caFile": res.ca_file,
        "subscriptions": [
            {
                "mode": "intercept",
                "events": ["tool.before"],
                "timeoutMs": 3000,
                "failurePolicy": "fail-closed",
                "content": {"default": "body"},
            }
        ],
        **extra,
    }


def trusted(auth: LoopbackAuthServer, **extra: Any) -> dict[str, Any]:
    return {
        "issuer": auth.issuer,
        "clientId": "gateway",
        "clientSecretRef": "env:DISCOVERY_SECRET",
        "scopes": ["ahp.hooks", "admin"],
        "caFile": auth.ca_file,
        **extra,
    }


async def start(gateway_factory: Any, res: Resource, auth: LoopbackAuthServer, **extra: Any) -> Any:
    cfg = gateway_config(
        [upstream_hook(res)],
        trustedIssuers=[trusted(auth)],
        discovery={"allowAddresses": ["127.0.0.1"]},
        limits={"deadlineMs": 5000, "maxBodyBytes": 1048576},
        frontend={"timeoutMs": 6000},
    )
    cfg.update(extra)
    return await gateway_factory(cfg)


def denied_by_auth(body: Any) -> bool:
    effect = body["result"]["effects"][0]
    return effect["type"] == "deny" and effect["extensions"]["org.example.gateway"]["failure"] == "auth"


@pytest.mark.spec("AHP-AUTH-001")
async def test_no_binding_discovers_a_resource_bound_token_and_retries_once(
    gateway_factory, resource, auth_server, http, monkeypatch
):
    monkeypatch.setenv("DISCOVERY_SECRET", SECRET)
    gw = await start(gateway_factory, resource, auth_server)
    for _ in range(2):
        _, body = await post(http, gw.url, intercept(tool_before()))
        assert body["result"]["effects"] == [], body
    assert "Authorization" not in resource.received[0], "the first attempt carries no credential"
    assert [("Authorization" in h) for h in resource.received] == [False, True, True]
    assert len(auth_server.token_requests) == 1
    assert auth_server.token_requests[0]["resource"] == resource.url, "RFC 8707: bound to the discovered resource"
    assert auth_server.token_requests[0]["scope"] == "ahp.hooks", "only locally permitted and supported scopes"


async def test_without_a_challenge_parameter_the_path_specific_then_root_locations_are_tried(
    gateway_factory, resource, auth_server, http, monkeypatch
):
    monkeypatch.setenv("DISCOVERY_SECRET", SECRET)
    resource.challenge = "Bearer"
    resource.documents["/.well-known/oauth-protected-resource"] = resource.documents.pop(
        "/.well-known/oauth-protected-resource/ahp"
    )
    gw = await start(gateway_factory, resource, auth_server)
    _, body = await post(http, gw.url, intercept(tool_before()))
    assert body["result"]["effects"] == []
    assert resource.metadata_hits == [
        "/.well-known/oauth-protected-resource/ahp",
        "/.well-known/oauth-protected-resource",
    ]


@pytest.mark.parametrize(
    "hostile",
    [
        'Bearer resource_metadata="https://10.0.0.7/.well-known/oauth-protected-resource"',
        'Bearer resource_metadata="https://169.254.169.254/latest/meta-data"',
        'Bearer resource_metadata="https://[::ffff:192.168.1.1]/x"',
        'Bearer resource_metadata="https://user:pw@example.com/x"',
        'Bearer resource_metadata="http://127.0.0.1:1/.well-known/oauth-protected-resource"',
        'Bearer resource_metadata="file:///etc/passwd"',
    ],
)
async def test_hostile_resource_metadata_locations_are_refused(
    gateway_factory, resource, auth_server, http, monkeypatch, hostile, caplog
):
    monkeypatch.setenv("DISCOVERY_SECRET", SECRET)
    resource.challenge = hostile
    gw = await start(gateway_factory, resource, auth_server)
    _, body = await post(http, gw.url, intercept(tool_before()))
    assert denied_by_auth(body)
    assert auth_server.token_requests == [] and len(resource.received) == 1
    assert "auth: discovered" in caplog.text, "refused by the destination policy, not merely unreachable"


@pytest.mark.parametrize(
    ("document", "why"),
    [
        (
            lambda res, auth: {"resource": "https://other.example/ahp", "authorization_servers": [auth.issuer]},
            "resource",
        ),
        (lambda res, auth: {"resource": res.base + "/other", "authorization_servers": [auth.issuer]}, "resource"),
        (lambda res, auth: {"resource": res.url, "authorization_servers": ["https://evil.example"]}, "untrusted"),
        (lambda res, auth: {"resource": res.url, "authorization_servers": "https://x"}, "not a list"),
        (lambda res, auth: {"resource": res.url + "?x=1", "authorization_servers": [auth.issuer]}, "query"),
    ],
)
async def test_metadata_for_another_resource_or_an_untrusted_issuer_is_refused(
    gateway_factory, resource, auth_server, http, monkeypatch, document, why
):
    monkeypatch.setenv("DISCOVERY_SECRET", SECRET)
    resource.documents["/.well-known/oauth-protected-resource/ahp"] = document(resource, auth_server)
    gw = await start(gateway_factory, resource, auth_server)
    _, body = await post(http, gw.url, intercept(tool_before()))
    assert denied_by_auth(body), why
    assert auth_server.token_requests == []


async def test_a_cross_origin_redirect_during_discovery_is_refused(
    gateway_factory, resource, auth_server, http, monkeypatch
):
    monkeypatch.setenv("DISCOVERY_SECRET", SECRET)
    resource.redirects["/.well-known/oauth-protected-resource/ahp"] = auth_server.issuer + "/jwks"
    gw = await start(gateway_factory, resource, auth_server)
    _, body = await post(http, gw.url, intercept(tool_before()))
    assert denied_by_auth(body) and auth_server.token_requests == [] and auth_server.jwks_fetches == 0


async def test_discovery_addresses_must_be_allow_listed(gateway_factory, resource, auth_server, http, monkeypatch):
    monkeypatch.setenv("DISCOVERY_SECRET", SECRET)
    gw = await start(gateway_factory, resource, auth_server, discovery={"allowAddresses": []})
    _, body = await post(http, gw.url, intercept(tool_before()))
    assert denied_by_auth(body) and resource.metadata_hits == []


async def test_an_explicit_binding_that_fails_never_falls_back_to_discovery(
    gateway_factory, resource, auth_server, http, monkeypatch
):
    monkeypatch.setenv("DISCOVERY_SECRET", SECRET)
    monkeypatch.setenv("STATIC_TOKEN", "static-token-that-the-resource-rejects")
    cfg = gateway_config(
        [upstream_hook(resource, authentication={"type": "bearer", "tokenEnv": "STATIC_TOKEN"})],
        trustedIssuers=[trusted(auth_server)],
        discovery={"allowAddresses": ["127.0.0.1"]},
    )
    gw = await gateway_factory(cfg)
    _, body = await post(http, gw.url, intercept(tool_before()))
    assert denied_by_auth(body)
    assert resource.metadata_hits == [] and auth_server.token_requests == [] and len(resource.received) == 1


async def test_policy_and_matching_units() -> None:
    policy = DestinationPolicy(["127.0.0.1/32"])
    await policy.check("https://127.0.0.1:8443/x")
    for url in ("https://127.0.0.2/", "https://10.1.1.1/", "https://[fe80::1]/", "https://0.0.0.0/", "https://[::1]/"):
        with pytest.raises(CredentialUnavailable):
            await policy.check(url)
    assert metadata_candidates("https://a.example/t/ahp", None) == [
        "https://a.example/.well-known/oauth-protected-resource/t/ahp",
        "https://a.example/.well-known/oauth-protected-resource",
    ]
    assert metadata_candidates("https://a.example/", 'Basic realm="x", resource_metadata="https://b"') == [
        "https://a.example/.well-known/oauth-protected-resource"
    ]
    assert resource_matches("https://a.example/t", "https://a.example/t/ahp")
    assert not resource_matches("https://a.example/t", "https://a.example/tx")
    assert not resource_matches("https://A.example:444/t", "https://a.example/t")


# ------------------------------------------------------------------------------------------------
# client authentication at the token endpoint (explicit oauth bindings)


@pytest.mark.parametrize("method", ["client_secret_post", "private_key_jwt"])
async def test_client_authentication_methods(
    gateway_factory, resource, auth_server, http, monkeypatch, tmp_path, method
):
    key = ECKey.generate_key("P-256", parameters={"kid": "gw-key"})
    client = Client(
        "gateway",
        SECRET,
        (resource.url,),
        auth_methods=(method,),
        public_key=ECKey.import_key(key.as_dict(private=False)),
    )
    auth_server.clients["gateway"] = client
    monkeypatch.setenv("DISCOVERY_SECRET", SECRET)
    (tmp_path / "client-key.pem").write_bytes(key.as_pem(private=True))
    binding: dict[str, Any] = {
        "type": "oauth",
        "resource": resource.url,
        "issuer": auth_server.issuer,
        "clientId": "gateway",
        "flow": "client_credentials",
        "scopes": ["ahp.hooks"],
        "tokenEndpointAuthMethod": method,
    }
    if method == "private_key_jwt":
        binding["privateKeyRef"] = "file:client-key.pem"
    else:
        binding["clientSecretRef"] = "env:DISCOVERY_SECRET"
    ca_bundle = tmp_path / "both-cas.pem"
    ca_bundle.write_text(Path(resource.ca_file).read_text() + Path(auth_server.ca_file).read_text())
    hook_entry = upstream_hook(resource, authentication=binding)
    hook_entry["caFile"] = str(ca_bundle)
    gw = await gateway_factory(gateway_config([hook_entry], limits={"deadlineMs": 4000}, frontend={"timeoutMs": 5000}))
    _, body = await post(http, gw.url, intercept(tool_before()))
    assert body["result"]["effects"] == [], body
    form = auth_server.token_requests[0]
    headers = auth_server.token_headers[0]
    assert "Authorization" not in headers
    if method == "client_secret_post":
        assert form["client_secret"] == SECRET and form["client_id"] == "gateway"
    else:
        assert "client_secret" not in form and form["client_assertion_type"].endswith("jwt-bearer")
        claims = jwt.decode(form["client_assertion"], ECKey.import_key(key.as_dict(private=False))).claims
        assert claims["iss"] == claims["sub"] == "gateway" and claims["aud"] == auth_server.issuer + "/token"
    assert json.dumps(auth_server.token_requests).count(SECRET) == (1 if method == "client_secret_post" else 0)


async def test_an_upload_endpoint_without_auth_discovers_its_own_token(
    gateway_factory, resource, auth_server, http, monkeypatch
):
    from tests.support.uploads import PNG, image_part, model_request

    monkeypatch.setenv("DISCOVERY_SECRET", SECRET)
    upload_url = resource.base + "/upload"
    resource.documents["/.well-known/oauth-protected-resource/upload"] = {
        "resource": upload_url,
        "authorization_servers": [auth_server.issuer],
        "scopes_supported": ["ahp.hooks"],
    }
    auth_server.clients["gateway"] = Client("gateway", SECRET, (resource.url, upload_url))
    entry = upstream_hook(resource)
    entry["subscriptions"][0]["events"] = ["model.request.before"]
    entry["subscriptions"][0]["upload"] = {"endpoint": upload_url, "timeoutMs": 3000, "maxBytes": 65536}
    cfg = gateway_config(
        [entry],
        trustedIssuers=[trusted(auth_server)],
        discovery={"allowAddresses": ["127.0.0.1"]},
        uploads={"maxBytes": 65536},
        limits={"deadlineMs": 5000, "maxBodyBytes": 1048576},
        frontend={"timeoutMs": 6000},
    )
    gw = await gateway_factory(cfg)
    headers = {"Content-Type": "application/octet-stream", "AHP-Content-SHA256": hashlib.sha256(PNG).hexdigest()}
    async with http.post(gw.url.rstrip("/") + "/uploads", data=PNG, headers=headers) as r:
        receipt = await r.json()
    _, body = await post(http, gw.url, intercept(model_request(receipt["ref"])))
    assert body["result"]["effects"] == [], body
    assert [r["resource"] for r in auth_server.token_requests] == [upload_url, resource.url], (
        "the upload endpoint and the event endpoint each got a token for exactly their own resource"
    )
    assert ["Authorization" in h for h in resource.uploads] == [False, True]
    assert resource.uploads[1]["Authorization"] != resource.received[-1]["Authorization"]
    assert image_part(json.loads(json.dumps(resource.last_event)))["body"] == {"ref": "res-upload-1"}


async def test_a_hostile_metadata_document_naming_a_private_authorization_server_is_refused(
    gateway_factory, resource, auth_server, http, monkeypatch, caplog
):
    """Even a trusted issuer entry cannot make the gateway call a private address: the document
    points the gateway at 10.0.0.9, which is not allow-listed."""
    monkeypatch.setenv("DISCOVERY_SECRET", SECRET)
    private = "https://10.0.0.9"
    resource.documents["/.well-known/oauth-protected-resource/ahp"] = {
        "resource": resource.url,
        "authorization_servers": [private],
    }
    cfg = gateway_config(
        [upstream_hook(resource)],
        trustedIssuers=[trusted(auth_server, issuer=private)],
        discovery={"allowAddresses": ["127.0.0.1"]},
        limits={"deadlineMs": 5000, "maxBodyBytes": 1048576},
        frontend={"timeoutMs": 6000},
    )
    gw = await gateway_factory(cfg)
    _, body = await post(http, gw.url, intercept(tool_before()))
    assert denied_by_auth(body)
    assert auth_server.token_requests == [] and len(resource.received) == 1
    assert "points at a loopback, private or link-local address" in caplog.text, "refused, not merely unreachable"
