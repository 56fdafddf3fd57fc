"""Request-path rules that live between the stages: deadline accounting, the observe ledger
marked at send time, shadow verdicts, the in-flight bound, and the stages used on their own."""

from __future__ import annotations

import asyncio

import pytest

from gateway.pipeline import frontend
from gateway.protocol import wire
from gateway.protocol.errors import RpcCode
from gateway.protocol.schemas import load as load_schemas
from tests.support.client import post, wait_for
from tests.support.config import gateway_config, hook
from tests.support.events import ALL_TOOL_BEFORE_CAPS, intercept, result, tool_before
from tests.support.telemetry import Capture


def metric(gw, name: str, **labels: str) -> float:
    text = gw.observability.metrics.render()[0].decode()
    want = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    for line in text.splitlines():
        if line.startswith(name + "{"):
            got = ",".join(sorted(line[len(name) + 1 : line.index("}")].split(",")))
            if got == want:
                return float(line.rsplit(" ", 1)[1])
    return 0.0


async def test_deadline_spent_by_an_earlier_upstream_is_not_charged_to_a_later_one(gateway_factory, stub_factory, http):
    """Issue 15 item 6: a later upstream never reached is recorded as deadline_exhausted — not a
    timeout, not a call, not a breaker failure — and its failure policy still applies."""

    async def hang(r):
        await asyncio.sleep(5)
        return result(r, [])

    slow = await stub_factory(hang)
    later = await stub_factory()
    capture = Capture()
    cfg = gateway_config(
        [
            hook("org.example.slow", slow.url, policy="fail-open", timeout=1000),
            hook(
                "org.example.later",
                later.url,
                policy="fail-open",
                circuitBreaker={"failureThreshold": 1, "openSeconds": 60},
            ),
        ],
        limits={"maxBodyBytes": 1048576, "deadlineMs": 200},
    )
    gw = await gateway_factory(cfg, telemetry=capture)
    for _ in range(2):
        _, body = await post(http, gw.url, intercept(tool_before()))
        assert body["result"]["effects"] == []
    assert later.received == []
    step = capture.decisions[-1].steps[1]
    assert (step.hook_id, step.failure, step.called, step.outcome.value) == (
        "org.example.later",
        "deadline_exhausted",
        False,
        "failed_open",
    )
    assert capture.decisions[-1].steps[0].failure == "timeout"
    assert gw.holder.breakers.states() == {"org.example.slow": False, "org.example.later": False}


async def test_deadline_exhausted_fail_closed_upstream_still_denies(gateway_factory, stub_factory, http):
    async def hang(r):
        await asyncio.sleep(5)
        return result(r, [])

    slow = await stub_factory(hang)
    required = await stub_factory()
    gw = await gateway_factory(
        gateway_config(
            [hook("org.example.slow", slow.url, policy="fail-open"), hook("org.example.required", required.url)],
            limits={"maxBodyBytes": 1048576, "deadlineMs": 200},
        )
    )
    _, body = await post(http, gw.url, intercept(tool_before()))
    deny = body["result"]["effects"][0]
    assert deny["extensions"]["org.example.gateway"] == {
        "upstream": "org.example.required",
        "kind": "synthetic",
        "failure": "deadline_exhausted",
    }
    assert required.received == []
    assert metric(gw, "ahp_gateway_upstream_calls_total", upstream="org.example.required", outcome="timeout") == 0
    assert metric(gw, "ahp_gateway_upstream_calls_total", upstream="org.example.slow", outcome="timeout") == 1


async def test_observation_during_an_inflight_call_is_not_forwarded_to_that_interceptor(
    gateway_factory, stub_factory, http
):
    """Protocol §8.3 / issue 15 item 10: a call is recorded as made when it is sent."""
    release = asyncio.Event()
    in_call = asyncio.Event()

    async def slow(r):
        in_call.set()
        await release.wait()
        return result(r, [])

    interceptor = await stub_factory(slow)
    observer = await stub_factory()
    cfg = gateway_config(
        [
            hook("org.example.icpt", interceptor.url, timeout=1500),
            {
                "id": "org.example.obs",
                "transport": {"type": "http", "url": observer.url},
                "subscriptions": [{"mode": "observe", "events": ["*"], "content": {"default": "body"}}],
            },
        ]
    )
    gw = await gateway_factory(cfg)
    event = tool_before()
    task = asyncio.ensure_future(post(http, gw.url, intercept(event)))
    await asyncio.wait_for(in_call.wait(), 5)
    note = {"jsonrpc": "2.0", "method": "hooks/observe", "params": {"protocolVersion": "draft", "event": event}}
    status, _ = await post(http, gw.url, note)
    assert status == 202
    await wait_for(lambda: len(observer.observed) == 1)
    await gw.gateway.drain(2)
    release.set()
    await task
    assert interceptor.observed == []  # it has the event already: never an "uncalled" copy


