"""The sink the engine reports to (metrics, decision log, tracing).

Each harness message is recorded once, from the :class:`~gateway.pipeline.exchange.Exchange`
the core returns (:meth:`Telemetry.exchanged`, called by ``Gateway.handle``). Only what cannot
wait for the exchange is still reported while it happens:

- ``begin`` / ``outbound_headers``: trace context must exist before the upstream calls go out;
- ``inflight``, ``observe_queue``: live gauges, read while requests are running;
- ``cel_error``, ``circuit``, ``shadow``, ``observe_delivered``: also raised by work that belongs to
  no exchange (observation workers, background shadow calls, breaker transitions).

:class:`NullTelemetry` keeps the engine usable without a sink.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from gateway.pipeline.exchange import Exchange


class Telemetry(Protocol):
    def begin(self, headers: Mapping[str, str], event: Mapping[str, Any]) -> Any: ...
    def outbound_headers(self, trace: Any, key: str, upstream: str) -> Mapping[str, str] | None: ...
    def exchanged(self, exchange: Exchange) -> None: ...
    def inflight(self, delta: int) -> None: ...
    def cel_error(self, expression_id: str) -> None: ...
    def shadow(self, hook_id: str, verdict: str) -> None: ...
    def observe_queue(self, depth: int) -> None: ...
    def observe_delivered(self, hook_id: str, outcome: str) -> None: ...
    def circuit(self, hook_id: str, is_open: bool) -> None: ...


class NullTelemetry:
    def begin(self, headers: Mapping[str, str], event: Mapping[str, Any]) -> Any:
        return None

    def outbound_headers(self, trace: Any, key: str, upstream: str) -> Mapping[str, str] | None:
        return None

    def exchanged(self, exchange: Exchange) -> None:
        return None

    def inflight(self, delta: int) -> None:
        return None

    def cel_error(self, expression_id: str) -> None:
        return None

    def shadow(self, hook_id: str, verdict: str) -> None:
        return None

    def observe_queue(self, depth: int) -> None:
        return None

    def observe_delivered(self, hook_id: str, outcome: str) -> None:
        return None

    def circuit(self, hook_id: str, is_open: bool) -> None:
        return None
