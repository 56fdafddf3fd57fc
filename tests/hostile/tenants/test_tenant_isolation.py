"""One tenant must not be able to change what another tenant's request gets.

Issue 28 item 1 (AHP-CAP-001, AHP-FAIL-001): an answer that is invalid only because of the
caller's own request (an effect that request did not advertise) is that request's failure, settled
by the hook's failure policy, but it says nothing about the upstream's health: it must never count
toward the shared circuit breaker, or one tenant could switch a policy off for every tenant.
"""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from tests.e2e.test_inbound_auth import send
from tests.support.client import wait_for
from tests.support.config import gateway_config, hook
from tests.support.events import intercept, result, tool_before
from tests.support.tokens import TOKEN_A, TOKEN_B, tokens_file

GUARD = "org.example.shared-guard"
DENY = {"type": "deny", "reason": "force pushes are not allowed", "code": "org.example.force-push"}


@pytest.mark.spec("AHP-CAP-001")
@pytest.mark.spec("AHP-FAIL-001")
async def test_cap_001_unadvertised_effects_a_caller_provokes_never_open_the_shared_breaker(
    gateway_factory, stub_factory, http, tmp_path
):
    """Tenant A advertises only ``message``; the guard denies anyway (invalid for A's request,
    fail-open: A gets no objection). Five such requests must leave the breaker closed, so tenant
    B's force push is still denied by the guard."""
    tokens_file(tmp_path / "tokens.yaml", (TOKEN_A, "team-a", {"tenant": "a"}), (TOKEN_B, "team-b", {"tenant": "b"}))
    guard = await stub_factory(lambda r: result(r, [DENY]))
    cfg = gateway_config(
        [hook(GUARD, guard.url, policy="fail-open", circuitBreaker={"failureThreshold": 5, "openSeconds": 60})],
        inbound={"auth": {"type": "bearer", "tokensFile": "tokens.yaml"}},
    )
    gw = await gateway_factory(cfg)
    as_a = {"Authorization": f"Bearer {TOKEN_A}"}
    as_b = {"Authorization": f"Bearer {TOKEN_B}"}
    for _ in range(5):
        status, body, _ = await send(http, gw.url, intercept(tool_before("git status"), {"effects": ["message"]}), as_a)
        assert status == 200 and body["result"]["effects"] == [], body
    assert len(guard.received) == 5
    status, body, _ = await send(http, gw.url, intercept(tool_before("git push --force origin main")), as_b)
    assert status == 200, body
    assert len(guard.received) == 6, "the guard was not called: its breaker was opened by another tenant"
    effects = body["result"]["effects"]
    assert [e["type"] for e in effects] == ["deny"] and effects[0]["code"] == DENY["code"], effects


# ------------------------------------------------------------------------------------------------
# Caller-provoked timeouts (issue 28, closing note): a call's budget is min(timeoutMs, what is left
# of limits.deadlineMs); nothing in a request sets it, but earlier work of the same request uses
# the deadline (its tenant's own backend first in the chain, re-uploads of its attachments, the
# local policy's analysis of its input). A timeout within a budget cut short that way is not the
# shared upstream's fault and must not open its breaker for every tenant.

TENANT_A_HANGS_MS = 1200
GUARD_ANSWERS_S = 1.0
GUARD_TIMEOUT_MS = 1500
DEADLINE_MS = 2000


async def _two_tenants(gateway_factory, stub_factory, tmp_path, fast_lane: bool = True):
    """[team-a's own backend (only for team-a, hangs), shared guard (answers in 1 s, threshold 3,
    fail-open)]: team-a's requests leave the guard 0.8 s of its 1.5 s."""
    tokens_file(tmp_path / "tokens.yaml", (TOKEN_A, "team-a", {"tenant": "a"}), (TOKEN_B, "team-b", {"tenant": "b"}))

    async def hang(request):
        await asyncio.sleep(30)
        return result(request, [])

    async def slow_deny(request):
        await asyncio.sleep(GUARD_ANSWERS_S)
        command = request["params"]["event"]["tool"]["input"].get("command", "")
        return result(request, [DENY] if "--force" in command else [])

    own = await stub_factory(hang)
    guard = await stub_factory(slow_deny)
    entries = [
        hook(
            "org.example.team-a-own",
            own.url,
            policy="fail-open",
            timeout=TENANT_A_HANGS_MS,
            when='principal.name == "team-a"',
        ),
        hook(
            GUARD,
            guard.url,
            policy="fail-open",
            timeout=GUARD_TIMEOUT_MS,
            circuitBreaker={"failureThreshold": 3, "openSeconds": 60},
        ),
    ]
    cfg = gateway_config(
        entries,
        inbound={"auth": {"type": "bearer", "tokensFile": "tokens.yaml"}},
        limits={"deadlineMs": DEADLINE_MS, "maxBodyBytes": 1048576},
        log={"decisions": "off"},
    )
    cfg["listen"]["fastLane"] = fast_lane
    gw = await gateway_factory(cfg, name=f"tenants-{fast_lane}.yaml")
    return gw, guard


