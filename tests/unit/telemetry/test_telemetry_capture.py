"""The recording sink tests use (tests/support/telemetry.py) and a check that the null sink is complete."""

from __future__ import annotations

from gateway.telemetry import NullTelemetry


def test_null_telemetry_implements_the_protocol():
    from gateway.telemetry import Telemetry

    sink: Telemetry = NullTelemetry()
    assert sink.outbound_headers(None, "org.example.a#0", "org.example.a") is None
