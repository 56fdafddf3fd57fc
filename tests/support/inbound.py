"""Inbound authentication helpers: a request with headers sent to a gateway, and the OAuth inbound block for a loopback authorization server."""

from __future__ import annotations

import json
from typing import Any

import aiohttp

from tests.support.oauth_server import LoopbackAuthServer

AUDIENCE = "https://gw.example/"


async def send(
    http: aiohttp.ClientSession, url: str, body: Any, headers: dict[str, str] | None = None, **kw: Any
) -> tuple[int, Any, Any]:
    data = json.dumps(body).encode()
    async with http.post(url, data=data, headers={"Content-Type": "application/json", **(headers or {})}, **kw) as r:
        raw = await r.read()
        return r.status, (json.loads(raw) if raw and r.content_type == "application/json" else raw), r.headers


def oauth_inbound(auth_server: LoopbackAuthServer, **extra: Any) -> dict[str, Any]:
    return {
        "auth": {
            "type": "oauth",
            "issuer": auth_server.issuer,
            "audience": AUDIENCE,
            "requiredScopes": ["ahp.hooks"],
            "caFile": auth_server.ca_file,
            **extra,
        }
    }
