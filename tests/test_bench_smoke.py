"""Smoke test of the benchmark suite (bench/): ``python -m bench.run --quick`` starts every
scenario's processes, measures briefly, and writes the Markdown table and the JSON results with a
row for every scenario. The numbers of a quick run are not checked; only that the suite works
against the current gateway (configurations load, probes get the expected answers)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

pytestmark = pytest.mark.skipif(
    shutil.which("wrk") is None,
    reason="wrk is not installed (apt-get install -y wrk); the benchmark measures throughput with it",
)


def test_quick_run_writes_table_and_json(tmp_path: Path) -> None:
    from bench.scenarios import ALL

    out = tmp_path / "results"
    done = subprocess.run(
        [sys.executable, "-m", "bench.run", "--quick", "--out", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=110,
    )
    assert done.returncode == 0, f"exit {done.returncode}\n{done.stdout[-3000:]}\n{done.stderr[-5000:]}"

    table = (out / "results.md").read_text(encoding="utf-8")
    data = json.loads((out / "results.json").read_text(encoding="utf-8"))
    assert "| Scenario | Throughput (req/s) |" in table
    for scenario in ALL:
        assert f"| {scenario.key} {scenario.title} |" in table, f"no table row for {scenario.key}"
        result = data["scenarios"].get(scenario.key)
        assert result is not None, f"no JSON result for {scenario.key}"
        assert not result.get("error"), f"{scenario.key} failed: {result.get('error')}"
        assert result["repetitions"] == 1
        assert result["rss_peak_mb"] > 0
        if scenario.throughput:
            assert result["throughput_rps"] > 0, f"{scenario.key} served no request"
    assert {row["target"] for row in data["targets"]} and "## Targets" in table
    machine = data["machine"]
    for key in ("cpu_model", "cores", "python", "kernel"):
        assert machine.get(key), f"machine description lacks {key}"


@pytest.mark.skipif(shutil.which("valgrind") is None, reason="valgrind is not installed (apt-get install -y valgrind)")
def test_instruction_count_of_a_live_gateway() -> None:
    """``bench.instructions`` runs the gateway under callgrind and counts its instructions per
    request: a count that is neither zero nor absurd, printed as a table row."""
    done = subprocess.run(
        [sys.executable, "-m", "bench.instructions", "--only", "S2", "--n", "160"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, f"exit {done.returncode}\n{done.stdout[-3000:]}\n{done.stderr[-5000:]}"
    row = next(line for line in done.stdout.splitlines() if line.startswith("| S2 |"))
    count = int(row.split("|")[2].replace(",", ""))
    assert 100_000 < count < 5_000_000, row
