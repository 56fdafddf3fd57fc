"""hooks/observe fan-out (protocol §8.3): 202 at once, observers and uncalled interceptors get
one copy per (event, subscription), bounded queue, never delaying anything."""

from __future__ import annotations

import asyncio

from tests.support.client import post, wait_for
from tests.support.config import gateway_config
from tests.support.events import intercept, result, tool_before
from tests.support.observe import note, observer
from tests.support.telemetry import Capture


def both(hook_id, url, policy="fail-closed"):
    return {
        "id": hook_id,
        "transport": {"type": "http", "url": url},
        "subscriptions": [
            {
                "mode": "intercept",
                "events": ["tool.before"],
                "timeoutMs": 1000,
                "failurePolicy": policy,
                "content": {"default": "body"},
            },
        ],
    }


async def test_observers_and_uncalled_interceptors_get_one_copy(gateway_factory, stub_factory, http):
    denier = await stub_factory(lambda r: result(r, [{"type": "deny", "reason": "no"}]))
    skipped = await stub_factory()
    audit = await stub_factory()
    capture = Capture()
    gw = await gateway_factory(
        gateway_config(
            [
                both("org.example.a", denier.url),
                both("org.example.b", skipped.url),
                observer("org.example.audit", audit.url),
            ]
        ),
        telemetry=capture,
    )
    event = tool_before()
    await post(http, gw.url, intercept(event))
    assert skipped.received == []
    # the harness sends the settled observation (twice: to our intercept and observe subscriptions)
    for _ in range(2):
        status, body = await post(http, gw.url, note(event))
        assert (status, body) == (202, None)
    await wait_for(lambda: len(skipped.observed) == 1 and len(audit.observed) == 1)
    await gw.gateway.drain(2)
    assert denier.observed == []  # already called for this event
    assert len(skipped.observed) == 1 and len(audit.observed) == 1
    assert skipped.observed[0]["params"]["event"]["id"] == event["id"]


async def test_event_the_gateway_never_intercepted_goes_to_all_matching_subscriptions(
    gateway_factory, stub_factory, http
):
    a, b = await stub_factory(), await stub_factory()
    gw = await gateway_factory(gateway_config([both("org.example.a", a.url), both("org.example.b", b.url)]))
    await post(http, gw.url, note(tool_before()))
    await wait_for(lambda: len(a.observed) == 1 and len(b.observed) == 1)


async def test_observe_is_answered_before_slow_observers(gateway_factory, stub_factory, http):
    slow = await stub_factory()
    slow.observe_gate = asyncio.Event()
    fast = await stub_factory(lambda r: result(r, []))
    gw = await gateway_factory(
        gateway_config(
            [both("org.example.fast", fast.url), observer("org.example.slow", slow.url)], observe={"timeoutMs": 5000}
        )
    )
    loop = asyncio.get_running_loop()
    for _ in range(5):
        t0 = loop.time()
        status, _ = await post(http, gw.url, note(tool_before()))
        assert status == 202
        _, body = await post(http, gw.url, intercept(tool_before()))
        assert body["result"]["effects"] == []
        assert loop.time() - t0 < 0.5
    slow.observe_gate.set()
    await wait_for(lambda: len(slow.observed) == 5)


async def test_queue_overflow_drops_and_counts(gateway_factory, stub_factory, http):
    stuck = await stub_factory()
    stuck.observe_gate = asyncio.Event()
    capture = Capture()
    gw = await gateway_factory(
        gateway_config(
            [observer("org.example.stuck", stuck.url)], observe={"queueSize": 1, "workers": 1, "timeoutMs": 5000}
        ),
        telemetry=capture,
    )
    for _ in range(20):
        status, _ = await post(http, gw.url, note(tool_before()))
        assert status == 202
    dropped = [status for status in capture.observed if status != "queued"]
    assert dropped and set(dropped) == {"queue_full"}
    assert capture.observed.count("queued") + len(dropped) == 20
    stuck.observe_gate.set()


async def test_observer_content_is_projected(gateway_factory, stub_factory, http):
    audit = await stub_factory()
    gw = await gateway_factory(gateway_config([observer("org.example.audit", audit.url, content="omit")]))
    event = tool_before()
    event["items"] = [
        {"id": "p", "kind": "text", "mediaType": "text/plain", "selection": "body", "text": "secret prompt"}
    ]
    await post(http, gw.url, note(event))
    await wait_for(lambda: len(audit.observed) == 1)
    assert audit.observed[0]["params"]["event"]["items"] == [
        {"id": "p", "kind": "text", "mediaType": "text/plain", "selection": "omit"}
    ]
