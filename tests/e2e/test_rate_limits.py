"""``rateLimits`` with a real redis-server: a principal over its limit is answered -32003 at once
(protocol §3 error codes: the gateway temporarily unable to evaluate; the harness applies its own
failure policy for the gateway, §9) by every replica, another principal is unaffected, ``scope:
local`` counts per process, observations over the limit are dropped and counted, and Redis
failing follows ``onStateError`` until it answers again."""

from __future__ import annotations

import asyncio
import copy
import json
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml

from tests.support.client import metric
from tests.support.config import gateway_config, hook
from tests.support.events import intercept, tool_before
from tests.support.redis_server import redis_server
from tests.support.tokens import TOKEN_A, TOKEN_B, tokens_file

SLOW = 0.001
"""requestsPerSecond of limits whose bucket must not refill during a test (one token per 1000 s)."""


@pytest.fixture
def redis(tmp_path: Path):
    with redis_server(tmp_path / "redis") as server:
        yield server


def limited_config(upstream_url: str, redis_url: str | None, limits: list[dict[str, Any]]) -> dict[str, Any]:
    cfg = gateway_config(
        [hook("org.example.policy", upstream_url, events=["tool.before"])],
        inbound={"auth": {"type": "bearer", "tokensFile": "tokens.yaml"}},
        rateLimits=limits,
    )
    if redis_url is not None:
        cfg["state"] = {
            "redis": {"url": redis_url, "keyPrefix": "rl-test:", "timeoutMs": 1500}
        }  # a loaded CI machine must not turn into fail-open
    return cfg


def per_principal(burst: int, **extra: Any) -> dict[str, Any]:
    return {"id": "per-principal", "key": "principal.name", "requestsPerSecond": SLOW, "burst": burst, **extra}


async def replicas(gateway_factory, stub_factory, tmp_path, redis_url, limits):
    tokens_file(tmp_path / "tokens.yaml", (TOKEN_A, "team-a", {"team": "a"}), (TOKEN_B, "team-b", {}))
    upstream = await stub_factory()
    cfg = limited_config(upstream.url, redis_url, limits)
    one = await gateway_factory(cfg, name="one.yaml")
    two = await gateway_factory(copy.deepcopy(cfg), name="two.yaml")
    return one, two, upstream


_ids = iter(range(1_000_000))


async def call(http: aiohttp.ClientSession, gw: Any, token: str) -> dict[str, Any]:
    event = tool_before(id=f"evt-{next(_ids)}")
    headers = {"Content-Type": "application/json", "Authorization": f"Bearer {token}"}
    async with http.post(gw.url, data=json.dumps(intercept(event)), headers=headers) as response:
        assert response.status == 200
        return await response.json()  # type: ignore[no-any-return]


def limited(body: dict[str, Any], limit: str = "per-principal") -> bool:
    error = body.get("error")
    if error is None:
        return False
    assert error["code"] == -32003 and limit in error["message"], error
    assert error["data"]["limit"] == limit and error["data"]["retryAfterMs"] >= 1
    return True


@pytest.mark.spec("AHP-RPC-002")
async def test_a_principal_over_its_shared_limit_across_both_replicas_another_unaffected(
    gateway_factory, stub_factory, tmp_path, redis, http
):
    one, two, upstream = await replicas(gateway_factory, stub_factory, tmp_path, redis.url, [per_principal(4)])
    answers = [await call(http, (one, two)[i % 2], TOKEN_A) for i in range(6)]
    assert [limited(a) for a in answers] == [False] * 4 + [True] * 2, "one bucket for both replicas"
    assert len(upstream.received) == 4, "a limited intercept never reaches the chain"
    others = [await call(http, (two, one)[i % 2], TOKEN_B) for i in range(4)]
    assert not any(limited(a) for a in others)
    total = metric(one, 'ahp_gateway_rate_limited_total{limit="per-principal"}') + metric(
        two, 'ahp_gateway_rate_limited_total{limit="per-principal"}'
    )
    assert total == 2
    assert metric(one, 'ahp_gateway_rejected_requests_total{code="-32003",method="hooks/intercept"}') == 1
    assert metric(one, "ahp_gateway_state_seconds_count" + '{op="ratelimit"}') >= 3


async def test_the_bucket_refills_at_requests_per_second(gateway_factory, stub_factory, tmp_path, redis, http):
    """20 per second, burst 1: once refused, the answer says when the next token comes (at most
    50 ms), and it does come then, through the other replica."""
    limit = {"id": "per-principal", "key": "principal.name", "requestsPerSecond": 20, "burst": 1}
    one, two, _ = await replicas(gateway_factory, stub_factory, tmp_path, redis.url, [limit])
    assert not limited(await call(http, one, TOKEN_A))
    for _ in range(100):  # a slow machine may take over 50 ms per call: call until refused
        refused = await call(http, two, TOKEN_A)
        if limited(refused):
            break
    else:
        raise AssertionError("never refused at 20 per second")
    retry = refused["error"]["data"]["retryAfterMs"]
    assert 1 <= retry <= 50
    await asyncio.sleep(retry / 1000 + 0.01)
    assert not limited(await call(http, two, TOKEN_A)), "a token is back after retryAfterMs"


