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

from gateway.config.models import has_userinfo
from gateway.credentials.bearer import BearerToken, CredentialUnavailable

EARLY_REFRESH = 30.0


def _metadata_urls(issuer: str) -> list[str]:
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
        secret: BearerToken,
        resource: str,
        scopes: list[str],
        session: Any,
        ssl_context: ssl.SSLContext | bool = True,
    ) -> None:
        self.issuer = issuer.rstrip("/")
        self.client_id = client_id
        self._secret = secret
        self.resource = resource
        self.scopes = scopes
        self._session = session
        self._ssl = ssl_context
        self._token: str | None = None
        self._expires = 0.0
        self._endpoint: str | None = None
        self._lock = asyncio.Lock()

    @classmethod
    def from_config(cls, auth: Any, base: Path, pool: Any, ca_file: str | None = None) -> ClientCredentials:
        ref = auth.clientSecretRef
        scheme, _, rest = ref.partition(":")
        secret = BearerToken(env=rest) if scheme == "env" else BearerToken(file=Path(os.path.abspath(base / rest)))
        context: ssl.SSLContext | bool = ssl.create_default_context(cafile=ca_file) if ca_file else True
        return cls(
            issuer=auth.issuer,
            client_id=auth.clientId,
            secret=secret,
            resource=auth.resource,
            scopes=list(auth.scopes),
            session=pool,
            ssl_context=context,
        )

    def invalidate(self) -> None:
        """The upstream rejected the token: the next call fetches a fresh one."""
        self._token = None

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
        for url in _metadata_urls(self.issuer):
            try:
                async with self._http().get(url, allow_redirects=False, ssl=self._ssl) as response:
                    if response.status != 200:
                        continue
                    meta = orjson.loads(await response.read())
            except (aiohttp.ClientError, OSError, orjson.JSONDecodeError):
                continue
            endpoint = meta.get("token_endpoint") if isinstance(meta, dict) else None
            if meta.get("issuer", "").rstrip("/") != self.issuer or not isinstance(endpoint, str):
                continue  # RFC 8414 §3.3: the metadata must name the configured issuer
            if not endpoint.startswith("https://"):
                raise CredentialUnavailable("token endpoint is not https")
            if has_userinfo(endpoint):  # would be sent as a second, Basic credential; never echoed
                raise CredentialUnavailable("token endpoint carries credentials in its URL")
            self._endpoint = endpoint
            return endpoint
        raise CredentialUnavailable("authorization server metadata unavailable")

    async def _fetch(self) -> None:
        endpoint = await self._discover()
        secret = self._secret.token()
        basic = base64.b64encode(f"{quote(self.client_id, safe='')}:{quote(secret, safe='')}".encode()).decode()
        form = {"grant_type": "client_credentials", "resource": self.resource}
        if self.scopes:
            form["scope"] = " ".join(self.scopes)
        try:
            async with self._http().post(
                endpoint,
                data=form,
                headers={"Authorization": "Basic " + basic, "Accept": "application/json"},
                allow_redirects=False,
                ssl=self._ssl,
            ) as response:
                payload = await response.read()
                if response.status != 200:
                    raise CredentialUnavailable(f"token endpoint answered HTTP {response.status}")
        except (aiohttp.ClientError, OSError) as exc:
            raise CredentialUnavailable(f"token endpoint unreachable ({exc.__class__.__name__})") from None
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
