"""The harness-facing HTTP binding (AHP-HTTP-001): POST, ``application/json``, one object per body.

The handler is thin: bound the body, hand the bytes to the pipeline, frame the answer — HTTP 200
with the JSON-RPC response (errors included), 202 with no body for a notification. Oversized
bodies get 413 without being read in full; other media types 415.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from aiohttp import web

from gateway.inbound.principal import Principal
from gateway.pipeline.gateway import Handler
from gateway.server.guard import Guard
from gateway.upstream.http import read_bounded

_JSON = "application/json"
HARD_BODY_CAP = 64 * 1024 * 1024


def build_app(
    gateway: Handler,
    path: str,
    max_body: Callable[[], int],
    guard: Guard | None = None,
    upload_path: str | None = None,
) -> web.Application:
    app = web.Application(client_max_size=HARD_BODY_CAP)

    async def handle(request: web.Request) -> web.StreamResponse:
        principal: Principal | None = None
        if guard is not None:  # authenticate before the body is read (protocol §12)
            found = await guard.principal(request)
            if isinstance(found, web.StreamResponse):
                return found
            principal = found
        if request.content_type != _JSON:
            return web.Response(status=415, text="AHP over HTTP requires Content-Type: application/json\n")
        limit = max_body()
        length = request.content_length
        if length is not None and length > limit:
            return web.Response(status=413, text=f"body exceeds {limit} bytes\n")
        body = await _read_bounded(request, limit)
        if body is None:
            return web.Response(status=413, text=f"body exceeds {limit} bytes\n")
        answer = await gateway.handle(body, request.headers, cel_principal(principal))
        if answer is None:
            return web.Response(status=202)
        return web.Response(status=200, body=answer, content_type=_JSON)

    if guard is not None:
        guard.install(app, upload_path)
        app.router.add_post(path, handle, expect_handler=guard.expect)
    else:
        app.router.add_post(path, handle)
    return app


def cel_principal(principal: Principal | None) -> Mapping[str, Any] | None:
    """The authenticated caller as the pipeline's ``principal`` (``{name, attributes}``)."""
    return principal.as_cel() if principal is not None and principal.authenticated else None


async def _read_bounded(request: web.Request, limit: int) -> bytes | None:
    if request.content_length is not None:  # already checked against the limit
        return await request.read()
    return await read_bounded(request.content, limit)
