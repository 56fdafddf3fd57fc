"""Bugs the hostile stdio harness found, each kept as a regression test (AHP-STDIO)."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import pytest

from gateway.server.ndjson import Answer, Forward, Framer, Line
from tests.hostile.stdio.helpers import (
    LIMIT,
    PROTOCOL,
    caps,
    dumps,
    outcome,
    parse_int,
)

# ------------------------------------------------------------------------------------------------
# bugs


async def test_quote_heavy_broken_lines_are_framed_in_bounded_time(stdio):
    """A line of ``"\\`` pairs (not JSON) within the limit, and one over it: both must be dropped
    in milliseconds. A tokenizer that retries a string at each quote of an unclosed run takes
    seconds for 64 KiB, during which the event loop, hence every other request, is stalled."""
    await stdio.send(caps(b'"warm"') + b"\n")
    await stdio.answers_until("warm")
    hostile = b'"\\' * (LIMIT // 2 - 8)
    try:
        async with asyncio.timeout(5):
            await stdio.send(hostile + b"\n" + hostile * 3 + b"\n" + caps(b'"after"') + b"\n")
            got, _ = await stdio.answers_until("after")
    except TimeoutError:
        raise AssertionError("the request after two quote-heavy lines was not answered within 5 s") from None
    assert got == []


KIB = 1024
HOSTILE_LINES = {
    "escaped-quotes": (b"", b'"\\'),
    "backslashes": (b"", b"\\\\"),
    "quotes": (b"", b'"'),
    "open-keys": (b"", b'{"'),
    "brackets": (b"", b"["),
    "deep-nesting": (b"", b'{"a":['),
    "id-keys": (b"{", b'"id":'),
    "unclosed-string": (b'{"jsonrpc":"2.0","id":"u","params":{"pad":"', b"x"),
    "unclosed-escaped-quotes": (b'{"jsonrpc":"2.0","id":"q","params":{"pad":"', b'\\"'),
}
"""A head and a unit repeated to the line's size: shapes that make a naive tokenizer backtrack or
recurse (none of them is JSON)."""


def framing_cpu(data: bytes) -> float:
    """CPU seconds for the framer to take ``data`` as a line of its own and as the continuation
    of an open fragment (CPU time: a loaded machine barely changes it)."""
    started = time.process_time()
    alone, in_fragment = Framer(2 * len(data)), Framer(2 * len(data))
    alone.frame(Line(data))
    alone.close()
    in_fragment.frame(Line(b'{"jsonrpc":"2.0","id":"f",'))
    in_fragment.frame(Line(data))
    in_fragment.close()
    return time.process_time() - started


@pytest.mark.parametrize("shape", list(HOSTILE_LINES))
def test_hostile_lines_are_framed_in_linear_time(shape):
    """Framing time grows linearly with the line: 16 times the bytes cost at most 64 times the
    time (linear is 16, quadratic 256), and 64 KiB stay far below a second. The bounds are loose on
    purpose; the small size is timed at its best of three, the large one re-timed only if slow."""
    head, unit = HOSTILE_LINES[shape]

    def line(size: int) -> bytes:
        return head + unit * ((size - len(head)) // len(unit))

    small = min(framing_cpu(line(64 * KIB)) for _ in range(3))
    assert small < 2.0, f"{shape}: {small:.2f}s of CPU for 64 KiB"  # checked before timing 16 times that
    large, bound = float("inf"), 64 * small + 0.2
    for _ in range(3):
        large = min(large, framing_cpu(line(1024 * KIB)))
        if large <= bound:
            break
    assert large <= bound and large < 30.0, f"{shape}: 64 KiB {small:.3f}s, 1 MiB {large:.3f}s of CPU"


def framed(data: bytes) -> list[tuple[Any, Any]]:
    """(id, error code or "forward") per frame with a line, for ``data`` framed line by line."""
    framer = Framer(LIMIT)
    frames = [f for line in data.split(b"\n")[:-1] for f in framer.frame(Line(line))] + framer.close()
    out: list[tuple[Any, Any]] = []
    for frame in frames:
        if isinstance(frame, Forward):
            out.append((frame.rid, "forward"))
        elif isinstance(frame, Answer):
            body = json.loads(frame.body)
            out.append((body["id"], body["error"]["code"]))
    return out


def test_which_lines_end_an_open_fragment():
    """A line that starts like a request, or alone is an object with ``jsonrpc`` or an id, starts
    a message of its own; a bare nested object of a pretty-printed body (``{}`` on its own line,
    the request's id further down) continues it, so that body still gets its one answer."""
    broken = b'{"jsonrpc":"2.0","id":"a","params":{\n'
    assert framed(broken + b'{ "jsonrpc": "2.0", "id": "b",\n') == [("a", -32700), ("b", -32700)]
    assert framed(broken + b'{"id":7}\n') == [("a", -32700), (7, "forward")]
    pretty = {"jsonrpc": "2.0", "method": "hooks/capabilities", "params": {"x": [{}, {}]}, "id": "late"}
    assert framed(json.dumps(pretty, indent=2).encode() + b"\n") == [("late", -32600)]


async def test_a_request_after_a_long_unclosed_line_is_answered(stdio, over_http):
    """An unclosed object just under the limit, then a valid request: the request must be
    answered (as over HTTP), not dropped as the over-long rest of the broken fragment."""
    fragment = b'{"jsonrpc":"2.0","id":"frag","params":{"pad":"' + b"x" * (LIMIT - 100)
    await stdio.send(fragment + b"\n" + caps(b'"next"') + b"\n" + caps(b'"sync"') + b"\n")
    got, _ = await stdio.answers_until("sync")
    assert [m["id"] for m in got] == ["frag", "next"], [(m["id"], outcome(m)) for m in got]
    assert got[1] == (await over_http(caps(b'"next"')))[1]


SWALLOWED = {
    "json-line-with-id-but-no-jsonrpc": dumps({"id": 7, "method": "hooks/capabilities", "params": PROTOCOL}),
    "second-truncated-request": b'{"jsonrpc":"2.0","id":"b","method":"hooks/capabilities",',
}


@pytest.mark.parametrize("second", list(SWALLOWED))
async def test_a_broken_line_does_not_swallow_the_next_line_with_an_id(stdio, over_http, second):
    """A truncated request, then a line that alone is answered with its own id (a JSON object
    without ``jsonrpc``: -32600 with id 7 as over HTTP; another truncated request: -32700 with
    its id). Both lines must be answered: taken as a continuation of the first, the second would
    get no line and the harness would wait for id 7 (or "b") forever."""
    line = SWALLOWED[second]
    await stdio.send(line + b"\n" + caps(b'"alone"') + b"\n")
    alone, _ = await stdio.answers_until("alone")
    assert len(alone) == 1  # the line on its own is answered
    await stdio.send(b'{"jsonrpc":"2.0","id":"a","params":{\n' + line + b"\n" + caps(b'"sync"') + b"\n")
    got, _ = await stdio.answers_until("sync")
    assert [m["id"] for m in got] == ["a", alone[0]["id"]], [(m["id"], outcome(m)) for m in got]
    assert got[1] == alone[0]


async def test_integer_ids_of_any_length_are_answered_with_their_exact_id(stdio, over_http):
    """AHP-RPC-001: an id is a non-empty string or an integer of any length. 4000, 4001 and 5000
    digits are each answered with the exact id (past 4000 digits the parser reads an integral
    Decimal; before, such an id got no line at all and the harness waited until its timeout)."""
    ids = [b"1" + b"0" * (n - 1) for n in (4000, 4001, 5000)]
    await stdio.send(b"".join(caps(rid) + b"\n" for rid in ids) + caps(b'"sync"') + b"\n")
    got, _ = await stdio.answers_until("sync")
    assert [m["id"] for m in got] == [parse_int(rid.decode()) for rid in ids]
