"""Named background tasks that stay referenced until done (asyncio only keeps weak refs)."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any

_live: set[asyncio.Task[Any]] = set()


def spawn(coro: Coroutine[Any, Any, Any], *, name: str) -> asyncio.Task[Any]:
    """Start ``coro`` as a task that cannot be garbage-collected while it runs."""
    task = asyncio.get_running_loop().create_task(coro, name=name)
    _live.add(task)
    task.add_done_callback(_live.discard)
    return task
