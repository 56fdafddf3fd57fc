"""The token buckets of ``rateLimits`` on a controlled clock: exactly ``burst`` at once, one more
per ``1 / requestsPerSecond``, the retry time the answer names, keys that cannot escape (an
evaluation error shares one bucket), per-key in-flight slots given back, and memory bounded when
a caller sprays keys."""

from __future__ import annotations

from typing import Any

import pytest

from gateway import ratelimit
from gateway.config.models import RateLimit
from gateway.ratelimit import ERROR_KEY, Limited, RateLimiter, compile_rules
from gateway.routing.cel import Engine

ENGINE = Engine()


def rules(*limits: dict[str, Any]) -> tuple[ratelimit.Rule, ...]:
    models = [RateLimit(**{"scope": "local", **limit}) for limit in limits]
    return compile_rules(models, lambda source, ident, _index: ENGINE.compile_string(source, ident))


def activation(name: str | None = "agent-1", **event: Any) -> Any:
    principal = {"name": name} if name is not None else {}
    values = {
        "method": "hooks/intercept",
        "protocolVersion": "draft",
        "capabilities": {},
        "principal": principal,
        "headers": {},
        "event": {"type": "tool.before", **event},
    }
    return ENGINE.activation(values)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def admitted(limiter: RateLimiter, compiled: Any, act: Any) -> bool:
    outcome = await limiter.check(compiled, act)
    if isinstance(outcome, Limited):
        return False
    outcome()
    return True


async def test_burst_then_one_per_interval_and_the_retry_time_is_exact() -> None:
    clock = Clock()
    limiter = RateLimiter(clock=clock)
    compiled = rules({"id": "p", "key": "principal.name", "requestsPerSecond": 5, "burst": 3})
    act = activation()
    assert [await admitted(limiter, compiled, act) for _ in range(4)] == [True, True, True, False]
    refused = await limiter.check(compiled, act)
    assert isinstance(refused, Limited) and refused.retry_after_ms == 200 and refused.limit == "p"
    assert refused.data == {"limit": "p", "retryAfterMs": 200} and "'p' exceeded" in refused.message
    clock.now += 0.199
    assert not await admitted(limiter, compiled, act)
    clock.now += 0.001
    assert await admitted(limiter, compiled, act), "one token back after exactly 1/requestsPerSecond"
    assert not await admitted(limiter, compiled, act)
    clock.now += 10
    assert [await admitted(limiter, compiled, act) for _ in range(4)] == [True, True, True, False], "never above burst"


async def test_keys_have_their_own_buckets_and_an_error_key_is_shared() -> None:
    limiter = RateLimiter(clock=Clock())
    compiled = rules({"id": "p", "key": "principal.name", "requestsPerSecond": 1, "burst": 1})
    assert await admitted(limiter, compiled, activation("a"))
    assert await admitted(limiter, compiled, activation("b"))
    assert not await admitted(limiter, compiled, activation("a"))
    # no principal name: the key fails to evaluate; onError match puts every such request in one bucket
    assert await admitted(limiter, compiled, activation(None))
    assert not await admitted(limiter, compiled, activation(None))
    assert ("p", ERROR_KEY) in limiter._tat
    skipping = rules({"id": "s", "key": "principal.name", "requestsPerSecond": 1, "burst": 1, "onError": "skip"})
    assert all([await admitted(limiter, skipping, activation(None)) for _ in range(5)])


async def test_a_non_string_key_at_run_time_is_an_evaluation_error() -> None:
    errors: list[str] = []
    limiter = RateLimiter(clock=Clock(), on_error=lambda program, error: errors.append(program.id))
    compiled = rules({"id": "n", "key": "event.count", "requestsPerSecond": 1, "burst": 1})
    assert await admitted(limiter, compiled, activation(count=3))
    assert not await admitted(limiter, compiled, activation(count=4)), "both fell into the error bucket"
    assert errors == ["rateLimits.n.key", "rateLimits.n.key"]


async def test_max_inflight_slots_are_per_key_and_given_back() -> None:
    limiter = RateLimiter(clock=Clock())
    compiled = rules({"id": "c", "key": "principal.name", "requestsPerSecond": 1000, "burst": 1000, "maxInflight": 2})
    first = await limiter.check(compiled, activation("a"))
    second = await limiter.check(compiled, activation("a"))
    assert callable(first) and callable(second)
    third = await limiter.check(compiled, activation("a"))
    assert isinstance(third, Limited) and third.retry_after_ms == 0
    other = await limiter.check(compiled, activation("b"))
    assert callable(other)
    first()
    again = await limiter.check(compiled, activation("a"))
    assert callable(again)
    for release in (second, other, again):
        release()
    assert limiter._inflight == {}, "nothing left behind"


