"""The sink the engine reports finished facts to (metrics, decision log, tracing).

The engine only hands over finished records; what is done with them lives in
``gateway.observability``. :class:`NullTelemetry` keeps the engine usable without it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from gateway.settle.ledger import Decision


class Telemetry(Protocol):
    def begin(self, headers: Mapping[str, str], event: Mapping[str, Any]) -> Any: ...
    def outbound_headers(self, trace: Any, key: str, upstream: str) -> Mapping[str, str] | None: ...
    def settled(self, decision: Decision, trace: Any = None) -> None: ...
    def inflight(self, delta: int) -> None: ...
    def rejected(self, method: str, reason: str) -> None: ...
    def discovery(self, method: str) -> None: ...
    def routed(self, hook_id: str) -> None: ...
    def cel_error(self, expression_id: str) -> None: ...
    def parallel_fallback(self) -> None: ...
    def shadow(self, hook_id: str, verdict: str) -> None: ...
    def observe_received(self, status: str) -> None: ...
    def observe_dropped(self, reason: str) -> None: ...
    def observe_queue(self, depth: int) -> None: ...
    def observe_delivered(self, hook_id: str, outcome: str) -> None: ...
    def circuit(self, hook_id: str, is_open: bool) -> None: ...


class NullTelemetry:
    def begin(self, headers: Mapping[str, str], event: Mapping[str, Any]) -> Any:
        return None

    def outbound_headers(self, trace: Any, key: str, upstream: str) -> Mapping[str, str] | None:
        return None

    def settled(self, decision: Decision, trace: Any = None) -> None:
        return None

    def inflight(self, delta: int) -> None:
        return None

    def rejected(self, method: str, reason: str) -> None:
        return None

    def discovery(self, method: str) -> None:
        return None

    def routed(self, hook_id: str) -> None:
        return None

    def cel_error(self, expression_id: str) -> None:
        return None

    def parallel_fallback(self) -> None:
        return None

    def shadow(self, hook_id: str, verdict: str) -> None:
        return None

    def observe_received(self, status: str) -> None:
        return None

    def observe_dropped(self, reason: str) -> None:
        return None

    def observe_queue(self, depth: int) -> None:
        return None

    def observe_delivered(self, hook_id: str, outcome: str) -> None:
        return None

    def circuit(self, hook_id: str, is_open: bool) -> None:
        return None
