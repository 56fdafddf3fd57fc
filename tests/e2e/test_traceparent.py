"""W3C Trace Context ``traceparent`` parsing, case by case (W3C Trace Context Level 1 §3.2 and
its test suite): an invalid header starts a new trace instead of joining a forged or broken one."""

from __future__ import annotations

import json

import pytest

from gateway.observability import tracing
from gateway.observability.tracing import TRACE_EXTENSION, child_headers, from_request, parse_traceparent
from gateway.upstream.h1 import header_block
from tests.support.config import gateway_config, hook
from tests.support.events import intercept, result, tool_before

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT = "00f067aa0ba902b7"

VALID = [
    (f"00-{TRACE}-{PARENT}-01", "01"),  # the spec's example, sampled
    (f"00-{TRACE}-{PARENT}-00", "00"),  # not sampled
    (f"00-{TRACE}-{PARENT}-ff", "ff"),  # unknown flag bits are carried, not an error
    (f" \t00-{TRACE}-{PARENT}-01\t ", "01"),  # optional whitespace around the field value
    (f"01-{TRACE}-{PARENT}-01", "01"),  # a future version, no extra fields
    (f"cc-{TRACE}-{PARENT}-01-what-the-future-will-be-like", "01"),  # future version, extra fields
    (f"fe-{TRACE}-{PARENT}-09-", "09"),
]

INVALID = [
    f"ff-{TRACE}-{PARENT}-01",  # version 255 is forbidden
    f"00-{TRACE}-{PARENT}-01-extra",  # version 00 has exactly four fields
    f"00-{TRACE}-{PARENT}-01-",
    f"cc-{TRACE}-{PARENT}-01.what-the-future",  # a later field must follow a dash
    f"cc-{TRACE}-{PARENT}-01what",
    f"00-{TRACE.upper()}-{PARENT}-01",  # uppercase hex is not HEXDIGLC
    f"00-{TRACE}-{PARENT.upper()}-01",
    f"00-{TRACE}-{PARENT}-0A",
    f"0A-{TRACE}-{PARENT}-01",
    f"00-{'0' * 32}-{PARENT}-01",  # all-zero trace id
    f"00-{TRACE}-{'0' * 16}-01",  # all-zero parent id
    f"0-{TRACE}-{PARENT}-01",  # version must be two hex digits
    f"000-{TRACE}-{PARENT}-01",
    f"00-{TRACE[:-1]}-{PARENT}-01",  # short trace id
    f"00-{TRACE}0-{PARENT}-01",  # long trace id
    f"00-{TRACE}-{PARENT[:-1]}-01",
    f"00-{TRACE}-{PARENT}-1",
    f"00-{TRACE}-{PARENT}-001",
    f"00_{TRACE}_{PARENT}_01",  # wrong delimiter
    f"00-{TRACE[:-1]}g-{PARENT}-01",  # not hex
    f"00-{TRACE}-{PARENT}-0g",
    f"00-{TRACE}-{PARENT}",  # flags missing
    f"00-{TRACE}-{PARENT}-01\n",  # a line break is not optional whitespace
    f"00-{TRACE}-{PARENT}-01\x00",
    "",
    "00",
]


@pytest.mark.parametrize(("header", "flags"), VALID)
def test_valid_traceparent_headers_are_joined(header: str, flags: str) -> None:
    assert parse_traceparent(header) == (TRACE, PARENT, flags)


@pytest.mark.parametrize("header", INVALID)
def test_invalid_traceparent_headers_start_a_new_trace(header: str) -> None:
    assert parse_traceparent(header) is None


@pytest.mark.parametrize("value", [None, 1, [f"00-{TRACE}-{PARENT}-01"], {"traceparent": "x"}])
def test_a_non_string_carrier_value_is_ignored(value: object) -> None:
    assert parse_traceparent(value) is None


async def test_a_future_version_is_propagated_as_version_00_with_the_same_trace(gateway_factory, stub_factory, http):
    up = await stub_factory()
    gw = await gateway_factory(gateway_config([hook("org.example.a", up.url)]))
    headers = {"Content-Type": "application/json", "traceparent": f"cc-{TRACE}-{PARENT}-01-later", "tracestate": "k=v"}
    async with http.post(gw.url, data=json.dumps(intercept(tool_before())), headers=headers) as resp:
        assert resp.status == 200
    version, trace_id, span_id, flags = up.headers[0]["traceparent"].split("-")
    assert (version, trace_id, flags) == ("00", TRACE, "01") and span_id != PARENT
    assert up.headers[0]["tracestate"] == "k=v"


