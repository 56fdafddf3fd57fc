"""aiohttp glue for inbound authentication and the upload receiver.

Every harness request and upload is authenticated from its headers and TLS peer before a byte
of the body is read (an ``Expect: 100-continue`` client is refused before it sends the body).
The upload endpoint implements protocol §13.2 as a receiver: ``POST`` raw octets with an exact
``Content-Length`` and ``AHP-Content-SHA256``; ``201`` with ``{ref, size, sha256}``.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Callable
from typing import Any

from aiohttp import web

from gateway.binding.rules import body_timeout_reason
from gateway.inbound.gate import Gate, Peer
from gateway.inbound.oauth import WELL_KNOWN, metadata_path, resource_document
from gateway.inbound.principal import Principal, Refusal
from gateway.uploads.store import DigestMismatch, IncompleteBody, StoreFull, StoreUnavailable, UploadStore

log = logging.getLogger("ahp_gateway")
SHA256_HEX = re.compile(r"[0-9a-f]{64}")
DIGEST_HEADER = "AHP-Content-SHA256"
_KEY: web.RequestKey[Principal | Refusal] = web.RequestKey("ahp_gateway.principal", object)  # type: ignore[arg-type]
_OCTETS = "application/octet-stream"


def peer_of(request: web.Request, gate: Gate) -> Peer:
    return transport_peer(request.transport, gate)


def transport_peer(transport: Any, gate: Gate) -> Peer:
    """The caller's address and, with mutual TLS, its verified certificate."""
    if transport is None:
        return Peer(None)
    peername = transport.get_extra_info("peername")
    host = peername[0] if isinstance(peername, tuple) and peername else None
    certificate = None
    if gate.tls is not None and gate.tls.mutual:
        ssl_object = transport.get_extra_info("ssl_object")
        if ssl_object is not None:
            certificate = ssl_object.getpeercert() or None  # verified in the handshake (CERT_REQUIRED)
    return Peer(host, certificate)


def refusal_text(refusal: Refusal) -> str:
    """The body of a 401 or 403 (the same on every binding; never the reason)."""
    return "unauthorized\n" if refusal.status == 401 else "forbidden\n"


def refusal_response(refusal: Refusal) -> web.Response:
    headers = {"WWW-Authenticate": refusal.challenge} if refusal.challenge else {}
    return web.Response(status=refusal.status, text=refusal_text(refusal), headers=headers)


