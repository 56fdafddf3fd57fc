"""``bench.instructions --by-object`` (docs/design/performance.md): the share of instructions per shared
object, read from a real callgrind dump, adds up to callgrind's own total and names the objects
that ran."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.paths import ROOT

if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.instructions import by_object  # noqa: E402


@pytest.mark.skipif(shutil.which("valgrind") is None, reason="valgrind is installed by .ci/run")
def test_shares_by_object_add_up_to_the_dumps_total(tmp_path: Path) -> None:
    dump = tmp_path / "cg.out"
    subprocess.run(
        ["valgrind", "--tool=callgrind", f"--callgrind-out-file={dump}", "/bin/sh", "-c", "echo x | wc -c >/dev/null"],
        check=True,
        capture_output=True,
        timeout=120,
    )
    totals = next(int(line.split()[1]) for line in dump.read_text().splitlines() if line.startswith("totals:"))
    spent = by_object(dump)
    assert sum(spent.values()) == totals
    names = {Path(name).name for name in spent}
    assert any(name.startswith("libc.so") for name in names), names
    assert any(name.startswith("ld-linux") for name in names), names
    assert all(count > 0 for count in spent.values())


def test_each_stage_runs_the_calls_it_is_given(tmp_path: Path) -> None:
    """``--stages`` subtracts a run of ``bench.stages`` with 0 calls from one with N: every stage
    must run on the real calls (a stage that fails to start would count nothing), and a wrong
    stage name is refused, not counted as an empty run."""
    from bench import realmix

    try:
        realmix.load_cases()
    except realmix.CorpusMissing:
        pytest.skip("the realcmds corpus is not beside the checkout")
    for stage in ("facts", "decision", "rest"):
        done = subprocess.run(
            [sys.executable, "-m", "bench.stages", stage, "3", "7"], cwd=ROOT, capture_output=True, timeout=300
        )
        assert done.returncode == 0, done.stderr[-2000:]
    bad = subprocess.run([sys.executable, "-m", "bench.stages", "nope", "3", "7"], cwd=ROOT, capture_output=True)
    assert bad.returncode != 0 and b"usage" in bad.stderr
