"""Native hook payloads the adapters cannot use (not JSON, unmapped, oversized) fail closed."""

from __future__ import annotations

import pytest

from tests.hostile.native.helpers import (
    CHANNEL_IDS,
    CHANNELS,
    RM_ROOT,
    SYNTHETIC,
    Answer,
    Send,
    call,
    denial,
    native_refusal,
    shell,
)

pytestmark = pytest.mark.asyncio(loop_scope="module")


# ---------------------------------------------------------------------- unusable / unmapped payloads
NOT_JSON = [b"{not json", b"", b"[]", b'"PreToolUse"', b"null", b"\xff\xfe{}", b"{" * 100_000, b'{"a":1}{"b":2}']


@pytest.mark.spec("AHP-FAIL-001")
@pytest.mark.parametrize(("channel", "harness"), CHANNELS, ids=CHANNEL_IDS)
async def test_a_payload_that_is_not_a_json_object_fails_closed(send: Send, channel: str, harness: str) -> None:
    """docs/agents/index.md ("Failure honesty") / native-hooks §7.1: an unreadable payload is never let through
    by the command adapter (exit 2 blocks in every supported harness's command hooks); the HTTP
    endpoint answers the harness's own denial in a 200 (a non-2xx would let the call proceed)."""
    event = "preToolUse" if harness == "copilot" else None
    for raw in NOT_JSON:
        a = await send(channel, harness, raw, event)
        if channel == "http":
            native_refusal(harness, a)
        else:
            assert a == Answer(2, "", a.err) and "blocking (--on-error deny)" in a.err, (raw[:20], a)


@pytest.mark.spec("AHP-TB-001")
@pytest.mark.parametrize(("channel", "harness"), CHANNELS, ids=CHANNEL_IDS)
async def test_unmapped_and_nameless_events(send: Send, channel: str, harness: str) -> None:
    """docs/agents/index.md ("Translation"): native events not listed are answered with the native no-op without
    calling the gateway (documented, so an unknown name is not a tool-before event); a payload
    with no event name at all is unusable and fails closed."""
    payload, event = shell(harness, RM_ROOT)
    field = "agent_action_name" if harness == "windsurf" else "hook_event_name"
    for unknown in ("PreToolUse2", "pretooluse", "BeforeToolSelection", "PermissionDenied"):
        if harness == "copilot":
            a = await call(send, channel, harness, payload, unknown)
        else:
            a = await call(send, channel, harness, {**payload, field: unknown}, None)
        expected_noop = Answer(0, "{}" if channel == "http" else "", "")
        assert a == expected_noop, (unknown, a)
    if harness == "copilot":
        return  # camelCase payloads carry no name: the event comes from --event / ?event=
    nameless = {k: v for k, v in payload.items() if k != field}
    a = await call(send, channel, harness, nameless, None)
    if channel == "http":
        native_refusal(harness, a)
    else:
        assert (a.code, a.out) == (2, "") and "no hook event name" in a.err, a
    for bad in (5, None, ["PreToolUse"], ""):
        a = await call(send, channel, harness, {**payload, field: bad}, None)
        if channel == "http":
            native_refusal(harness, a)
        else:
            assert a.code == 2, (bad, a)


@pytest.mark.spec("AHP-FAIL-001")
@pytest.mark.parametrize(("channel", "harness"), CHANNELS, ids=CHANNEL_IDS)
async def test_payload_over_the_gateway_body_limit_fails_closed(send: Send, channel: str, harness: str) -> None:
    """A command padded past the gateway's `limits.maxBodyBytes` (1 MiB in the bundled
    configuration) is refused by the gateway. Through the command adapter the native answer is
    then a denial, never a pass; a native HTTP hook gets the harness's own denial in a 200 before
    the payload is read (a 413 would let the call proceed: issue 28 item 4)."""
    payload, event = shell(harness, "ls; " + "#" * 1_200_000 + "\n" + RM_ROOT)
    a = await call(send, channel, harness, payload, event)
    if channel == "http":
        native_refusal(harness, a)
        return
    assert SYNTHETIC in denial(channel, harness, event, a), a