async def test_an_uppercase_header_starts_a_new_trace_and_drops_its_tracestate(gateway_factory, stub_factory, http):
    up = await stub_factory()
    gw = await gateway_factory(gateway_config([hook("org.example.a", up.url)]))
    headers = {
        "Content-Type": "application/json",
        "traceparent": f"00-{TRACE.upper()}-{PARENT}-01",
        "tracestate": "k=v",
    }
    async with http.post(gw.url, data=json.dumps(intercept(tool_before())), headers=headers) as resp:
        assert resp.status == 200
    assert up.headers[0]["traceparent"].split("-")[1] != TRACE
    assert "tracestate" not in up.headers[0]


DENY = {"type": "deny", "reason": "blocked by the upstream", "code": "org.example.no"}


@pytest.mark.parametrize(
    "state",
    ["k=v\r\nX-Injected: 1", "k=v\nX: 1", "k=v\x00", "k=" + "v" * 600, "k=v\u00e9"],
    ids=["crlf", "lf", "nul", "over-512", "non-ascii"],
)
async def test_an_unsafe_tracestate_in_the_event_is_dropped_and_cannot_fail_the_upstream_open(
    state: str, gateway_factory, stub_factory, http
) -> None:
    """W3C Trace Context §3.3.1.1: an invalid ``tracestate`` may be discarded. The carrier in the
    event is the harness's JSON, not an HTTP field: a line break there once made the header check
    refuse every upstream call (a failure), so a fail-open upstream was skipped and its deny lost.
    Now the upstream is called, with the trace joined and without the unsafe value."""
    up = await stub_factory(lambda request: result(request, [DENY]))
    gw = await gateway_factory(gateway_config([hook("org.example.a", up.url, policy="fail-open")]))
    event = tool_before(extensions={TRACE_EXTENSION: {"traceparent": f"00-{TRACE}-{PARENT}-01", "tracestate": state}})
    async with http.post(gw.url, json=intercept(event)) as resp:
        answer = await resp.json()
    assert [e["type"] for e in answer["result"]["effects"]] == ["deny"]
    assert up.headers[0]["traceparent"].split("-")[1] == TRACE
    assert "tracestate" not in up.headers[0] and "X-Injected" not in up.headers[0]


def test_a_safe_tracestate_is_kept_beside_a_valid_parent_only() -> None:
    """§3.3: no ``tracestate`` is read without a valid ``traceparent`` next to it."""
    joined = from_request({"traceparent": f"00-{TRACE}-{PARENT}-01", "tracestate": " a=1,b=2 "}, {})
    assert (joined.trace_id, joined.state) == (TRACE, "a=1,b=2")
    assert from_request({"traceparent": "garbage", "tracestate": "a=1"}, {}).state is None
    assert from_request({"tracestate": "a=1"}, {}).state is None


def test_child_headers_carry_their_lines_and_match_what_the_mapping_says() -> None:
    """The HTTP client sends the pre-built lines; they must say exactly what the mapping says."""
    ctx = from_request({"traceparent": f"00-{TRACE}-{PARENT}-01", "tracestate": "a=1"}, {})
    headers = child_headers(ctx)
    assert header_block(headers) == header_block(dict(headers))
    version, trace_id, span_id, flags = headers["traceparent"].split("-")
    assert (version, trace_id, flags) == ("00", TRACE, "01") and span_id != PARENT and len(span_id) == 16
    assert child_headers(ctx)["traceparent"] != headers["traceparent"]  # a new span per call


def test_new_ids_are_random_hex_and_never_all_zero(monkeypatch: pytest.MonkeyPatch) -> None:
    """W3C Trace Context §3.2.2.3-4: an all-zero trace or span id is invalid, so the pool skips
    one; ids are lowercase hex of the right length and do not repeat."""
    served = [bytes(4096), bytes(range(256)) * 16]
    monkeypatch.setattr(tracing.os, "urandom", lambda n: served.pop(0))
    ids = tracing._HexIds()
    trace_id, span_id = ids.pair()
    assert trace_id.strip("0") and span_id.strip("0") and (len(trace_id), len(span_id)) == (32, 16)
    monkeypatch.undo()
    fresh = tracing._HexIds()
    seen = {fresh.take(32) for _ in range(1000)}
    assert len(seen) == 1000 and all(len(i) == 32 and int(i, 16) for i in seen)


def test_a_forked_worker_does_not_repeat_its_parents_ids() -> None:
    """Workers are forked: a pool inherited from the parent would hand out the parent's ids."""
    import os

    # private: the id pool is module state with no public handle; the test checks a fork resets it
    tracing._ids.take(16)  # the parent holds a pool
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report its next id and leave at once
        os.write(write, tracing._ids.take(16).encode())
        os._exit(0)
    os.close(write)
    child = os.read(read, 64).decode()
    os.waitpid(pid, 0)
    os.close(read)
    assert len(child) == 16 and child != tracing._ids.take(16)
