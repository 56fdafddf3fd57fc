"""Persistent stdio upstreams as a pool of real child processes (AHP-STDIO-001: one outstanding
intercept per process), their restarts, and bounded stderr capture."""

from __future__ import annotations

import asyncio
import logging
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from gateway.upstream.stdio import RESTART_MAX_SECONDS, StderrBudget, restart_delay
from tests.support.client import post, wait_for
from tests.support.config import gateway_config
from tests.support.events import intercept, tool_before
from tests.support.paths import ROOT
from tests.support.processes import alive, pids

SYNTHETIC = "org.example.gateway.upstream_unavailable"


def scripted(
    mode: str,
    arg: str = "",
    *,
    lifecycle: str = "persistent",
    pool: int | None = None,
    starts: Path | None = None,
    timeout: int = 5000,
    policy: str = "fail-closed",
) -> dict[str, Any]:
    transport: dict[str, Any] = {
        "type": "stdio",
        "command": sys.executable,
        "args": ["-m", "tests.support.stdio_scripted", mode, *([arg] if arg else [])],
        "lifecycle": lifecycle,
        "cwd": str(ROOT),
    }
    if pool is not None:
        transport["pool"] = {"size": pool}
    if starts is not None:
        transport["env"] = {"STARTS_FILE": str(starts)}
    return {
        "id": f"org.example.{mode}",
        "transport": transport,
        "subscriptions": [
            {
                "mode": "intercept",
                "events": ["tool.before"],
                "timeoutMs": timeout,
                "failurePolicy": policy,
                "content": {"default": "body"},
            }
        ],
    }


# ------------------------------------------------------------------------------------------------
# pure parts


def test_restart_backoff_doubles_and_is_capped():
    assert restart_delay(0) == 0
    delays = [restart_delay(n) for n in range(1, 12)]
    assert delays[:3] == [0.05, 0.1, 0.2]
    assert all(b >= a for a, b in zip(delays, delays[1:], strict=False))
    assert max(delays) == RESTART_MAX_SECONDS


def test_stderr_budget_is_a_token_bucket():
    now = [0.0]
    budget = StderrBudget(burst=3, rate=1.0, clock=lambda: now[0])
    assert [budget.take() for _ in range(5)] == [True, True, True, False, False]
    now[0] = 2.0
    assert [budget.take() for _ in range(3)] == [True, True, False]
    assert budget.dropped == 3


def test_pool_needs_a_persistent_lifecycle(tmp_path):
    from gateway.config.issues import ConfigError
    from gateway.config.load import load

    cfg = gateway_config([scripted("sleep", "0", lifecycle="per_event", pool=2)])
    path = tmp_path / "gateway.json"
    import json

    path.write_text(json.dumps(cfg))
    with pytest.raises(ConfigError) as info:
        load(path)
    assert "pool applies to lifecycle: persistent only" in str(info.value.issues)


# ------------------------------------------------------------------------------------------------
# concurrency


async def run_batch(gateway_factory, http, tmp_path: Path, size: int, n: int = 16) -> tuple[float, list[int]]:
    starts = tmp_path / f"starts-{size}"
    gw = await gateway_factory(
        gateway_config(
            [scripted("sleep", "0.15", pool=size, starts=starts, timeout=20000)],
            limits={"deadlineMs": 20000},
        ),
        name=f"gateway-{size}.yaml",
    )

    async def one(command: str) -> None:
        _, body = await post(http, gw.url, intercept(tool_before(command)))
        assert body["result"]["effects"] == [], body

    await asyncio.gather(*(one("warm") for _ in range(size)))  # start every child first
    started = time.perf_counter()
    await asyncio.gather(*(one(f"job {i}") for i in range(n)))
    return time.perf_counter() - started, pids(starts)


@pytest.mark.spec("AHP-STDIO-001")
async def test_sixteen_concurrent_intercepts_with_pool_of_four_take_a_quarter_of_serial(
    gateway_factory, http, tmp_path
):
    """One outstanding intercept per child, four children: 16 concurrent intercepts need about a
    quarter of the time one child needs for them (compared within this test, not absolutely)."""
    serial, serial_children = await run_batch(gateway_factory, http, tmp_path, 1)
    pooled, pooled_children = await run_batch(gateway_factory, http, tmp_path, 4)
    assert len(serial_children) == 1 and len(pooled_children) == 4
    ratio = pooled / serial
    assert 0.1 < ratio < 0.5, (serial, pooled)


