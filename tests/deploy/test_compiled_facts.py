"""The compiled build (``AHP_GATEWAY_MYPYC=1``, setup.py): the policy facts compiled by mypyc must
derive exactly what the interpreted modules derive, on real traffic and on every policy case.

mypyc checks declared types at run time, so a value the annotations do not allow (a ``None``
where ``str`` is declared) raises in the compiled build where the interpreter would carry on:
only a comparison on real inputs shows that the two builds agree. The build runs ``setup.py`` as
``pip wheel`` does, in a copy of the sources, so no compiled module lands in the checkout.

Without the real-traffic data (``../shared/realcmds``) the tests are skipped, unless ``CI`` is
set: then they fail.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest

from bench.compiled import build
from gateway.policy.facts import for_event
from tests.support.paths import ROOT
from tests.support.processes import run_group

pytestmark = [pytest.mark.deploy, pytest.mark.slow]

DATA = ROOT.parent / "shared" / "realcmds"
DEFAULT_ROOT = "/home/dev/proj"
BUILD_TIMEOUT = 900
"""Seconds for mypyc and the C compiler (about 70 s on one idle core)."""

WORKER = r"""
import sys, orjson
import gateway.policy.facts.shell.walker as walker
from gateway.policy.facts import for_event
from gateway.build import facts_build
assert walker.__file__.endswith(".so") and facts_build() == "compiled", walker.__file__
out = [for_event(e) for e in orjson.loads(sys.stdin.buffer.read())]
sys.stdout.buffer.write(orjson.dumps(out, option=orjson.OPT_SORT_KEYS))
"""


def _cases(name: str) -> list[dict[str, Any]]:
    path = DATA / name
    if not path.is_file():
        reason = f"real-traffic data not found: {path} (expected beside the repository)"
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)
    data = json.loads(path.read_text(encoding="utf-8"))
    assert isinstance(data, list) and data
    return data


def _event(n: int, case: dict[str, Any]) -> dict[str, Any]:
    session = case.get("session") or {}
    return {
        "id": f"evt-{n}",
        "type": "tool.before",
        "session": {
            "id": "s",
            "cwd": session.get("cwd", DEFAULT_ROOT),
            "workspaceRoots": session.get("workspaceRoots", [DEFAULT_ROOT]),
        },
        "tool": {"name": case["tool"], "origin": "native", "input": case["input"]},
    }


@pytest.fixture(scope="module")
def compiled(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the sources with the facts compiled in place, as the wheel would carry them."""
    if shutil.which("cc") is None and shutil.which("gcc") is None:
        message = "no C compiler (apt-get install gcc)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    src = build(tmp_path_factory.mktemp("compiled"), timeout=BUILD_TIMEOUT)
    built = sorted(p.relative_to(src).as_posix() for p in (src / "gateway").rglob("*.so"))
    assert "gateway/policy/facts/shell/walker" in " ".join(built), built
    assert not any("programs" in b for b in built), "the program table's pydantic models stay interpreted"
    return src


def _compiled_facts(src: Path, events: list[dict[str, Any]]) -> list[Any]:
    env = {**os.environ, "PYTHONPATH": str(src)}
    proc = run_group([sys.executable, "-c", WORKER], cwd=src, env=env, timeout=600, stdin=orjson.dumps(events))
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")[-4000:]
    return list(orjson.loads(proc.stdout))


def test_the_checkout_reports_interpreted_facts() -> None:
    """``ahp_gateway_build_info{facts}``: the editable checkout has no compiled module."""
    from gateway.build import facts_build

    assert facts_build() == "interpreted"


@pytest.mark.parametrize("name", ["corpus.json", "dangerous.json"])
def test_compiled_facts_equal_the_interpreted_ones_on_real_calls(compiled: Path, name: str) -> None:
    events = [_event(n, c) for n, c in enumerate(_cases(name))]
    want = [orjson.loads(orjson.dumps(for_event(e), option=orjson.OPT_SORT_KEYS)) for e in events]
    got = _compiled_facts(compiled, events)
    differ = [n for n, (a, b) in enumerate(zip(want, got, strict=True)) if a != b]
    assert not differ, f"{len(differ)} calls differ, first: {events[differ[0]]['tool']}"


def test_the_policy_cases_pass_on_the_compiled_build(compiled: Path) -> None:
    """``policy test`` of the bundled library, every case of every rule, with the compiled facts."""
    env = {**os.environ, "PYTHONPATH": str(compiled)}
    argv = [sys.executable, "-m", "gateway.cli", "policy", "test", str(ROOT / "policies")]
    proc = run_group(argv, cwd=compiled, env=env, timeout=600)
    interpreted = run_group(argv, cwd=ROOT, env=os.environ.copy(), timeout=600)
    assert proc.returncode == 0, proc.stdout.decode(errors="replace")[-4000:]
    assert proc.stdout == interpreted.stdout
