"""Uploads in the tests: an image attachment, the event that carries it, an upstream's own receiver, an upload hook."""

from __future__ import annotations

import asyncio
import hashlib
from typing import Any

from aiohttp import web

from tests.support.events import HARNESS

PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 8
UPLOAD_TOKEN = "upload-token-for-a-51d0"
EVENT_TOKEN = "event-token-for-a-8c2e"


def model_request(ref: str, **body_extra: Any) -> dict[str, Any]:
    """A model.request.before event whose user message carries one image attachment."""
    return {
        "id": f"evt-{ref[-6:]}-{len(body_extra)}",
        "source": "urn:example:harness",
        "type": "model.request.before",
        "time": "2026-11-30T10:00:00Z",
        "harness": dict(HARNESS),
        "session": {"id": "sess-1", "cwd": "/home/dev/project", "workspaceRoots": ["/home/dev/project"]},
        "model": {"id": "example", "provider": "example"},
        "attempt": {"id": "a1", "number": 1},
        "params": {},
        "items": [
            {
                "id": "message1",
                "role": "user",
                "parts": [
                    {"id": "t1", "kind": "text", "mediaType": "text/plain", "selection": "body", "text": "look"},
                    {
                        "id": "image1",
                        "kind": "attachment",
                        "mediaType": "image/png",
                        "selection": "body",
                        "body": {"ref": ref, **body_extra},
                    },
                ],
            }
        ],
    }


def image_part(event: dict[str, Any]) -> dict[str, Any]:
    part: dict[str, Any] = event["items"][0]["parts"][1]
    return part


class Receiver:
    """An upstream's own upload receiver on loopback: checks framing and its own credential."""

    def __init__(self, token: str | None) -> None:
        self.token = token
        self.requests: list[tuple[dict[str, str], bytes]] = []
        self.answer: Any = None
        self.url = ""
        self.refs: dict[str, bytes] = {}

    async def handle(self, request: web.Request) -> web.StreamResponse:
        data = await request.read()
        self.requests.append((dict(request.headers), data))
        if self.answer is not None:
            out = self.answer(data)
            return (await out) if asyncio.iscoroutine(out) else out  # type: ignore[no-any-return]
        if self.token is not None and request.headers.get("Authorization") != f"Bearer {self.token}":
            return web.Response(status=401)
        if request.headers.get("AHP-Content-SHA256") != hashlib.sha256(data).hexdigest():
            return web.Response(status=400)
        ref = f"urn:receiver:{len(self.refs) + 1}"
        self.refs[ref] = data
        return web.json_response(
            {"ref": ref, "size": len(data), "sha256": hashlib.sha256(data).hexdigest()}, status=201
        )


def upload_hook(hook_id: str, url: str, upload: dict[str, Any] | None, **extra: Any) -> dict[str, Any]:
    sub: dict[str, Any] = {
        "mode": "intercept",
        "events": ["model.request.before"],
        "timeoutMs": 1500,
        "failurePolicy": "fail-closed",
        "content": {"default": "body"},
    }
    if upload is not None:
        sub["upload"] = upload
    return {"id": hook_id, "transport": {"type": "http", "url": url}, "subscriptions": [sub], **extra}
