"""The one client of ``state.redis``: every worker and replica shares uploads and rate-limit
buckets through it (docs/operations/uploads.md and rate-limits.md).

Each operation is one round trip (a Lua script where it must be atomic), bounded by
``timeoutMs`` and by what is left of the caller's deadline, timed and counted
(``ahp_gateway_state_seconds``, ``ahp_gateway_state_errors_total{op}``). Any failure surfaces as
:class:`StateUnavailable`, and the caller's policy decides (uploads 503, limits
``onStateError``). After a failure, calls fail at once for :data:`BACKOFF` seconds instead of
each waiting ``timeoutMs`` for a Redis that is down; the next call after that tries again, so
recovery needs no restart. Redis' own clock (``TIME``) is the only clock, so replicas whose clocks
disagree still share one bucket.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import RedisError, ResponseError

from gateway import tasks
from gateway.config.models import RedisState
from gateway.state import Script, StateUnavailable
from gateway.state.resp import Lane, ReplyError, encode

log = logging.getLogger("ahp_gateway")
BACKOFF = 0.5
"""Seconds during which calls fail at once after a failed one (no waiting on a dead Redis)."""
PROBE_SECONDS = 2.0
"""How often a PING keeps ``/readyz``'s view of Redis fresh."""
OnTiming = Callable[[str, float], None]
OnError = Callable[[str], None]


class _Waiter:
    __slots__ = ("args", "deadline", "future", "keys")

    def __init__(self, keys: Sequence[str | bytes], args: Sequence[Any], deadline: float | None, future: Any) -> None:
        self.keys = keys
        self.args = args
        self.deadline = deadline
        self.future: asyncio.Future[Any] | None = future
        """None for a call that makes the round trip itself."""


def _settled(waiter: _Waiter) -> bool:
    """Nothing to tell this waiter: it made its own round trip, or it was cancelled."""
    return waiter.future is None or waiter.future.done()


async def _exchange(lane: Lane, script: Script, waiters: list[_Waiter]) -> list[Any]:
    """Send every waiter's EVALSHA at once (each script is atomic alone: no transaction), then
    read the replies in order; an error reply is that waiter's result."""
    sha = script.sha_bytes
    return await lane.exchange([encode(b"EVALSHA", sha, len(w.keys), *w.keys, *w.args) for w in waiters])


def _no_script(reply: Any) -> bool:
    return isinstance(reply, ReplyError) and str(reply).startswith("NOSCRIPT")


def password_of(cfg: RedisState, base: Path) -> str | None:
    """The password from ``passwordEnv`` or ``passwordFile`` (read at start, never logged)."""
    if cfg.passwordEnv is not None:
        return os.environ.get(cfg.passwordEnv) or None
    if cfg.passwordFile is not None:
        path = Path(os.path.abspath(base / cfg.passwordFile))
        return path.read_text(encoding="utf-8").strip() or None
    return None