async def test_scope_local_counts_per_process(gateway_factory, stub_factory, tmp_path, http):
    """No Redis at all: each replica has its own bucket."""
    one, two, _ = await replicas(gateway_factory, stub_factory, tmp_path, None, [per_principal(2, scope="local")])
    assert [limited(await call(http, one, TOKEN_A)) for _ in range(3)] == [False, False, True]
    assert [limited(await call(http, two, TOKEN_A)) for _ in range(3)] == [False, False, True]
    assert not limited(await call(http, one, TOKEN_B))


async def test_limits_are_checked_in_order_and_the_first_exceeded_answers(
    gateway_factory, stub_factory, tmp_path, redis, http
):
    limits = [
        {"id": "everyone", "key": "'all'", "requestsPerSecond": SLOW, "burst": 5, "scope": "local"},
        per_principal(2),
        {"id": "by-team", "key": "principal.attributes.team", "requestsPerSecond": SLOW, "burst": 1, "onError": "skip"},
    ]
    one, _, _ = await replicas(gateway_factory, stub_factory, tmp_path, redis.url, limits)
    first = await call(http, one, TOKEN_A)
    assert not limited(first)
    assert limited(await call(http, one, TOKEN_A), "by-team"), "team a has one token"
    assert limited(await call(http, one, TOKEN_A), "per-principal"), "the earlier limit answers first"
    # team-b has no team attribute: onError skip lets by-team pass
    assert not limited(await call(http, one, TOKEN_B)) and not limited(await call(http, one, TOKEN_B))
    assert limited(await call(http, one, TOKEN_B), "everyone")


async def test_a_key_that_fails_to_evaluate_counts_under_one_error_bucket(
    gateway_factory, stub_factory, tmp_path, http
):
    """onError: match (the default): failing the key does not escape the limit."""
    limit = {"id": "by-team", "key": "principal.attributes.team", "requestsPerSecond": SLOW, "burst": 1}
    one, _, _ = await replicas(gateway_factory, stub_factory, tmp_path, None, [{**limit, "scope": "local"}])
    assert not limited(await call(http, one, TOKEN_B))
    assert limited(await call(http, one, TOKEN_B), "by-team")
    assert not limited(await call(http, one, TOKEN_A)), "team a has its own bucket"
    assert metric(one, 'ahp_gateway_cel_errors_total{expression="rateLimits.by-team.key"}') == 2


async def test_max_inflight_per_key(gateway_factory, stub_factory, tmp_path, http):
    gate = asyncio.Event()
    tokens_file(tmp_path / "tokens.yaml", (TOKEN_A, "team-a", {}), (TOKEN_B, "team-b", {}))

    async def slow(body: dict[str, Any]) -> Any:
        await gate.wait()
        return {"jsonrpc": "2.0", "id": body["id"], "result": {"protocolVersion": "draft", "effects": []}}

    upstream = await stub_factory(slow)
    limit = {"id": "concurrency", "key": "principal.name", "requestsPerSecond": 1000, "burst": 1000}
    cfg = limited_config(upstream.url, None, [{**limit, "scope": "local", "maxInflight": 1}])
    gw = await gateway_factory(cfg)
    first = asyncio.ensure_future(call(http, gw, TOKEN_A))
    while not upstream.received:
        await asyncio.sleep(0.01)
    second = await call(http, gw, TOKEN_A)
    assert second["error"]["code"] == -32003 and "concurrency" in second["error"]["message"]
    other = asyncio.ensure_future(call(http, gw, TOKEN_B))
    while len(upstream.received) < 2:
        await asyncio.sleep(0.01)
    gate.set()
    assert "result" in await first and "result" in await other
    assert "result" in await call(http, gw, TOKEN_A), "the slot is given back when the intercept ends"


