"""Uploads held in ``state.redis`` (``uploads.storage.type: redis``): a ref received by any worker
or replica is usable through every other, by the principal that uploaded it only (protocol §12:
a ref alone never grants access).

Per upload one hash (owner, size, digest, bytes) that expires with ``ttlSeconds``. The total cap
and the upload count are kept in Redis and changed only by Lua scripts, so replicas racing for
the last bytes can never exceed ``totalBytes``: the room for an upload is reserved atomically
before its first byte is read (as the memory store does), the bytes are written with a check that
the reservation still stands, and a failed or abandoned upload gives its room back. Expired
uploads leave the accounting on the next reservation (and their bytes leave Redis by TTL).

Redis failing is never hidden: a reservation or write that cannot reach Redis raises
:class:`~gateway.uploads.store.StoreUnavailable` (the receiver answers 503 with ``Retry-After``;
nothing is kept elsewhere), and a ref that cannot be read is a gap.
"""

from __future__ import annotations

import asyncio
import hashlib
import secrets
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

from gateway.config.models import UploadStorage
from gateway.state import Script, StateUnavailable
from gateway.state.redis import RedisStore
from gateway.uploads.store import (
    ENTRY_BYTES,
    MIN_ENTRIES,
    DigestMismatch,
    IncompleteBody,
    Stored,
    StoreFull,
    StoreUnavailable,
)

_NOW = "local t = redis.call('TIME')\nlocal now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)\n"
RESERVE = Script(
    _NOW
    + """
local gone = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, 1000)
for _, ref in ipairs(gone) do
  redis.call('DECRBY', KEYS[3], tonumber(redis.call('HGET', KEYS[2], ref) or '0'))
  redis.call('HDEL', KEYS[2], ref)
  redis.call('ZREM', KEYS[1], ref)
end
local used = tonumber(redis.call('GET', KEYS[3]) or '0')
local size = tonumber(ARGV[2])
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[5]) then return {1, used} end
if used + size > tonumber(ARGV[4]) then return {2, used} end
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[3]), ARGV[1])
redis.call('HSET', KEYS[2], ARGV[1], size)
return {0, redis.call('INCRBY', KEYS[3], size)}
"""
)
"""KEYS: held (ref → expiry, ms), sizes (ref → bytes), used bytes; ARGV: ref, size, hold ms,
totalBytes, most uploads. ``{0, used}`` reserved, ``{1, _}`` too many uploads, ``{2, _}`` full."""

COMMIT = Script(
    _NOW
    + """
if not redis.call('ZSCORE', KEYS[1], ARGV[1]) then return 0 end
redis.call('HSET', KEYS[2], 'owner', ARGV[3], 'size', ARGV[4], 'sha256', ARGV[5], 'data', ARGV[6])
redis.call('PEXPIRE', KEYS[2], ARGV[2])
redis.call('ZADD', KEYS[1], 'XX', now + tonumber(ARGV[2]), ARGV[1])
return 1
"""
)
"""KEYS: held, the upload's hash; ARGV: ref, ttl ms, owner, size, sha256, bytes. 0 when the
reservation is gone (it outlived its hold): nothing is written."""

RELEASE = Script(
    """
if redis.call('ZREM', KEYS[1], ARGV[1]) == 1 then
  redis.call('DECRBY', KEYS[3], tonumber(redis.call('HGET', KEYS[2], ARGV[1]) or '0'))
end
redis.call('HDEL', KEYS[2], ARGV[1])
return redis.call('GET', KEYS[3])
"""
)

GET = Script(
    """
local v = redis.call('HMGET', KEYS[1], 'owner', 'size', 'sha256')
if not v[1] or v[1] ~= ARGV[1] then return false end
return {v[2], v[3], redis.call('HGET', KEYS[1], 'data'), redis.call('PTTL', KEYS[1])}
"""
)
"""The upload if ``ARGV[1]`` owns it (another principal's ref reads as unknown, and its bytes
never leave Redis)."""


