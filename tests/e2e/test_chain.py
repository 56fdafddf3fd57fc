"""The ordered chain toward upstreams (AHP-COMP-001, protocol §8), over real loopback HTTP."""

from __future__ import annotations

import asyncio
import copy

import pytest

from tests.support.client import post
from tests.support.config import gateway_config, hook
from tests.support.events import ALL_TOOL_BEFORE_CAPS, intercept, result, tool_before
from tests.support.events_after import tool_after

DENY = {"type": "deny", "reason": "not allowed", "code": "org.example.policy.no"}


async def test_serial_order_event_and_state_flow_to_later_upstreams(gateway_factory, stub_factory, http):
    """AHP-COMP-001: later upstreams see earlier accepted modifications and the pending state."""
    first = await stub_factory(
        lambda r: result(
            r,
            [{"type": "modify", "target": "input", "operation": "merge", "value": {"cwd": "/tmp"}}, {"type": "allow"}],
        )
    )
    second = await stub_factory(lambda r: result(r, [{"type": "message", "text": "checked"}]))
    gw = await gateway_factory(gateway_config([hook("org.example.a", first.url), hook("org.example.b", second.url)]))
    req = intercept(tool_before("ls"), ALL_TOOL_BEFORE_CAPS)
    status, body = await post(http, gw.url, req)
    assert status == 200
    seen = second.received[0]["params"]
    assert seen["event"]["tool"]["input"] == {"command": "ls", "cwd": "/tmp"}
    # the merge changed the event after nothing was allowed; the allow came with it and survives
    assert seen["state"] == {"permission": "allow", "candidate": None}
    assert second.received[0]["id"] == req["id"] == seen["event"]["id"]
    assert body["result"]["effects"] == [
        {"type": "modify", "target": "input", "operation": "merge", "value": {"cwd": "/tmp"}},
        {"type": "message", "text": "checked"},
        {"type": "allow"},
    ]


async def test_later_change_invalidates_earlier_allow_and_return(gateway_factory, stub_factory, http):
    """Protocol §8.2: a relevant change invalidates an earlier approval and supplied result."""
    a = await stub_factory(lambda r: result(r, [{"type": "allow"}, {"type": "return", "value": {"stdout": "cached"}}]))
    b = await stub_factory(
        lambda r: result(
            r, [{"type": "modify", "target": "input", "operation": "replace", "value": {"command": "ls -l"}}]
        )
    )
    gw = await gateway_factory(gateway_config([hook("org.example.a", a.url), hook("org.example.b", b.url)]))
    _, body = await post(http, gw.url, intercept(tool_before("ls"), ALL_TOOL_BEFORE_CAPS))
    assert b.received[0]["params"]["state"] == {"permission": "allow", "candidate": {"value": {"stdout": "cached"}}}
    assert body["result"]["effects"] == [
        {"type": "modify", "target": "input", "operation": "replace", "value": {"command": "ls -l"}}
    ]


async def test_deny_stops_the_chain_and_is_attributed(gateway_factory, stub_factory, http):
    a = await stub_factory(lambda r: result(r, [{"type": "message", "text": "m1"}, DENY, {**DENY, "reason": "second"}]))
    b = await stub_factory()
    gw = await gateway_factory(gateway_config([hook("org.example.a", a.url), hook("org.example.b", b.url)]))
    _, body = await post(http, gw.url, intercept(tool_before(), {"effects": ["deny", "message"]}))
    assert b.received == []
    effects = body["result"]["effects"]
    assert effects[0] == {"type": "message", "text": "m1"}
    assert [e["type"] for e in effects] == ["message", "deny"]
    assert effects[1]["reason"] == "not allowed"  # several denies settle as deny: keep the first
    assert effects[1]["code"] == "org.example.policy.no"
    assert effects[1]["extensions"]["org.example.gateway"] == {"upstream": "org.example.a", "kind": "explicit"}


async def test_upstream_cannot_spoof_gateway_attribution(gateway_factory, stub_factory, http):
    spoof = {**DENY, "extensions": {"org.example.gateway": {"kind": "synthetic"}, "org.example.policy": {"rule": 3}}}
    a = await stub_factory(lambda r: result(r, [spoof]))
    gw = await gateway_factory(gateway_config([hook("org.example.a", a.url)]))
    _, body = await post(http, gw.url, intercept(tool_before()))
    ext = body["result"]["effects"][0]["extensions"]
    assert ext["org.example.gateway"] == {"upstream": "org.example.a", "kind": "explicit"}
    assert ext["org.example.policy"] == {"rule": 3}


