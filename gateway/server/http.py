"""The harness-facing HTTP binding (AHP-HTTP-001): POST, ``application/json``, one object per body.

The handler is thin: bound the body, hand the bytes to the engine, write status and bytes.
Oversized bodies get 413 without being read in full.
"""

from __future__ import annotations

from collections.abc import Callable

from aiohttp import web

from gateway.dispatch import Engine
from gateway.observability.capture import Capture
from gateway.upstream.http import read_bounded

_JSON = "application/json"
HARD_BODY_CAP = 64 * 1024 * 1024


def build_app(
    engine: Engine, path: str, max_body: Callable[[], int], capture: Capture | None = None
) -> web.Application:
    app = web.Application(client_max_size=HARD_BODY_CAP)

    async def handle(request: web.Request) -> web.StreamResponse:
        if request.content_type != _JSON:
            return web.Response(status=415, text="AHP over HTTP requires Content-Type: application/json\n")
        limit = max_body()
        length = request.content_length
        if length is not None and length > limit:
            return web.Response(status=413, text=f"body exceeds {limit} bytes\n")
        body = await _read_bounded(request, limit)
        if body is None:
            return web.Response(status=413, text=f"body exceeds {limit} bytes\n")
        status, payload = await engine.handle(body, request.headers)
        if capture is not None:
            capture.record(body, request.headers, payload)
        if payload is None:
            return web.Response(status=status)
        return web.Response(status=status, body=payload, content_type=_JSON)

    app.router.add_post(path, handle)
    return app


async def _read_bounded(request: web.Request, limit: int) -> bytes | None:
    if request.content_length is not None:  # already checked against the limit
        return await request.read()
    return await read_bounded(request.content, limit)
