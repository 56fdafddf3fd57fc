"""Talking to a gateway with uploads on: an upload to its receiver route, and an intercept call with a bearer token."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import aiohttp

from tests.support.events import intercept
from tests.support.tokens import TOKEN_A


async def upload(
    http: aiohttp.ClientSession, gw: Any, data: bytes, token: str | None = TOKEN_A, **headers: str
) -> tuple[int, Any]:
    sent = {"Content-Type": "application/octet-stream", "AHP-Content-SHA256": hashlib.sha256(data).hexdigest()}
    if token is not None:
        sent["Authorization"] = f"Bearer {token}"
    sent.update(headers)
    async with http.post(upload_url(gw), data=data, headers=sent) as response:
        raw = await response.read()
        return response.status, (json.loads(raw) if response.content_type == "application/json" else raw)


async def call(http: aiohttp.ClientSession, gw: Any, event: dict[str, Any], token: str = TOKEN_A) -> dict[str, Any]:
    headers = {"Content-Type": "application/json", "Authorization": f"Bearer {token}"}
    async with http.post(gw.url, data=json.dumps(intercept(event)), headers=headers) as response:
        assert response.status == 200
        return await response.json()  # type: ignore[no-any-return]


def upload_url(gw: Any) -> str:
    return gw.url.rstrip("/") + "/uploads"