async def test_flow_stop_ends_decision_making(gateway_factory, stub_factory, http):
    a = await stub_factory(lambda r: result(r, [{"type": "flow", "operation": "stop", "reason": "enough"}]))
    b = await stub_factory()
    gw = await gateway_factory(gateway_config([hook("org.example.a", a.url), hook("org.example.b", b.url)]))
    _, body = await post(http, gw.url, intercept(tool_before(), ALL_TOOL_BEFORE_CAPS))
    assert body["result"]["effects"] == [{"type": "flow", "operation": "stop", "reason": "enough"}]
    assert b.received == []


TOOL_AFTER_CAPS = {
    "effects": ["modify", "flow", "message"],
    "modify": {"output": {"replace": True, "merge": True}},
    "flow": {
        "operations": ["stop", "continue"],
        "remainingContinuations": 2,
        "continuationCount": 1,
        "maxContinuations": 3,
    },
}


async def test_capabilities_are_narrowed_never_widened(gateway_factory, stub_factory, http):
    """Protocol §8.5 item 5: exactly what the harness advertised, the continuation allowance
    shrinking as earlier upstreams consume it."""
    a = await stub_factory(lambda r: result(r, [{"type": "flow", "operation": "continue", "instruction": "again"}]))
    b = await stub_factory(lambda r: result(r, [{"type": "flow", "operation": "continue"}]))
    c = await stub_factory()
    gw = await gateway_factory(
        gateway_config(
            [hook(f"org.example.{n}", s.url, events=["tool.after"]) for n, s in zip("abc", (a, b, c), strict=True)]
        )
    )
    status, body = await post(http, gw.url, intercept(tool_after(), TOOL_AFTER_CAPS))
    assert status == 200, body
    assert a.received[0]["params"]["capabilities"] == TOOL_AFTER_CAPS
    assert b.received[0]["params"]["capabilities"]["flow"]["remainingContinuations"] == 1
    assert c.received[0]["params"]["capabilities"]["flow"]["remainingContinuations"] == 0
    assert c.received[0]["params"]["state"]["instructions"] == ["again"]
    assert c.received[0]["params"]["state"]["flow"] == "continue"
    assert body["result"]["effects"] == [
        {"type": "flow", "operation": "continue", "instruction": "again"},
        {"type": "flow", "operation": "continue"},
    ]


async def test_exhausted_continuation_allowance_rejects_the_answer(gateway_factory, stub_factory, http):
    a = await stub_factory(lambda r: result(r, [{"type": "flow", "operation": "continue"}]))
    b = await stub_factory(
        lambda r: result(r, [{"type": "message", "text": "x"}, {"type": "flow", "operation": "continue"}])
    )
    gw = await gateway_factory(
        gateway_config(
            [
                hook("org.example.a", a.url, events=["tool.after"]),
                hook("org.example.b", b.url, events=["tool.after"], policy="fail-open"),
            ]
        )
    )
    caps = copy.deepcopy(TOOL_AFTER_CAPS)
    caps["flow"]["remainingContinuations"] = 1
    _, body = await post(http, gw.url, intercept(tool_after(), caps))
    assert body["result"]["effects"] == [{"type": "flow", "operation": "continue"}]


async def test_ask_persists_and_deny_beats_ask(gateway_factory, stub_factory, http):
    a = await stub_factory(lambda r: result(r, [{"type": "ask"}]))
    b = await stub_factory(lambda r: result(r, [{"type": "allow"}]))
    gw = await gateway_factory(gateway_config([hook("org.example.a", a.url), hook("org.example.b", b.url)]))
    _, body = await post(http, gw.url, intercept(tool_before(), ALL_TOOL_BEFORE_CAPS))
    assert b.received[0]["params"]["state"]["permission"] == "ask"
    assert body["result"]["effects"] == [{"type": "ask"}]


async def test_incoming_state_is_passed_and_not_reemitted(gateway_factory, stub_factory, http):
    a = await stub_factory(lambda r: result(r, [{"type": "message", "text": "hi"}]))
    gw = await gateway_factory(gateway_config([hook("org.example.a", a.url)]))
    state = {"permission": "allow", "candidate": {"value": 1}}
    _, body = await post(http, gw.url, intercept(tool_before(), ALL_TOOL_BEFORE_CAPS, state=state))
    assert a.received[0]["params"]["state"] == state
    assert body["result"]["effects"] == [{"type": "message", "text": "hi"}]


