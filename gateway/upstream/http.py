"""AHP over HTTP toward one upstream (AHP-HTTP-001): POST one JSON object, no redirects, bounded
answers, over the process's pooled keep-alive HTTP/1.1 client (:mod:`gateway.upstream.h1`)."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Mapping
from typing import Any, Protocol

import aiohttp

from gateway.credentials.bearer import CredentialUnavailable
from gateway.protocol import wire
from gateway.settle.reply import Failure, FailureClass, Reply
from gateway.upstream.base import Call
from gateway.upstream.h1 import AnswerTooLarge, H1Client, ProtocolError, Response, Target, header_block

_JSON = "application/json"
DELIVERED = frozenset({202, 204})
"""The only answers that confirm an observe delivery (AHP HTTP binding: 202 or 204, no body)."""


class Authorizer(Protocol):
    async def authorization(self) -> str | None: ...


class ClientPool:
    """The process-wide upstream clients, created inside the running loop and closed once: the
    lean HTTP/1.1 client of intercepts and observe deliveries (:mod:`gateway.upstream.h1`), and
    an aiohttp session for everything off the hot path (credential discovery, token requests,
    upload forwarding)."""

    def __init__(self, *, limit_per_host: int = 256, keepalive: float = 30.0) -> None:
        self._limit = limit_per_host
        self._keepalive = keepalive
        self._session: aiohttp.ClientSession | None = None
        self._h1: H1Client | None = None

    @property
    def h1(self) -> H1Client:
        if self._h1 is None:
            self._h1 = H1Client(limit_per_host=self._limit, keepalive=self._keepalive)
        return self._h1

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            connector = aiohttp.TCPConnector(
                limit=0,
                limit_per_host=self._limit,
                keepalive_timeout=self._keepalive,
                ttl_dns_cache=60,
                enable_cleanup_closed=True,
            )
            self._session = aiohttp.ClientSession(
                connector=connector,
                auto_decompress=False,
                skip_auto_headers=("User-Agent", "Accept-Encoding"),
                json_serialize=lambda v: wire.dumps(v).decode(),
            )
        return self._session

    async def aclose(self) -> None:
        if self._h1 is not None:
            self._h1.close()
            self._h1 = None
        if self._session is not None and not self._session.closed:
            await self._session.close()


class HttpUpstream:
    kind = "http"
    policy = None

    def __init__(
        self,
        *,
        url: str,
        pool: ClientPool,
        static_headers: Mapping[str, str],
        authorizer: Authorizer | None,
        max_response_bytes: int,
        ca_file: str | None = None,
    ) -> None:
        self.url = url
        self._pool = pool
        self._authorizer = authorizer
        self._max = max_response_bytes
        context = ssl.create_default_context(cafile=ca_file) if ca_file else None  # replaces the trust store
        self._target = Target(url, {**static_headers, "Content-Type": _JSON, "Accept": _JSON}, context)

    def unresolved(self) -> str | None:
        """Why this upstream's configured credential cannot be resolved now, or None."""
        check = getattr(self._authorizer, "unresolved", None)
        return check() if check is not None else None

    @staticmethod
    async def _headers_for(extra: Mapping[str, str] | None, authorizer: Authorizer) -> bytes:
        """The per-call header lines: trace context and the current credential."""
        headers = dict(extra) if extra else {}
        value = await authorizer.authorization()
        if value:  # None: no credential yet (RFC 9728 discovery happens on a 401)
            headers["Authorization"] = value
        return header_block(headers)

    async def intercept(self, call: Call) -> Reply | Failure:
        outcome = await self._post(call.request, call.timeout, call.headers, answer=True)
        return outcome if isinstance(outcome, Failure) else Reply(outcome)

    async def observe(
        self, message: dict[str, Any], timeout: float, headers: Mapping[str, str] | None = None
    ) -> Failure | None:
        outcome = await self._post(message, timeout, headers, answer=False)
        return outcome if isinstance(outcome, Failure) else None

    async def _post(
        self,
        message: dict[str, Any],
        timeout: float,
        headers: Mapping[str, str] | None,
        *,
        answer: bool,
        retried: bool = False,
    ) -> bytes | Failure:
        """POST one JSON-RPC object. ``answer``: a request (200 and a bounded body expected);
        otherwise a notification: only 202/204 confirm it, and its answer body is never read
        (an observer cannot make the gateway buffer anything)."""
        try:
            if self._authorizer is None:  # nothing to await but the exchange: h1's deadline timer bounds it
                response = await self._pool.h1.post(
                    self._target,
                    header_block(headers) if headers else b"",
                    wire.dumps(message),
                    limit=self._max,
                    want_body=answer,
                    deadline=asyncio.get_running_loop().time() + timeout,
                )
            else:
                async with asyncio.timeout(timeout):  # a credential may need a token request first
                    sent = await self._headers_for(headers, self._authorizer)
                    response = await self._pool.h1.post(
                        self._target, sent, wire.dumps(message), limit=self._max, want_body=answer
                    )
                    if response.status == 401 and not retried and await self._rediscover(response):
                        return await self._post(message, timeout, headers, answer=answer, retried=True)
            status = response.status
            if not answer:
                return b"" if status in DELIVERED else self._status_failure(status)
            if status != 200 or response.body is None:
                return self._status_failure(status)
            return response.body
        except CredentialUnavailable as exc:
            return Failure(FailureClass.AUTH, str(exc))
        except TimeoutError:
            return Failure(FailureClass.TIMEOUT, f"no answer within {timeout * 1000:.0f} ms")
        except AnswerTooLarge as exc:
            return Failure(FailureClass.TOO_LARGE, str(exc))
        except ProtocolError as exc:
            return Failure(FailureClass.INVALID_RESPONSE, str(exc))
        except OSError as exc:
            return Failure(FailureClass.CONNECT, exc.__class__.__name__)
        except ValueError as exc:  # a per-call header that would inject a line (never echoed)
            return Failure(FailureClass.INTERNAL, str(exc))

    async def _rediscover(self, response: Response) -> bool:
        """Discovered credentials (gateway.credentials.discovery) get one retry after a 401."""
        retry = getattr(self._authorizer, "on_unauthorized", None)
        if retry is None:
            return False
        return bool(await retry(response.headers.get("www-authenticate")))

    def _status_failure(self, status: int) -> Failure:
        if status in (401, 403):
            invalidate = getattr(self._authorizer, "invalidate", None)
            if status == 401 and invalidate is not None:
                invalidate()  # a rejected cached token must not be reused
            return Failure(FailureClass.AUTH, f"HTTP {status}")
        return Failure(FailureClass.HTTP_STATUS, f"HTTP {status}")

    async def aclose(self) -> None:
        """The session belongs to the pool, not to this upstream."""
