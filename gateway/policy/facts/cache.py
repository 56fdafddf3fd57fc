"""A bounded cache for the pure helpers of the facts that are asked the same small questions on
every event (a program's name, a glob segment): nothing in it depends on an event, and neither
a flood of distinct inputs nor a huge one can make it hold more than a few hundred KiB."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

ENTRIES = 1024
LONGEST = 256
"""At most :data:`ENTRIES` answers, for inputs of at most :data:`LONGEST` characters (longer ones
are computed each time)."""


def short_inputs(function: Callable[[str], T]) -> Callable[[str], T]:
    """``function`` (pure, of one string) answered from a bounded LRU cache for short inputs."""
    cached = functools.lru_cache(maxsize=ENTRIES)(function)

    @functools.wraps(function)
    def lookup(text: str) -> T:
        return cached(text) if len(text) <= LONGEST else function(text)

    return lookup
