"""The h1 client's memory under tracemalloc against answers sent as fast as loopback allows."""

from __future__ import annotations

import asyncio
import tracemalloc
from typing import Any

import pytest

from gateway.upstream.h1 import AnswerTooLarge, H1Client, ProtocolError, Target
from tests.hostile.upstream_h1.helpers import (
    LIMIT,
    Upstream,
    stream,
)
from tests.support.client import wait_for

# ------------------------------------------------------------------------------------------------
# Memory: the h1 client itself, under tracemalloc, against answers sent as fast as loopback allows.

FLOOD_SECONDS = 0.6
"""The h1 deadline of a flood (what ends it when nothing else does)."""
HEADER_FLOODS: list[Any] = [
    pytest.param(
        b"",
        b"HTTP/1.1 100 Continue\r\n" + b"X-I: " + b"i" * 60000 + b"\r\n\r\n",
        TimeoutError,
        id="1xx-headers-near-the-budget",
    ),
    pytest.param(b"HTTP/1.1 200 ", b"O" * 65536, ProtocolError, id="reason-phrase"),
    pytest.param(
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5;", b"e" * 65536, AnswerTooLarge, id="chunk-extension"
    ),
]


async def _flood(head: bytes, unit: bytes, deadline: float) -> tuple[BaseException | None, int]:
    """Send ``head`` then ``unit`` repeatedly (up to 16 MiB) to an h1 client; (what the client
    raised, the peak bytes allocated while it ran)."""
    upstream = Upstream()
    upstream.acts.append(stream(head, unit, total=16 << 20))
    async with upstream.server:
        client = H1Client()
        tracemalloc.start()
        try:
            loop = asyncio.get_running_loop()
            await client.post(
                Target(upstream.url, {}, None), b"", b'{"id":"e1"}', limit=LIMIT, deadline=loop.time() + deadline
            )
            raised: BaseException | None = None
        except (ProtocolError, AnswerTooLarge, TimeoutError, OSError) as exc:
            raised = exc
        finally:
            peak = tracemalloc.get_traced_memory()[1]
            tracemalloc.stop()
            client.close()
        await wait_for(lambda: upstream.ended == 1)
    return raised, peak


@pytest.mark.parametrize(("head", "unit", "expected"), HEADER_FLOODS)
async def test_answer_heads_streamed_at_full_speed_keep_memory_bounded(head, unit, expected):
    """AHP-HTTP-001 bounded answers: a flood of interim answers whose headers each stay just
    under the budget (the budget is per message, so only the deadline ends it), an endless
    reason phrase or chunk extension (ended by the head's or the body's wire budget): peak
    memory stays far below the megabytes sent."""
    raised, peak = await _flood(head, unit, FLOOD_SECONDS)
    assert isinstance(raised, expected), raised
    assert peak < 4 << 20, f"peak {peak} bytes"


@pytest.mark.parametrize(
    "head",
    [
        pytest.param(b"HTTP/1.1 200 OK\r\nX-Endless: ", id="one-header-value"),
        pytest.param(b"HTTP/1.1 200 OK\r\nX-", id="one-header-name"),
        pytest.param(
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nX-Trailer: ",
            id="one-trailer-value",
        ),
    ],
)
async def test_one_endless_header_field_is_refused_at_the_header_budget(head):
    """AHP-HTTP-001 bounded answers: one header field that never ends (value, name or trailer)
    must fail once it passes its wire budget ('answer headers too large' for the head; for a
    trailer, the body's framing budget: too large), with memory bounded, not be buffered until
    the deadline."""
    raised, peak = await _flood(head, b"a" * 65536, FLOOD_SECONDS)
    # a trailer comes after the head: the body's framing budget ends it (as too large)
    assert isinstance(raised, AnswerTooLarge if b"X-Trailer" in head else ProtocolError), raised
    assert peak < 4 << 20, f"peak {peak} bytes"
