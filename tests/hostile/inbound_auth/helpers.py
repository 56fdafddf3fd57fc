"""Helpers of the inbound authentication attacks: raw requests, token forging, the hostile issuer, metrics."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature
from joserfc import jws
from joserfc.jwk import ECKey

from gateway.server.app import GatewayServer
from tests.support.config import gateway_config, hook
from tests.support.events import intercept, tool_before
from tests.support.oauth_server import LoopbackAuthServer

AUDIENCE = "https://gw.example/"

RESOURCE_METADATA = 'Bearer resource_metadata="https://gw.example/.well-known/oauth-protected-resource"'

INVALID_TOKEN = RESOURCE_METADATA + ', error="invalid_token"'

INVALID_REQUEST = RESOURCE_METADATA + ', error="invalid_request"'

TOKEN = "tok-hostile-5d4c3b2a1f9e"
"""The one valid static bearer token."""

LANES = pytest.mark.parametrize("fast", [True, False], ids=["fastLane", "aiohttp"])


def listen(fast: bool) -> dict[str, Any]:
    return {"host": "127.0.0.1", "port": 0, "path": "/", "fastLane": fast}


def body() -> bytes:
    return json.dumps(intercept(tool_before())).encode()


def request(*lines: bytes | str, payload: bytes | None = None) -> bytes:
    """One ``POST /`` with exact framing and ``Connection: close``; ``lines`` are extra header
    lines sent byte for byte."""
    data = body() if payload is None else payload
    head: list[bytes] = [
        b"POST / HTTP/1.1",
        b"Host: 127.0.0.1",
        b"Content-Type: application/json",
        b"Content-Length: %d" % len(data),
        b"Connection: close",
    ]
    head += [line.encode("utf-8") if isinstance(line, str) else line for line in lines]
    return b"\r\n".join(head) + b"\r\n\r\n" + data


def bearer(token: str | bytes) -> bytes:
    return b"Authorization: Bearer " + (token.encode("utf-8") if isinstance(token, str) else token)


@dataclass
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes
    raw: bytes


async def exchange(port: int, data: bytes, timeout: float = 10.0) -> Answer:
    """Send ``data`` on a fresh connection and read the whole answer (until the server closes;
    every request carries ``Connection: close``), within a deadline."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    raw = b""
    try:
        writer.write(data)
        await writer.drain()
        async with asyncio.timeout(timeout):
            while True:
                try:
                    chunk = await reader.read(65536)
                except ConnectionResetError:
                    break
                if not chunk:
                    break
                raw += chunk
    finally:
        writer.close()
    head, _, rest = raw.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return Answer(int(lines[0].split(" ", 2)[1]), headers, rest, raw)


async def jwks_gateway(gateway_factory: Any, stub_factory: Any, hostile: Any) -> tuple[Any, Any]:
    """A gateway (fast lane on) whose OAuth key set is ``hostile``'s ``/jwks``, and its upstream."""
    upstream = await stub_factory()
    cfg = gateway_config(
        [hook("org.example.a", upstream.url)],
        listen=listen(True),
        inbound=oauth(hostile.url, hostile.ca_file, jwksUri=hostile.url + "/jwks"),
    )
    return await gateway_factory(cfg), upstream


def metric(gw: GatewayServer, reason: str) -> float:
    assert gw.observability is not None
    needle = f'ahp_gateway_auth_failures_total{{reason="{reason}"}} '
    for line in gw.observability.metrics.render()[0].decode().splitlines():
        if line.startswith(needle):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def failures(gw: GatewayServer) -> dict[str, float]:
    from gateway.inbound.principal import REASONS

    return {reason: metric(gw, reason) for reason in REASONS}


async def metrics_text(gw: GatewayServer) -> str:
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"http://127.0.0.1:{gw.admin_port}/metrics") as response,
    ):
        assert response.status == 200
        return await response.text()


