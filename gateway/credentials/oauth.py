"""OAuth 2.0 client credentials for an upstream (registration ``authentication.type: oauth``).

Authorization server metadata is discovered from the https ``issuer`` (RFC 8414, then OpenID
discovery); tokens are requested for exactly the configured ``resource`` (RFC 8707) and scopes,
cached until shortly before expiry, fetched by one caller at a time, and dropped when the upstream
answers 401. The client secret is read from ``clientSecretRef`` (env:NAME or file:/path) at use.
Token acquisition runs inside the intercept deadline of the call that needs it.
"""

from __future__ import annotations

import asyncio
import base64
import os
import ssl
import time
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit, urlunsplit

import aiohttp
import orjson

from gateway.bounded import read_bounded
from gateway.config.models import has_userinfo
from gateway.credentials.bearer import BearerToken, CredentialUnavailable

MAX_DOCUMENT = 512 * 1024
"""Bytes read of a metadata document or a token answer (an answer past it is refused)."""

ASSERTION_TYPE = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"

EARLY_REFRESH = 30.0


def metadata_urls(issuer: str) -> list[str]:
    parts = urlsplit(issuer)
    path = parts.path.rstrip("/")
    base = (parts.scheme, parts.netloc)
    return [
        urlunsplit((*base, "/.well-known/oauth-authorization-server" + path, "", "")),
        urlunsplit((*base, path + "/.well-known/openid-configuration", "", "")),
    ]


class ClientCredentials:
    def __init__(
        self,
        *,
        issuer: str,
        client_id: str,
        secret: BearerToken | None,
        resource: str,
        scopes: list[str],
        session: Any,
        ssl_context: ssl.SSLContext | bool = True,
        auth_method: str = "client_secret_basic",
        private_key: BearerToken | None = None,
        endpoint_check: Any = None,
    ) -> None:
        self.issuer = issuer.rstrip("/")
        self.client_id = client_id
        self._secret = secret
        self.auth_method = auth_method
        self._private_key = private_key
        self._endpoint_check = endpoint_check
        """Destination policy for the discovered token endpoint (raises CredentialUnavailable)."""
        self.resource = resource
        self.scopes = scopes
        self._session = session
        self._ssl = ssl_context
        self._token: str | None = None
        self._expires = 0.0
        self._endpoint: str | None = None
        self._lock = asyncio.Lock()

    @classmethod
    def from_config(
        cls,
        auth: Any,
        base: Path,
        pool: Any,
        ca_file: str | None = None,
        *,
        resource: str | None = None,
        scopes: list[str] | None = None,
        endpoint_check: Any = None,
    ) -> ClientCredentials:
        """From an explicit ``oauth`` binding, or (``resource`` given) a ``trustedIssuers`` entry."""
        context: ssl.SSLContext | bool = ssl.create_default_context(cafile=ca_file) if ca_file else True
        method = getattr(auth, "tokenEndpointAuthMethod", "client_secret_basic")
        key_ref = getattr(auth, "privateKeyRef", None)
        return cls(
            issuer=auth.issuer,
            client_id=auth.clientId,
            secret=_secret(auth.clientSecretRef, base),
            resource=resource if resource is not None else auth.resource,
            scopes=list(scopes if scopes is not None else auth.scopes),
            session=pool,
            ssl_context=context,
            auth_method=method,
            private_key=_secret(key_ref, base) if key_ref else None,
            endpoint_check=endpoint_check,
        )

    def invalidate(self) -> None:
        """The upstream rejected the token: the next call fetches a fresh one."""
        self._token = None

    def unresolved(self) -> str | None:
        """Why the client secret or private key cannot be read now, or None (``/readyz``)."""
        for ref in (self._secret, self._private_key):
            problem = ref.unresolved() if ref is not None else None
            if problem is not None:
                return problem
        return None

    async def authorization(self) -> str:
        if self._token is not None and time.monotonic() < self._expires:
            return "Bearer " + self._token
        async with self._lock:
            if self._token is None or time.monotonic() >= self._expires:
                await self._fetch()
        assert self._token is not None
        return "Bearer " + self._token

    def _http(self) -> aiohttp.ClientSession:
        session = self._session
        return session.session if hasattr(session, "session") else session  # type: ignore[no-any-return]

    async def _discover(self) -> str:
        if self._endpoint is not None:
            return self._endpoint
        for url in metadata_urls(self.issuer):
            try:
                async with self._http().get(url, allow_redirects=False, ssl=self._ssl) as response:
                    if response.status != 200:
                        continue
                    raw = await read_bounded(response.content, MAX_DOCUMENT)
                    if raw is None:
                        continue
                    meta = orjson.loads(raw)
            except (aiohttp.ClientError, OSError, orjson.JSONDecodeError):
                continue
            endpoint = meta.get("token_endpoint") if isinstance(meta, dict) else None
            if meta.get("issuer", "").rstrip("/") != self.issuer or not isinstance(endpoint, str):
                continue  # RFC 8414 §3.3: the metadata must name the configured issuer
            if not endpoint.startswith("https://"):
                raise CredentialUnavailable("token endpoint is not https")
            if has_userinfo(endpoint):  # would be sent as a second, Basic credential; never echoed
                raise CredentialUnavailable("token endpoint carries credentials in its URL")
            if self._endpoint_check is not None:
                await self._endpoint_check(endpoint)
            self._endpoint = endpoint
            return endpoint
        raise CredentialUnavailable("authorization server metadata unavailable")

    def _client_auth(self, endpoint: str, form: dict[str, str]) -> dict[str, str]:
        """Client authentication at the token endpoint (RFC 6749 §2.3.1, RFC 7523 §2.2)."""
        headers = {"Accept": "application/json"}
        if self.auth_method == "private_key_jwt":
            assert self._private_key is not None
            form["client_id"] = self.client_id
            form["client_assertion_type"] = ASSERTION_TYPE
            form["client_assertion"] = client_assertion(self._private_key.token(), self.client_id, endpoint)
            return headers
        secret = self._secret.token() if self._secret is not None else ""
        if not secret:
            raise CredentialUnavailable("client secret is not configured")
        if self.auth_method == "client_secret_post":
            form["client_id"] = self.client_id
            form["client_secret"] = secret
            return headers
        basic = base64.b64encode(f"{quote(self.client_id, safe='')}:{quote(secret, safe='')}".encode()).decode()
        headers["Authorization"] = "Basic " + basic
        return headers

    async def _fetch(self) -> None:
        endpoint = await self._discover()
        form = {"grant_type": "client_credentials", "resource": self.resource}
        if self.scopes:
            form["scope"] = " ".join(self.scopes)
        headers = self._client_auth(endpoint, form)
        try:
            async with self._http().post(
                endpoint,
                data=form,
                headers=headers,
                allow_redirects=False,
                ssl=self._ssl,
            ) as response:
                payload = await read_bounded(response.content, MAX_DOCUMENT)
                if response.status != 200:
                    raise CredentialUnavailable(f"token endpoint answered HTTP {response.status}")
        except (aiohttp.ClientError, OSError) as exc:
            raise CredentialUnavailable(f"token endpoint unreachable ({exc.__class__.__name__})") from None
        if payload is None:
            raise CredentialUnavailable("token endpoint answered an oversized document")
        try:
            data = orjson.loads(payload)
        except orjson.JSONDecodeError:
            raise CredentialUnavailable("token endpoint answered malformed JSON") from None
        token = data.get("access_token") if isinstance(data, dict) else None
        if not isinstance(token, str) or not token or str(data.get("token_type", "")).lower() != "bearer":
            raise CredentialUnavailable("token endpoint answered no bearer access_token")
        lifetime = data.get("expires_in")
        lifetime = float(lifetime) if isinstance(lifetime, int | float) and lifetime > 0 else 300.0
        self._token = token
        self._expires = time.monotonic() + max(1.0, lifetime - EARLY_REFRESH)