class RedisUploadStore:
    """The :class:`~gateway.uploads.store.UploadStore` interface over ``state.redis``."""

    def __init__(
        self,
        cfg: UploadStorage,
        redis: RedisStore,
        *,
        on_bytes: Callable[[str, int], None] | None = None,
        hold_seconds: float | None = None,
    ) -> None:
        self.redis = redis
        self.memory_limit = cfg.memoryBytes or cfg.totalBytes
        """Bytes this process may hold while receiving (each upload is read whole before it is
        written): the Redis reservation bounds the deployment, this bounds one pod."""
        self.receiving = 0
        self.total_limit = cfg.totalBytes
        self.ttl = cfg.ttlSeconds
        self.max_entries = max(MIN_ENTRIES, cfg.totalBytes // ENTRY_BYTES)
        self._hold_ms = int(1000 * max(self.ttl, hold_seconds or 0.0))
        self._on_bytes = on_bytes
        self._held = redis.key("uploads", "held")
        self._sizes = redis.key("uploads", "sizes")
        self._used = redis.key("uploads", "bytes")

    def _publish(self, used: Any) -> None:
        if self._on_bytes is not None and used is not None:
            self._on_bytes("redis", int(used))

    async def _script(
        self, op: str, script: Script, keys: list[str], args: list[Any], timeout: float | None = None
    ) -> Any:
        try:
            return await self.redis.script(op, script, keys, args, timeout=timeout)
        except StateUnavailable as exc:
            raise StoreUnavailable(f"upload storage (state.redis) is unavailable: {exc}") from None

    async def receive(self, chunks: AsyncIterator[bytes], size: int, sha256: str, owner: str) -> Stored:
        """Reserve room in Redis, read exactly ``size`` bytes whose SHA-256 is ``sha256``,
        write them; nothing is kept (and the room is given back) on any failure."""
        if self.receiving + size > self.memory_limit:
            raise StoreFull("this process holds memoryBytes of uploads being received")
        ref = "upl_" + secrets.token_urlsafe(32)
        accounting = [self._held, self._sizes, self._used]
        verdict, used = await self._script(
            "upload_reserve", RESERVE, accounting, [ref, size, self._hold_ms, self.total_limit, self.max_entries]
        )
        if verdict == 1:
            raise StoreFull("too many uploads held")
        if verdict == 2:
            raise StoreFull("total upload storage is full")
        self._publish(used)
        committed = False
        self.receiving += size
        try:
            data = await _read_exactly(chunks, size, sha256)
            written = await self._script(
                "upload_commit",
                COMMIT,
                [self._held, self._key(ref)],
                [ref, int(self.ttl * 1000), owner, size, sha256, data],
                timeout=_transfer_seconds(self.redis.timeout, size),
            )
            if not written:
                raise StoreUnavailable("the upload's reservation expired before its bytes arrived")
            committed = True
        finally:
            self.receiving -= size
            if not committed:
                await asyncio.shield(self._give_back(ref, accounting))
        return Stored(ref=ref, owner=owner, size=size, sha256=sha256, expires=time.monotonic() + self.ttl, data=data)

    async def _give_back(self, ref: str, accounting: list[str]) -> None:
        try:
            self._publish(await self._script("upload_release", RELEASE, accounting, [ref]))
        except StoreUnavailable:
            pass  # the reservation expires with its hold: the room comes back then

    def _key(self, ref: str) -> str:
        return self.redis.key("upload", ref)

    async def fetch(self, ref: str, owner: str, deadline: float | None = None) -> Stored | None:
        """The upload behind ``ref`` if ``owner`` uploaded it and it has not expired; None also
        when Redis cannot answer (the attachment becomes a gap)."""
        if not ref.startswith("upl_") or len(ref) > 100:
            return None
        try:
            found = await self.redis.script(
                "upload_get", GET, [self._key(ref)], [owner], deadline, timeout=_transfer_seconds(self.redis.timeout, 0)
            )
        except StateUnavailable:
            return None
        if not found:
            return None
        size, digest, data, pttl = found
        if data is None or int(size) != len(data):
            return None
        left = max(0.0, int(pttl) / 1000) if int(pttl) >= 0 else self.ttl
        return Stored(ref, owner, int(size), digest.decode(), time.monotonic() + left, data=bytes(data))

    def __len__(self) -> int:
        return 0  # held in Redis, shared by every replica (ahp_gateway_upload_stored_bytes{tier="redis"})

    def close(self) -> None:
        return None


TRANSFER_FLOOR = 1.0
TRANSFER_RATE = 50e6
"""Operations that carry an upload's bytes get at least :data:`TRANSFER_FLOOR` seconds plus the
size at :data:`TRANSFER_RATE` bytes per second (``timeoutMs`` is sized for the small rate-limit
script), still inside the request's deadline."""


def _transfer_seconds(timeout: float, size: int) -> float:
    return max(timeout, TRANSFER_FLOOR) + size / TRANSFER_RATE


async def _read_exactly(chunks: AsyncIterator[bytes], size: int, sha256: str) -> bytes:
    digest = hashlib.sha256()
    parts: list[bytes] = []
    received = 0
    async for chunk in chunks:
        received += len(chunk)
        if received > size:
            raise IncompleteBody("body longer than Content-Length")
        digest.update(chunk)
        parts.append(chunk)
    if received != size:
        raise IncompleteBody("body shorter than Content-Length")
    if not secrets.compare_digest(digest.hexdigest(), sha256):
        raise DigestMismatch("AHP-Content-SHA256 does not match the body")
    return b"".join(parts)
