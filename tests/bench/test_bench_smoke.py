"""Smoke test of the benchmark suite (bench/): ``python -m bench.run --quick`` starts every
scenario's processes, measures briefly, and writes the Markdown table and the JSON results with a
row for every scenario. The numbers of a quick run are not checked; only that the suite works
against the current gateway (configurations load, probes get the expected answers)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.paths import ROOT

if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

pytestmark = pytest.mark.skipif(
    shutil.which("wrk") is None,
    reason="wrk is not installed (apt-get install -y wrk); the benchmark measures throughput with it",
)


def run_bounded(argv: list[str], timeout: float, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``argv`` in a process group of its own; on timeout the group gets SIGTERM (the runner then
    stops every process it started, by PID), then SIGKILL."""
    proc = subprocess.Popen(
        argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True, env=env
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.communicate(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
        raise
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)


def corpus_present() -> bool:
    from bench.realmix import corpus_path

    return corpus_path().is_file()


def test_quick_run_writes_table_and_json(tmp_path: Path) -> None:
    from bench.scenarios import ALL

    out = tmp_path / "results"
    done = run_bounded([sys.executable, "-m", "bench.run", "--quick", "--out", str(out)], timeout=150)
    assert done.returncode == 0, f"exit {done.returncode}\n{done.stdout[-3000:]}\n{done.stderr[-5000:]}"

    table = (out / "results.md").read_text(encoding="utf-8")
    data = json.loads((out / "results.json").read_text(encoding="utf-8"))
    assert "| Scenario | Throughput (req/s) |" in table
    for scenario in ALL:
        assert f"| {scenario.key} {scenario.title} |" in table, f"no table row for {scenario.key}"
        result = data["scenarios"].get(scenario.key)
        assert result is not None, f"no JSON result for {scenario.key}"
        assert not result.get("error"), f"{scenario.key} failed: {result.get('error')}"
        if scenario.key == "S8" and not corpus_present():  # the corpus is not part of the repository
            assert "does not exist" in result["skipped"]
            continue
        assert result["repetitions"] == 1
        assert result["rss_peak_mb"] > 0
        if scenario.throughput:
            assert result["throughput_rps"] > 0, f"{scenario.key} served no request"
    assert {row["target"] for row in data["targets"]} and "## Targets" in table
    machine = data["machine"]
    for key in ("cpu_model", "cores", "python", "kernel"):
        assert machine.get(key), f"machine description lacks {key}"


def test_quick_s8_run_replays_real_calls_with_valid_answers(tmp_path: Path) -> None:
    """S8 alone, quick: the sample check passed before measuring, every answer of every load was
    a result (no error counted), no load ran out of fresh bodies, and the decision log saw the
    requests with no failed backend call."""
    if not corpus_present():
        pytest.skip("the realcmds corpus is not there (AHP_REALCMDS)")
    out = tmp_path / "results"
    done = run_bounded(
        [sys.executable, "-m", "bench.run", "--quick", "--only", "S8", "--seed", "8", "--out", str(out)], timeout=120
    )
    assert done.returncode == 0, f"exit {done.returncode}\n{done.stdout[-3000:]}\n{done.stderr[-5000:]}"
    assert "sample check passed: 200 calls" in done.stderr and "seed 8" in done.stderr
    data = json.loads((out / "results.json").read_text(encoding="utf-8"))
    assert data["realmix"]["seed"] == 8 and data["realmix"]["sample"] == 200 and not data["realmix"]["error"]
    result = data["scenarios"]["S8"]
    assert result["repetitions"] == 1 and result["throughput_rps"] > 0
    assert result["errors_sat"] == 0 and all(r["errors"] == 0 for r in result["rates"].values())
    assert result["mix"]["wraps"] == 0 and result["mix"]["requests"] > 0
    assert result["mix"]["effectful"] < result["mix"]["requests"] / 10  # real everyday calls: rarely an effect
    decisions = result["decisions"]
    assert sum(decisions["outcomes"].values()) >= result["mix"]["requests"] * 0.9 and not decisions["failures"]
    assert "| S8 " in (out / "results.md").read_text(encoding="utf-8")


def test_inprocess_mix_measures_the_cpu_per_decision() -> None:
    if not corpus_present():
        pytest.skip("the realcmds corpus is not there (AHP_REALCMDS)")
    done = run_bounded([sys.executable, "-m", "bench.inprocess", "--mix", "--n", "300", "--seed", "3"], timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "seed 3" in done.stdout and "µs CPU per decision (n=300)" in done.stdout


@pytest.mark.skipif(shutil.which("valgrind") is None, reason="valgrind is not installed (apt-get install -y valgrind)")
@pytest.mark.timeout(330)  # its own bound (300 s) applies, not the suite's 120 s
def test_instruction_count_of_a_live_gateway() -> None:
    """``bench.instructions`` runs the gateway under callgrind and counts its instructions per
    request: a count that is neither zero nor absurd, printed as a table row."""
    done = run_bounded([sys.executable, "-m", "bench.instructions", "--only", "S2", "--n", "160"], timeout=300)
    assert done.returncode == 0, f"exit {done.returncode}\n{done.stdout[-3000:]}\n{done.stderr[-5000:]}"
    row = next(line for line in done.stdout.splitlines() if line.startswith("| S2 |"))
    count = int(row.split("|")[2].replace(",", ""))
    assert 100_000 < count < 5_000_000, row


@pytest.mark.skipif(shutil.which("valgrind") is None, reason="valgrind is not installed (apt-get install -y valgrind)")
@pytest.mark.timeout(330)  # its own bound (300 s) applies, not the suite's 120 s
def test_instruction_count_of_s8() -> None:
    """S8 under callgrind: the default gateway, real calls it has not seen, a plausible count
    (more than a repeated command answered by the memo)."""
    if not corpus_present():
        pytest.skip("the realcmds corpus is not there (AHP_REALCMDS)")
    argv = [sys.executable, "-m", "bench.instructions", "--only", "S8", "--n", "160", "--warm", "64", "--seed", "1"]
    done = run_bounded(argv, timeout=300)
    assert done.returncode == 0, f"exit {done.returncode}\n{done.stdout[-3000:]}\n{done.stderr[-5000:]}"
    row = next(line for line in done.stdout.splitlines() if line.startswith("| S8 |"))
    count = int(row.split("|")[2].replace(",", ""))
    assert 300_000 < count < 50_000_000, row
