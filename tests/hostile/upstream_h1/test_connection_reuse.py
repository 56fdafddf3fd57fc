"""Reused connections: cross-request confusion, and odd but valid framing that allows reuse or not."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import pytest

from tests.hostile.upstream_h1.helpers import (
    SHORT_MS,
    Upstream,
    answer,
    ask,
    chunked,
    forged,
    handled,
    honest,
    next_request_is_answered_on_a_new_connection,
    own,
    recorded,
    send,
    synthetic,
)
from tests.support.client import wait_for
from tests.support.events import tool_before
from tests.support.scripted_h1 import ok

# ------------------------------------------------------------------------------------------------
# Cross-request confusion through a reused connection.


@pytest.mark.spec("AHP-HTTP-001")
@pytest.mark.parametrize(
    "extra",
    [
        pytest.param(lambda nxt: forged(nxt), id="a-second-complete-answer"),
        pytest.param(lambda nxt: b"GARBAGE\r\n\r\n", id="garbage"),
        pytest.param(lambda nxt: b"HTTP/1.1 200 OK\r\nContent-", id="half-a-head"),
        pytest.param(lambda nxt: b"HTTP/1.1 100 Continue\r\n\r\n", id="a-late-interim"),
        pytest.param(lambda nxt: b"X", id="one-byte"),
    ],
)
async def test_bytes_after_a_complete_answer_in_the_same_segment_never_reach_the_next_request(rig, http, extra):
    """AHP-HTTP-001 (no pipelining): the answer is complete (Content-Length shorter than what was
    written) and is the answer to its request; whatever follows in the same segment, even a
    valid deny carrying the next request's id, is never read as the next answer: the connection
    is dropped and the next request gets its own answer on a new one."""
    gateway, upstream = await rig()
    first, second = tool_before(), tool_before()
    upstream.acts.append(send(lambda rid: honest(rid) + extra(second["id"])))
    rid, effects, _ = await ask(http, gateway, first)
    assert effects == own(rid)
    await wait_for(lambda: upstream.ended == 1)
    rid, effects, _ = await ask(http, gateway, second)
    assert effects == own(rid)
    assert upstream.connection_of(rid) == 2
    await recorded(http, gateway, ok=2, deny=0)


@pytest.mark.spec("AHP-HTTP-001")
@pytest.mark.parametrize(
    "unsolicited",
    [
        pytest.param(lambda nxt: forged(nxt), id="a-forged-answer-for-the-next-id"),
        pytest.param(lambda nxt: b"HTTP/1.1 100 Continue\r\n\r\n", id="an-interim-answer"),
        pytest.param(lambda nxt: b"\r\n", id="an-empty-line"),
    ],
)
async def test_bytes_on_an_idle_pooled_connection_drop_it_before_the_next_request(rig, http, unsolicited):
    """AHP-HTTP-001: an answer (or anything) the upstream sends while its connection sits idle
    in the pool is not kept for the next request: the gateway closes that connection, and the
    next request gets its own answer on a new one, never the forged deny."""
    gateway, upstream = await rig()
    first, second = tool_before(), tool_before()
    answered, wrote = asyncio.Event(), asyncio.Event()

    async def act(request: dict[str, Any], reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(honest(request["id"]))
        await writer.drain()
        await asyncio.wait_for(answered.wait(), 5)  # the harness has its answer: the connection is idle
        writer.write(unsolicited(second["id"]))
        await writer.drain()
        wrote.set()

    upstream.acts.append(act)
    rid, effects, _ = await ask(http, gateway, first)
    assert effects == own(rid)
    answered.set()
    await asyncio.wait_for(wrote.wait(), 5)
    await wait_for(lambda: upstream.ended == 1)  # closed by the gateway, before any next request
    rid, effects, _ = await ask(http, gateway, second)
    assert effects == own(rid)
    assert upstream.connection_of(rid) == 2


@pytest.mark.spec("AHP-HTTP-001")
@pytest.mark.parametrize("policy", ["fail-closed", "fail-open"])
async def test_a_stale_answer_ahead_of_the_real_one_is_rejected_not_attributed(rig, http, policy):
    """AHP-HTTP-001, protocol §6.3 (a mismatched id is an operational failure): on a reused
    connection the upstream puts a valid deny for the previous request ahead of the real answer.
    The stale answer is not attributed to the new request (invalid_response under the policy),
    the real answer behind it is not salvaged either, and the connection is dropped."""
    gateway, upstream = await rig(policy)
    first, second = tool_before(), tool_before()
    rid, effects, _ = await ask(http, gateway, first)
    assert effects == own(rid)
    upstream.acts.append(send(lambda rid: forged(first["id"]) + honest(rid)))
    rid, effects, _ = await ask(http, gateway, second)
    assert upstream.connection_of(rid) == 1  # the pool did reuse the healthy connection
    assert effects == handled(policy, "invalid_response")
    await next_request_is_answered_on_a_new_connection(http, gateway, upstream)
    await recorded(http, gateway, invalid_response=1, ok=2, deny=0)


@pytest.mark.spec("AHP-FAIL-002")
async def test_a_late_answer_to_a_timed_out_call_never_reaches_the_next_request(rig, http):
    """AHP-FAIL-002 ("MUST ignore any later response"): the call times out; the upstream then
    answers it (a deny) on the same connection. The next request must not read that answer: the
    connection was dropped at the timeout and the next request gets its own on a new one."""
    gateway, upstream = await rig(timeout_ms=SHORT_MS)
    late_written = asyncio.Event()

    async def act(request: dict[str, Any], reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        await asyncio.sleep(SHORT_MS / 1000 + 0.1)
        with contextlib.suppress(ConnectionError):
            writer.write(forged(request["id"]))
            await writer.drain()
        late_written.set()
        return False  # and keep reading: a reused connection would bring the next request here

    upstream.acts.append(act)
    _, effects, _ = await ask(http, gateway)
    assert effects == synthetic("timeout")
    await asyncio.wait_for(late_written.wait(), 5)
    await next_request_is_answered_on_a_new_connection(http, gateway, upstream)


# ------------------------------------------------------------------------------------------------
# Odd but valid framing: the answer is accepted; the connection is reused only when allowed.

VALID: list[Any] = [
    pytest.param(
        lambda rid: ok(answer(rid, own(rid))).replace(b"Content-Length: ", b"Content-Length: 000", 1),
        True,
        id="cl-leading-zeros",
    ),
    pytest.param(
        lambda rid: chunked(answer(rid, own(rid)), size_line=b'%x;ext=1;q="a b"' % len(answer(rid, own(rid)))),
        True,
        id="chunk-extensions",
    ),
    pytest.param(
        lambda rid: chunked(answer(rid, own(rid)), trailer=b"X-Checksum: 1\r\n"),
        True,
        id="trailers",
    ),
    pytest.param(lambda rid: b"HTTP/1.1 103 Early Hints\r\nLink: </x>\r\n\r\n" + honest(rid), True, id="103-then-200"),
    pytest.param(lambda rid: honest(rid).replace(b"HTTP/1.1", b"HTTP/1.0", 1), False, id="http-1.0-without-keep-alive"),
    pytest.param(lambda rid: ok(answer(rid, own(rid)), b"Connection: close\r\n"), False, id="connection-close"),
    pytest.param(
        lambda rid: ok(answer(rid, own(rid)), b"Connection: keep-alive, close\r\n"),
        False,
        id="connection-keep-alive-close",
    ),
]


@pytest.mark.spec("AHP-HTTP-001")
@pytest.mark.parametrize(("build", "reusable"), VALID)
async def test_odd_but_valid_framing_is_accepted_and_reused_only_when_allowed(rig, http, build, reusable):
    """AHP-HTTP-001: valid HTTP/1.1 framing variants are answers like any other; a connection
    the server did not keep alive is never reused."""
    gateway, upstream = await rig()
    upstream.acts.append(send(build))
    rid, effects, _ = await ask(http, gateway)
    assert effects == own(rid)
    if reusable:
        rid, effects, _ = await ask(http, gateway)
        assert effects == own(rid) and upstream.connection_of(rid) == 1
    else:
        await next_request_is_answered_on_a_new_connection(http, gateway, upstream)


@pytest.mark.spec("AHP-HTTP-001")
async def test_a_close_delimited_answer_is_accepted_and_not_reused(rig, http):
    """AHP-HTTP-001, RFC 9112 §6.3: no Content-Length, no chunked: the body ends when the upstream
    closes the connection."""
    gateway, upstream = await rig()
    upstream.acts.append(send(lambda rid: b"HTTP/1.1 200 OK\r\n\r\n" + answer(rid, own(rid)), close=True))
    rid, effects, _ = await ask(http, gateway)
    assert effects == own(rid)
    await next_request_is_answered_on_a_new_connection(http, gateway, upstream)


@pytest.mark.spec("AHP-HTTP-001")
async def test_content_length_with_trailing_whitespace_is_valid(rig, http):
    """AHP-HTTP-001, RFC 9112 §5 (field-line = name ":" OWS value OWS): trailing OWS is not part
    of the value, so this answer is valid and must be accepted."""
    gateway, upstream = await rig()
    upstream.acts.append(send(lambda rid: honest(rid).replace(b"\r\n\r\n", b" \r\n\r\n", 1)))
    rid, effects, _ = await ask(http, gateway)
    assert effects == own(rid)


@pytest.mark.spec("AHP-HTTP-001")
async def test_a_redirect_is_a_status_failure_and_its_location_is_never_contacted(rig, http):
    """AHP-HTTP-001 ("Redirects MUST NOT be followed"): a 307 to a server that would answer
    allow is an http_status failure; that server never sees a connection."""
    elsewhere = Upstream()
    async with elsewhere.server:
        gateway, upstream = await rig()
        location = elsewhere.url.encode()
        for status in (b"301 Moved Permanently", b"307 Temporary Redirect", b"308 Permanent Redirect"):
            upstream.acts.append(
                send(lambda rid, s=status: b"HTTP/1.1 %s\r\nLocation: %s\r\nContent-Length: 0\r\n\r\n" % (s, location))
            )
            _, effects, _ = await ask(http, gateway)
            assert effects == synthetic("http_status")
        rid, effects, _ = await ask(http, gateway)
        assert effects == own(rid)
        assert elsewhere.connections == 0
        assert upstream.connections == 1  # a complete 3xx may keep its connection: nothing was left unread
        await recorded(http, gateway, http_status=3, ok=1)
