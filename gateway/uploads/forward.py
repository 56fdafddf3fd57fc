"""Per-upstream re-upload (protocol §13.2, gateway consequence): a ref the harness got from the
gateway's receiver means nothing to an upstream, so before an intercept chain starts, the bytes
behind every attachment an upstream may see are uploaded to that upstream's own
``upload.endpoint`` with that upstream's own ``upload.auth`` (an absent binding sends no
credential; event credentials are never inherited), its own ``timeoutMs`` and ``maxBytes``.

Only a ``201`` whose JSON receipt names the exact size and SHA-256 sent confirms an upload; the
returned ref replaces the harness's ref in the event sent to that upstream only. Anything else
(no ``upload``, too large, timeout, credential failure, 202, a wrong receipt) leaves that
attachment a schema-valid ``gap`` for that upstream; bytes are never inlined. All uploads for an
event run concurrently and within the intercept deadline. A confirmed ref is reused only for the
same bytes, receiver endpoint and credential source, for ``uploads.reuseSeconds`` after it was
confirmed (the receiver's retention is its own and unknown: there is no expiry protocol), and
never after that upstream answered an event carrying it with 404, the status an event receiver
may give for referenced content it no longer has: the next delivery re-uploads the bytes.

Memory stays bounded however many events refer to the same attachments: a spooled upload is
streamed from its file (never read whole), concurrent events share one transfer per (bytes,
receiver, credential), and the bytes of the transfers in flight are capped at
:data:`IN_FLIGHT_BYTES` (a transfer waits for room, within its timeout).
"""

from __future__ import annotations

import asyncio
import os
import re
import ssl
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import aiohttp
import orjson

from gateway import tasks
from gateway.bounded import read_bounded
from gateway.config.load import LoadedConfig
from gateway.config.models import GatewayBackend, UploadBinding
from gateway.credentials.bearer import BearerToken, CredentialUnavailable
from gateway.credentials.discovery import discovered_authorizer
from gateway.credentials.oauth import ClientCredentials
from gateway.protocol.content import attachment_bodies
from gateway.settle.reply import Failure, FailureClass
from gateway.uploads.store import Stored, UploadStore

if TYPE_CHECKING:
    from gateway.uploads.redis_store import RedisUploadStore

DIGEST_HEADER = "AHP-Content-SHA256"
MAX_RECEIPT = 64 * 1024
REUSE_ENTRIES = 4096
CHUNK = 64 * 1024
"""Bytes read from a spool file at a time."""
IN_FLIGHT_BYTES = 64 * 1024 * 1024
"""The sizes of the transfers in progress, summed, stay within this (one larger transfer may run
alone): a receiver that never answers cannot make the gateway hold more."""
SHA256_HEX = re.compile(r"[0-9a-f]{64}")
OnOutcome = Callable[[str, str], None]


@dataclass(frozen=True, slots=True)
class UploadTarget:
    hook_id: str
    endpoint: str
    timeout: float
    max_bytes: int
    authorizer: Any
    """BearerToken / ClientCredentials, or None: no credential is sent."""
    credential_id: str
    """Where the credential comes from (never the secret): part of the reuse key."""
    ssl: ssl.SSLContext | bool


