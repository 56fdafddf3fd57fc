"""Scripted upstreams on loopback: the ``Stub`` a stub_factory returns and the runner that serves an app."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

Answer = Callable[[dict[str, Any]], Any]


@dataclass
class Stub:
    """A scripted upstream on loopback. ``answer(request)`` returns a dict (JSON 200), a
    (status, bytes|dict) pair, or an awaitable of either."""

    url: str
    received: list[dict[str, Any]] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)
    answer: Answer | None = None
    observed: list[dict[str, Any]] = field(default_factory=list)
    observe_event: asyncio.Event = field(default_factory=asyncio.Event)
    observe_gate: asyncio.Event | None = None
    """When set, observe notifications are held until the event is set (a slow observer)."""


async def start_app(app: web.Application) -> tuple[web.AppRunner, int]:
    runner = web.AppRunner(app, access_log=None, handler_cancellation=True, shutdown_timeout=0.5)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    return runner, port
