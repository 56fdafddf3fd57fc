"""A recording telemetry sink for tests: what the core returned (every exchange, the decisions
among them, the observation statuses) and the live reports."""

from __future__ import annotations

from typing import Any

from gateway.pipeline.exchange import Exchange
from gateway.telemetry import NullTelemetry


class Capture(NullTelemetry):
    """Keeps what the core returned: every exchange, the decisions among them and the
    observation statuses (drop reasons included), plus the live reports."""

    def __init__(self) -> None:
        self.exchanges: list[Exchange] = []
        self.decisions: list[Any] = []
        self.observed: list[str] = []
        self.delivered: list[tuple[str, str]] = []
        self.shadows: list[tuple[str, str]] = []
        self.cel_errors: list[str] = []

    def exchanged(self, exchange: Exchange) -> None:
        self.exchanges.append(exchange)
        if exchange.decision is not None:
            self.decisions.append(exchange.decision)
        if exchange.observed is not None:
            self.observed.append(exchange.observed)

    def observe_delivered(self, hook_id: str, outcome: str) -> None:
        self.delivered.append((hook_id, outcome))

    def shadow(self, hook_id: str, verdict: str) -> None:
        self.shadows.append((hook_id, verdict))

    def cel_error(self, expression_id: str) -> None:
        self.cel_errors.append(expression_id)