async def test_replace_supersedes_earlier_modifications_in_the_collapse(gateway_factory, stub_factory, http):
    a = await stub_factory(
        lambda r: result(r, [{"type": "modify", "target": "input", "operation": "merge", "value": {"a": 1}}])
    )
    b = await stub_factory(
        lambda r: result(r, [{"type": "modify", "target": "input", "operation": "replace", "value": {"command": "x"}}])
    )
    c = await stub_factory(
        lambda r: result(r, [{"type": "modify", "target": "input", "operation": "merge", "value": {"b": 2}}])
    )
    gw = await gateway_factory(
        gateway_config([hook(f"org.example.{n}", s.url) for n, s in zip("abc", (a, b, c), strict=True)])
    )
    _, body = await post(http, gw.url, intercept(tool_before(), ALL_TOOL_BEFORE_CAPS))
    assert c.received[0]["params"]["event"]["tool"]["input"] == {"command": "x"}
    assert body["result"]["effects"] == [
        {"type": "modify", "target": "input", "operation": "replace", "value": {"command": "x"}},
        {"type": "modify", "target": "input", "operation": "merge", "value": {"b": 2}},
    ]


# ---------------------------------------------------------------------------- failures


def _slow(seconds: float):
    async def answer(r):
        await asyncio.sleep(seconds)
        return result(r, [])

    return answer


FAILURES = {
    "down": None,
    "slow": _slow(1.0),
    "http_500": lambda r: (500, {"error": "boom"}),
    "html": lambda r: (200, b"<html>oops</html>"),
    "wrong_id": lambda r: {**result(r, []), "id": "someone-else"},
    "unadvertised": lambda r: result(r, [{"type": "allow"}]),
    "missing_result": lambda r: {"jsonrpc": "2.0", "id": r["id"]},
    "wrong_version": lambda r: {
        "jsonrpc": "2.0",
        "id": r["id"],
        "result": {"protocolVersion": "1900-01-01", "effects": []},
    },
    "rpc_error": lambda r: {"jsonrpc": "2.0", "id": r["id"], "error": {"code": -32004, "message": "x"}},
    "atomic_unknown": lambda r: result(r, [{"type": "message", "text": "ok"}, {"type": "unknown"}]),
    "invalid_deny_salvage": lambda r: result(
        r, [DENY, {"type": "modify", "target": "input", "operation": "merge", "value": {"x": 1}}]
    ),
}


@pytest.mark.spec("AHP-FAIL-001")
@pytest.mark.parametrize("failure", sorted(FAILURES))
@pytest.mark.parametrize("policy", ["fail-open", "fail-closed"])
async def test_failure_matrix(gateway_factory, stub_factory, http, failure, policy):
    """Every operational failure applies the failing upstream's own policy; nothing is salvaged
    (an invalid list is rejected whole even if it holds a valid deny)."""
    bad = await stub_factory(FAILURES[failure])
    good = await stub_factory(lambda r: result(r, [{"type": "message", "text": "after"}]))
    url = bad.url
    if failure == "down":
        await bad_down(bad)
        url = "http://127.0.0.1:9/"
    gw = await gateway_factory(
        gateway_config([hook("org.example.bad", url, policy=policy, timeout=200), hook("org.example.good", good.url)])
    )
    status, body = await post(http, gw.url, intercept(tool_before(), {"effects": ["deny", "message"]}))
    assert status == 200
    effects = body["result"]["effects"]
    if policy == "fail-open":
        assert effects == [{"type": "message", "text": "after"}]
    else:
        assert good.received == []
        assert len(effects) == 1 and effects[0]["type"] == "deny"
        assert effects[0]["code"] == "org.example.gateway.upstream_unavailable"
        assert effects[0]["reason"] == "Required policy backend unavailable"
        assert effects[0]["extensions"]["org.example.gateway"]["kind"] == "synthetic"
        assert effects[0]["extensions"]["org.example.gateway"]["upstream"] == "org.example.bad"


async def bad_down(stub):
    """Use a port nothing listens on (9 = discard, closed on loopback)."""
    return None


async def test_fail_closed_without_deny_capability_is_32003(gateway_factory, stub_factory, http):
    """Protocol §8.5 item 6: no deny advertised → -32003 so the harness's own policy decides."""
    gw = await gateway_factory(gateway_config([hook("org.example.bad", "http://127.0.0.1:9/")]))
    _, body = await post(http, gw.url, intercept(tool_before(), {"effects": ["message"]}))
    assert body["error"]["code"] == -32003
    assert "data" not in body["error"]


