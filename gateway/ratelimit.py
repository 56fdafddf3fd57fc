"""Rate limits (``rateLimits``): a token bucket per limit and key, checked before the chain.

Each bucket is a GCRA (generic cell rate algorithm): one number per key, the theoretical arrival
time ``tat``; a request is admitted when ``tat + interval - now <= interval * burst``, which is
exactly a token bucket of ``burst`` tokens refilled at ``requestsPerSecond`` (in whole
microseconds, so the arithmetic is exact in Lua's doubles and Python alike). ``scope: shared``
buckets live in ``state.redis`` and are updated by one Lua script per check (all the shared
limits of a request in one round trip, on Redis' clock, so every replica and worker draws from
the same bucket); ``scope: local`` buckets live in this process.

Limits are checked in order and the first exceeded one answers; limits checked before it have
spent their token (as a request counted by a proxy's earlier descriptor stays counted). A key
that fails to evaluate follows ``onError``: ``match`` counts it under one key shared by every
such request (a principal cannot escape its limit by making the key fail), ``skip`` lets it
pass. Redis failing within ``timeoutMs`` follows ``onStateError``.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gateway.routing.cel import Activation, EvalError, ValueProgram
from gateway.state import Script, StateUnavailable

if TYPE_CHECKING:
    from gateway.state.redis import RedisStore

ERROR_KEY = "\x00error"
"""The bucket of requests whose key failed to evaluate (``onError: match``); no string a key
expression produces can equal it (activations never carry U+0000)."""
LOCAL_KEYS = 100_000
"""Local buckets kept per process: beyond it, full (idle) buckets are forgotten first."""
KEY_BYTES = 128
"""Key values longer than this are stored in Redis by their SHA-256."""
STATE_RETRY_MS = 500

GCRA = Script(
    """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
for i = 1, #KEYS do
  local interval = tonumber(ARGV[2 * i - 1])
  local tolerance = tonumber(ARGV[2 * i])
  local tat = tonumber(redis.call('GET', KEYS[i]) or '0')
  if tat < now then tat = now end
  local new = tat + interval
  if new - now > tolerance then
    return {i, math.ceil((new - now - tolerance) / 1000)}
  end
  redis.call('SET', KEYS[i], string.format('%d', new), 'PX', math.ceil((new - now) / 1000) + 1)
end
return {0, 0}
"""
)
"""Every shared limit of one request, in order: ``{0, 0}`` when all admit it, else ``{i,
retryAfterMs}`` for the first (1-based) that is exceeded; the ones before it spent a token."""


@dataclass(frozen=True, slots=True)
class Rule:
    """One compiled ``rateLimits`` entry (part of the runtime snapshot)."""

    id: str
    key: ValueProgram
    interval_us: int
    tolerance_us: int
    shared: bool
    fail_closed: bool
    skip_on_error: bool
    max_inflight: int | None
    reads_event: bool = True
    gcra_args: tuple[bytes, bytes] = (b"", b"")
    """``interval_us`` and ``tolerance_us`` as the script's arguments, encoded once."""


@dataclass(frozen=True, slots=True)
class Limited:
    """The answer: which limit, and when to try again."""

    limit: str
    retry_after_ms: int
    state_error: bool = False

    @property
    def message(self) -> str:
        if self.state_error:
            return f"rate limit {self.limit!r} cannot be checked (shared state unavailable)"
        return f"rate limit {self.limit!r} exceeded"

    @property
    def data(self) -> dict[str, Any]:
        return {"limit": self.limit, "retryAfterMs": self.retry_after_ms}


Release = Callable[[], None]


def _noop() -> None:
    return None


