"""The per-upstream circuit breaker: unit rules with an injected clock, then end to end over
loopback HTTP — above all that a cancelled call (harness disconnect, decided parallel chain)
can never leave a breaker stuck open (AHP-FAIL-001: a failure must never decide by accident)."""

from __future__ import annotations

import asyncio

import pytest
import yaml

from gateway.upstream.circuit import NORMAL, PROBE, REFUSED, Breakers, CircuitBreaker
from tests.support.client import post, wait_for
from tests.support.config import gateway_config, hook
from tests.support.events import intercept, result, tool_before


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def failing(breaker: CircuitBreaker, times: int) -> None:
    for _ in range(times):
        breaker.release(breaker.acquire(), False)


def test_opens_after_threshold_consecutive_failures_only():
    clock = Clock()
    b = CircuitBreaker(3, 5.0, clock)
    failing(b, 2)
    b.release(b.acquire(), True)  # a success resets the count
    failing(b, 2)
    assert not b.is_open and b.acquire() == NORMAL
    b.release(NORMAL, False)
    assert b.is_open
    assert b.acquire() == REFUSED


def test_single_half_open_probe_then_close_on_success():
    clock = Clock()
    b = CircuitBreaker(2, 5.0, clock)
    failing(b, 2)
    clock.now += 4.9
    assert b.acquire() == REFUSED
    clock.now += 0.2
    assert b.acquire() == PROBE
    assert b.acquire() == REFUSED  # exactly one probe at a time
    assert b.release(PROBE, True) is True  # state changed: closed
    assert not b.is_open and b.acquire() == NORMAL


def test_failed_probe_reopens_for_a_full_period():
    clock = Clock()
    b = CircuitBreaker(1, 5.0, clock)
    failing(b, 1)
    clock.now += 5
    permit = b.acquire()
    assert permit == PROBE
    assert b.release(permit, False) is False  # still open
    clock.now += 4.9
    assert b.acquire() == REFUSED
    clock.now += 0.2
    assert b.acquire() == PROBE


def test_cancelled_probe_frees_the_slot_without_counting():
    clock = Clock()
    b = CircuitBreaker(1, 5.0, clock)
    failing(b, 1)
    clock.now += 5
    assert b.acquire() == PROBE
    assert b.release(PROBE, None) is False
    assert b.acquire() == PROBE  # the next call may probe at once
    b.release(PROBE, True)
    assert not b.is_open


def test_cancelled_normal_call_is_not_counted():
    b = CircuitBreaker(1, 5.0, Clock())
    assert b.release(b.acquire(), None) is False
    assert not b.is_open
    assert b.acquire() == NORMAL


def test_refused_permit_release_changes_nothing():
    clock = Clock()
    b = CircuitBreaker(1, 5.0, clock)
    failing(b, 1)
    assert b.release(REFUSED, True) is False
    assert b.is_open


def test_a_new_hook_gets_a_breaker_with_its_own_settings():
    fresh = Breakers().for_hook("org.example.new", 2, 7.5)
    assert (fresh.threshold, fresh.open_seconds, fresh.is_open) == (2, 7.5, False)
    failing(fresh, 1)
    assert not fresh.is_open
    failing(fresh, 1)
    assert fresh.is_open


def test_registry_keeps_breakers_across_snapshots_and_changes_nothing_before_adopt():
    reg = Breakers()
    first = reg.for_hook("org.example.a", 2, 5.0)
    assert reg.for_hook("org.example.a", 2, 5.0) is not first  # nothing registered yet
    reg.adopt([("org.example.a", first, 2, 5.0)])
    failing(first, 2)
    again = reg.for_hook("org.example.a", 9, 1.0)
    assert again is first and again.threshold == 2  # settings change only on adopt
    assert reg.open() == ["org.example.a"]
    reg.adopt([("org.example.a", again, 9, 1.0)])
    assert first.threshold == 9 and not first.is_open
    reg.adopt([])
    assert reg.states() == {}