def _secret(ref: str | None, base: Path) -> BearerToken | None:
    if not ref:
        return None
    scheme, _, rest = ref.partition(":")
    return BearerToken(env=rest) if scheme == "env" else BearerToken(file=Path(os.path.abspath(base / rest)))


def check_private_key(key_text: str) -> None:
    """Raise :class:`CredentialUnavailable` unless ``key_text`` is a PEM or JWK private key
    (``check`` and ``serve`` refuse a ``privateKeyRef`` that is not one before the first call)."""
    _private_key(key_text)


def _private_key(key_text: str) -> Any:
    from joserfc.errors import JoseError
    from joserfc.jwk import ECKey, OKPKey, RSAKey, import_key

    key: Any = None
    try:
        if key_text.lstrip().startswith("{"):
            key = import_key(orjson.loads(key_text))
        else:
            for kind in (ECKey, RSAKey, OKPKey):
                try:
                    key = kind.import_key(key_text)
                    break
                except (JoseError, ValueError, TypeError):
                    continue
    except (JoseError, ValueError, TypeError, orjson.JSONDecodeError):
        key = None
    if key is None or not key.is_private:
        raise CredentialUnavailable("privateKeyRef does not hold a private key")
    return key


def client_assertion(key_text: str, client_id: str, audience: str, lifetime: int = 60) -> str:
    """A signed RFC 7523 client assertion (``private_key_jwt``) for one token request."""
    import secrets as _secrets

    from joserfc import jwt
    from joserfc.jwk import ECKey, RSAKey

    key = _private_key(key_text)
    if isinstance(key, RSAKey):
        alg = "RS256"
    elif isinstance(key, ECKey):
        alg = {"P-256": "ES256", "P-384": "ES384", "P-521": "ES512"}.get(str(key.curve_name), "ES256")
    else:
        alg = "EdDSA"
    now = int(time.time())
    claims = {
        "iss": client_id,
        "sub": client_id,
        "aud": audience,
        "jti": _secrets.token_urlsafe(16),
        "iat": now,
        "exp": now + lifetime,
    }
    header: dict[str, Any] = {"alg": alg, "typ": "JWT"}
    if key.kid:
        header["kid"] = key.kid
    return jwt.encode(header, claims, key)
