"""The one way a front end (HTTP or stdio) reaches the request pipeline.

``call_engine`` is the single call into the engine (today ``Engine.handle(body, headers)``); when
the pipeline changes shape, only that line changes. ``front_door`` wraps it in the version bridge
so every front end serves the same wire versions the same way.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from gateway.dispatch import Engine
from gateway.server.versions import VersionBridge


class Handler(Protocol):
    """Request bytes in, (HTTP status, response bytes or None for no answer) out."""

    async def handle(self, body: bytes, headers: Mapping[str, str] | None = None) -> tuple[int, bytes | None]: ...


async def call_engine(engine: Engine, body: bytes, headers: Mapping[str, str] | None) -> tuple[int, bytes | None]:
    return await engine.handle(body, headers)


class _EngineHandler:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    async def handle(self, body: bytes, headers: Mapping[str, str] | None = None) -> tuple[int, bytes | None]:
        return await call_engine(self.engine, body, headers)


def front_door(engine: Engine) -> Handler:
    """The engine behind the version bridge; the bridge reads the accepted versions from the
    snapshot each request runs on, so a reload that changes ``protocolVersions`` applies at once."""
    return VersionBridge(_EngineHandler(engine), lambda: engine.holder.current.versions, engine.telemetry.rejected)