@pytest.mark.parametrize(
    ("effects", "verdict"),
    [
        ([], "no_effect"),
        ([{"type": "deny", "reason": "no"}], "deny"),
        ([{"type": "ask"}], "ask"),
        ([{"type": "allow"}], "allow"),
        ([{"type": "return", "value": {"stdout": "x"}}], "return"),
        ([{"type": "modify", "target": "input", "operation": "replace", "value": {"command": "ls"}}], "modified"),
        ([{"type": "flow", "operation": "stop", "reason": "halt"}], "stop"),
        ([{"type": "message", "text": "m"}], "message"),
        (
            [
                {
                    "type": "inject",
                    "target": "context",
                    "operation": "append",
                    "deliverAt": "now",
                    "value": [
                        {
                            "id": "i1",
                            "role": "user",
                            "parts": [
                                {
                                    "id": "p1",
                                    "kind": "text",
                                    "mediaType": "text/plain",
                                    "selection": "body",
                                    "text": "t",
                                }
                            ],
                        }
                    ],
                }
            ],
            "message",
        ),
        ("garbage", "error"),
    ],
)
async def test_shadow_verdict_for_every_outcome(gateway_factory, stub_factory, http, effects, verdict):
    """Issue 10: ask, allow, return and inject were counted as no_effect."""

    def answer(r):
        return (200, b"{not json") if effects == "garbage" else result(r, effects)

    shadow = await stub_factory(answer)
    capture = Capture()
    gw = await gateway_factory(
        gateway_config([hook("org.example.shadow", shadow.url, mode="shadow")]), telemetry=capture
    )
    _, body = await post(http, gw.url, intercept(tool_before(), ALL_TOOL_BEFORE_CAPS))
    assert body["result"]["effects"] == []
    await wait_for(lambda: capture.shadows == [("org.example.shadow", verdict)])


async def test_in_flight_bound_answers_backend_unavailable_at_once(gateway_factory, stub_factory, http):
    """limits.maxInflight: beyond it, -32003 at once instead of queueing into the deadline."""
    release = asyncio.Event()
    in_call = asyncio.Event()

    async def slow(r):
        in_call.set()
        await release.wait()
        return result(r, [])

    stub = await stub_factory(slow)
    gw = await gateway_factory(
        gateway_config(
            [hook("org.example.a", stub.url, timeout=1500)],
            limits={"maxBodyBytes": 1048576, "deadlineMs": 2000, "maxInflight": 1},
        )
    )
    first = asyncio.ensure_future(post(http, gw.url, intercept(tool_before())))
    await asyncio.wait_for(in_call.wait(), 5)
    _, body = await asyncio.wait_for(post(http, gw.url, intercept(tool_before())), 1)
    assert body["error"]["code"] == RpcCode.BACKEND_UNAVAILABLE
    assert metric(gw, "ahp_gateway_rejected_requests_total", method="hooks/intercept", code="-32003") == 1
    release.set()
    _, ok = await first
    assert ok["result"]["effects"] == []
    _, again = await post(http, gw.url, intercept(tool_before()))  # the slot was given back
    assert again["result"]["effects"] == []


@pytest.mark.parametrize(
    ("body", "kind"),
    [
        (b"{", frontend.Rejected),
        (b"[]", frontend.Rejected),
        (b'{"jsonrpc":"2.0","method":"hooks/observe","params":{}}', frontend.Notification),
        (
            b'{"jsonrpc":"2.0","id":1,"method":"hooks/capabilities","params":{"protocolVersion":"draft"}}',
            frontend.Discovery,
        ),
    ],
)
def test_frontend_check_is_pure_and_transport_free(body, kind):
    """AHP-RPC-001: the check maps bytes to a value; no HTTP status anywhere."""
    checked = frontend.check(body, ("draft",), load_schemas())
    assert isinstance(checked, kind)


def test_frontend_check_yields_the_validated_intercept():
    req = intercept(tool_before(), ALL_TOOL_BEFORE_CAPS)
    checked = frontend.check(wire.dumps(req), ("draft",), load_schemas())
    assert isinstance(checked, frontend.Intercept)
    assert checked.event == req["params"]["event"] and checked.event_type == "tool.before"