async def test_a_refused_later_limit_gives_back_the_slots_taken() -> None:
    limiter = RateLimiter(clock=Clock())
    compiled = rules(
        {"id": "slots", "key": "principal.name", "requestsPerSecond": 1000, "burst": 1000, "maxInflight": 5},
        {"id": "tight", "key": "principal.name", "requestsPerSecond": 1000, "burst": 1000, "maxInflight": 1},
    )
    held = await limiter.check(compiled, activation("a"))
    assert callable(held)
    refused = await limiter.check(compiled, activation("a"))
    assert isinstance(refused, Limited) and refused.limit == "tight"
    assert limiter._inflight == {("slots", "a"): 1, ("tight", "a"): 1}
    held()
    assert limiter._inflight == {}


async def test_sprayed_keys_do_not_grow_memory_without_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ratelimit, "LOCAL_KEYS", 100)
    clock = Clock()
    limiter = RateLimiter(clock=clock)
    compiled = rules({"id": "p", "key": "principal.name", "requestsPerSecond": 0.001, "burst": 5})
    for i in range(1000):
        assert await admitted(limiter, compiled, activation(f"agent-{i}"))
    assert len(limiter._tat) <= 100
    # a key still in use keeps its count when only full buckets need forgetting
    monkeypatch.setattr(ratelimit, "LOCAL_KEYS", 10_000)
    for _ in range(5):
        assert await admitted(limiter, compiled, activation("busy"))
    assert not await admitted(limiter, compiled, activation("busy"))


async def test_shared_limits_without_redis_follow_on_state_error() -> None:
    limiter = RateLimiter(clock=Clock())  # no state.redis (check refuses it; a limiter never guesses)
    open_ = rules({"id": "o", "key": "principal.name", "requestsPerSecond": 1, "burst": 1, "scope": "shared"})
    assert all([await admitted(limiter, open_, activation()) for _ in range(3)])
    closed = rules(
        {
            "id": "c",
            "key": "principal.name",
            "requestsPerSecond": 1,
            "burst": 1,
            "scope": "shared",
            "onStateError": "fail-closed",
        }
    )
    refused = await limiter.check(closed, activation())
    assert isinstance(refused, Limited) and refused.state_error and "shared state unavailable" in refused.message


def test_redis_key_forms_cannot_collide() -> None:
    """A key value that spells another key's hashed form names its own bucket."""
    long_key = "x" * 500
    hashed = ratelimit._stored_key(long_key)
    assert hashed.startswith("#") and len(hashed) == 65
    assert ratelimit._stored_key(hashed) != hashed and ratelimit._stored_key(hashed[1:]) != hashed
    assert ratelimit._stored_key("agent\nnewline").startswith("#"), "non-printable keys are hashed"
    assert ratelimit._stored_key("agent-1") == "=agent-1"


@pytest.mark.parametrize(
    "source",
    [
        "principal.name",
        "event.session.id",
        "headers.tenant",
        "event.tool.input",
        "principal.?name.orValue('anonymous')",
        "event.session.?id.orValue('')",
        "event.?session.?id.orValue('none')",
    ],
)
@pytest.mark.parametrize(
    "values",
    [
        {
            "principal": {"name": "a"},
            "event": {"session": {"id": "s1"}, "tool": {"input": {"x": 1}}},
            "headers": {"tenant": "t"},
        },
        {"principal": {}, "event": {"session": "flat", "tool": {"input": "text"}}, "headers": {}},
        {"principal": {"name": 7}, "event": {"session": {"id": None}}, "headers": {"tenant": ""}},
        {"principal": {"name": "caf\ufffd"}, "event": {}, "headers": {}},
    ],
)
def test_field_path_keys_read_as_the_engine_does(source: str, values: dict[str, Any]) -> None:
    """The shortcut for keys that only select fields gives the engine's value, or an error where
    the engine gives one."""
    program = ENGINE.compile_string(source, "k")
    assert program._path is not None
    engine_only = ratelimit.ValueProgram(program._expr, source, "k")
    full = {"method": "hooks/intercept", "protocolVersion": "draft", "capabilities": {}, **values}
    fast, slow = program.eval(ENGINE.activation(full)), engine_only.eval(ENGINE.activation(full))
    assert type(fast) is type(slow) and (isinstance(fast, ratelimit.EvalError) or fast == slow)


def test_other_keys_go_to_the_engine() -> None:
    for source in [
        "principal.name + ':' + event.type",
        "headers['x-tenant']",
        "principal.?name.orValue(string(1))",
        "event.?session.id.orValue('x')",
    ]:
        assert ENGINE.compile_string(source, "k")._path is None