async def test_a_hanging_child_does_not_block_its_siblings(gateway_factory, http, tmp_path):
    starts = tmp_path / "starts"
    gw = await gateway_factory(
        gateway_config([scripted("hang-on", "stuck", pool=2, starts=starts, timeout=1500)], limits={"deadlineMs": 5000})
    )
    stuck = asyncio.ensure_future(post(http, gw.url, intercept(tool_before("stuck"))))
    await wait_for(lambda: len(pids(starts)) == 1)
    _, body = await post(http, gw.url, intercept(tool_before("fine")))
    assert body["result"]["effects"] == []
    assert not stuck.done()  # the sibling answered while the stuck child was still silent
    _, body = await stuck
    assert body["result"]["effects"][0]["code"] == SYNTHETIC
    hung = pids(starts)[0]
    await wait_for(lambda: not alive(hung))  # killed on the timeout, never reused
    _, body = await post(http, gw.url, intercept(tool_before("fine again")))
    assert body["result"]["effects"] == []


# ------------------------------------------------------------------------------------------------
# failures and restarts


async def test_a_crashed_child_is_restarted(gateway_factory, http, tmp_path):
    starts = tmp_path / "starts"
    gw = await gateway_factory(gateway_config([scripted("crash-on", "boom", starts=starts)]))
    _, body = await post(http, gw.url, intercept(tool_before("boom")))
    assert body["result"]["effects"][0]["code"] == SYNTHETIC  # crash mid-request: fail-closed
    _, body = await post(http, gw.url, intercept(tool_before("ls")))
    assert body["result"]["effects"] == []
    assert len(pids(starts)) == 2


@pytest.mark.spec("AHP-STDIO-001")
async def test_a_child_printing_a_banner_on_stdout_is_killed_and_replaced(gateway_factory, http, tmp_path, caplog):
    """Nothing but responses may appear on a backend's stdout: the banner is malformed output,
    the child is killed (never asked again), the call fails under its policy, and the banner text
    reaches neither the harness nor the log."""
    caplog.set_level(logging.INFO)
    starts = tmp_path / "starts"
    gw = await gateway_factory(gateway_config([scripted("banner", starts=starts)]))
    for expected_children in (1, 2):
        _, body = await post(http, gw.url, intercept(tool_before("ls")))
        assert body["result"]["effects"][0]["code"] == SYNTHETIC
        assert "ready" not in str(body)
        assert len(pids(starts)) == expected_children
        first = pids(starts)[-1]
        await wait_for(lambda first=first: not alive(first))
    assert "backend v1.2 ready" not in caplog.text
    assert "malformed JSON line" in caplog.text


async def test_restarts_back_off(gateway_factory, http, tmp_path):
    """A child that fails on every start is restarted less and less often: requests that arrive
    during the back-off fail at once instead of starting yet another child."""
    starts = tmp_path / "starts"
    gw = await gateway_factory(
        gateway_config([scripted("banner", starts=starts, timeout=40, policy="fail-open")], limits={"deadlineMs": 500})
    )
    results = [await post(http, gw.url, intercept(tool_before("ls"))) for _ in range(30)]
    assert all(body["result"]["effects"] == [] for _, body in results)  # fail-open
    assert len(pids(starts)) < 30  # back-off: fewer children than requests
    await wait_for(lambda: not any(alive(p) for p in pids(starts)), 10)  # none left running unowned


# ------------------------------------------------------------------------------------------------
# stderr and the SDK backend


async def test_stderr_is_captured_bounded(gateway_factory, http, tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="ahp_gateway.stdio")
    gw = await gateway_factory(gateway_config([scripted("stderr", "200", lifecycle="per_event")]))
    _, body = await post(http, gw.url, intercept(tool_before()))
    assert body["result"]["effects"] == []
    await wait_for(lambda: "stderr lines dropped" in caplog.text)
    lines = [r.getMessage() for r in caplog.records if "stderr: diagnostic" in r.getMessage()]
    assert 0 < len(lines) <= 60
    assert all(len(line) < 700 for line in lines)


@pytest.mark.spec("AHP-STDIO-001")
async def test_sdk_stdio_backend_in_a_pool(gateway_factory, http):
    entry = {
        "id": "org.example.sdk-pool",
        "transport": {
            "type": "stdio",
            "command": sys.executable,
            "args": ["-m", "tests.support.stdio_backend", "sdk"],
            "lifecycle": "persistent",
            "cwd": str(ROOT),
            "pool": {"size": 3},
        },
        "subscriptions": [
            {
                "mode": "intercept",
                "events": ["tool.before"],
                "timeoutMs": 8000,
                "failurePolicy": "fail-closed",
                "content": {"default": "body"},
            }
        ],
    }
    gw = await gateway_factory(gateway_config([entry], limits={"deadlineMs": 9000}))
    commands = ["git push --force", "git status", "git push --force origin", "ls"]
    answers = await asyncio.gather(*(post(http, gw.url, intercept(tool_before(c))) for c in commands))
    verdicts = [[e["reason"] for e in body["result"]["effects"]] for _, body in answers]
    assert verdicts == [["stdio says no"], [], ["stdio says no"], []]
