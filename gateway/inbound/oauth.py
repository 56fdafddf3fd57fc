"""The gateway as an OAuth 2.0 protected resource: JWT access tokens (RFC 9068) from one issuer.

Signatures are checked with joserfc against the issuer's JWKS (``jwksUri``, else the issuer
metadata's ``jwks_uri``, RFC 8414), cached for ``jwksCacheSeconds`` (a removed key stops working);
a token with an unknown ``kid`` triggers one refetch at most every ``jwksRefetchSeconds`` (single
flight). An unreachable issuer keeps the last key set. Claims: ``iss`` exactly the issuer, ``aud``
containing the gateway's resource identifier, ``exp`` required and ``nbf`` honoured with a small
clock skew, every ``requiredScopes`` entry present; the JOSE ``typ`` ``at+jwt`` (RFC 9068 §4) unless
``requireAccessTokenTyp: false``. The principal is named by ``sub``, or ``client_id:<client_id>``
for a token without one, so the two namespaces never meet. Refusals carry ``WWW-Authenticate: Bearer
resource_metadata="…"`` pointing at the RFC 9728 document the gateway serves.
"""

from __future__ import annotations

import asyncio
import logging
import math
import ssl
import time
from collections.abc import Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, TypeGuard
from urllib.parse import urlsplit, urlunsplit

import aiohttp
import orjson

if TYPE_CHECKING:  # joserfc (with cryptography, about 9 MB) is imported only when oauth is configured
    from joserfc.jwk import KeySet

from gateway.bounded import read_bounded
from gateway.config.models import InboundOAuth
from gateway.credentials.oauth import MAX_DOCUMENT, metadata_urls
from gateway.inbound.bearer import bearer_credential
from gateway.inbound.principal import Principal, Refusal

log = logging.getLogger("ahp_gateway")
WELL_KNOWN = "/.well-known/oauth-protected-resource"
MAX_TOKEN = 8000
TIME_CLAIMS = frozenset(("exp", "nbf", "iat", "jti"))
ACCESS_TOKEN_TYPES = frozenset(("at+jwt", "application/at+jwt"))
"""RFC 9068 §4: the ``typ`` an access token must carry (compared case-insensitively)."""
LENIENT_TOKEN_TYPES = ACCESS_TOKEN_TYPES | {"jwt"}
"""With ``requireAccessTokenTyp: false``: also ``JWT``, or no ``typ`` at all."""
CLIENT_PREFIX = "client_id:"
"""The principal name of a token without ``sub`` is its ``client_id`` under this prefix, and a
``sub`` that starts with it is refused: a subject and a client never share a name (nor uploads)."""


def metadata_path(resource: str) -> str:
    """RFC 9728 §3.1: the well-known segment goes between the host and the resource's path."""
    path = urlsplit(resource).path.rstrip("/")
    return WELL_KNOWN + path


def metadata_url(resource: str) -> str:
    parts = urlsplit(resource)
    return urlunsplit((parts.scheme, parts.netloc, metadata_path(resource), "", ""))


def resource_document(cfg: InboundOAuth) -> dict[str, Any]:
    document: dict[str, Any] = {
        "resource": cfg.audience,
        "authorization_servers": [cfg.issuer],
        "bearer_methods_supported": ["header"],
    }
    if cfg.requiredScopes:
        document["scopes_supported"] = list(cfg.requiredScopes)
    return document


class IssuerUnavailable(Exception):
    pass


