"""Fault matrix, stdio rows (issue 28 items 2, 3 and 6): a stdio upstream started directly or
through a wrapper shell (``/bin/sh -c "python3 backend.py"``, the shape of ``npx`` and ``uv run``:
the backend is a grandchild) × {starts slower than its timeout, hangs, crashes} × {fail-open,
fail-closed}, and hot reloads under load with warm pools.

For each cell, as in ``test_faults_matrix.py``: the settled answer is right (a synthetic deny
naming the failure class under fail-closed, the rest of the chain under fail-open; AHP-FAIL-001),
within the deadline; the breaker (threshold 1) opens and closes again once the backend answers;
and no backend process outlives what the gateway killed (the whole process group goes).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import shlex
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.support.client import post, wait_for
from tests.support.config import gateway_config, hook
from tests.support.events import intercept, result, tool_before
from tests.support.paths import ROOT
from tests.support.processes import alive, pids

GATEWAY = "org.example.gateway"
ADV = "org.example.stdio"
AFTER = "org.example.after"
CAPS = {"effects": ["deny", "message"]}
AFTER_MESSAGE = {"type": "message", "text": "after ran"}
TIMEOUT_MS = 600
DEADLINE_MS = 1500
SLOW_START_S = 1.0
OPEN_SECONDS = 0.2
SLACK = 1.5
"""Seconds beyond the deadline a loaded 2-core machine may add."""
FAULT = "FAULT-MARKER"
PY = shlex.quote(sys.executable)
FAILURE = {"hang": "timeout", "crash": "connect", "slow_start": "timeout"}


def backend(mode: str, launch: str, starts: Path, *, slow: float = 0.0) -> dict[str, Any]:
    """The stdio transport: ``tests.support.stdio_scripted MODE`` after ``slow`` seconds, run
    directly (exec'd by python) or as the grandchild of a wrapper shell that does not exec it."""
    args = ["-m", "tests.support.stdio_scripted", *mode.split()]
    transport: dict[str, Any] = {
        "type": "stdio",
        "lifecycle": "persistent",
        "cwd": str(ROOT),
        "env": {"STARTS_FILE": str(starts)},
    }
    if launch == "wrapped":
        line = " ".join([PY, *(shlex.quote(a) for a in args)])
        transport.update(command="/bin/sh", args=["-c", f"sleep {slow}; {line}; exit $?"])
    else:
        code = (
            f"import runpy, sys, time; time.sleep({slow}); sys.argv = ['stdio_scripted', *{mode.split()!r}]; "
            "runpy.run_module('tests.support.stdio_scripted', run_name='__main__')"
        )
        transport.update(command=sys.executable, args=["-c", code])
    return transport


def _config(transport: dict[str, Any], after_url: str, policy: str, **extra: Any) -> dict[str, Any]:
    entry = hook(
        ADV,
        "http://unused",
        policy=policy,
        timeout=TIMEOUT_MS,
        circuitBreaker={"failureThreshold": 1, "openSeconds": OPEN_SECONDS},
    )
    entry["transport"] = {**transport, **extra}
    after = hook(AFTER, after_url, policy="fail-open", timeout=TIMEOUT_MS)
    return gateway_config([entry, after], limits={"deadlineMs": DEADLINE_MS}, log={"decisions": "off"})


def _expected(policy: str, failure: str) -> list[dict[str, Any]]:
    if policy == "fail-open":
        return [AFTER_MESSAGE]
    return [
        {
            "type": "deny",
            "reason": "Required policy backend unavailable",
            "code": f"{GATEWAY}.upstream_unavailable",
            "extensions": {GATEWAY: {"upstream": ADV, "kind": "synthetic", "failure": failure}},
        }
    ]


async def _ask(http: Any, gw: Any, command: str) -> tuple[list[dict[str, Any]], float]:
    started = time.monotonic()
    status, body = await post(http, gw.url, intercept(tool_before(command), CAPS))
    assert status == 200 and "result" in body, body
    return body["result"]["effects"], time.monotonic() - started


def _answered_by_backend(effects: list[dict[str, Any]]) -> bool:
    return bool(effects) and effects[0].get("reason", "").startswith("pid ")


async def _recovers(http: Any, gw: Any) -> None:
    """Within openSeconds and a (slow) start, a probe reaches a backend and closes the circuit."""
    deadline = time.monotonic() + OPEN_SECONDS + SLOW_START_S + 4 * SLACK
    while True:
        effects, _ = await _ask(http, gw, "git status")
        if _answered_by_backend(effects) and gw.holder.breakers.open() == []:
            return
        assert time.monotonic() < deadline, f"circuit did not recover: {effects}"
        await asyncio.sleep(0.05)


@pytest.mark.spec("AHP-FAIL-001")
@pytest.mark.spec("AHP-STDIO-001")
@pytest.mark.parametrize("policy", ["fail-open", "fail-closed"])
@pytest.mark.parametrize("fault", ["slow_start", "hang", "crash"])
@pytest.mark.parametrize("launch", ["direct", "wrapped"])
async def test_stdio_fault(gateway_factory, stub_factory, http, tmp_path, launch, fault, policy):
    starts = tmp_path / "starts"
    after = await stub_factory(lambda r: result(r, [AFTER_MESSAGE]))
    if fault == "slow_start":
        transport = backend("pid", launch, starts, slow=SLOW_START_S)
    else:
        transport = backend(f"{'hang' if fault == 'hang' else 'crash'}-on {FAULT} pid", launch, starts)
    gw = await gateway_factory(_config(transport, after.url, policy))
    if fault != "slow_start":  # a child that has answered, then faults
        effects, _ = await _ask(http, gw, "git status")
        assert _answered_by_backend(effects), effects
    first = pids(starts)
    effects, elapsed = await _ask(http, gw, f"git push --force {FAULT}")
    assert effects == _expected(policy, FAILURE[fault]), effects
    assert elapsed < DEADLINE_MS / 1000 + SLACK
    assert gw.holder.breakers.open() == [ADV]  # threshold 1: the backend's own fault is charged
    if fault == "hang":  # the timed-out child is killed with its whole group: the grandchild too
        await wait_for(lambda: not any(alive(p) for p in first), 10)
    await _recovers(http, gw)
    if fault == "slow_start":  # the starting child was kept and answers: one start in all
        assert len(pids(starts)) == 1, pids(starts)
    live = [p for p in pids(starts) if alive(p)]
    assert len(live) <= 1, f"backends left running: {live}"


@pytest.mark.spec("AHP-STDIO-001")
@pytest.mark.parametrize("launch", ["direct", "wrapped"])
async def test_reload_under_load_keeps_warm_pools_and_ends_retired_groups(
    gateway_factory, stub_factory, http, tmp_path, launch
):
    """Issue 28 item 3 under load, with slow starters and wrappers: three reloads of an unchanged
    file keep both warm children (no request falls back, every answer from them); a reload that
    changes the pool retires it, and every process of the old groups ends."""
    starts = tmp_path / "starts"
    after = await stub_factory(lambda r: result(r, [AFTER_MESSAGE]))
    transport = backend("pid", launch, starts, slow=0.5)
    cfg = _config(transport, after.url, "fail-open", pool={"size": 2, "minIdle": 2, "startTimeoutMs": 5000})
    gw = await gateway_factory(cfg)
    await wait_for(lambda: len(pids(starts)) == 2, 15)  # warmed at load
    answers: list[str] = []
    stop = asyncio.Event()

    async def load() -> None:
        while not stop.is_set():
            effects, _ = await _ask(http, gw, "git push --force origin main")
            answers.append(effects[0]["reason"] if _answered_by_backend(effects) else "fail-open")

    workers = [asyncio.ensure_future(load()) for _ in range(2)]
    try:
        await wait_for(lambda: len(answers) >= 6, 15)
        warm = set(pids(starts))
        for _ in range(3):
            assert await gw.reload()
            reloaded_at = len(answers)
            await wait_for(lambda reloaded_at=reloaded_at: len(answers) >= reloaded_at + 10, 15)
        assert "fail-open" not in answers, answers
        assert set(pids(starts)) == warm and all(alive(p) for p in warm)
        # a changed pool: the old one is retired once its requests finish, its groups end
        path = tmp_path / "gateway.yaml"
        path.write_text(path.read_text().replace("size: 2", "size: 1").replace("minIdle: 2", "minIdle: 1"))
        assert await gw.reload()
        await wait_for(lambda: not any(alive(p) for p in warm), 15)
    finally:
        stop.set()
        await asyncio.gather(*workers)


@pytest.mark.spec("AHP-FAIL-001")
@pytest.mark.spec("AHP-STDIO-001")
@pytest.mark.parametrize("launch", ["direct", "wrapped"])
async def test_a_tenant_cutting_its_calls_short_keeps_the_shared_child(
    gateway_factory, stub_factory, http, tmp_path, launch
):
    """Hostile tenants and a shared stdio pool of one child: team-a's own backend hangs first in
    its chain, so the guard's calls for team-a time out within a budget team-a cut short, and
    team-a also disconnects mid-call. The child is kept (its late answers dropped by id), never
    put into restart back-off and never charged: team-b is answered by the same warm child."""
    from tests.support.tokens import TOKEN_A, TOKEN_B, tokens_file

    tokens_file(tmp_path / "tokens.yaml", (TOKEN_A, "team-a", {}), (TOKEN_B, "team-b", {}))
    starts = tmp_path / "starts"

    async def hang(request: dict[str, Any]) -> Any:
        await asyncio.sleep(30)
        return result(request, [])

    own = await stub_factory(hang)
    guard = hook(
        ADV,
        "http://unused",
        policy="fail-closed",
        timeout=900,
        circuitBreaker={"failureThreshold": 1, "openSeconds": 60},
    )
    guard["transport"] = {**backend("slow-pid 0.4", launch, starts), "pool": {"size": 1, "minIdle": 1}}
    cfg = gateway_config(
        [
            hook("org.example.team-a-own", own.url, policy="fail-open", timeout=900, when='principal.name == "team-a"'),
            guard,
        ],
        inbound={"auth": {"type": "bearer", "tokensFile": "tokens.yaml"}},
        limits={"deadlineMs": 1200},
        log={"decisions": "off"},
    )
    gw = await gateway_factory(cfg)
    as_a, as_b = {"Authorization": f"Bearer {TOKEN_A}"}, {"Authorization": f"Bearer {TOKEN_B}"}

    async def ask(headers: dict[str, str]) -> list[dict[str, Any]]:
        data = json.dumps(intercept(tool_before("git push --force"), CAPS))
        async with http.post(gw.url, data=data, headers={"Content-Type": "application/json", **headers}) as answer:
            assert answer.status == 200
            body = await answer.json()
        return body["result"]["effects"]

    first = await ask(as_b)
    assert _answered_by_backend(first), first
    for _ in range(2):  # cut short: the synthetic deny of fail-closed for team-a's own request
        effects = await ask(as_a)
        assert effects[0]["extensions"][GATEWAY]["failure"] == "timeout", effects
    task = asyncio.ensure_future(ask(as_a))
    await asyncio.sleep(1.0)  # past its own backend's 0.9 s: the guard's call is in flight
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    assert gw.holder.breakers.open() == []
    again = await ask(as_b)
    assert again == first, "team-b was not answered by the same warm child"
    assert len(pids(starts)) == 1, pids(starts)
