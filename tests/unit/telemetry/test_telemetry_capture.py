"""A recording telemetry sink used by tests (and a check that the null sink is complete)."""

from __future__ import annotations

from typing import Any

from gateway.telemetry import NullTelemetry


class Capture(NullTelemetry):
    def __init__(self) -> None:
        self.decisions: list[Any] = []
        self.observed: list[str] = []
        self.delivered: list[tuple[str, str]] = []
        self.shadows: list[tuple[str, str]] = []
        self.cel_errors: list[str] = []

    def settled(self, decision: Any, trace: Any = None) -> None:
        self.decisions.append(decision)

    def observe_received(self, status: str) -> None:
        self.observed.append(status)

    def observe_delivered(self, hook_id: str, outcome: str) -> None:
        self.delivered.append((hook_id, outcome))

    def shadow(self, hook_id: str, verdict: str) -> None:
        self.shadows.append((hook_id, verdict))

    def cel_error(self, expression_id: str) -> None:
        self.cel_errors.append(expression_id)


def test_null_telemetry_implements_the_protocol():
    from gateway.telemetry import Telemetry

    sink: Telemetry = NullTelemetry()
    assert sink.outbound_headers(None, "org.example.a#0", "org.example.a") is None