class JwtAuthenticator:
    scheme = "oauth"

    def __init__(self, cfg: InboundOAuth, *, ca_file: str | None = None, clock: Any = time.time) -> None:
        self.cfg = cfg
        self.issuer = cfg.issuer
        self._ssl: ssl.SSLContext | bool = ssl.create_default_context(cafile=ca_file) if ca_file else True
        self._clock = clock
        self._keys: KeySet | None = None
        self._fetched_at = -1e18
        self._jwks_uri = cfg.jwksUri
        self._lock = asyncio.Lock()
        self._session: aiohttp.ClientSession | None = None
        self.fetches = 0
        self.attempts = 0
        challenge = f'Bearer resource_metadata="{metadata_url(cfg.audience)}"'
        self._challenge = challenge
        self._invalid = challenge + ', error="invalid_token"'
        scope = " ".join(cfg.requiredScopes)
        self._scope = challenge + f', error="insufficient_scope", scope="{scope}"'

    # ------------------------------------------------------------------ JWKS
    def _http(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5))
        return self._session

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()

    async def _get_json(self, url: str) -> Any:
        async with self._http().get(url, allow_redirects=False, ssl=self._ssl) as response:
            if response.status != 200:
                raise IssuerUnavailable(f"{url} answered HTTP {response.status}")
            body = await read_bounded(response.content, MAX_DOCUMENT)
            if body is None:
                raise IssuerUnavailable(f"{url} answered an oversized document")
            return orjson.loads(body)

    async def _discover_jwks(self) -> str:
        if self._jwks_uri is not None:
            return self._jwks_uri
        for url in metadata_urls(self.issuer):
            try:
                meta = await self._get_json(url)
            except (IssuerUnavailable, aiohttp.ClientError, OSError, orjson.JSONDecodeError, TimeoutError):
                continue
            if not isinstance(meta, dict):
                continue
            uri = meta.get("jwks_uri")
            if meta.get("issuer") != self.issuer or not isinstance(uri, str):
                continue  # RFC 8414 §3.3: the metadata must name the configured issuer
            if not uri.startswith("https://"):
                raise IssuerUnavailable("jwks_uri is not https")
            self._jwks_uri = uri
            return uri
        raise IssuerUnavailable("authorization server metadata unavailable")

    async def _refresh(self, *, forced: bool) -> KeySet | None:
        """Fetch the JWKS (single flight); ``forced`` (unknown kid) obeys the refetch interval."""
        from joserfc.errors import JoseError
        from joserfc.jwk import KeySet

        async with self._lock:
            now = time.monotonic()
            age = now - self._fetched_at
            if self._keys is not None:
                if forced and age < self.cfg.jwksRefetchSeconds:
                    return self._keys  # an unknown kid within the refetch interval: no fetch storm
                if not forced and age < self.cfg.jwksCacheSeconds:
                    return self._keys
            if self._keys is None and now - self._fetched_at < min(self.cfg.jwksRefetchSeconds, 5.0):
                return None  # the issuer just failed: unauthenticated callers must not drive a fetch storm
            self._fetched_at = now
            self.attempts += 1
            try:
                uri = await self._discover_jwks()
                data = await self._get_json(uri)
                keys = _strong(KeySet.import_key_set(data))
            except (IssuerUnavailable, aiohttp.ClientError, OSError, orjson.JSONDecodeError, TimeoutError) as exc:
                log.warning(
                    "inbound OAuth: JWKS unavailable (%s)",
                    exc if isinstance(exc, IssuerUnavailable) else exc.__class__.__name__,
                )
                self._fetched_at = time.monotonic()  # the failure window starts when the fetch gave up
                return self._keys
            except (JoseError, ValueError, TypeError, KeyError, AttributeError):
                log.warning("inbound OAuth: the issuer's JWKS is malformed")
                self._fetched_at = time.monotonic()
                return self._keys
            self.fetches += 1
            self._keys = keys
            return keys

    # ------------------------------------------------------------------ tokens
    async def authenticate(self, headers: Mapping[str, str]) -> Principal | Refusal:
        from joserfc.errors import BadSignatureError, DecodeError, InvalidKeyIdError, JoseError

        token = bearer_credential(headers)
        if token is None:
            return Refusal(401, "missing", self._challenge)
        if isinstance(token, Refusal) or len(token) > MAX_TOKEN:
            return Refusal(401, "malformed", self._challenge + ', error="invalid_request"')
        keys = self._keys
        if keys is None or time.monotonic() - self._fetched_at >= self.cfg.jwksCacheSeconds:
            keys = await self._refresh(forced=False)  # first use, or a stale set (removed keys stop working)
        if keys is None:
            return Refusal(401, "issuer_unavailable", self._invalid)
        try:
            decoded = self._decode(token, keys)
        except InvalidKeyIdError:
            fresh = await self._refresh(forced=True)
            if fresh is None or fresh is keys:
                return Refusal(401, "unknown_key", self._invalid)
            try:
                decoded = self._decode(token, fresh)
            except InvalidKeyIdError:
                return Refusal(401, "unknown_key", self._invalid)
            except (JoseError, ValueError, TypeError, RecursionError):
                return Refusal(401, "invalid_token", self._invalid)
        except (BadSignatureError, DecodeError, JoseError, ValueError, TypeError, RecursionError):
            return Refusal(401, "invalid_token", self._invalid)  # RecursionError: a deeply nested payload
        return self._claims(decoded)

    def _decode(self, token: str, keys: KeySet) -> Any:
        from joserfc import jwt
        from joserfc.errors import DecodeError

        decoded = jwt.decode(token, keys, algorithms=list(self.cfg.algorithms))
        typ = decoded.header.get("typ")
        strict = self.cfg.requireAccessTokenTyp
        if typ is None and not strict:
            return decoded
        if not isinstance(typ, str) or typ.lower() not in (ACCESS_TOKEN_TYPES if strict else LENIENT_TOKEN_TYPES):
            raise DecodeError("not an access token")
        return decoded

    def _claims(self, decoded: Any) -> Principal | Refusal:
        claims = decoded.claims
        if not isinstance(claims, dict):
            return Refusal(401, "invalid_token", self._invalid)
        if claims.get("iss") != self.issuer:
            return Refusal(401, "wrong_issuer", self._invalid)
        audience = claims.get("aud")
        audiences = [audience] if isinstance(audience, str) else audience
        if not isinstance(audiences, list) or self.cfg.audience not in audiences:
            return Refusal(401, "wrong_audience", self._invalid)
        now = self._clock()
        skew = self.cfg.clockSkewSeconds
        exp, nbf = claims.get("exp"), claims.get("nbf")
        if not _instant(exp):  # NaN and Infinity (which the JWT parser admits) would never expire
            return Refusal(401, "invalid_token", self._invalid)
        if exp + skew <= now:
            return Refusal(401, "expired", self._invalid)
        if nbf is not None and (not _instant(nbf) or nbf - skew > now):
            return Refusal(401, "invalid_token", self._invalid)
        granted = _scopes(claims)
        if any(scope not in granted for scope in self.cfg.requiredScopes):
            return Refusal(403, "insufficient_scope", self._scope)
        name = _principal_name(claims)
        if name is None:
            return Refusal(401, "invalid_token", self._invalid)
        attributes: dict[str, Any] = {
            k: v for k, v in claims.items() if k not in TIME_CLAIMS and isinstance(v, str | int | float | bool | list)
        }
        attributes["scopes"] = sorted(granted)
        return Principal(name, MappingProxyType(attributes), "oauth")