async def _force_push_as_b(http, gw, guard) -> None:
    calls = len(guard.received)
    status, body, _ = await send(http, gw.url, intercept(tool_before("git push --force origin main")), AS_B)
    assert status == 200, body
    assert len(guard.received) == calls + 1, "the guard was not called: its breaker was opened by another tenant"
    assert [e["type"] for e in body["result"]["effects"]] == ["deny"], body


AS_A = {"Authorization": f"Bearer {TOKEN_A}"}
AS_B = {"Authorization": f"Bearer {TOKEN_B}"}


@pytest.mark.spec("AHP-FAIL-001")
async def test_fail_001_timeouts_within_a_budget_the_caller_cut_short_never_open_the_shared_breaker(
    gateway_factory, stub_factory, http, tmp_path
):
    gw, guard = await _two_tenants(gateway_factory, stub_factory, tmp_path)
    answers = await asyncio.gather(*(send(http, gw.url, intercept(tool_before("git status")), AS_A) for _ in range(4)))
    for status, body, _ in answers:
        assert status == 200 and body["result"]["effects"] == [], body  # both fail-open: no objection
    assert len(guard.received) == 4  # the guard was called each time, and timed out each time
    samples = gw.observability.metrics.render()[0].decode()
    assert f'ahp_gateway_upstream_calls_total{{outcome="timeout",upstream="{GUARD}"}} 4.0' in samples, samples
    assert gw.holder.breakers.open() == []
    await _force_push_as_b(http, gw, guard)


@pytest.mark.spec("AHP-FAIL-001")
async def test_fail_001_the_guard_own_timeouts_still_open_its_breaker(gateway_factory, stub_factory, http, tmp_path):
    """The other side: a guard too slow for its own full timeoutMs is charged as before."""
    gw, guard = await _two_tenants(gateway_factory, stub_factory, tmp_path)

    async def hang(request):
        await asyncio.sleep(30)
        return result(request, [])

    guard.answer = hang
    await asyncio.gather(*(send(http, gw.url, intercept(tool_before("git status")), AS_B) for _ in range(3)))
    assert gw.holder.breakers.open() == [GUARD]


@pytest.mark.spec("AHP-FAIL-001")
@pytest.mark.parametrize("fast_lane", [True, False], ids=["fast-lane", "aiohttp"])
async def test_fail_001_a_caller_that_disconnects_never_charges_the_shared_breaker(
    gateway_factory, stub_factory, http, tmp_path, fast_lane
):
    """The harness's own timeout: team-b's client gives up while the guard is answering (three
    times, threshold three). Its cancelled calls are not the guard's failures."""
    gw, guard = await _two_tenants(gateway_factory, stub_factory, tmp_path, fast_lane)
    for _ in range(3):
        calls = len(guard.received)
        task = asyncio.ensure_future(send(http, gw.url, intercept(tool_before("git status")), AS_B))
        await wait_for(lambda calls=calls: len(guard.received) > calls, 10)
        task.cancel()  # the connection closes: the gateway cancels the upstream call
        with contextlib.suppress(asyncio.CancelledError):
            await task
    await wait_for(lambda: gw.holder.current is not None and _inflight(gw) == 0, 10)
    assert gw.holder.breakers.open() == []
    await _force_push_as_b(http, gw, guard)


def _inflight(gw) -> float:
    for line in gw.observability.metrics.render()[0].decode().splitlines():
        if line.startswith("ahp_gateway_inflight_requests "):
            return float(line.split()[-1])
    return 0.0