def _breaker_config(url: str, **extra):
    return gateway_config(
        [
            hook(
                "org.example.a",
                url,
                policy="fail-closed",
                timeout=1500,
                circuitBreaker={"failureThreshold": 1, "openSeconds": 0.2},
            )
        ],
        **extra,
    )


async def _open_then_probe(gw, http, answers: dict[str, str]):
    answers["mode"] = "fail"
    _, body = await post(http, gw.url, intercept(tool_before()))
    assert body["result"]["effects"][0]["code"] == "org.example.gateway.upstream_unavailable"
    assert gw.holder.breakers.open() == ["org.example.a"]


async def test_harness_disconnect_during_probe_never_strands_the_breaker(gateway_factory, stub_factory, http):
    """Issue: a cancelled half-open probe left the circuit open forever."""
    answers = {"mode": "ok"}
    probe_started = asyncio.Event()

    async def answer(r):
        if answers["mode"] == "fail":
            return 500, b"down"
        if answers["mode"] == "hang":
            probe_started.set()
            await asyncio.sleep(30)
        return result(r, [])

    stub = await stub_factory(answer)
    gw = await gateway_factory(_breaker_config(stub.url))
    await _open_then_probe(gw, http, answers)
    await asyncio.sleep(0.25)  # the open period (0.2 s) elapses; the next call is the probe
    answers["mode"] = "hang"
    task = asyncio.ensure_future(post(http, gw.url, intercept(tool_before())))
    await asyncio.wait_for(probe_started.wait(), 5)
    task.cancel()  # the harness goes away mid-probe
    with pytest.raises(asyncio.CancelledError):
        await task
    answers["mode"] = "ok"

    async def recovered() -> bool:
        _, body = await post(http, gw.url, intercept(tool_before()))
        return body["result"]["effects"] == []

    loop = asyncio.get_running_loop()
    deadline = loop.time() + 5
    while not await recovered():
        assert loop.time() < deadline, "the breaker never let a probe through again"
        await asyncio.sleep(0.05)
    assert gw.holder.breakers.open() == []


async def test_parallel_cancel_of_later_calls_is_not_counted(gateway_factory, stub_factory, http):
    """fanout: parallel cancels calls after the deciding deny; those never count as failures."""
    slow_started = asyncio.Event()

    async def slow(r):
        slow_started.set()
        await asyncio.sleep(30)
        return result(r, [])

    first = await stub_factory(lambda r: result(r, [{"type": "deny", "reason": "no"}]))
    later = await stub_factory(slow)
    cfg = gateway_config(
        [
            hook("org.example.first", first.url),
            hook("org.example.later", later.url, circuitBreaker={"failureThreshold": 1, "openSeconds": 60}),
        ],
        fanout="parallel",
    )
    gw = await gateway_factory(cfg)
    for _ in range(3):
        slow_started.clear()
        _, body = await post(http, gw.url, intercept(tool_before()))
        assert body["result"]["effects"][0]["type"] == "deny"
        await asyncio.wait_for(slow_started.wait(), 5)
    await asyncio.sleep(0)  # let the cancelled calls finish unwinding
    await wait_for(lambda: gw.holder.breakers.states().get("org.example.later") is False)


async def test_reload_keeps_breaker_state_and_removes_dropped_hooks(gateway_factory, stub_factory, http):
    stub = await stub_factory(lambda r: (500, b"down"))
    gw = await gateway_factory(_breaker_config(stub.url))
    await post(http, gw.url, intercept(tool_before()))
    assert gw.holder.breakers.open() == ["org.example.a"]
    assert await gw.reload()
    assert gw.holder.breakers.open() == ["org.example.a"]  # the same hook keeps its breaker
    readyz = f"http://127.0.0.1:{gw.admin_port}/readyz"
    async with http.get(readyz) as resp:
        assert (await resp.json())["openCircuits"] == ["org.example.a"]
    gw.loaded.path.write_text(yaml.safe_dump(gateway_config([hook("org.example.b", stub.url)])))
    assert await gw.reload()
    assert gw.holder.breakers.states() == {"org.example.b": False}
    async with http.get(readyz) as resp:
        assert (await resp.json())["openCircuits"] == []
