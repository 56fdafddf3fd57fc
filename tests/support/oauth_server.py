"""A real OAuth 2.0 authorization server on loopback (TLS, test CA), built from authlib's server
components: RFC 8414 metadata, a JWKS endpoint with rotatable keys, and the client-credentials
grant issuing RFC 9068 JWT access tokens whose ``aud`` is the requested RFC 8707 ``resource``
(a resource the client is not registered for is ``invalid_target``)."""

from __future__ import annotations

import ssl
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import trustme
from aiohttp import web
from authlib.oauth2.rfc6749 import AuthorizationServer, ClientMixin, OAuth2Payload, OAuth2Request
from authlib.oauth2.rfc6749.grants import ClientCredentialsGrant
from authlib.oauth2.rfc7523 import JWTBearerClientAssertion
from authlib.oauth2.rfc8414 import AuthorizationServerMetadata
from authlib.oauth2.rfc9068 import JWTBearerTokenGenerator
from joserfc import jwt
from joserfc.jwk import ECKey, KeySet


class _Payload(OAuth2Payload):
    def __init__(self, form: dict[str, str]) -> None:
        self._form = form

    @property
    def data(self) -> dict[str, str]:
        return self._form

    @property
    def datalist(self) -> defaultdict[str, list[str]]:
        out: defaultdict[str, list[str]] = defaultdict(list)
        for key, value in self._form.items():
            out[key].append(value)
        return out


class _Request(OAuth2Request):
    def __init__(self, method: str, uri: str, headers: Any, form: dict[str, str]) -> None:
        super().__init__(method=method, uri=uri, headers=headers)
        self._form = form
        self.payload = _Payload(form)

    @property
    def args(self) -> dict[str, str]:
        return {}

    @property
    def form(self) -> dict[str, str]:
        return self._form


@dataclass
class Client(ClientMixin):  # type: ignore[misc]
    client_id: str
    secret: str
    resources: tuple[str, ...]
    scopes: tuple[str, ...] = ("ahp.hooks", "ahp.upload")
    auth_methods: tuple[str, ...] = ("client_secret_basic", "client_secret_post")
    public_key: Any = None
    """For private_key_jwt: the client's public JWK."""

    def get_client_id(self) -> str:
        return self.client_id

    def get_allowed_scope(self, scope: str) -> str:
        return " ".join(s for s in (scope or "").split() if s in self.scopes)

    def check_client_secret(self, client_secret: str) -> bool:
        return client_secret == self.secret

    def check_endpoint_auth_method(self, method: str, endpoint: str) -> bool:
        return method in self.auth_methods

    def check_grant_type(self, grant_type: str) -> bool:
        return grant_type == "client_credentials"


class _ClientCredentials(ClientCredentialsGrant):  # type: ignore[misc]
    TOKEN_ENDPOINT_AUTH_METHODS = ["client_secret_basic", "client_secret_post", "private_key_jwt"]


class _PrivateKeyJwt(JWTBearerClientAssertion):  # type: ignore[misc]
    """RFC 7523 client authentication: assertions signed by the client's registered key, for
    this token endpoint, each ``jti`` accepted once."""

    CLIENT_AUTH_METHOD = "private_key_jwt"

    def __init__(self, owner: LoopbackAuthServer) -> None:
        super().__init__(validate_jti=True)
        self.owner = owner
        self.seen: set[str] = set()

    def get_audiences(self) -> list[str]:
        return [self.owner.issuer + "/token"]

    def validate_jti(self, claims: Any, jti: str) -> bool:
        if jti in self.seen:
            return False
        self.seen.add(jti)
        return True

    def resolve_client_public_key(self, client: Any) -> Any:
        return client.public_key


class _Generator(JWTBearerTokenGenerator):  # type: ignore[misc]
    def __init__(self, owner: LoopbackAuthServer) -> None:
        self.owner = owner
        super().__init__(issuer=owner.issuer, alg="ES256")

    @property  # type: ignore[override]
    def issuer(self) -> str:
        return self.owner.issuer  # known only once the server listens

    @issuer.setter
    def issuer(self, value: str) -> None:
        pass

    def get_jwks(self) -> dict[str, Any]:
        return self.owner.signing_key.as_dict(private=True)

    def get_audiences(self, client: Any, user: Any, scope: Any) -> str:
        return self.owner.current_resource

    def get_extra_claims(self, client: Any, grant_type: Any, user: Any, scope: Any) -> dict[str, Any]:
        return dict(self.owner.extra_claims.get(client.get_client_id(), {}))