def b64(data: bytes | dict[str, Any]) -> str:
    raw = json.dumps(data).encode() if isinstance(data, dict) else data
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def compact(header: dict[str, Any], payload: bytes, key: Any) -> str:
    """A JWS compact token with exactly this protected header and payload bytes."""
    return jws.serialize_compact(header, payload, key)


def es256(header: dict[str, Any], payload: bytes, key: ECKey) -> str:
    """An ES256 token signed by hand, so the header may hold what a library would refuse to
    write (a list ``kid``, a ``jku``, an embedded ``jwk``): a forger is not bound by one."""
    signing_input = f"{b64(header)}.{b64(payload)}"
    der = key.private_key.sign(signing_input.encode(), ec.ECDSA(hashes.SHA256()))
    r, s = decode_dss_signature(der)
    return f"{signing_input}.{b64(r.to_bytes(32, 'big') + s.to_bytes(32, 'big'))}"


def hs256(header: dict[str, Any], claims: dict[str, Any], secret: bytes) -> str:
    """An HMAC-signed token (``HS256``/``HS512`` as the header says) built by hand: no library
    guard stops a forger."""
    signing_input = f"{b64(header)}.{b64(claims)}"
    digest = hashlib.sha512 if header["alg"] == "HS512" else hashlib.sha256
    mac = hmac.new(secret, signing_input.encode(), digest).digest()
    return f"{signing_input}.{b64(mac)}"


def attacker_key(kid: str) -> ECKey:
    return ECKey.generate_key("P-256", parameters={"kid": kid, "alg": "ES256"})


def sha(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


@dataclass
class Hostile:
    """A scriptable issuer on loopback TLS: ``routes[path]`` answers, ``hits[path]`` counts."""

    url: str = ""
    ca_file: str = ""
    routes: dict[str, Callable[[web.Request], Awaitable[web.StreamResponse]]] = field(default_factory=dict)
    hits: dict[str, int] = field(default_factory=dict)
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    """Set at teardown: releases every handler that hangs."""

    def json(self, path: str, document: Any, status: int = 200) -> None:
        async def answer(_: web.Request) -> web.StreamResponse:
            return web.json_response(document, status=status)

        self.routes[path] = answer

    def hang(self, path: str) -> None:
        async def answer(_: web.Request) -> web.StreamResponse:
            await self.stop.wait()
            return web.json_response({})

        self.routes[path] = answer


def oauth(issuer: str, ca_file: str, **extra: Any) -> dict[str, Any]:
    return {
        "auth": {
            "type": "oauth",
            "issuer": issuer,
            "audience": AUDIENCE,
            "requiredScopes": ["ahp.hooks"],
            "caFile": ca_file,
            **extra,
        }
    }


def claims_for(issuer: str, **overrides: Any) -> dict[str, Any]:
    now = int(time.time())
    out: dict[str, Any] = {
        "iss": issuer,
        "aud": AUDIENCE,
        "sub": "svc-a",
        "exp": now + 300,
        "iat": now,
        "scope": "ahp.hooks",
    }
    out.update(overrides)
    return {k: v for k, v in out.items() if v is not None}


async def oauth_gateway(
    gateway_factory: Any, stub_factory: Any, auth_server: LoopbackAuthServer, fast: bool, **extra: Any
) -> tuple[GatewayServer, Any]:
    upstream = await stub_factory()
    cfg = gateway_config(
        [hook("org.example.a", upstream.url)],
        listen=listen(fast),
        inbound=oauth(auth_server.issuer, auth_server.ca_file, **extra),
        log={"decisions": "decisions.jsonl"},
    )
    return await gateway_factory(cfg, name=f"gateway-{int(fast)}.yaml"), upstream


def assert_refused(answer: Answer, status: int, challenge: str | None, *secrets: str) -> None:
    assert answer.status == status, answer.raw[:300]
    assert answer.headers.get("www-authenticate") == challenge, answer.raw[:300]
    if status in (401, 403):
        assert answer.body == (b"unauthorized\n" if status == 401 else b"forbidden\n")
    for secret in secrets:
        assert secret.encode() not in answer.raw, "the credential is echoed in the answer"
