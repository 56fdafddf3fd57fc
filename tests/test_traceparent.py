"""W3C Trace Context ``traceparent`` parsing, case by case (W3C Trace Context Level 1 §3.2 and
its test suite): an invalid header starts a new trace instead of joining a forged or broken one."""

from __future__ import annotations

import json

import pytest

from gateway.observability.tracing import parse_traceparent
from tests.conftest import gateway_config, hook, intercept, tool_before

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