@dataclass
class LoopbackAuthServer:
    issuer: str = ""
    ca_file: str = ""
    ca: Any = None
    clients: dict[str, Client] = field(default_factory=dict)
    keys: list[ECKey] = field(default_factory=list)
    signing_key: Any = None
    current_resource: str = ""
    jwks_fetches: int = 0
    token_requests: list[dict[str, str]] = field(default_factory=list)
    token_headers: list[dict[str, str]] = field(default_factory=list)
    extra_claims: dict[str, dict[str, Any]] = field(default_factory=dict)
    token_answers: list[int] = field(default_factory=list)
    runner: web.AppRunner | None = None

    def rotate(self, kid: str) -> ECKey:
        key = ECKey.generate_key("P-256", parameters={"kid": kid, "alg": "ES256", "use": "sig"})
        self.keys.append(key)
        self.signing_key = key
        return key

    def mint(self, claims: dict[str, Any], *, key: Any = None, header: dict[str, Any] | None = None) -> str:
        """A token signed by one of this server's keys (or ``key``) with exactly ``claims``."""
        signer = key or self.signing_key
        head = {"alg": "ES256", "typ": "at+jwt", "kid": signer.kid, **(header or {})}
        return jwt.encode(head, claims, signer)

    def claims(self, audience: str, **overrides: Any) -> dict[str, Any]:
        now = int(time.time())
        out = {"iss": self.issuer, "aud": audience, "sub": "svc-a", "exp": now + 300, "iat": now, "scope": "ahp.hooks"}
        out.update(overrides)
        return {k: v for k, v in out.items() if v is not None}

    def build(self) -> web.Application:
        server = AuthorizationServer(scopes_supported=["ahp.hooks", "ahp.upload"])
        server.query_client = self.clients.get
        server.save_token = lambda token, request: None
        server.register_grant(_ClientCredentials)
        server.register_token_generator("default", _Generator(self))
        server.register_client_auth_method("private_key_jwt", _PrivateKeyJwt(self))

        def respond(status: int, body: Any, headers: Any) -> web.Response:
            extra = {k: v for k, v in dict(headers).items() if k.lower() != "content-type"}
            return web.json_response(body, status=status, headers=extra)

        server.handle_response = respond
        server.create_oauth2_request = lambda request: request  # already an OAuth2Request
        server.send_signal = lambda name, *args, **kwargs: None
        app = web.Application()

        async def metadata(request: web.Request) -> web.Response:
            meta = AuthorizationServerMetadata(
                {
                    "issuer": self.issuer,
                    "token_endpoint": self.issuer + "/token",
                    "jwks_uri": self.issuer + "/jwks",
                    "grant_types_supported": ["client_credentials"],
                    "token_endpoint_auth_methods_supported": [
                        "client_secret_basic",
                        "client_secret_post",
                        "private_key_jwt",
                    ],
                    "response_types_supported": ["token"],
                    "token_endpoint_auth_signing_alg_values_supported": ["ES256", "RS256"],
                }
            )
            meta.validate()
            return web.json_response(dict(meta))

        async def jwks(request: web.Request) -> web.Response:
            self.jwks_fetches += 1
            return web.json_response(KeySet(list(self.keys)).as_dict(private=False))

        async def token(request: web.Request) -> web.Response:
            form = {k: str(v) for k, v in (await request.post()).items()}
            self.token_requests.append(form)
            self.token_headers.append(dict(request.headers))
            client = self.clients.get(form.get("client_id", "")) if "client_id" in form else None
            resource = form.get("resource")
            # RFC 8707: the token is bound to exactly one registered resource
            known = {r for c in self.clients.values() for r in c.resources}
            if client is not None and resource not in client.resources or resource not in known:
                return web.json_response({"error": "invalid_target"}, status=400)
            self.current_resource = resource
            oauth_request = _Request("POST", str(request.url), request.headers, form)
            result: web.Response = server.create_token_response(oauth_request)
            self.token_answers.append(result.status)
            return result

        app.router.add_get("/.well-known/oauth-authorization-server", metadata)
        app.router.add_get("/jwks", jwks)
        app.router.add_post("/token", token)
        return app


async def start_auth_server(tmp_path: Path) -> LoopbackAuthServer:
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1")
    ca_file = tmp_path / "as-ca.pem"
    ca.cert_pem.write_to_path(str(ca_file))
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    cert.configure_cert(context)
    state = LoopbackAuthServer(ca_file=str(ca_file), ca=ca)
    runner = web.AppRunner(state.build(), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=context)
    await site.start()
    state.issuer = f"https://127.0.0.1:{runner.addresses[0][1]}"
    state.runner = runner
    state.rotate("key-1")
    return state