class Guard:
    """The inbound gate and the upload receiver route. The upload ``store`` is the assembly's
    (:mod:`gateway.assemble`, which also closes it): the pipeline's forwarder reads what this
    route writes."""

    def __init__(
        self,
        gate: Gate,
        store: UploadStore | Any = None,
        max_upload: int = 0,
        count_upload: Callable[[str], None] | None = None,
    ) -> None:
        self.gate = gate
        self.store = store
        self.max_upload = max_upload
        self._count = count_upload or (lambda outcome: None)
        self._body_timeout: Callable[[], float] = lambda: 30.0
        self._on_body_timeout: Callable[[], None] | None = None

    async def principal(self, request: web.Request) -> Principal | web.Response:
        """The caller, authenticated once per request (the expect handler may have done it)."""
        found = request.get(_KEY)
        if found is None:
            found = await self.gate.authenticate(request.headers, peer_of(request, self.gate))
            request[_KEY] = found
        return refusal_response(found) if isinstance(found, Refusal) else found

    async def expect(self, request: web.Request) -> web.StreamResponse | None:
        """``Expect: 100-continue``: refuse before the client sends the body."""
        outcome = await self.principal(request)
        if isinstance(outcome, web.StreamResponse):
            if request.path == getattr(self, "upload_path", None):
                self._count("unauthorized")  # as the upload handler counts it without Expect
            return outcome
        if request.path == getattr(self, "upload_path", None):
            early = self._framing(request)
            if early is not None:
                return early
        expect = request.headers.get("Expect", "")
        if expect.lower() != "100-continue":
            raise web.HTTPExpectationFailed(text="unknown Expect\n")
        await request.writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        request.writer.output_size = 0
        return None

    @property
    def ssl_context(self) -> Any:
        return self.gate.tls.context if self.gate.tls is not None else None

    async def aclose(self) -> None:
        await self.gate.aclose()

    def install(
        self,
        app: web.Application,
        upload_path: str | None,
        body_timeout: Callable[[], float] | None = None,
        on_body_timeout: Callable[[], None] | None = None,
    ) -> None:
        """The OAuth metadata routes and the upload route; an upload body must arrive within
        ``body_timeout()`` seconds (the live ``limits.bodyTimeoutMs``), like a hook request's."""
        if body_timeout is not None:
            self._body_timeout = body_timeout
        self._on_body_timeout = on_body_timeout
        oauth = self.gate.oauth_config
        if oauth is not None:
            document = resource_document(oauth)

            async def metadata(request: web.Request) -> web.Response:
                return web.json_response(document, headers={"Cache-Control": "max-age=300"})

            for path in sorted({WELL_KNOWN, metadata_path(oauth.audience)}):
                app.router.add_get(path, metadata)
        if upload_path is not None and self.store is not None:
            self.upload_path = upload_path
            app.router.add_post(upload_path, self.upload, expect_handler=self.expect)

    # ------------------------------------------------------------------ uploads
    def _framing(self, request: web.Request) -> web.Response | None:
        """Checks on headers alone: 400 framing, 413 too large (before the body is read)."""

        def bad(reason: str) -> web.Response:
            self._count("bad_request")
            return web.Response(status=400, text=reason + "\n")

        if request.headers.get("Transfer-Encoding") is not None:
            return bad("chunked or encoded transfer is not allowed; send an exact Content-Length")
        if request.headers.get("Content-Encoding", "identity").lower() != "identity":
            return bad("compressed uploads are not allowed")
        if request.content_type != _OCTETS:
            return bad("Content-Type must be application/octet-stream")
        if request.content_length is None:
            return bad("Content-Length is required")
        digests = request.headers.getall(DIGEST_HEADER, [])
        if len(digests) != 1 or not SHA256_HEX.fullmatch(digests[0]):
            return bad(f"{DIGEST_HEADER} must be one lowercase hex SHA-256 digest")
        if request.content_length > self.max_upload:
            self._count("too_large")
            return web.Response(status=413, text=f"upload exceeds {self.max_upload} bytes\n")
        return None

    async def upload(self, request: web.Request) -> web.StreamResponse:
        principal = await self.principal(request)
        if isinstance(principal, web.StreamResponse):
            self._count("unauthorized")
            return principal
        early = self._framing(request)
        if early is not None:
            return early
        assert self.store is not None and request.content_length is not None
        size, digest = request.content_length, request.headers[DIGEST_HEADER]
        timeout = self._body_timeout()
        try:
            async with asyncio.timeout(timeout):  # a body that never comes must not hold its reservation
                stored = await self.store.receive(_bounded(request, self.max_upload), size, digest, principal.scope_key)
        except TimeoutError:
            self._count("timeout")
            if self._on_body_timeout is not None:
                self._on_body_timeout()
            response = web.Response(status=408, text=body_timeout_reason(timeout) + "\n")
            response.force_close()  # the rest of the body cannot frame a next request
            return response
        except StoreFull:
            self._count("storage_full")
            return web.Response(status=503, text="upload storage is full\n", headers={"Retry-After": "5"})
        except StoreUnavailable:  # state.redis down: refused, never kept elsewhere (docs/operations/uploads.md)
            self._count("storage_unavailable")
            response = web.Response(status=503, text="upload storage is unavailable\n", headers={"Retry-After": "1"})
            response.force_close()  # the body may not have been read
            return response
        except _TooLarge:
            self._count("too_large")
            return web.Response(status=413, text=f"upload exceeds {self.max_upload} bytes\n")
        except IncompleteBody as exc:
            self._count("bad_request")
            return web.Response(status=400, text=f"{exc}\n")
        except DigestMismatch:
            self._count("hash_mismatch")
            return web.Response(status=400, text=f"{DIGEST_HEADER} does not match the body\n")
        self._count("stored")
        return web.json_response({"ref": stored.ref, "size": stored.size, "sha256": stored.sha256}, status=201)


class _TooLarge(Exception):
    pass


async def _bounded(request: web.Request, limit: int) -> Any:
    """The body's chunks; more than ``limit`` bytes raises at once (never truncated)."""
    seen = 0
    async for chunk in request.content.iter_chunked(65536):
        seen += len(chunk)
        if seen > limit:
            raise _TooLarge
        yield chunk


def build_guard(cfg: Any, base: Any, host: str, metrics: Any | None, store: UploadStore | Any = None) -> Guard:
    """The guard for one server: refuses an unauthenticated listener off loopback (a config
    error), counts refusals and uploads, and logs how callers are authenticated. ``store``: the
    assembly's upload store, served by the receiver route when ``uploads`` is configured."""
    from gateway.config.issues import ConfigError, Issue
    from gateway.inbound.gate import describe, unauthenticated_exposure
    from gateway.inbound.principal import REASONS

    problem = unauthenticated_exposure(cfg, host)
    if problem is not None:
        raise ConfigError([Issue("inbound", "$.inbound.auth", problem)])
    on_refusal = None
    count = None
    if metrics is not None:
        for reason in REASONS:
            metrics.child(metrics.auth_failures, reason)

        def on_refusal(reason: str) -> None:
            metrics.child(metrics.auth_failures, reason).inc()

        def count(outcome: str) -> None:
            metrics.child(metrics.uploads, outcome).inc()

    from gateway.inbound.bearer import TokenFileError

    try:
        gate = Gate(cfg, base, on_refusal=on_refusal)
    except TokenFileError as exc:  # a broken tokens file at start: a clean error, never a traceback
        raise ConfigError([Issue("inbound", "$.inbound.auth.tokensFile", str(exc))]) from None
    limit = cfg.uploads.maxBytes if cfg.uploads is not None else 0
    line = describe(cfg)
    (log.warning if "UNAUTHENTICATED" in line else log.info)("%s", line)
    return Guard(gate, store if cfg.uploads is not None else None, limit, count)