async def test_observations_over_the_limit_are_dropped_and_counted(gateway_factory, stub_factory, tmp_path, http):
    tokens_file(tmp_path / "tokens.yaml", (TOKEN_A, "team-a", {}), (TOKEN_B, "team-b", {}))
    upstream = await stub_factory()
    cfg = gateway_config(
        [
            {
                "id": "org.example.audit",
                "transport": {"type": "http", "url": upstream.url},
                "subscriptions": [{"mode": "observe", "events": ["tool.before"], "content": {"default": "body"}}],
            }
        ],
        inbound={"auth": {"type": "bearer", "tokensFile": "tokens.yaml"}},
        rateLimits=[per_principal(2, scope="local")],
    )
    gw = await gateway_factory(cfg)
    headers = {"Content-Type": "application/json", "Authorization": f"Bearer {TOKEN_A}"}
    for i in range(4):
        note = {
            "jsonrpc": "2.0",
            "method": "hooks/observe",
            "params": {"protocolVersion": "draft", "event": tool_before(id=f"obs-{i}")},
        }
        async with http.post(gw.url, data=json.dumps(note), headers=headers) as response:
            assert response.status in (202, 204)
    assert metric(gw, 'ahp_gateway_observe_drops_total{reason="rate_limited"}') == 2
    assert metric(gw, 'ahp_gateway_rate_limited_total{limit="per-principal"}') == 2
    deadline = asyncio.get_running_loop().time() + 5
    while len(upstream.observed) < 2:
        assert asyncio.get_running_loop().time() < deadline
        await asyncio.sleep(0.01)
    assert sorted(n["params"]["event"]["id"] for n in upstream.observed) == ["obs-0", "obs-1"]


async def test_redis_killed_mid_run_follows_on_state_error_and_recovers(
    gateway_factory, stub_factory, tmp_path, redis, http
):
    limits = [
        per_principal(100, onStateError="fail-open"),
        {
            "id": "strict",
            "key": "principal.name",
            "requestsPerSecond": SLOW,
            "burst": 100,
            "onStateError": "fail-closed",
        },
    ]
    one, two, _ = await replicas(gateway_factory, stub_factory, tmp_path, redis.url, limits)
    assert "result" in await call(http, one, TOKEN_A)
    redis.stop()
    down = await call(http, one, TOKEN_A)
    assert down["error"]["code"] == -32003 and "strict" in down["error"]["message"]
    assert "shared state unavailable" in down["error"]["message"]
    assert metric(one, 'ahp_gateway_state_errors_total{op="ratelimit"}') >= 1
    # fail-open alone: the intercept is served
    only_open = limited_config(
        "http://127.0.0.1:9/", redis.url, [per_principal(1, id="open-only", onStateError="fail-open")]
    )
    only_open["hooks"] = one.loaded.config.model_dump(mode="json", exclude_none=True)["hooks"]
    three = await gateway_factory(only_open, name="three.yaml")
    assert "result" in await call(http, three, TOKEN_A) and "result" in await call(http, three, TOKEN_A)
    redis.start()
    deadline = asyncio.get_running_loop().time() + 10
    while True:
        answer = await call(http, two, TOKEN_A)
        if "result" in answer:
            break
        assert asyncio.get_running_loop().time() < deadline, "limits did not recover"
        await asyncio.sleep(0.1)
    state = three.assembly.state
    while not state.healthy:  # its own probe finds Redis again (no restart of the gateway)
        assert asyncio.get_running_loop().time() < deadline, "the probe did not see Redis again"
        await asyncio.sleep(0.05)
    assert "result" in await call(http, three, TOKEN_A), "a new (empty) bucket after the restart"
    assert limited(await call(http, three, TOKEN_A), "open-only"), "and it is enforced again"


async def test_a_reload_adds_a_limit_and_a_changed_state_is_refused(gateway_factory, stub_factory, tmp_path, http):
    """rateLimits reload in place; state (the Redis connection) takes a restart, like uploads."""
    tokens_file(tmp_path / "tokens.yaml", (TOKEN_A, "team-a", {}), (TOKEN_B, "team-b", {}))
    upstream = await stub_factory()
    cfg = limited_config(upstream.url, None, [])
    gw = await gateway_factory(cfg)
    assert not any([limited(await call(http, gw, TOKEN_A)) for _ in range(3)])
    cfg["rateLimits"] = [per_principal(1, scope="local")]
    (tmp_path / "gateway.yaml").write_text(yaml.safe_dump(cfg))
    assert await gw.reload() is True
    assert [limited(await call(http, gw, TOKEN_A)) for _ in range(2)] == [False, True]
    cfg["state"] = {"redis": {"url": "redis://127.0.0.1:9/0"}}
    (tmp_path / "gateway.yaml").write_text(yaml.safe_dump(cfg))
    assert await gw.reload() is False, "state changed: only a restart applies it"
    assert limited(await call(http, gw, TOKEN_A)), "the last good configuration keeps serving"


async def test_concurrent_intercepts_through_both_replicas_spend_exactly_burst(
    gateway_factory, stub_factory, tmp_path, redis, http
):
    """30 intercepts at once, split over two replicas (pipelined round trips): exactly burst
    (10) are admitted, however they were batched."""
    one, two, upstream = await replicas(gateway_factory, stub_factory, tmp_path, redis.url, [per_principal(10)])
    answers = await asyncio.gather(*(call(http, (one, two)[i % 2], TOKEN_A) for i in range(30)))
    assert sum(not limited(a) for a in answers) == 10 and len(upstream.received) == 10
