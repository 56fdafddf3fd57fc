"""Bounded storage for uploads the gateway received: memory first, then a disk spool, a total
cap reserved before the first byte is read, a TTL, and refs that are unguessable and scoped to
the principal that uploaded (a ref alone never grants access, protocol §12)."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import secrets
import shutil
import tempfile
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path

from gateway.config.models import UploadStorage

ENTRY_BYTES = 512
MIN_ENTRIES = 64
"""What one held upload costs beside its bytes (its record and ref): the store holds at most one
upload per ``ENTRY_BYTES`` of ``totalBytes`` (and at least ``MIN_ENTRIES``), so empty or tiny
uploads cannot grow it without bound."""


class StoreFull(Exception):
    """No room for the declared size (memory, spool and the total cap considered)."""


class StoreUnavailable(Exception):
    """The storage cannot be reached (``type: redis`` and Redis down): answered 503, never
    stored elsewhere."""


class IncompleteBody(Exception):
    """The body ended before (or ran past) the declared Content-Length."""


class DigestMismatch(Exception):
    pass


@dataclass(slots=True)
class Stored:
    ref: str
    owner: str
    size: int
    sha256: str
    expires: float
    data: bytes | None = None
    path: Path | None = None

    @property
    def tier(self) -> str:
        return "memory" if self.path is None else "spool"


class UploadStore:
    def __init__(
        self,
        cfg: UploadStorage,
        base: Path,
        *,
        on_bytes: Callable[[str, int], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.memory_limit = cfg.memoryBytes
        self.total_limit = cfg.totalBytes
        self.ttl = cfg.ttlSeconds
        self._spool_root = Path(os.path.abspath(base / cfg.spoolDir)) if cfg.spoolDir else None
        self._spool: Path | None = None
        self._clock = clock
        self._on_bytes = on_bytes
        self._items: dict[str, Stored] = {}
        self.used = {"memory": 0, "spool": 0}
        self.reserved = {"memory": 0, "spool": 0}
        self.max_entries = max(MIN_ENTRIES, cfg.totalBytes // ENTRY_BYTES)
        self._receiving = 0
        self._sweeper: asyncio.TimerHandle | None = None

    # ------------------------------------------------------------------ accounting
    def _total(self) -> int:
        return sum(self.used.values()) + sum(self.reserved.values())

    def _tier_for(self, size: int) -> str:
        self.sweep()
        if len(self._items) + self._receiving >= self.max_entries:
            raise StoreFull("too many uploads held")
        if self._total() + size > self.total_limit:
            raise StoreFull("total upload storage is full")
        if self.used["memory"] + self.reserved["memory"] + size <= self.memory_limit:
            return "memory"
        if self._spool_root is not None:
            return "spool"
        raise StoreFull("upload memory is full and no spoolDir is configured")

    def _publish(self) -> None:
        if self._on_bytes is not None:
            for tier, value in self.used.items():
                self._on_bytes(tier, value)

    def _spool_dir(self) -> Path:
        if self._spool is None:
            assert self._spool_root is not None
            self._spool_root.mkdir(parents=True, exist_ok=True)
            self._spool = Path(tempfile.mkdtemp(prefix="ahp-uploads-", dir=self._spool_root))  # mode 0700
        return self._spool

    # ------------------------------------------------------------------ write
    async def receive(self, chunks: AsyncIterator[bytes], size: int, sha256: str, owner: str) -> Stored:
        """Store exactly ``size`` bytes whose SHA-256 is ``sha256``; nothing is kept on failure."""
        tier = self._tier_for(size)
        self.reserved[tier] += size
        self._receiving += 1
        digest = hashlib.sha256()
        received = 0
        parts: list[bytes] = []
        handle = None
        path: Path | None = None
        try:
            if tier == "spool":
                fd, name = tempfile.mkstemp(dir=self._spool_dir())
                path = Path(name)
                handle = os.fdopen(fd, "wb")
            async for chunk in chunks:
                received += len(chunk)
                if received > size:
                    raise IncompleteBody("body longer than Content-Length")
                digest.update(chunk)
                if handle is not None:
                    handle.write(chunk)
                else:
                    parts.append(chunk)
            if received != size:
                raise IncompleteBody("body shorter than Content-Length")
            if not secrets.compare_digest(digest.hexdigest(), sha256):
                raise DigestMismatch("AHP-Content-SHA256 does not match the body")
            if handle is not None:
                handle.close()
                handle = None
        except BaseException:
            if handle is not None:
                handle.close()
            if path is not None:
                with contextlib.suppress(OSError):
                    path.unlink()
            raise
        finally:
            self.reserved[tier] -= size
            self._receiving -= 1
        stored = Stored(
            ref="upl_" + secrets.token_urlsafe(32),
            owner=owner,
            size=size,
            sha256=sha256,
            expires=self._clock() + self.ttl,
            data=b"".join(parts) if tier == "memory" else None,
            path=path,
        )
        self._items[stored.ref] = stored
        self.used[tier] += size
        self._publish()
        self._schedule_sweep()
        return stored

    # ------------------------------------------------------------------ read
    def get(self, ref: str, owner: str) -> Stored | None:
        """The upload behind ``ref`` if ``owner`` uploaded it and it has not expired."""
        stored = self._items.get(ref)
        # compared as UTF-8: compare_digest refuses non-ASCII str, and a principal name may be any text
        if stored is None or not secrets.compare_digest(stored.owner.encode(), owner.encode()):
            return None
        if stored.expires <= self._clock():
            self._drop(stored)
            return None
        return stored

    async def fetch(self, ref: str, owner: str, deadline: float | None = None) -> Stored | None:
        """:meth:`get`, behind the interface every storage type offers (Redis' is I/O)."""
        return self.get(ref, owner)

    @staticmethod
    def read(stored: Stored) -> bytes:
        if stored.data is not None:
            return stored.data
        assert stored.path is not None
        return stored.path.read_bytes()

    # ------------------------------------------------------------------ expiry
    def _drop(self, stored: Stored) -> None:
        if self._items.pop(stored.ref, None) is None:
            return
        self.used[stored.tier] -= stored.size
        if stored.path is not None:
            with contextlib.suppress(OSError):
                stored.path.unlink()
        self._publish()

    def sweep(self) -> None:
        now = self._clock()
        for stored in [s for s in self._items.values() if s.expires <= now]:
            self._drop(stored)

    def _schedule_sweep(self) -> None:
        """Expired uploads leave on time even when no request comes: one timer, at the earliest
        expiry (every upload has the same TTL, so later ones never expire sooner)."""
        if self._sweeper is not None or not self._items:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # outside a loop (tools): expiry on the next use
            return
        due = min(s.expires for s in self._items.values()) - self._clock()
        self._sweeper = loop.call_later(max(due, 0.0) + 0.01, self._sweep_due)

    def _sweep_due(self) -> None:
        self._sweeper = None
        self.sweep()
        self._schedule_sweep()

    def __len__(self) -> int:
        return len(self._items)

    def close(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
            self._sweeper = None
        for stored in list(self._items.values()):
            self._drop(stored)
        if self._spool is not None:
            shutil.rmtree(self._spool, ignore_errors=True)
            self._spool = None
