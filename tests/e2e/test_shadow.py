"""``mode: shadow``: the upstream is called concurrently, its verdict is logged and counted, and it
never changes or delays the result (differential against the same chain without it)."""

from __future__ import annotations

import asyncio

from tests.support.client import post, wait_for
from tests.support.config import gateway_config, hook
from tests.support.events import ALL_TOOL_BEFORE_CAPS, intercept, result, tool_before
from tests.support.telemetry import Capture

SCENARIOS = [
    ("git status", []),
    ("git push --force", [{"type": "deny", "reason": "enforced"}]),
    ("ls", [{"type": "message", "text": "m"}]),
]


async def test_shadow_never_changes_results(gateway_factory, stub_factory, http):
    def enforced(r):
        command = r["params"]["event"]["tool"]["input"]["command"]
        return result(r, next(e for c, e in SCENARIOS if c == command))

    async def shadow_answer(r):
        await asyncio.sleep(1.5)
        return result(
            r,
            [
                {"type": "deny", "reason": "shadow would deny"},
                {"type": "modify", "target": "input", "operation": "replace", "value": {}},
            ],
        )

    primary = await stub_factory(enforced)
    shadow = await stub_factory(shadow_answer)
    capture = Capture()
    plain = await gateway_factory(gateway_config([hook("org.example.primary", primary.url)]), name="plain.yaml")
    shadowed = await gateway_factory(
        gateway_config(
            [
                hook("org.example.shadow", shadow.url, mode="shadow", timeout=2000),
                hook("org.example.primary", primary.url),
            ]
        ),
        name="shadowed.yaml",
        telemetry=capture,
    )
    loop = asyncio.get_running_loop()
    for command, _ in SCENARIOS:
        event = tool_before(command)
        _, expected = await post(http, plain.url, intercept(event, ALL_TOOL_BEFORE_CAPS))
        t0 = loop.time()
        _, got = await post(http, shadowed.url, intercept(event, ALL_TOOL_BEFORE_CAPS))
        assert loop.time() - t0 < 1.0  # the 1.5 s shadow never delays the answer
        assert got == expected
    await wait_for(lambda: len(capture.shadows) == len(SCENARIOS), timeout=15)
    assert capture.shadows == [("org.example.shadow", "deny")] * len(SCENARIOS)
    assert len(shadow.received) == len(SCENARIOS)
    # the enforcing upstream saw the harness's event untouched by the shadow's modify
    assert [r["params"]["event"]["tool"]["input"]["command"] for r in primary.received[1::2]] == [
        c for c, _ in SCENARIOS
    ]


async def test_shadow_failures_are_counted_not_enforced(gateway_factory, stub_factory, http):
    capture = Capture()
    gw = await gateway_factory(
        gateway_config([hook("org.example.shadow", "http://127.0.0.1:9/", mode="shadow")]), telemetry=capture
    )
    _, body = await post(http, gw.url, intercept(tool_before()))
    assert body["result"]["effects"] == []
    await wait_for(lambda: capture.shadows == [("org.example.shadow", "error")])
