"""The harness-facing HTTP binding (AHP-HTTP-001): POST, ``application/json``, one object per body.

The handler is thin: bound the body, hand the bytes to the engine, write status and bytes.
Oversized bodies get 413 without being read in full.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from aiohttp import web

from gateway.dispatch import Engine
from gateway.inbound.principal import Principal
from gateway.server.guard import Guard
from gateway.upstream.http import read_bounded

_JSON = "application/json"
HARD_BODY_CAP = 64 * 1024 * 1024


def build_app(
    engine: Engine,
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
        status, payload = await dispatch(engine, body, request.headers, principal)
        if payload is None:
            return web.Response(status=status)
        return web.Response(status=status, body=payload, content_type=_JSON)

    if guard is not None:
        guard.install(app, upload_path)
        app.router.add_post(path, handle, expect_handler=guard.expect)
    else:
        app.router.add_post(path, handle)
    return app


async def dispatch(
    engine: Engine, body: bytes, headers: Mapping[str, str], principal: Principal | None
) -> tuple[int, bytes | None]:
    """The one call into the engine: the authenticated principal travels as ``{name, attributes}``."""
    if principal is None or not principal.authenticated:
        return await engine.handle(body, headers)
    return await engine.handle(body, headers, principal=principal.as_cel())


async def _read_bounded(request: web.Request, limit: int) -> bytes | None:
    if request.content_length is not None:  # already checked against the limit
        return await request.read()
    return await read_bounded(request.content, limit)