class RedisStore:
    """A pooled redis-py asyncio client with per-operation deadlines, metrics and a health view."""

    def __init__(
        self,
        cfg: RedisState,
        base: Path,
        *,
        on_timing: OnTiming | None = None,
        on_error: OnError | None = None,
    ) -> None:
        self.prefix = cfg.keyPrefix
        self.timeout = cfg.timeoutMs / 1000
        self._on_timing = on_timing or (lambda op, seconds: None)
        self._on_error = on_error or (lambda op: None)
        ca = str(Path(os.path.abspath(base / cfg.caFile))) if cfg.caFile else None
        options: dict[str, Any] = {
            "password": password_of(cfg, base),
            "username": cfg.username,
            "max_connections": cfg.maxConnections,
            # a bound for the socket too; each call is bounded more tightly by its deadline
            "socket_timeout": max(self.timeout, 0.05) * 4,
            "socket_connect_timeout": max(self.timeout, 0.05) * 4,
            "retry": Retry(NoBackoff(), 0),
            "decode_responses": False,
        }
        if ca is not None:
            options["ssl_ca_certs"] = ca
        self.client: Any = aioredis.Redis.from_url(cfg.url, **options)
        self._lane_args = (cfg.url, cfg.username, options["password"], ca)
        self._down_until = 0.0
        self.last_error: str | None = None
        """Why the last operation failed (None: it succeeded); what ``/readyz`` shows."""
        self.checked_at = 0.0
        self._probe: asyncio.Task[None] | None = None
        self._queued: dict[str, list[_Waiter]] = {}
        """Per operation: calls waiting for the next pipelined round trip (:meth:`batched`)."""
        self._sending: set[str] = set()
        """Operations with a round trip in flight."""
        self._lanes: dict[str, Lane] = {}
        """Per batched operation, its own connection (:class:`gateway.state.resp.Lane`: one round
        trip in flight at a time needs no pool, and RESP written by hand and read by hiredis costs a
        third of redis-py's connection per command)."""

    def key(self, *parts: str) -> str:
        return self.prefix + ":".join(parts)

    @property
    def healthy(self) -> bool:
        return self.last_error is None

    def status(self) -> dict[str, Any]:
        """For ``/readyz``: reachable or why not (never the URL's secrets: there are none)."""
        return {"reachable": self.last_error is None, **({"error": self.last_error} if self.last_error else {})}

    async def call(
        self, op: str, run: Callable[[Any], Any], deadline: float | None = None, *, timeout: float | None = None
    ) -> Any:
        """``run(client)`` within ``timeoutMs`` (or ``timeout``) and ``deadline`` (loop time);
        StateUnavailable on any failure, each counted under ``op``."""
        loop = asyncio.get_running_loop()
        now = loop.time()
        limit = self.timeout if timeout is None else timeout
        budget = limit if deadline is None else min(limit, deadline - now)
        if now < self._down_until or budget <= 0:
            self._on_error(op)
            raise StateUnavailable(self.last_error or "no time left in the request's deadline")
        started = time.perf_counter()
        try:
            async with asyncio.timeout(budget):
                result = await run(self.client)
        except (RedisError, OSError, TimeoutError) as exc:
            reason = "timed out" if isinstance(exc, TimeoutError) else type(exc).__name__
            self._failed(op, reason, loop.time())
            raise StateUnavailable(reason) from None
        self._on_timing(op, time.perf_counter() - started)
        if self.last_error is not None:
            log.warning("state.redis answers again")
        self.last_error = None
        return result

    def _failed(self, op: str, reason: str, now: float) -> None:
        self._on_error(op)
        if self.last_error is None:
            log.warning("state.redis failed (%s: %s); retrying in %.1f s", op, reason, BACKOFF)
        self.last_error = f"{op}: {reason}"
        self._down_until = now + BACKOFF

    async def script(
        self,
        op: str,
        script: Script,
        keys: Sequence[str],
        args: Sequence[Any],
        deadline: float | None = None,
        *,
        timeout: float | None = None,
    ) -> Any:
        return await self.call(op, lambda client: script.run(client, keys, args), deadline, timeout=timeout)

    async def batched(
        self,
        op: str,
        script: Script,
        keys: Sequence[str | bytes],
        args: Sequence[Any],
        deadline: float | None = None,
    ) -> Any:
        """:meth:`script` for the request path: calls of one operation are pipelined, at most one
        round trip in flight per operation. With nothing in flight a call makes its round trip
        itself, at once; calls made meanwhile go together in the next round trip (sent by a task
        of its own as soon as the one in flight ends), so under load the client's fixed cost per command is shared instead of paid by every
        request. Failures fail every call of the round trip (and count once)."""
        if op not in self._sending and op not in self._queued:
            # nothing in flight or waiting: this call is the round trip, in its own task (a
            # cancellation drops only its own connection); calls meanwhile wait for the next one
            self._sending.add(op)
            try:
                alone = [_Waiter(keys, args, deadline, None)]
                return (await self.call(op, lambda client: self._lane(op, script, alone), deadline))[0]
            finally:
                self._sending.discard(op)
                if self._queued.get(op):
                    self._flush(op, script)
        loop = asyncio.get_running_loop()
        waiter = _Waiter(keys, args, deadline, loop.create_future())
        queue = self._queued.get(op)
        if queue is None:
            queue = self._queued[op] = []
            if op not in self._sending:
                loop.call_soon(self._flush, op, script)
        queue.append(waiter)
        assert waiter.future is not None
        return await waiter.future

    def _flush(self, op: str, script: Script) -> None:
        waiters = [w for w in self._queued.pop(op, ()) if not _settled(w)]
        if not waiters:
            return
        self._sending.add(op)
        tasks.spawn(self._send(op, script, waiters), name=f"state-redis-{op}")

    async def _send(self, op: str, script: Script, waiters: list[_Waiter]) -> None:
        deadlines = [w.deadline for w in waiters if w.deadline is not None]
        deadline = min(deadlines) if deadlines else None
        try:
            results = await self.call(op, lambda client: self._lane(op, script, waiters), deadline)
        except StateUnavailable as exc:
            for waiter in waiters:
                if not _settled(waiter):
                    waiter.future.set_exception(StateUnavailable(str(exc)))  # type: ignore[union-attr]
        except BaseException as exc:  # cancelled at close: nobody is left waiting forever
            for waiter in waiters:
                if not _settled(waiter):
                    waiter.future.set_exception(StateUnavailable(type(exc).__name__))  # type: ignore[union-attr]
            raise
        else:
            for waiter, result in zip(waiters, results, strict=True):
                if not _settled(waiter):
                    waiter.future.set_result(result)  # type: ignore[union-attr]
        finally:
            self._sending.discard(op)
            if self._queued.get(op):
                self._flush(op, script)

    async def _lane(self, op: str, script: Script, waiters: list[_Waiter]) -> list[Any]:
        """One EVALSHA per waiter, pipelined on the operation's own connection; a server that lost
        the script (a restart) gets it loaded and the missing ones sent again. Any failure or
        cancellation drops the connection (replies may still be on their way)."""
        lane = self._lanes.get(op)
        try:
            if lane is None:
                lane = self._lanes[op] = Lane(*self._lane_args)
                await lane.open()
            results = await _exchange(lane, script, waiters)
            missing = [i for i, r in enumerate(results) if _no_script(r)]
            if missing:
                await lane.exchange([encode(b"SCRIPT", b"LOAD", script.source)])
                again = await _exchange(lane, script, [waiters[i] for i in missing])
                for index, result in zip(missing, again, strict=True):
                    results[index] = result
        except BaseException:
            self._lanes.pop(op, None)
            if lane is not None:
                lane.close()
            raise
        for result in results:
            if isinstance(result, ReplyError):
                raise ResponseError(str(result))
        return results

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        if self._probe is None:
            self._probe = tasks.spawn(self._probing(), name="state-redis-probe")

    async def _probing(self) -> None:
        while True:
            try:
                await self.call("ping", lambda client: client.ping())
            except StateUnavailable:
                pass
            self.checked_at = time.time()
            await asyncio.sleep(PROBE_SECONDS if self.healthy else BACKOFF)

    async def aclose(self) -> None:
        if self._probe is not None:
            self._probe.cancel()
            await asyncio.gather(self._probe, return_exceptions=True)
            self._probe = None
        for lane in self._lanes.values():
            lane.close()
        self._lanes.clear()
        try:
            await self.client.aclose()
        except (RedisError, OSError):
            pass
