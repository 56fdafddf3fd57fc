"""The aiohttp adapter of the harness-facing HTTP binding (AHP-HTTP-001): the routes the fast
lane hands off, and every request when it is off — ``POST <listen.path>``, ``POST /native/<harness>``
and the uploads the guard installs.

The binding rules are :mod:`gateway.binding.rules` (the fast lane applies the same ones): after
authentication, :func:`~gateway.binding.rules.judge` refuses another media type or coding (415) or a
declared length over ``maxBodyBytes`` (413) before the body is read; :func:`~gateway.server.limits.read_body`
bounds the body (decoded size, ``bodyTimeoutMs``: 408); :func:`~gateway.binding.rules.frame` frames the answer.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from aiohttp import hdrs, web

from gateway.binding.rules import (
    JSON,
    BodyRejected,
    Refuse,
    Serve,
    auth_denied_natively,
    denied_natively,
    frame,
    judge,
)
from gateway.config.models import Limits
from gateway.inbound.principal import Principal
from gateway.native.endpoint import handle_native, refused, unauthenticated
from gateway.pipeline.gateway import Handler
from gateway.server.guard import Guard
from gateway.server.limits import read_body, without_versions

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

    async def read(request: web.Request, media: str | None) -> bytes | Refuse:
        """The body, if the binding rules allow it (:func:`judge`), within ``maxBodyBytes``
        (decoded size) and ``bodyTimeoutMs``; otherwise the refusal."""
        current = limits()
        verdict = judge(
            media, request.content_length, request.headers.getall(hdrs.CONTENT_ENCODING, []), current.maxBodyBytes
        )
        if isinstance(verdict, Serve):
            try:
                return await read_body(
                    request.content, limit=verdict.limit, coding=verdict.coding, timeout=current.bodyTimeoutMs / 1000
                )
            except BodyRejected as exc:
                if exc.status == 408 and on_body_timeout is not None:
                    on_body_timeout()
                verdict = exc.refusal()
        return verdict

    def refusal(verdict: Refuse, status: int | None = None, body: bytes | None = None) -> web.Response:
        if status is None:
            response = web.Response(status=verdict.status, text=verdict.body.decode())
        else:
            response = web.Response(status=status, body=body, content_type=JSON if status == 200 else "text/plain")
        if verdict.close:
            response.force_close()  # the rest of the stream cannot be trusted to frame a next request
        return response

    async def evaluate(body: bytes, headers: Mapping[str, str], principal: Principal | None) -> bytes | None:
        """The one call of the pipeline on this binding."""
        return (await gateway.handle(body, headers, cel_principal(principal))).answer

    async def handle(request: web.Request) -> web.StreamResponse:
        principal = await authenticate(request)
        if isinstance(principal, web.StreamResponse):
            return principal
        body = await read(request, request.content_type)
        if isinstance(body, Refuse):
            return refusal(body)
        status, content_type, payload = frame(await evaluate(body, request.headers, principal))
        if content_type is None:
            return web.Response(status=status)
        return web.Response(status=status, body=payload, content_type=content_type)

    async def native(request: web.Request) -> web.StreamResponse:
        """``POST /native/<harness>``: a native HTTP hook through the same pipeline (JSON only; a
        body refused on size or shape gets the harness's own denial, :func:`denied_natively`)."""
        principal = await authenticate(request)
        harness, event = request.match_info["harness"], request.query.get("event")
        if isinstance(principal, web.StreamResponse):
            return native_unauthenticated(principal, harness, event)
        body = await read(request, request.content_type)
        if isinstance(body, Refuse):
            if not denied_natively(body):
                return refusal(body)
            return refusal(body, *refused(harness, event, body.body.decode().strip()))

        async def decide(message: bytes, headers: Mapping[str, str]) -> tuple[int, bytes | None]:
            status, _, payload = frame(await evaluate(message, headers, principal))
            return status, payload if status == 200 else None

        status, payload = await handle_native(harness, body, request.headers, decide, event=event)
        return web.Response(status=status, body=payload, content_type=JSON if status == 200 else "text/plain")

    if guard is not None:
        guard.install(app, upload_path, lambda: limits().bodyTimeoutMs / 1000, on_body_timeout)
    expect = guard.expect if guard is not None else None
    native_expect = None
    if expect is not None:

        async def native_expect(request: web.Request) -> web.StreamResponse | None:
            """``Expect: 100-continue`` refused by authentication: the harness's denial too."""
            assert expect is not None
            outcome = await expect(request)
            if outcome is None or outcome.status not in (401, 403):
                return outcome
            return native_unauthenticated(outcome, request.match_info["harness"], request.query.get("event"))

    app.router.add_post(path, handle, expect_handler=expect)
    app.router.add_post("/native/{harness}", native, expect_handler=native_expect)  # native HTTP hooks
    return without_versions(app)


def native_unauthenticated(refusal: web.StreamResponse, harness: str, event: str | None) -> web.StreamResponse:
    """A 401/403 on ``/native/<harness>``: the harness's own denial in a 200 with the challenge
    (:func:`~gateway.binding.rules.auth_denied_natively`)."""
    denial = unauthenticated(harness, event, refusal.status) if auth_denied_natively(refusal.status) else None
    if denial is None:
        return refusal
    challenge = refusal.headers.get("WWW-Authenticate")
    headers = {"WWW-Authenticate": challenge} if challenge else None
    return web.Response(status=denial[0], body=denial[1], content_type=JSON, headers=headers)


def cel_principal(principal: Principal | None) -> Mapping[str, Any] | None:
    """The authenticated caller as the pipeline's ``principal`` (``{name, attributes}``)."""
    return principal.as_cel() if principal is not None and principal.authenticated else None
