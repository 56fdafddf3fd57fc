"""Which (event, subscription) pairs were already served, for observe fan-out (protocol §8.3).

Two generations of plain dicts rotated every ``ttl/2`` seconds (or when a generation fills up):
membership costs two dict lookups, memory is bounded by ``max_entries``, and an entry lives at
least ``ttl/2`` and at most ``ttl`` seconds. Pure apart from the clock it is handed.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable


class DeliveryLedger:
    __slots__ = ("_clock", "_current", "_half", "_limit", "_previous", "_rotate_at")

    def __init__(self, max_entries: int, ttl: float, clock: Callable[[], float]) -> None:
        self._limit = max(1, max_entries // 2)
        self._half = ttl / 2
        self._clock = clock
        self._current: dict[Hashable, bool] = {}
        self._previous: dict[Hashable, bool] = {}
        self._rotate_at = clock() + self._half

    def _maybe_rotate(self) -> None:
        if len(self._current) >= self._limit or self._clock() >= self._rotate_at:
            self._previous, self._current = self._current, {}
            self._rotate_at = self._clock() + self._half

    def __contains__(self, key: Hashable) -> bool:
        return key in self._current or key in self._previous

    def add(self, key: Hashable) -> None:
        self._maybe_rotate()
        self._current[key] = True

    def __len__(self) -> int:
        return len(self._current) + len(self._previous)
