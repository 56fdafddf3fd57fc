"""The one inbound decision: ``authenticate(headers, peer) -> Principal | Refusal``.

Modes (``inbound.auth.type``): ``bearer`` (hashed tokens file), ``oauth`` (JWT access tokens),
``none``. ``none`` serves loopback peers only, unless ``inbound.allowUnauthenticated: true``
(a mesh sidecar authenticates) or a verified client certificate (mTLS) names the caller. Every
refusal is counted by reason; no credential ever reaches a log line, metric or answer.
"""

from __future__ import annotations

import functools
import ipaddress
import logging
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gateway.config.models import GatewayConfig, InboundBearer, InboundOAuth
from gateway.inbound.bearer import BearerAuthenticator, TokenTable
from gateway.inbound.oauth import JwtAuthenticator
from gateway.inbound.principal import ANONYMOUS, Principal, Refusal
from gateway.inbound.tls import TlsTerminator, certificate_principal

log = logging.getLogger("ahp_gateway")


@dataclass(frozen=True, slots=True)
class Peer:
    host: str | None
    certificate: dict[str, Any] | None = None
    """The client certificate verified during the TLS handshake (never from a header)."""


@functools.lru_cache(maxsize=4096)
def is_loopback(host: str | None) -> bool:
    """Peer addresses repeat (one per connection, many requests each): parsed once."""
    if not host:
        return False
    if host == "localhost":
        return True
    try:
        address = ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return False
    mapped = getattr(address, "ipv4_mapped", None)
    return bool(address.is_loopback or (mapped is not None and mapped.is_loopback))


def unauthenticated_exposure(cfg: GatewayConfig, host: str) -> str | None:
    """Why serving with ``type: none`` on ``host`` is refused, or None when it is allowed."""
    inbound = cfg.inbound
    if inbound.auth.type != "none" or inbound.allowUnauthenticated or is_loopback(host):
        return None
    if inbound.tls is not None and inbound.tls.clientCaFile:
        return None
    return (
        f"inbound.auth.type none on {host!r} would serve anyone who reaches the port: use bearer or oauth, "
        "mTLS (inbound.tls.clientCaFile), or set inbound.allowUnauthenticated: true behind an authenticating mesh"
    )


def describe(cfg: GatewayConfig) -> str:
    """One line for ``check`` and the startup log (never a secret)."""
    inbound = cfg.inbound
    auth = inbound.auth
    tls = ""
    if inbound.tls is not None:
        tls = ", TLS" + (" with client certificates (mTLS)" if inbound.tls.clientCaFile else "")
    if isinstance(auth, InboundBearer):
        return f"inbound: bearer tokens from {auth.tokensFile}{tls}"
    if isinstance(auth, InboundOAuth):
        scopes = f", scopes {' '.join(auth.requiredScopes)}" if auth.requiredScopes else ""
        return f"inbound: OAuth access tokens from {auth.issuer} for {auth.audience}{scopes}{tls}"
    if inbound.allowUnauthenticated:
        return f"inbound: UNAUTHENTICATED (allowUnauthenticated: true; every caller is served){tls}"
    if inbound.tls is not None and inbound.tls.clientCaFile:
        return f"inbound: client certificates only (mTLS){tls}"
    return f"inbound: unauthenticated, loopback callers only{tls}"


class Gate:
    def __init__(
        self,
        cfg: GatewayConfig,
        base: Path,
        *,
        on_refusal: Callable[[str], None] | None = None,
    ) -> None:
        inbound = cfg.inbound
        self.allow_unauthenticated = inbound.allowUnauthenticated
        self._on_refusal = on_refusal
        self.tls = TlsTerminator(inbound.tls, base) if inbound.tls is not None else None
        auth = inbound.auth
        self.jwt: JwtAuthenticator | None = None
        self.bearer: BearerAuthenticator | None = None
        if isinstance(auth, InboundBearer):
            self.bearer = BearerAuthenticator(TokenTable(Path(os.path.abspath(base / auth.tokensFile))))
        elif isinstance(auth, InboundOAuth):
            ca = str(Path(os.path.abspath(base / auth.caFile))) if auth.caFile else None
            self.jwt = JwtAuthenticator(auth, ca_file=ca)
        self.oauth_config = auth if isinstance(auth, InboundOAuth) else None

    async def authenticate(self, headers: Mapping[str, str], peer: Peer) -> Principal | Refusal:
        outcome = await self._decide(headers, peer)
        if isinstance(outcome, Refusal) and self._on_refusal is not None:
            self._on_refusal(outcome.reason)
        return outcome

    async def _decide(self, headers: Mapping[str, str], peer: Peer) -> Principal | Refusal:
        checker = self.bearer or self.jwt
        if checker is not None:
            return await checker.authenticate(headers)
        verified = certificate_principal(peer.certificate)
        if verified is not None:
            return verified
        if self.allow_unauthenticated or is_loopback(peer.host):
            return ANONYMOUS
        return Refusal(403, "not_loopback")

    async def aclose(self) -> None:
        if self.jwt is not None:
            await self.jwt.aclose()