def _principal_name(claims: dict[str, Any]) -> str | None:
    """``sub`` as it is (routing by subject keeps working), else ``client_id:<client_id>``; None
    when neither is a non-empty string, or when ``sub`` poses as a qualified client id."""
    sub = claims.get("sub")
    if sub is not None and sub != "":  # an empty sub is absent, as before
        if not isinstance(sub, str) or sub.startswith(CLIENT_PREFIX):
            return None
        return sub
    client = claims.get("client_id")
    return CLIENT_PREFIX + client if isinstance(client, str) and client else None


def _scopes(claims: dict[str, Any]) -> set[str]:
    scope = claims.get("scope")
    if isinstance(scope, str):
        return set(scope.split())
    scp = claims.get("scp")
    if isinstance(scp, list):
        return {s for s in scp if isinstance(s, str)}
    return set()


def _instant(value: Any) -> TypeGuard[float]:
    """A NumericDate (RFC 7519 §2): a finite JSON number, never a bool."""
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


MIN_RSA_BITS = 2048


def _strong(keys: KeySet) -> KeySet:
    """The key set without RSA keys under 2048 bits (RFC 7518 §3.3), which are refused with a
    warning: a signature by a weak key proves nothing."""
    from joserfc.jwk import KeySet

    strong = [k for k in keys.keys if not (k.key_type == "RSA" and getattr(k.raw_value, "key_size", 0) < MIN_RSA_BITS)]
    if len(strong) != len(keys.keys):
        log.warning(
            "inbound OAuth: %d RSA key(s) under %d bits in the JWKS ignored", len(keys.keys) - len(strong), MIN_RSA_BITS
        )
    return keys if len(strong) == len(keys.keys) else KeySet(strong)