async def test_explicit_deny_is_authoritative_under_fail_open(gateway_factory, stub_factory, http):
    a = await stub_factory(lambda r: result(r, [DENY]))
    gw = await gateway_factory(gateway_config([hook("org.example.a", a.url, policy="fail-open")]))
    _, body = await post(http, gw.url, intercept(tool_before()))
    assert body["result"]["effects"][0]["reason"] == "not allowed"


async def test_earlier_results_survive_a_later_fail_open_rejection(gateway_factory, stub_factory, http):
    a = await stub_factory(lambda r: result(r, [{"type": "message", "text": "kept"}]))
    b = await stub_factory(lambda r: (200, b"garbage"))
    gw = await gateway_factory(
        gateway_config([hook("org.example.a", a.url), hook("org.example.b", b.url, policy="fail-open")])
    )
    _, body = await post(http, gw.url, intercept(tool_before(), {"effects": ["deny", "message"]}))
    assert body["result"]["effects"] == [{"type": "message", "text": "kept"}]


@pytest.mark.spec("AHP-FAIL-002")
async def test_deadline_caps_every_upstream(gateway_factory, stub_factory, http):
    slow = await stub_factory(_slow(0.4))
    later = await stub_factory()
    cfg = gateway_config(
        [
            hook("org.example.a", slow.url, timeout=1000, policy="fail-open"),
            hook("org.example.b", later.url, timeout=1000),
        ]
    )
    cfg["limits"]["deadlineMs"] = 200
    gw = await gateway_factory(cfg)
    loop = asyncio.get_running_loop()
    started = loop.time()
    _, body = await post(http, gw.url, intercept(tool_before()))
    elapsed = loop.time() - started
    assert elapsed < 0.39, elapsed
    # the budget is gone when b's turn comes: b is never called and fails closed
    assert later.received == []
    assert body["result"]["effects"][0]["extensions"]["org.example.gateway"]["upstream"] == "org.example.b"


async def test_missing_secret_means_failure_not_unauthenticated_call(gateway_factory, stub_factory, http, monkeypatch):
    monkeypatch.delenv("TEST_GW_TOKEN", raising=False)
    a = await stub_factory()
    entry = hook(
        "org.example.a", a.url, policy="fail-open", authentication={"type": "bearer", "tokenEnv": "TEST_GW_TOKEN"}
    )
    gw = await gateway_factory(gateway_config([entry]))
    _, body = await post(http, gw.url, intercept(tool_before()))
    assert a.received == []
    assert body["result"]["effects"] == []
    monkeypatch.setenv("TEST_GW_TOKEN", "s3cret-token")
    await post(http, gw.url, intercept(tool_before()))
    assert [h["Authorization"] for h in a.headers] == ["Bearer s3cret-token"]


async def test_token_file_is_reread_after_rotation(gateway_factory, stub_factory, http, tmp_path):
    a = await stub_factory()
    token = tmp_path / "token"
    token.write_text("one\n")
    entry = hook("org.example.a", a.url, authentication={"type": "bearer", "tokenRef": f"file:{token}"})
    gw = await gateway_factory(gateway_config([entry]))
    await post(http, gw.url, intercept(tool_before()))
    token.write_text("two-longer\n")
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 5
    while a.headers[-1]["Authorization"] != "Bearer two-longer":
        assert loop.time() < deadline, "rotated token never picked up"
        await asyncio.sleep(0.05)
        await post(http, gw.url, intercept(tool_before()))
    assert all(h["Authorization"].count("Bearer") == 1 for h in a.headers)


# ---------------------------------------------------------------------------- parallel


async def test_parallel_fanout_settles_in_order_and_cancels(gateway_factory, stub_factory, http):
    """Opt-in deviation: with caps ⊆ {deny, message} calls run at once, settle in order."""
    started: list[str] = []

    def delayed(name, seconds, effects):
        async def answer(r):
            started.append(name)
            await asyncio.sleep(seconds)
            return result(r, effects)

        return answer

    a = await stub_factory(delayed("a", 0.2, [{"type": "message", "text": "a"}]))
    b = await stub_factory(delayed("b", 0.2, [DENY]))
    c = await stub_factory(delayed("c", 0.2, [{"type": "message", "text": "c"}]))
    gw = await gateway_factory(
        gateway_config(
            [hook(f"org.example.{n}", s.url) for n, s in zip("abc", (a, b, c), strict=True)], fanout="parallel"
        )
    )
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    _, body = await post(http, gw.url, intercept(tool_before(), {"effects": ["deny", "message"]}))
    elapsed = loop.time() - t0
    assert sorted(started) == ["a", "b", "c"]
    assert elapsed < 0.5, elapsed  # concurrent, not 0.6 s serial
    effects = body["result"]["effects"]
    assert [e["type"] for e in effects] == ["message", "deny"]  # c's message after the decider dropped
    assert effects[0]["text"] == "a"


