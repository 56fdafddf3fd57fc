"""Every number JSON allows parses and reaches upstreams unchanged (AHP-RPC-001: a JSON-RPC
request is any valid JSON text; a parse error is only for text that is not JSON)."""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from gateway.protocol import wire
from tests.support.client import post
from tests.support.config import gateway_config, hook
from tests.support.events import ALL_TOOL_BEFORE_CAPS, intercept, tool_before
from tests.support.servers import start_app

LONG_INT = "1234567890" * 3
HUGE_INT = "9" * 400
VAST_INT = "7" * 5000


def exact(raw: bytes | str) -> Any:
    """A reference parse that keeps every number's exact value."""
    return json.loads(raw, parse_float=Decimal, parse_int=Decimal)


@pytest.mark.spec("AHP-RPC-001")
@pytest.mark.parametrize(
    "text",
    [
        "1e309",
        "-1e309",
        "1E400",
        "2.5e+999",
        "-0.0",
        LONG_INT,
        "-" + LONG_INT,
        HUGE_INT,
        VAST_INT,
        "18446744073709551615",
        "18446744073709551616",
        "-9223372036854775809",
    ],
)
def test_valid_numbers_parse_and_serialise_to_the_same_value(text: str) -> None:
    """Beyond a double's range and beyond 64-bit integers: the exact value survives."""
    document = f'{{"n": [{text}, {{"deep": {text}}}], "s": "{text}"}}'
    value = wire.loads(document.encode())
    again = wire.dumps(value)
    assert exact(again) == exact(document)
    assert value["s"] == text


@pytest.mark.parametrize(
    "text", ["1e-400", "0.1000000000000000055511151231257827", "4.9e-324", "1.7976931348623157e308"]
)
def test_fractions_within_double_range_are_read_as_doubles(text: str) -> None:
    """Decision: a number a double can approximate is read as the nearest double (RFC 8259 §6, and
    what both SDK peers do); only numbers no double can hold take the exact path."""
    assert json.loads(wire.dumps(wire.loads(f"[{text}]"))) == [float(text)]


def test_ordinary_numbers_keep_their_fast_types() -> None:
    assert wire.loads(b'{"a": 1, "b": 2.5, "c": 9223372036854775807, "d": "12345678901234567890123"}') == {
        "a": 1,
        "b": 2.5,
        "c": 9223372036854775807,
        "d": "12345678901234567890123",
    }


@pytest.mark.spec("AHP-RPC-001")
@pytest.mark.parametrize(
    "raw",
    [
        b"[NaN]",
        b"[1e309, NaN]",
        b"[1e309, Infinity]",
        b"[1e309, -Infinity]",
        b'[1e309, "\\ud800"]',  # lone surrogate: the standard library would accept it
        b'["\\udc00", ' + LONG_INT.encode() + b"]",
        b'[1e309, "\xff"]',  # invalid UTF-8
        b"\xef\xbb\xbf[1e309]",  # a byte-order mark is not JSON
        b"[1e309,]",
        b"[" * 5000 + b"1e309" + b"]" * 5000,  # deeper than any parser should recurse
        b"[01, 1e309]",
        b"1e309 1",
    ],
)
def test_not_json_stays_a_parse_error_on_the_fallback_path(raw: bytes) -> None:
    with pytest.raises(wire.JSONDecodeError):
        wire.loads(raw)


async def _raw_upstream(answer: dict[str, Any] | None = None) -> tuple[web.AppRunner, str, list[bytes]]:
    bodies: list[bytes] = []

    async def handle(request: web.Request) -> web.Response:
        raw = await request.read()
        bodies.append(raw)
        message = json.loads(raw)
        out = answer or {"result": {"protocolVersion": "draft", "effects": []}}
        return web.json_response({"jsonrpc": "2.0", "id": message["id"], **out})

    app = web.Application()
    app.router.add_post("/", handle)
    runner, port = await start_app(app)
    return runner, f"http://127.0.0.1:{port}/", bodies


@pytest.mark.spec("AHP-RPC-001")
async def test_huge_numbers_in_tool_input_reach_the_upstream_exactly(gateway_factory, http) -> None:
    runner, url, bodies = await _raw_upstream()
    try:
        server = await gateway_factory(gateway_config([hook("org.example.up", url)]))
        event = tool_before()
        request = intercept(event)
        raw = json.dumps(request).replace(
            '"input": {"command": "ls -la"}', f'"input": {{"n": 1e309, "big": {HUGE_INT}, "long": -{LONG_INT}}}'
        )
        assert "1e309" in raw
        status, body = await post(http, server.url, raw)
        assert status == 200 and body["result"]["effects"] == [], body
        sent = exact(bodies[0])["params"]["event"]["tool"]["input"]
        assert sent == {"n": Decimal("1e309"), "big": Decimal(HUGE_INT), "long": Decimal("-" + LONG_INT)}
    finally:
        await runner.cleanup()


