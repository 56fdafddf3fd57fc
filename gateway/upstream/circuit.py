"""Per-upstream circuit breakers: after ``threshold`` consecutive operational failures the
upstream is not called for ``open_seconds`` (calls fail fast as ``circuit_open`` and its failure
policy applies, exactly as for any failure); then one probe call decides whether it closes.

A call holds a permit from :meth:`CircuitBreaker.acquire` and gives it back exactly once with
:meth:`CircuitBreaker.release`: with its result, or with ``None`` when it was cancelled (the
harness went away, or a parallel chain was decided). A cancelled call says nothing about the
upstream, so it never counts, and a cancelled probe frees the probe slot at once.

Breakers belong to the hook id, not to a configuration snapshot: :class:`Breakers` hands the
same object to every snapshot that keeps the hook, so a reload neither resets nor strands one.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

REFUSED = 0
"""Permit: fail fast, the circuit is open."""
NORMAL = 1
"""Permit: an ordinary call through a closed circuit."""
PROBE = 2
"""Permit: the single half-open probe."""


class CircuitBreaker:
    __slots__ = ("_clock", "_failures", "_open_until", "_probing", "open_seconds", "threshold")

    def __init__(self, threshold: int, open_seconds: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.threshold = threshold
        self.open_seconds = open_seconds
        self._clock = clock
        self._failures = 0
        self._open_until = 0.0
        self._probing = False

    @property
    def is_open(self) -> bool:
        return self._failures >= self.threshold

    def acquire(self) -> int:
        """A permit for one call: NORMAL while closed; while open, PROBE for the one call after
        the open period, else REFUSED."""
        if self._failures < self.threshold:
            return NORMAL
        if not self._probing and self._clock() >= self._open_until:
            self._probing = True
            return PROBE
        return REFUSED

    def release(self, permit: int, ok: bool | None) -> bool:
        """Give a permit back with the call's result (``None``: cancelled, not counted).
        Returns True when the open/closed state changed."""
        if permit == PROBE:
            self._probing = False
        if ok is None or permit == REFUSED:
            return False
        was_open = self.is_open
        if ok:
            self._failures = 0
        else:
            self._failures += 1
            if self._failures >= self.threshold:
                self._open_until = self._clock() + self.open_seconds
        return was_open != self.is_open


class Breakers:
    """The breakers of the live configuration, by hook id."""

    def __init__(self) -> None:
        self._by_hook: dict[str, CircuitBreaker] = {}

    def for_hook(self, hook_id: str, threshold: int, open_seconds: float) -> CircuitBreaker:
        """The live breaker of ``hook_id`` (settings unchanged until :meth:`adopt`), or a new one.
        Nothing is registered here, so a configuration that fails to build changes nothing."""
        live = self._by_hook.get(hook_id)
        return live if live is not None else CircuitBreaker(threshold, open_seconds)

    def adopt(self, breakers: Iterable[tuple[str, CircuitBreaker, int, float]]) -> None:
        """Make exactly these the live breakers, with these settings (on a snapshot swap)."""
        by_hook: dict[str, CircuitBreaker] = {}
        for hook_id, breaker, threshold, open_seconds in breakers:
            breaker.threshold, breaker.open_seconds = threshold, open_seconds
            by_hook[hook_id] = breaker
        self._by_hook = by_hook

    def states(self) -> dict[str, bool]:
        return {hook: breaker.is_open for hook, breaker in self._by_hook.items()}

    def open(self) -> list[str]:
        """Upstreams whose circuit is open (reported by /readyz; never changes readiness)."""
        return sorted(h for h, b in self._by_hook.items() if b.is_open)
