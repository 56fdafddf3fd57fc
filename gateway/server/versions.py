"""Version bridging at the harness edge (placeholder: pass-through)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any


class VersionBridge:
    def __init__(self, inner: Any, versions: Callable[[], tuple[str, ...]]) -> None:
        self.inner = inner
        self.versions = versions

    async def handle(self, body: bytes, headers: Mapping[str, str] | None = None) -> tuple[int, bytes | None]:
        result: tuple[int, bytes | None] = await self.inner.handle(body, headers)
        return result