class Forwarder:
    """One per process: the store of received uploads, the client session for re-uploads, the
    reuse cache of confirmed refs, and the per-snapshot upload targets."""

    def __init__(
        self,
        store: UploadStore | RedisUploadStore,
        on_outcome: OnOutcome | None = None,
        *,
        reuse_seconds: float = 300.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.store = store
        self._on_outcome = on_outcome or (lambda hook, outcome: None)
        self._session: aiohttp.ClientSession | None = None
        self._confirmed: OrderedDict[tuple[str, int, str, str], tuple[str, float]] = OrderedDict()
        """Reuse key → (the upstream's ref, when it was confirmed)."""
        self._reuse_seconds = reuse_seconds
        self._clock = clock
        self._targets: dict[int, tuple[Any, dict[str, UploadTarget]]] = {}
        self._transfers: dict[tuple[str, int, str, str], asyncio.Task[str]] = {}
        """One transfer in progress per reuse key, shared by every event that needs it."""
        self.in_flight_bytes = 0
        """Sizes of the transfers in progress, summed (bounded by :data:`IN_FLIGHT_BYTES`)."""
        self._room: asyncio.Condition | None = None

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(auto_decompress=False, skip_auto_headers=("User-Agent",))
        return self._session

    async def aclose(self) -> None:
        for task in list(self._transfers.values()):
            task.cancel()
        if self._session is not None:
            await self._session.close()

    # ------------------------------------------------------------------ targets
    def targets(self, loaded: LoadedConfig) -> dict[str, UploadTarget]:
        """Upload targets by route key (``<hook id>#<subscription index>``), built once per
        configuration snapshot."""
        cached = self._targets.get(id(loaded))
        if cached is not None and cached[0] is loaded:
            return cached[1]
        out: dict[str, UploadTarget] = {}
        for hook in loaded.hooks:
            ca = hook.caFile if isinstance(hook, GatewayBackend) else None
            ca_path = str(Path(os.path.abspath(loaded.base_dir / ca))) if ca else None
            for index, sub in enumerate(hook.subscriptions):
                if sub.upload is not None:
                    out[f"{hook.id}#{index}"] = self._target(hook.id, sub.upload, loaded, ca_path)
        self._targets = {id(loaded): (loaded, out)}  # the previous snapshot's cache is dropped
        return out

    def _target(self, hook_id: str, upload: UploadBinding, loaded: LoadedConfig, ca: str | None) -> UploadTarget:
        base = loaded.base_dir
        auth = upload.auth
        # absent upload.auth: no credential, RFC 9728 discovery on a 401 (never the event binding)
        authorizer: Any = discovered_authorizer(upload.endpoint, loaded, self, ca) if auth is None else None
        credential = "none" if authorizer is None else "discovered"
        if auth is not None and auth.type == "bearer":
            authorizer = BearerToken.from_config(auth.tokenEnv, auth.tokenRef, base)
            credential = "bearer:" + authorizer.describe()
        elif auth is not None and auth.type == "oauth":
            authorizer = ClientCredentials.from_config(auth, base, self, ca)
            credential = f"oauth:{auth.issuer}:{auth.clientId}:{auth.resource}"
        context: ssl.SSLContext | bool = ssl.create_default_context(cafile=ca) if ca else True
        return UploadTarget(
            hook_id, upload.endpoint, upload.timeoutMs / 1000, upload.maxBytes, authorizer, credential, context
        )

    # ------------------------------------------------------------------ one upload
    async def _send(self, target: UploadTarget, stored: Stored, budget: float) -> str:
        """The upstream's confirmed ref, or raise _Failed(outcome)."""
        if stored.size > target.max_bytes:
            raise _Failed("too_large")
        key = (stored.sha256, stored.size, target.endpoint, target.credential_id)
        reused = self._confirmed.get(key)
        if reused is not None:
            if self._clock() - reused[1] < self._reuse_seconds:
                self._confirmed.move_to_end(key)
                raise _Reused(reused[0])
            del self._confirmed[key]  # the receiver may have let it go: upload the bytes again
        if budget <= 0:
            raise _Failed("timeout")
        task = self._transfers.get(key)
        if task is None:
            task = asyncio.ensure_future(self._transfer(key, target, stored))
            self._transfers[key] = task
            task.add_done_callback(lambda done: self._finished(key, done))
        try:  # this event stops waiting at its own budget; the shared transfer goes on for the others
            return await asyncio.wait_for(asyncio.shield(task), min(budget, target.timeout))
        except TimeoutError:
            raise _Failed("timeout") from None

    def _finished(self, key: tuple[str, int, str, str], task: asyncio.Task[str]) -> None:
        if self._transfers.get(key) is task:
            del self._transfers[key]
        if not task.cancelled():
            task.exception()  # retrieved: a transfer nobody waits for any more is not an error

    async def _transfer(self, key: tuple[str, int, str, str], target: UploadTarget, stored: Stored) -> str:
        """One upload to one receiver, within the receiver's timeout (waiting for room included)."""
        try:
            async with asyncio.timeout(target.timeout):
                await self._reserve(stored.size)
                try:
                    body = await self._post(target, stored, retried=False)
                finally:
                    self._release(stored.size)
        except CredentialUnavailable:
            raise _Failed("auth") from None
        except TimeoutError:
            raise _Failed("timeout") from None
        except (aiohttp.ClientError, OSError):
            raise _Failed("unavailable") from None
        ref = _receipt_ref(body, stored)
        if ref is None:
            raise _Failed("receipt")
        self._confirmed[key] = (ref, self._clock())
        while len(self._confirmed) > REUSE_ENTRIES:
            self._confirmed.popitem(last=False)
        return ref

    async def _reserve(self, size: int) -> None:
        if self._room is None:
            self._room = asyncio.Condition()
        async with self._room:
            await self._room.wait_for(
                lambda: not self.in_flight_bytes or self.in_flight_bytes + size <= IN_FLIGHT_BYTES
            )
            self.in_flight_bytes += size

    def _release(self, size: int) -> None:
        self.in_flight_bytes -= size
        room = self._room
        if room is not None:
            tasks.spawn(_notify(room), name="upload-room")

    async def _post(self, target: UploadTarget, stored: Stored, *, retried: bool) -> bytes | None:
        headers = {"Content-Type": "application/octet-stream", DIGEST_HEADER: stored.sha256}
        # an exact Content-Length, so a streamed body is not sent chunked (protocol §13.2)
        headers["Content-Length"] = str(stored.size)
        data: bytes | AsyncIterator[bytes] = stored.data if stored.data is not None else _stream(stored)
        if target.authorizer is not None:
            value = await target.authorizer.authorization()
            if value:  # None: a discovered binding before its first 401
                headers["Authorization"] = value
        async with self.session.post(
            target.endpoint, data=data, headers=headers, allow_redirects=False, ssl=target.ssl
        ) as response:
            if response.status == 401 and not retried and hasattr(target.authorizer, "on_unauthorized"):
                challenge = response.headers.get("WWW-Authenticate")
                response.release()
                if await target.authorizer.on_unauthorized(challenge):
                    return await self._post(target, stored, retried=True)
            if response.status in (401, 403):
                if response.status == 401 and hasattr(target.authorizer, "invalidate"):
                    target.authorizer.invalidate()
                raise _Failed("auth")
            if response.status != 201 or response.content_type != "application/json":
                raise _Failed("status")  # 202/204 are not a confirmation
            return await read_bounded(response.content, MAX_RECEIPT)

    async def _one(self, target: UploadTarget, stored: Stored, budget: float) -> str | None:
        try:
            ref = await self._send(target, stored, budget)
        except _Reused as hit:
            self._on_outcome(target.hook_id, "reused")
            return hit.ref
        except _Failed as failure:
            self._on_outcome(target.hook_id, failure.outcome)
            return None
        self._on_outcome(target.hook_id, "ok")
        return ref

    def forget(self, loaded: LoadedConfig, route_key: str, refs: Mapping[str, Mapping[str, Any]]) -> None:
        """The upstream of ``route_key`` reported content it was sent as unknown: its refs in
        ``refs`` (what :meth:`prepare` gave that route) are not reused again."""
        target = self.targets(loaded).get(route_key)
        if target is None or not refs:
            return
        sent = {str(descriptor.get("ref")) for descriptor in refs.values()}
        for key, (ref, _) in list(self._confirmed.items()):
            if ref in sent and key[2] == target.endpoint and key[3] == target.credential_id:
                del self._confirmed[key]

    # ------------------------------------------------------------------ one event
    async def prepare(
        self,
        loaded: LoadedConfig,
        slots: Mapping[str, tuple[tuple[str, ...], ...]],
        event: dict[str, Any],
        routes: Iterable[Any],
        owner: str,
        deadline: float,
    ) -> dict[str, dict[str, dict[str, Any]]]:
        """Per route key: harness ref -> that upstream's content reference. Routes left out get
        gaps for every attachment."""
        targets = self.targets(loaded)
        loop = asyncio.get_running_loop()
        jobs: dict[tuple[str, str, str], asyncio.Future[str | None]] = {}
        wanted: list[tuple[str, dict[str, Any], tuple[str, str, str], Stored]] = []
        fetched: dict[str, Stored | None] = {}
        for route in routes:
            parts = attachment_bodies(event, slots, route.selection)
            if not parts:
                continue
            target = targets.get(route.key)
            for part in parts:
                body = part["body"]
                ref = str(body.get("ref"))
                if ref not in fetched:  # one read per ref and event (Redis storage: one round trip)
                    fetched[ref] = await self.store.fetch(ref, owner, deadline)
                stored = fetched[ref]
                if stored is None or body.get("size", stored.size) != stored.size:
                    continue  # unknown, expired, another principal's, or a descriptor that lies: gap
                if body.get("sha256", stored.sha256) != stored.sha256:
                    continue
                if target is None:
                    self._on_outcome(route.hook_id, "not_configured")
                    continue
                job = (target.endpoint, target.credential_id, stored.ref)
                if job not in jobs:
                    jobs[job] = asyncio.ensure_future(self._one(target, stored, deadline - loop.time()))
                wanted.append((route.key, body, job, stored))
        if not jobs:
            return {}
        try:
            await asyncio.gather(*jobs.values())
        finally:
            for future in jobs.values():
                future.cancel()
        out: dict[str, dict[str, dict[str, Any]]] = {}
        for key, body, job, stored in wanted:
            confirmed = jobs[job].result()
            if confirmed is not None:  # same descriptor shape as the harness sent, the upstream's ref
                out.setdefault(key, {})[stored.ref] = {**body, "ref": confirmed}
        return out


async def _notify(room: asyncio.Condition) -> None:
    async with room:
        room.notify_all()


async def _stream(stored: Stored) -> AsyncIterator[bytes]:
    """A spooled upload, :data:`CHUNK` bytes at a time (read off the event loop)."""
    assert stored.path is not None
    handle = await asyncio.to_thread(stored.path.open, "rb")
    try:
        left = stored.size
        while left > 0:
            chunk = await asyncio.to_thread(handle.read, min(CHUNK, left))
            if not chunk:
                raise OSError("spooled upload shorter than stored")
            left -= len(chunk)
            yield chunk
    finally:
        handle.close()


def reports_unknown(failure: Failure) -> bool:
    """An event receiver's 404: it may answer so for referenced content it does not have
    (protocol §13.2), so the refs it was sent are not to be trusted again."""
    return failure.kind is FailureClass.HTTP_STATUS and failure.detail == "HTTP 404"


class _Failed(Exception):
    def __init__(self, outcome: str) -> None:
        self.outcome = outcome


class _Reused(Exception):
    def __init__(self, ref: str) -> None:
        self.ref = ref


def _receipt_ref(body: bytes | None, stored: Stored) -> str | None:
    """The receipt's ref when it is exactly ``{ref, size, sha256}`` for the bytes sent (``body``
    None: longer than :data:`MAX_RECEIPT`)."""
    if body is None:
        return None
    try:
        receipt = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(receipt, dict) or set(receipt) != {"ref", "size", "sha256"}:
        return None
    ref, size, digest = receipt["ref"], receipt["size"], receipt["sha256"]
    if not isinstance(ref, str) or not ref or type(size) is not int or size != stored.size:
        return None
    if not isinstance(digest, str) or not SHA256_HEX.fullmatch(digest) or digest != stored.sha256:
        return None
    return ref
