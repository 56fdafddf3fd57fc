"""The upstream seam: ``intercept`` (a request dict in, a Reply or Failure out), ``observe`` and
``aclose``. Implementations: :mod:`gateway.upstream.http` and the local CEL policy backend."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from gateway.settle.outcome import Failure, Reply


class Upstream(Protocol):
    kind: str

    async def intercept(
        self, request: dict[str, Any], timeout: float, headers: Mapping[str, str] | None = None
    ) -> Reply | Failure: ...

    async def observe(
        self, message: dict[str, Any], timeout: float, headers: Mapping[str, str] | None = None
    ) -> Failure | None: ...

    async def aclose(self) -> None: ...
