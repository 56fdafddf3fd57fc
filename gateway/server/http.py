"""The harness-facing HTTP binding (AHP-HTTP-001): POST, ``application/json``, one object per body.

The handler is thin: bound the body, hand the bytes to the pipeline, frame the answer — HTTP 200
with the JSON-RPC response (errors included), 202 with no body for a notification. Oversized
bodies get 413 without being read in full; other media types 415. A gzip/deflate body is decoded
with the limit on its decoded size (other encodings 415, a body that does not decode 400); a body
that does not arrive within ``limits.bodyTimeoutMs`` gets 408 (see :mod:`gateway.server.limits`).
"""

from __future__ import annotations

from collections.abc import Callable

from aiohttp import hdrs, web

from gateway.config.models import Limits
from gateway.pipeline.gateway import Gateway
from gateway.server.limits import BodyRejected, coding_of, read_body

_JSON = "application/json"
HARD_BODY_CAP = 64 * 1024 * 1024


def build_app(
    gateway: Gateway, path: str, limits: Callable[[], Limits], on_body_timeout: Callable[[], None] | None = None
) -> web.Application:
    app = web.Application(client_max_size=HARD_BODY_CAP)

    async def handle(request: web.Request) -> web.StreamResponse:
        if request.content_type != _JSON:
            return web.Response(status=415, text="AHP over HTTP requires Content-Type: application/json\n")
        current = limits()
        limit = current.maxBodyBytes
        try:
            coding = coding_of(request.headers.getall(hdrs.CONTENT_ENCODING, []))
            length = request.content_length
            if length is not None and length > limit:
                raise BodyRejected(413, f"body exceeds {limit} bytes")
            body = await read_body(request.content, limit=limit, coding=coding, timeout=current.bodyTimeoutMs / 1000)
        except BodyRejected as exc:
            if exc.status == 408 and on_body_timeout is not None:
                on_body_timeout()
            response = web.Response(status=exc.status, text=exc.reason + "\n")
            if exc.status in (400, 408):
                response.force_close()  # the rest of the stream cannot be trusted to frame a next request
            return response
        answer = await gateway.handle(body, request.headers)
        if answer is None:
            return web.Response(status=202)
        return web.Response(status=200, body=answer, content_type=_JSON)

    app.router.add_post(path, handle)
    return app
