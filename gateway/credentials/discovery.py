"""Credentials for an upstream without an explicit binding (protocol §12): the first call carries
no credential; on ``401`` the gateway follows RFC 9728 (``resource_metadata`` from
``WWW-Authenticate``, else the path-specific, then the root well-known location), checks that the
document's ``resource`` is the upstream it called, picks an authorization server only from
``trustedIssuers``, obtains a client-credentials token bound to that resource (RFC 8707) and
retries once. Explicit bindings never come here (no downgrade, no switch).

Every discovered URL and redirect passes :class:`DestinationPolicy`: https only, no userinfo, no
loopback, private, link-local or otherwise special address unless allow-listed, redirects only
within the same origin. The token is only ever sent to the upstream it was obtained for.
"""

from __future__ import annotations

import asyncio
import ipaddress
import os
import re
import ssl
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urljoin, urlsplit, urlunsplit

import aiohttp
import orjson

from gateway.bounded import read_bounded
from gateway.credentials.bearer import CredentialUnavailable
from gateway.credentials.oauth import ClientCredentials

WELL_KNOWN = "/.well-known/oauth-protected-resource"
MAX_DOCUMENT = 256 * 1024
MAX_REDIRECTS = 3
_RESOURCE_METADATA = re.compile(r'resource_metadata\s*=\s*"([^"]*)"', re.IGNORECASE)
Address = ipaddress.IPv4Address | ipaddress.IPv6Address


def _origin(url: str) -> tuple[str, str]:
    parts = urlsplit(url)
    return parts.scheme.lower(), parts.netloc.lower()


class DestinationPolicy:
    def __init__(self, allow: Sequence[str] = ()) -> None:
        self._allow = [ipaddress.ip_network(item, strict=False) for item in allow]

    def _allowed(self, address: Address) -> bool:
        mapped = getattr(address, "ipv4_mapped", None)
        if mapped is not None:
            address = mapped
        if any(address in network for network in self._allow):
            return True
        return address.is_global and not address.is_multicast

    async def check(self, url: str) -> None:
        """Raise :class:`CredentialUnavailable` unless ``url`` may be contacted."""
        parts = urlsplit(url)
        if parts.scheme.lower() != "https":
            raise CredentialUnavailable("discovered URL is not https")
        if parts.username is not None or parts.password is not None or not parts.hostname:
            raise CredentialUnavailable("discovered URL has no host or carries userinfo")
        host = parts.hostname
        try:
            addresses: list[Address] = [ipaddress.ip_address(host)]
        except ValueError:
            try:
                infos = await asyncio.get_running_loop().getaddrinfo(host, parts.port or 443)
            except OSError:
                raise CredentialUnavailable("discovered host does not resolve") from None
            addresses = [ipaddress.ip_address(info[4][0]) for info in infos]
        if not addresses or not all(self._allowed(a) for a in addresses):
            raise CredentialUnavailable("discovered URL points at a loopback, private or link-local address")


def metadata_candidates(url: str, challenge: str | None) -> list[str]:
    """RFC 9728 order: the challenge's ``resource_metadata``, else path-specific then root."""
    if challenge and challenge.lstrip().lower().startswith("bearer"):
        found = _RESOURCE_METADATA.search(challenge)
        if found:
            return [found.group(1)]
    parts = urlsplit(url)
    path = parts.path.rstrip("/")
    root = urlunsplit((parts.scheme, parts.netloc, WELL_KNOWN, "", ""))
    return [urlunsplit((parts.scheme, parts.netloc, WELL_KNOWN + path, "", "")), root] if path else [root]


def resource_matches(resource: str, url: str) -> bool:
    """RFC 9728 §3.3 / MCP: the document must describe the resource that was called: the
    upstream URL itself or a path prefix of it on the same origin."""
    if _origin(resource) != _origin(url) or urlsplit(resource).query or urlsplit(resource).fragment:
        return False
    want = urlsplit(resource).path.rstrip("/")
    have = urlsplit(url).path.rstrip("/")
    return have == want or have.startswith(want + "/")


