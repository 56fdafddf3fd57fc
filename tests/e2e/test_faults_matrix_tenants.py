"""Fault matrix, hostile-tenant rows (issue 28 item 1 and its closing note): two tenants share one
guard and its circuit breaker (threshold 3). Tenant A provokes failures of the guard that its own
request caused × {fast lane, aiohttp} × {fail-open, fail-closed}:

- ``not_granted``: A advertises only ``message``; the guard denies anyway (invalid for A's request);
- ``cut_short``: A's own backend runs first in the chain (routed by A's principal) and hangs, so
  the guard gets what is left of the deadline and times out within it (AHP-FAIL-001);
- ``disconnect``: A gives up (its own harness timeout) while the guard is answering.

A's requests get the guard's failure policy (fail-open: no objection; fail-closed: a synthetic
deny); none of it is charged to the guard's breaker, so B's force push, afterwards, is still
decided by the guard itself: its explicit deny, never ``circuit_open``. The other side — the
guard's own timeouts at its full ``timeoutMs`` are charged — is the last test.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.support.client import wait_for
from tests.support.config import gateway_config, hook
from tests.support.events import intercept, result, tool_before
from tests.support.tokens import TOKEN_A, TOKEN_B, tokens_file

GATEWAY = "org.example.gateway"
GUARD = "org.example.shared-guard"
OWN = "org.example.team-a-own"
DENY = {"type": "deny", "reason": "force pushes are not allowed", "code": "org.example.force-push"}
AS_A = {"Authorization": f"Bearer {TOKEN_A}"}
AS_B = {"Authorization": f"Bearer {TOKEN_B}"}
THRESHOLD = 3
OWN_HANGS_MS = 1200
GUARD_ANSWERS_S = 1.0
GUARD_TIMEOUT_MS = 1500
DEADLINE_MS = 2000
"""A's requests leave the guard 0.8 s of its 1.5 s: it answers in 1 s, so it times out for A only."""


async def _send(http: aiohttp.ClientSession, url: str, body: Any, headers: dict[str, str]) -> tuple[int, Any]:
    data = json.dumps(body).encode()
    async with http.post(url, data=data, headers={"Content-Type": "application/json", **headers}) as answer:
        return answer.status, await answer.json()


async def _rig(gateway_factory: Any, stub_factory: Any, tmp_path: Path, provocation: str, lane: str, policy: str):
    tokens_file(tmp_path / "tokens.yaml", (TOKEN_A, "team-a", {}), (TOKEN_B, "team-b", {}))

    async def guard_answer(request: dict[str, Any]) -> Any:
        if provocation != "not_granted":
            await asyncio.sleep(GUARD_ANSWERS_S)
        command = request["params"]["event"]["tool"]["input"].get("command", "")
        return result(request, [DENY] if provocation == "not_granted" or "--force" in command else [])

    async def hang(request: dict[str, Any]) -> Any:
        await asyncio.sleep(30)
        return result(request, [])

    guard = await stub_factory(guard_answer)
    entries = [
        hook(
            GUARD,
            guard.url,
            policy=policy,
            timeout=GUARD_TIMEOUT_MS,
            circuitBreaker={"failureThreshold": THRESHOLD, "openSeconds": 60},
        )
    ]
    if provocation == "cut_short":
        own = await stub_factory(hang)
        when = 'principal.name == "team-a"'
        entries.insert(0, hook(OWN, own.url, policy="fail-open", timeout=OWN_HANGS_MS, when=when))
    cfg = gateway_config(
        entries,
        inbound={"auth": {"type": "bearer", "tokensFile": "tokens.yaml"}},
        limits={"deadlineMs": DEADLINE_MS, "maxBodyBytes": 1048576},
        log={"decisions": "off"},
    )
    cfg["listen"]["fastLane"] = lane == "fast-lane"
    return await gateway_factory(cfg), guard


def _inflight(gw: Any) -> float:
    for line in gw.observability.metrics.render()[0].decode().splitlines():
        if line.startswith("ahp_gateway_inflight_requests "):
            return float(line.split()[-1])
    raise AssertionError("no ahp_gateway_inflight_requests sample")


def _a_request(provocation: str) -> dict[str, Any]:
    caps = {"effects": ["message"]} if provocation == "not_granted" else {"effects": ["deny", "message"]}
    return intercept(tool_before("git status"), caps)


def _failed_as(policy: str, body: dict[str, Any]) -> bool:
    """The guard's failure policy for A's own request: fail-open, no objection; fail-closed, a
    synthetic deny, or -32003 when A did not advertise ``deny``."""
    if "error" in body:
        return policy == "fail-closed" and body["error"]["code"] == -32003
    effects = body["result"]["effects"]
    if policy == "fail-open":
        return effects == []
    return [e["type"] for e in effects] == ["deny"] and effects[0]["extensions"][GATEWAY]["kind"] == "synthetic"


@pytest.mark.spec("AHP-FAIL-001")
@pytest.mark.spec("AHP-CAP-001")
@pytest.mark.parametrize("policy", ["fail-open", "fail-closed"])
@pytest.mark.parametrize("lane", ["fast-lane", "aiohttp"])
@pytest.mark.parametrize("provocation", ["not_granted", "cut_short", "disconnect"])
async def test_a_tenant_cannot_open_the_shared_breaker(
    gateway_factory, stub_factory, http, tmp_path, provocation, lane, policy
):
    gw, guard = await _rig(gateway_factory, stub_factory, tmp_path, provocation, lane, policy)
    if provocation == "disconnect":
        for _ in range(THRESHOLD):
            calls = len(guard.received)
            task = asyncio.ensure_future(_send(http, gw.url, _a_request(provocation), AS_A))
            await wait_for(lambda calls=calls: len(guard.received) > calls, 10)
            task.cancel()  # the connection closes: the gateway cancels the guard's call
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await wait_for(lambda: _inflight(gw) == 0, 10)  # the gateway saw each disconnect
    else:
        answers = await asyncio.gather(
            *(_send(http, gw.url, _a_request(provocation), AS_A) for _ in range(THRESHOLD + 1))
        )
        for status, body in answers:
            assert status == 200 and _failed_as(policy, body), body
    assert len(guard.received) >= THRESHOLD, "the guard was not called for A"
    assert gw.holder.breakers.open() == []
    calls = len(guard.received)
    status, body = await _send(http, gw.url, intercept(tool_before("git push --force origin main")), AS_B)
    assert status == 200, body
    assert len(guard.received) == calls + 1, "the guard was not called: another tenant opened its breaker"
    effects = body["result"]["effects"]
    assert [e["type"] for e in effects] == ["deny"] and effects[0]["code"] == DENY["code"], effects


@pytest.mark.spec("AHP-FAIL-001")
async def test_the_guard_own_timeouts_at_its_full_timeout_still_open_its_breaker(
    gateway_factory, stub_factory, http, tmp_path
):
    gw, guard = await _rig(gateway_factory, stub_factory, tmp_path, "cut_short", "fast-lane", "fail-open")

    async def hang(request: dict[str, Any]) -> Any:
        await asyncio.sleep(30)
        return result(request, [])

    guard.answer = hang
    await asyncio.gather(*(_send(http, gw.url, _a_request("cut_short"), AS_B) for _ in range(THRESHOLD)))
    assert gw.holder.breakers.open() == [GUARD]
