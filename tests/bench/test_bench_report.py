"""The benchmark report's targets (bench/report.py): a throughput ratio is judged on the medians
and shown in every repetition, and a target one repetition missed is not reported as plainly met
(the machine's load moves between repetitions; docs/design/performance.md → Targets)."""

from __future__ import annotations

import sys
from typing import Any

from tests.support.paths import ROOT

if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench import report  # noqa: E402


def _run(scenario: str, repetition: int, rps: float) -> dict[str, Any]:
    """One measured repetition of a scenario, shaped as ``bench.run`` records it."""
    result = {"rps": rps, "latency_ms": {"p50": 1.0, "p99": 2.0}, "failed": 0}
    return {
        "scenario": scenario,
        "repetition": repetition,
        "saturation": {"result": result, "cpu_s_per_1k": 0.1, "utilization": 1.0},
        "rates": {},
        "memory": {"hwm_mb": 50.0, "rss_mb": 50.0},
    }


def _row(instances: list[dict[str, Any]], name: str) -> dict[str, Any]:
    rows = report.targets(report.aggregate(instances, ()), instances)
    return next(r for r in rows if r["target"].startswith(name))


def test_a_repetition_below_the_threshold_is_shown_and_qualifies_the_verdict() -> None:
    runs = [_run("S1", 0, 100), _run("S2", 0, 110), _run("S1", 1, 100), _run("S2", 1, 98), _run("S1", 2, 80)]
    runs.append(_run("S2", 2, 100))
    row = _row(runs, "S2 throughput ≥ 1.0")
    assert row["per_repetition"] == [1.1, 0.98, 1.25]
    assert row["met"] is True and row["robust"] is False
    assert report.verdict(row) == "met on the median, not in every repetition"


def test_a_target_met_in_every_repetition_is_met() -> None:
    runs = [_run("S2", r, 100) for r in range(3)] + [_run("S7", r, 95 - r) for r in range(3)]
    row = _row(runs, "S7")
    assert row["robust"] is True and report.verdict(row) == "met"


def test_a_repetition_one_side_missed_is_left_out_and_one_repetition_judges_nothing() -> None:
    runs = [_run("S0n", 0, 200), _run("S5", 0, 120), _run("S0n", 1, 200), {**_run("S5", 1, 0), "error": "boom"}]
    row = _row(runs, "S5 throughput ≥ 0.5 × a bare")
    assert row["per_repetition"] == [0.6]
    assert row["robust"] is None and report.verdict(row) == "met"


def test_a_median_below_the_threshold_is_not_met() -> None:
    runs = [_run("S1", r, 100) for r in range(3)] + [_run("S2", r, v) for r, v in enumerate((120, 90, 80))]
    assert report.verdict(_row(runs, "S2 throughput ≥ 1.0")) == "**not met**"