@pytest.mark.spec("AHP-RPC-001")
async def test_a_modify_with_a_huge_integer_reaches_the_harness_exactly(gateway_factory, http) -> None:
    replaced = {"command": "ls", "count": int(HUGE_INT)}
    answer = {
        "result": {
            "protocolVersion": "draft",
            "effects": [{"type": "modify", "target": "input", "operation": "replace", "value": replaced}],
        }
    }
    runner, url, _ = await _raw_upstream(answer)
    try:
        server = await gateway_factory(gateway_config([hook("org.example.up", url)]))
        request = intercept(tool_before(), ALL_TOOL_BEFORE_CAPS)
        async with http.post(server.url, json=request) as response:
            raw = await response.read()
        effects = exact(raw)["result"]["effects"]
        assert effects == [
            {
                "type": "modify",
                "target": "input",
                "operation": "replace",
                "value": {"command": "ls", "count": Decimal(HUGE_INT)},
            }
        ], raw
    finally:
        await runner.cleanup()


@pytest.mark.spec("AHP-RPC-001")
@pytest.mark.parametrize("number", ["1e309", HUGE_INT, LONG_INT])
async def test_local_rules_compare_huge_numbers_as_doubles(gateway_factory, http, tmp_path: Path, number) -> None:
    (tmp_path / "rules.yaml").write_text(
        "namespace: org.example.numbers\n"
        "rules:\n"
        "  - id: too-many\n"
        "    events: [tool.before]\n"
        "    when: 'double(event.tool.input.n) > 1000.0'\n"
        "    deny: {reason: too many}\n"
    )
    local = {
        "id": "org.example.rules",
        "transport": {"type": "local", "policies": ["rules.yaml"]},
        "subscriptions": [
            {
                "mode": "intercept",
                "events": ["tool.before"],
                "timeoutMs": 100,
                "failurePolicy": "fail-open",
                "content": {"default": "body"},
            }
        ],
    }
    server = await gateway_factory(gateway_config([local]))
    raw = json.dumps(intercept(tool_before())).replace('"input": {"command": "ls -la"}', f'"input": {{"n": {number}}}')
    status, body = await post(http, server.url, raw)
    assert status == 200
    assert [e["type"] for e in body["result"]["effects"]] == ["deny"], body


@pytest.mark.spec("AHP-RPC-001")
async def test_the_sdk_backend_receives_the_exact_numbers(gateway_factory, http) -> None:
    """The official SDK backend reads numbers with the standard library: it must see the very
    integer the harness sent, and the double nearest to a float no double can hold exactly."""
    from tests.support.sdk_peers import SdkBackend, serve_backends

    backend = SdkBackend(lambda ctx: ())
    async with serve_backends([backend]) as (url,):
        server = await gateway_factory(gateway_config([hook("org.example.sdk", url)]))
        raw = json.dumps(intercept(tool_before())).replace(
            '"input": {"command": "ls -la"}', f'"input": {{"big": {HUGE_INT}, "long": -{LONG_INT}, "n": 1e308}}'
        )
        status, body = await post(http, server.url, raw)
        assert status == 200 and body["result"]["effects"] == [], body
    assert backend.intercepts[0]["input"] == {"big": int(HUGE_INT), "long": -int(LONG_INT), "n": 1e308}


@pytest.mark.spec("AHP-RPC-001")
@pytest.mark.parametrize(
    ("raw_id", "answered"),
    [("1" + "0" * 4000, True), ("-" + "9" * 5000, True), ("1" + "0" * 400 + ".5", False), ("1e400", False)],
    ids=["4001 digits", "minus 5000 digits", "huge with a fraction", "huge exponent"],
)
async def test_an_integer_id_of_any_length_is_echoed_exactly(
    gateway_factory, http, raw_id: str, answered: bool
) -> None:
    """AHP-RPC-001: an id is a string or an integer of any length. An integer past 4000 digits is
    read as an integral Decimal (int parsing turns quadratic there) and is still an id, echoed
    digit for digit; a number with a fraction or an exponent is not an id (-32600, id null)."""
    server = await gateway_factory(gateway_config([hook("org.example.up", "http://127.0.0.1:9/")]))
    raw = (
        '{"jsonrpc": "2.0", "id": '
        + raw_id
        + ', "method": "hooks/capabilities", "params": {"protocolVersion": "draft"}}'
    )
    async with http.post(server.url, data=raw, headers={"Content-Type": "application/json"}) as response:
        assert response.status == 200
        text = await response.text()
    if answered:
        assert text.startswith('{"jsonrpc":"2.0","id":' + raw_id + ',"result":'), text[:80]
    else:
        assert json.loads(text)["id"] is None and json.loads(text)["error"]["code"] == -32600
