"""The compiled build (``AHP_GATEWAY_MYPYC=1``, setup.py): the modules mypyc compiles (the policy
facts, the rule index, the memo, the CEL activation and programs) must derive exactly the facts
and give exactly the answers of the interpreted modules, on real traffic and on every policy case.

mypyc checks declared types at run time, so a value the annotations do not allow (a ``None``
where ``str`` is declared) raises in the compiled build where the interpreter would carry on:
only a comparison on real inputs shows that the two builds agree. The build runs ``setup.py`` as
``pip wheel`` does, in a copy of the sources, so no compiled module lands in the checkout.

Without the real-traffic data (``../shared/realcmds``) the tests are skipped, unless ``CI`` is
set: then they fail.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest

from bench.compiled import build
from gateway.assemble import Assembly
from gateway.config.load import load
from gateway.policy.facts import for_event
from gateway.telemetry import NullTelemetry
from tests.support.paths import ROOT
from tests.support.processes import run_group
from tests.support.realcmds import body, cases

pytestmark = [pytest.mark.deploy, pytest.mark.slow]

BUILD_TIMEOUT = 900
"""Seconds for mypyc and the C compiler (about 70 s on one idle core)."""

WORKER = r"""
import asyncio, sys, orjson
import gateway.policy.facts.shell.walker as walker
from gateway.assemble import Assembly
from gateway.build import facts_build
from gateway.config.load import load
from gateway.assemble import Assembly
from gateway.config.load import load
from gateway.policy.facts import for_event
from gateway.telemetry import NullTelemetry
from gateway.telemetry import NullTelemetry
assert walker.__file__.endswith(".so") and facts_build() == "compiled", walker.__file__
bodies = orjson.loads(sys.stdin.buffer.read())
gateway = Assembly(load(None), telemetry=NullTelemetry()).gateway
async def answers():
    return [(await gateway.handle(b.encode(), {})).answer.decode() for b in bodies]
facts = [for_event(orjson.loads(b)["params"]["event"]) for b in bodies]
out = {"facts": facts, "answers": asyncio.run(answers())}
sys.stdout.buffer.write(orjson.dumps(out, option=orjson.OPT_SORT_KEYS))
"""


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


def _run_compiled(src: Path, bodies: list[str]) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(src)}
    proc = run_group([sys.executable, "-c", WORKER], cwd=src, env=env, timeout=600, stdin=orjson.dumps(bodies))
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")[-4000:]
    out = orjson.loads(proc.stdout)
    assert isinstance(out, dict)
    return out


def _answers(bodies: list[str]) -> list[str]:
    gateway = Assembly(load(None), telemetry=NullTelemetry()).gateway

    async def run() -> list[str]:
        out = []
        for each in bodies:
            answer = (await gateway.handle(each.encode(), {})).answer
            assert answer is not None
            out.append(answer.decode())
        return out

    return asyncio.run(run())


def test_the_checkout_reports_interpreted_facts() -> None:
    """``ahp_gateway_build_info{facts}``: the editable checkout has no compiled module."""
    from gateway.build import facts_build

    assert facts_build() == "interpreted"


@pytest.mark.parametrize("name", ["corpus.json", "dangerous.json"])
def test_the_compiled_build_derives_the_same_facts_and_answers_on_real_calls(compiled: Path, name: str) -> None:
    """Every real call as the default gateway answers it (the same request path as the HTTP front
    end, minus the socket): the facts and the whole answer, byte for byte."""
    bodies = [body(n, c).decode() for n, c in enumerate(cases(name))]
    got = _run_compiled(compiled, bodies)
    facts = [
        orjson.loads(orjson.dumps(for_event(json.loads(b)["params"]["event"]), option=orjson.OPT_SORT_KEYS))
        for b in bodies
    ]
    differ = [n for n, (a, b) in enumerate(zip(facts, got["facts"], strict=True)) if a != b]
    assert not differ, f"{len(differ)} calls have other facts, first: {bodies[differ[0]][:300]}"
    answers = _answers(bodies)
    differ = [n for n, (a, b) in enumerate(zip(answers, got["answers"], strict=True)) if a != b]
    assert not differ, f"{len(differ)} calls have another answer, first: {bodies[differ[0]][:300]}"
    assert all('"result"' in a for a in answers), "every call is decided, none refused"
    if name == "dangerous.json":  # so the two builds do not merely agree on allowing everything
        assert all('"deny"' in a or '"ask"' in a for a in answers)


def test_the_policy_cases_pass_on_the_compiled_build(compiled: Path) -> None:
    """``policy test`` of the bundled library, every case of every rule, on the compiled build."""
    env = {**os.environ, "PYTHONPATH": str(compiled)}
    argv = [sys.executable, "-m", "gateway.cli", "policy", "test", str(ROOT / "policies")]
    proc = run_group(argv, cwd=compiled, env=env, timeout=600)
    interpreted = run_group(argv, cwd=ROOT, env=os.environ.copy(), timeout=600)
    assert proc.returncode == 0, proc.stdout.decode(errors="replace")[-4000:]
    assert proc.stdout == interpreted.stdout
