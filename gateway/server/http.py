"""The harness-facing HTTP binding (AHP-HTTP-001): POST, ``application/json``, one object per body.

The handler is thin: bound the body, hand the bytes to the pipeline, frame the answer — HTTP 200
with the JSON-RPC response (errors included), 202 with no body for a notification. Oversized
bodies get 413 without being read in full; other media types 415. A gzip/deflate body is decoded
with the limit on its decoded size (other encodings 415, a body that does not decode 400); a body
that does not arrive within ``limits.bodyTimeoutMs`` gets 408 (see :mod:`gateway.server.limits`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from aiohttp import hdrs, web

from gateway.config.models import Limits
from gateway.inbound.principal import Principal
from gateway.native.endpoint import handle_native
from gateway.pipeline.gateway import Handler
from gateway.server.guard import Guard
from gateway.server.limits import BodyRejected, coding_of, read_body

_JSON = "application/json"
HARD_BODY_CAP = 64 * 1024 * 1024


def build_app(
    gateway: Handler,
    path: str,
    limits: Callable[[], Limits],
    on_body_timeout: Callable[[], None] | None = None,
    guard: Guard | None = None,
    upload_path: str | None = None,
) -> web.Application:
    app = web.Application(client_max_size=HARD_BODY_CAP)

    async def authenticate(request: web.Request) -> Principal | web.StreamResponse | None:
        """The caller, before any byte of the body is read (protocol §12), or the refusal."""
        return await guard.principal(request) if guard is not None else None

    async def read(request: web.Request) -> bytes | web.StreamResponse:
        """The body within ``maxBodyBytes`` (decoded size) and ``bodyTimeoutMs``, or the refusal."""
        current = limits()
        limit = current.maxBodyBytes
        try:
            coding = coding_of(request.headers.getall(hdrs.CONTENT_ENCODING, []))
            length = request.content_length
            if length is not None and length > limit:
                raise BodyRejected(413, f"body exceeds {limit} bytes")
            return await read_body(request.content, limit=limit, coding=coding, timeout=current.bodyTimeoutMs / 1000)
        except BodyRejected as exc:
            if exc.status == 408 and on_body_timeout is not None:
                on_body_timeout()
            response = web.Response(status=exc.status, text=exc.reason + "\n")
            if exc.status in (400, 408):
                response.force_close()  # the rest of the stream cannot be trusted to frame a next request
            return response

    async def handle(request: web.Request) -> web.StreamResponse:
        principal = await authenticate(request)
        if isinstance(principal, web.StreamResponse):
            return principal
        if request.content_type != _JSON:
            return web.Response(status=415, text="AHP over HTTP requires Content-Type: application/json\n")
        body = await read(request)
        if isinstance(body, web.StreamResponse):
            return body
        answer = (await gateway.handle(body, request.headers, cel_principal(principal))).answer
        if answer is None:
            return web.Response(status=202)
        return web.Response(status=200, body=answer, content_type=_JSON)

    async def native(request: web.Request) -> web.StreamResponse:
        """``POST /native/<harness>``: a native HTTP hook through the same pipeline."""
        principal = await authenticate(request)
        if isinstance(principal, web.StreamResponse):
            return principal
        body = await read(request)
        if isinstance(body, web.StreamResponse):
            return body
        caller = cel_principal(principal)

        async def decide(message: bytes, headers: Mapping[str, str]) -> tuple[int, bytes | None]:
            answer = (await gateway.handle(message, headers, caller)).answer
            return (202, None) if answer is None else (200, answer)

        harness = request.match_info["harness"]
        status, payload = await handle_native(harness, body, request.headers, decide, event=request.query.get("event"))
        return web.Response(status=status, body=payload, content_type=_JSON if status == 200 else "text/plain")

    if guard is not None:
        guard.install(app, upload_path, lambda: limits().bodyTimeoutMs / 1000, on_body_timeout)
    expect = guard.expect if guard is not None else None
    app.router.add_post(path, handle, expect_handler=expect)
    app.router.add_post("/native/{harness}", native, expect_handler=expect)  # native HTTP hooks
    return app


def cel_principal(principal: Principal | None) -> Mapping[str, Any] | None:
    """The authenticated caller as the pipeline's ``principal`` (``{name, attributes}``)."""
    return principal.as_cel() if principal is not None and principal.authenticated else None