class RateLimiter:
    """Per process: the local buckets and in-flight counts, and the shared client."""

    def __init__(
        self,
        redis: RedisStore | None = None,
        on_limited: Callable[[str], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
        on_error: Callable[[Any, EvalError], None] | None = None,
    ) -> None:
        self.redis = redis
        self._on_limited = on_limited or (lambda limit: None)
        self._on_error = on_error
        self._clock = clock
        self._tat: dict[tuple[str, str], int] = {}
        self._inflight: dict[tuple[str, str], int] = {}

    async def check(
        self, rules: Sequence[Rule], activation: Activation, deadline: float | None = None
    ) -> Limited | Release:
        """The first limit ``activation`` exceeds, or a release for the in-flight counts taken
        (call it when the request is done)."""
        keys: list[str | None] = []
        for rule in rules:
            value = rule.key.eval(activation)
            if isinstance(value, EvalError):
                if self._on_error is not None:
                    self._on_error(rule.key, value)
                keys.append(None if rule.skip_on_error else ERROR_KEY)
            else:
                keys.append(value)
        held: list[tuple[str, str]] = []
        index = 0
        while index < len(rules):
            rule, key = rules[index], keys[index]
            if key is None:
                index += 1
                continue
            if rule.shared:
                end = index
                while end < len(rules) and rules[end].shared:
                    end += 1
                limited = await self._shared(rules[index:end], keys[index:end], deadline)
                index = end
            else:
                limited = self._local(rule, key)
                index += 1
            if limited is None:
                continue
            self._release(held)
            self._on_limited(limited.limit)
            return limited
        for rule, key in zip(rules, keys, strict=True):
            if rule.max_inflight is None or key is None:
                continue
            slot = (rule.id, key)
            count = self._inflight.get(slot, 0)
            if count >= rule.max_inflight:
                self._release(held)
                self._on_limited(rule.id)
                return Limited(rule.id, 0)
            self._inflight[slot] = count + 1
            held.append(slot)
        if not held:
            return _noop
        return lambda: self._release(held)

    def _release(self, held: list[tuple[str, str]]) -> None:
        for slot in held:
            left = self._inflight[slot] - 1
            if left:
                self._inflight[slot] = left
            else:
                del self._inflight[slot]
        held.clear()

    def _local(self, rule: Rule, key: str) -> Limited | None:
        now = round(self._clock() * 1_000_000)
        slot = (rule.id, key)
        tat = max(self._tat.get(slot, now), now)
        new = tat + rule.interval_us
        if new - now > rule.tolerance_us:
            return Limited(rule.id, max(1, -(-(new - now - rule.tolerance_us) // 1000)))
        if slot not in self._tat and len(self._tat) >= LOCAL_KEYS:
            self._prune(now)
        self._tat[slot] = new
        return None

    def _prune(self, now: int) -> None:
        """Forget full buckets (``tat`` passed: same as never seen); if every bucket is in use,
        the oldest half (a key-spraying caller cannot grow memory without bound)."""
        self._tat = {slot: tat for slot, tat in self._tat.items() if tat > now}
        if len(self._tat) >= LOCAL_KEYS:
            keep = list(self._tat.items())[LOCAL_KEYS // 2 :]
            self._tat = dict(keep)

    async def _shared(
        self, rules: Sequence[Rule], keys: Sequence[str | None], deadline: float | None
    ) -> Limited | None:
        active = [(rule, key) for rule, key in zip(rules, keys, strict=True) if key is not None]
        if not active:
            return None
        if self.redis is None:  # check refuses it; a snapshot built without state fails safe by policy
            return _state_failure(r for r, _ in active)
        redis = self.redis
        names = [redis.key("rl", rule.id, _stored_key(key)).encode() for rule, key in active]
        args: list[bytes] = []
        for rule, _ in active:
            args += rule.gcra_args
        try:
            index, retry = await redis.batched("ratelimit", GCRA, names, args, deadline)
        except StateUnavailable:
            return _state_failure(r for r, _ in active)
        if not index:
            return None
        return Limited(active[int(index) - 1][0].id, max(1, int(retry)))


def _state_failure(rules: Any) -> Limited | None:
    for rule in rules:
        if rule.fail_closed:
            return Limited(rule.id, STATE_RETRY_MS, state_error=True)
    return None


def _stored_key(key: str) -> str:
    """``=<key>`` when short and printable (readable in Redis), else ``#<sha256>``: the two forms
    cannot meet, so no key value can name another key's bucket."""
    if len(key) <= KEY_BYTES and key.isprintable():
        return "=" + key
    return "#" + hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()


def compile_rules(
    limits: Sequence[Any], compile_key: Callable[[str, str, int], ValueProgram | None]
) -> tuple[Rule, ...]:
    """``rateLimits`` as rules; ``compile_key(source, id, index)`` reports its own errors."""
    out: list[Rule] = []
    for index, limit in enumerate(limits):
        program = compile_key(limit.key, f"rateLimits.{limit.id}.key", index)
        if program is None:
            continue
        interval = max(1, round(1_000_000 / limit.requestsPerSecond))
        out.append(
            Rule(
                id=limit.id,
                key=program,
                interval_us=interval,
                tolerance_us=interval * limit.burst,
                shared=limit.scope == "shared",
                fail_closed=limit.onStateError == "fail-closed",
                skip_on_error=limit.onError == "skip",
                max_inflight=limit.maxInflight,
                reads_event=program.reads_event(),
                gcra_args=(b"%d" % interval, b"%d" % (interval * limit.burst)),
            )
        )
    return tuple(out)