class DiscoveredAuth:
    """The authorizer of one upstream without ``authentication``."""

    def __init__(
        self,
        url: str,
        trusted: Sequence[Any],
        base: Path,
        pool: Any,
        policy: DestinationPolicy,
        ssl_context: ssl.SSLContext | bool = True,
    ) -> None:
        self.url = url
        self._trusted = {entry.issuer.rstrip("/"): entry for entry in trusted}
        self._cas = {
            issuer: str(Path(os.path.abspath(base / entry.caFile)))
            for issuer, entry in self._trusted.items()
            if entry.caFile
        }
        self._base = base
        self._pool = pool
        self._policy = policy
        self._ssl = ssl_context
        self._client: ClientCredentials | None = None
        self._lock = asyncio.Lock()

    async def authorization(self) -> str | None:
        """None until discovery succeeded: the first attempt carries no credential."""
        return await self._client.authorization() if self._client is not None else None

    async def on_unauthorized(self, challenge: str | None) -> bool:
        """A 401 from the upstream: True when the call should be retried once with a token."""
        async with self._lock:
            if self._client is not None:
                self._client.invalidate()  # a rejected token is never reused
                return True
            self._client = await self._discover(challenge)
            return True

    def _http(self) -> aiohttp.ClientSession:
        session = self._pool
        return session.session if hasattr(session, "session") else session  # type: ignore[no-any-return]

    async def _get(self, url: str) -> Any:
        """GET a JSON document under the destination policy; same-origin redirects only."""
        for _ in range(MAX_REDIRECTS + 1):
            await self._policy.check(url)
            async with self._http().get(url, allow_redirects=False, ssl=self._ssl) as response:
                if response.status in (301, 302, 303, 307, 308):
                    target = urljoin(url, response.headers.get("Location", ""))
                    if _origin(target) != _origin(url):
                        raise CredentialUnavailable("cross-origin redirect during discovery")
                    url = target
                    continue
                if response.status != 200:
                    return None
                body = await read_bounded(response.content, MAX_DOCUMENT)
                if body is None:
                    raise CredentialUnavailable("oversized discovery document")
                try:
                    return orjson.loads(body)
                except orjson.JSONDecodeError:
                    return None
        raise CredentialUnavailable("too many redirects during discovery")

    async def _discover(self, challenge: str | None) -> ClientCredentials:
        document: Any = None
        for candidate in metadata_candidates(self.url, challenge):
            try:
                document = await self._get(candidate)
            except (aiohttp.ClientError, OSError):
                document = None
            if isinstance(document, dict):
                break
        if not isinstance(document, dict):
            raise CredentialUnavailable("no protected resource metadata")
        resource = document.get("resource")
        if not isinstance(resource, str) or not resource_matches(resource, self.url):
            raise CredentialUnavailable("protected resource metadata names another resource")
        servers = document.get("authorization_servers")
        if not isinstance(servers, list):
            raise CredentialUnavailable("protected resource metadata lists no authorization server")
        entry = next(
            (self._trusted[s.rstrip("/")] for s in servers if isinstance(s, str) and s.rstrip("/") in self._trusted),
            None,
        )
        if entry is None:
            raise CredentialUnavailable("no listed authorization server is in trustedIssuers")
        await self._policy.check(entry.issuer)
        supported = document.get("scopes_supported")
        scopes = list(entry.scopes)
        if isinstance(supported, list):
            scopes = [s for s in scopes if s in supported]
        ca = self._cas.get(entry.issuer.rstrip("/"))
        return ClientCredentials.from_config(
            entry, self._base, self._pool, ca, resource=resource, scopes=scopes, endpoint_check=self._policy.check
        )


def discovered_authorizer(url: str, loaded: Any, pool: Any, ca_file: str | None) -> DiscoveredAuth | None:
    """For an http upstream without ``authentication``: discovery when issuers are trusted."""
    cfg = loaded.config
    if not cfg.trustedIssuers or not url.startswith("https://"):
        return None
    context: ssl.SSLContext | bool = ssl.create_default_context(cafile=ca_file) if ca_file else True
    policy = DestinationPolicy(cfg.discovery.allowAddresses)
    return DiscoveredAuth(url, cfg.trustedIssuers, loaded.base_dir, pool, policy, context)