async def test_parallel_falls_back_to_serial_when_state_can_change(gateway_factory, stub_factory, http):
    a = await stub_factory(
        lambda r: result(r, [{"type": "modify", "target": "input", "operation": "merge", "value": {"x": 1}}])
    )
    b = await stub_factory()
    gw = await gateway_factory(
        gateway_config([hook("org.example.a", a.url), hook("org.example.b", b.url)], fanout="parallel")
    )
    await post(http, gw.url, intercept(tool_before("ls"), ALL_TOOL_BEFORE_CAPS))
    assert b.received[0]["params"]["event"]["tool"]["input"] == {"command": "ls", "x": 1}


async def test_harness_disconnect_cancels_inflight_upstream_calls(gateway_factory, stub_factory, http):
    cancelled = asyncio.Event()

    async def hang(r):
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return result(r, [])

    a = await stub_factory(hang)
    cfg = gateway_config([hook("org.example.a", a.url, timeout=10000)])
    cfg["limits"]["deadlineMs"] = 20000
    cfg["frontend"] = {"timeoutMs": 25000}
    gw = await gateway_factory(cfg)
    task = asyncio.ensure_future(post(http, gw.url, intercept(tool_before())))
    from tests.support.client import wait_for

    await wait_for(lambda: len(a.received) == 1)
    task.cancel()
    await asyncio.wait_for(cancelled.wait(), 5)


async def test_upstream_receives_projected_content(gateway_factory, stub_factory, http):
    a = await stub_factory()
    entry = hook("org.example.a", a.url)
    entry["subscriptions"][0]["content"] = {"default": "metadata"}
    gw = await gateway_factory(gateway_config([entry]))
    event = tool_before()
    event["items"] = [{"id": "p1", "kind": "text", "mediaType": "text/plain", "selection": "body", "text": "private"}]
    event["native"] = {"raw": "native payload"}
    await post(http, gw.url, intercept(copy.deepcopy(event)))
    seen = a.received[0]["params"]["event"]
    assert seen["items"] == [{"id": "p1", "kind": "text", "mediaType": "text/plain", "selection": "metadata"}]
    assert "native" not in seen


async def test_managed_scope_forces_fail_closed(gateway_factory, http):
    """A managed subscription cannot be disabled, so its failure denies even under fail-open."""
    entry = hook("org.example.managed", "http://127.0.0.1:9/", policy="fail-open")
    entry["subscriptions"][0].update(scope="managed", disableable=False)
    gw = await gateway_factory(gateway_config([entry]))
    _, body = await post(http, gw.url, intercept(tool_before()))
    assert body["result"]["effects"][0]["code"] == "org.example.gateway.upstream_unavailable"


async def test_answer_without_effects_is_an_empty_list(gateway_factory, stub_factory, http):
    """SDK 0.10.1 schema: result.effects is optional; absent means no effect (as the SDK settles)."""
    a = await stub_factory(lambda r: {"jsonrpc": "2.0", "id": r["id"], "result": {"protocolVersion": "draft"}})
    b = await stub_factory(lambda r: result(r, [{"type": "message", "text": "b"}]))
    gw = await gateway_factory(gateway_config([hook("org.example.a", a.url), hook("org.example.b", b.url)]))
    _, body = await post(http, gw.url, intercept(tool_before(), {"effects": ["deny", "message"]}))
    assert body["result"]["effects"] == [{"type": "message", "text": "b"}]


async def test_attachment_bodies_reach_upstreams_as_gaps(gateway_factory, stub_factory, http):
    a = await stub_factory()
    gw = await gateway_factory(gateway_config([hook("org.example.a", a.url)]))
    event = tool_before()
    event["items"] = [
        {
            "id": "img",
            "kind": "attachment",
            "mediaType": "image/png",
            "selection": "body",
            "body": {"ref": "ahp:ref:abc"},
        }
    ]
    _, body = await post(http, gw.url, intercept(copy.deepcopy(event)))
    assert "result" in body, body
    seen = a.received[0]["params"]["event"]["items"][0]
    assert "body" not in seen and seen["gap"]["reason"]
