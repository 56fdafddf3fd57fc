"""A per-upstream circuit breaker: after ``threshold`` consecutive operational failures the
upstream is not called for ``open_seconds`` (calls fail fast as ``circuit_open`` and its failure
policy applies, exactly as for any failure); then one probe call decides whether it closes."""

from __future__ import annotations

import time


class CircuitBreaker:
    __slots__ = ("_failures", "_open_until", "_probing", "open_seconds", "threshold")

    def __init__(self, threshold: int = 5, open_seconds: float = 5.0) -> None:
        self.threshold = threshold
        self.open_seconds = open_seconds
        self._failures = 0
        self._open_until = 0.0
        self._probing = False

    @property
    def is_open(self) -> bool:
        return self._failures >= self.threshold

    def allow(self) -> bool:
        """May a call go out now? While open, only one probe after the open period."""
        if self._failures < self.threshold:
            return True
        if time.monotonic() >= self._open_until and not self._probing:
            self._probing = True
            return True
        return False

    def record(self, ok: bool) -> bool:
        """Record a call's result; returns True when the open/closed state changed."""
        was_open = self.is_open
        self._probing = False
        if ok:
            self._failures = 0
        else:
            self._failures += 1
            if self._failures >= self.threshold:
                self._open_until = time.monotonic() + self.open_seconds
        return was_open != self.is_open
