"""The harness-facing front end: HTTP binding (AHP-HTTP-001) and JSON-RPC error order."""

from __future__ import annotations

import json

import pytest

from tests.support.client import post
from tests.support.config import gateway_config, hook
from tests.support.events import intercept, result, tool_before


@pytest.fixture
async def gw(gateway_factory, stub_factory):
    stub = await stub_factory()
    server = await gateway_factory(gateway_config([hook("org.example.up", stub.url)]))
    server.stub = stub  # type: ignore[attr-defined]
    return server


async def test_intercept_success_is_200_with_correlated_result(gw, http):
    """AHP-HTTP-001: intercept success is 200 with the correlated JSON-RPC response."""
    req = intercept(tool_before())
    status, body = await post(http, gw.url, req)
    assert status == 200
    assert body == result(req, [])


@pytest.mark.parametrize(
    ("payload", "code"),
    [
        (b"{not json", -32700),
        (b"\xff\xfe", -32700),
        (b'[{"jsonrpc":"2.0","id":1,"method":"hooks/capabilities","params":{"protocolVersion":"draft"}}]', -32600),
        (b'"just a string"', -32600),
        (b'{"jsonrpc":"1.0","id":1,"method":"hooks/capabilities","params":{"protocolVersion":"draft"}}', -32600),
        (b'{"jsonrpc":"2.0","id":true,"method":"hooks/capabilities","params":{"protocolVersion":"draft"}}', -32600),
        (b'{"jsonrpc":"2.0","id":"","method":"hooks/capabilities","params":{"protocolVersion":"draft"}}', -32600),
        (b'{"jsonrpc":"2.0","id":1,"method":"hooks/capabilities","params":"x"}', -32600),
        (b'{"jsonrpc":"2.0","id":1,"method":"hooks/unknown","params":{}}', -32601),
        (b'{"jsonrpc":"2.0","id":1,"method":"hooks/capabilities","params":{"protocolVersion":"0.1"}}', -32001),
        (b'{"jsonrpc":"2.0","id":1,"method":"hooks/capabilities","params":{"protocolVersion":"draft","x":1}}', -32602),
    ],
)
@pytest.mark.spec("AHP-RPC-001")
async def test_malformed_requests_get_the_right_error(gw, http, payload, code):
    status, body = await post(http, gw.url, payload)
    assert status == 200
    assert body["error"]["code"] == code
    assert "result" not in body


async def test_error_order_version_before_event_before_schema(gw, http):
    """The SDK backend's order: version (-32001) → event type (-32002) → schema (-32602)."""
    event = tool_before()
    req = intercept(event)
    req["params"]["protocolVersion"] = "1900-01-01"
    req["params"]["event"]["type"] = "turn.end"
    del req["params"]["capabilities"]
    status, body = await post(http, gw.url, req)
    assert body["error"]["code"] == -32001
    assert body["error"]["data"] == {"supported": ["draft"]}
    req["params"]["protocolVersion"] = "draft"
    _, body = await post(http, gw.url, req)
    assert body["error"]["code"] == -32002
    req["params"]["event"]["type"] = "tool.before"
    _, body = await post(http, gw.url, req)
    assert body["error"]["code"] == -32602
    assert body["error"]["data"] == {"path": "/params", "keyword": "required"}


@pytest.mark.spec("AHP-CORE-004")
async def test_request_id_must_equal_event_id(gw, http):
    req = intercept(tool_before(), rid="other-id")
    _, body = await post(http, gw.url, req)
    assert body["error"]["code"] == -32602
    assert body["id"] == "other-id"
    assert gw.stub.received == []


async def test_schema_error_names_the_field_not_the_value(gw, http):
    event = tool_before("secret-value-123")
    del event["tool"]["origin"]
    _, body = await post(http, gw.url, intercept(event))
    assert body["error"]["code"] == -32602
    assert body["error"]["data"]["path"].startswith("/params/event")
    assert "secret-value-123" not in json.dumps(body)


async def test_notifications_never_get_a_body(gw, http):
    note = {"jsonrpc": "2.0", "method": "hooks/observe", "params": {"protocolVersion": "draft", "event": tool_before()}}
    status, body = await post(http, gw.url, note)
    assert (status, body) == (202, None)
    for bad in (
        {"jsonrpc": "2.0", "method": "hooks/nope", "params": {}},
        {"jsonrpc": "2.0", "method": "hooks/intercept", "params": {"protocolVersion": "draft"}},
        {"jsonrpc": "2.0", "method": "hooks/observe", "params": {"protocolVersion": "9"}},
    ):
        status, body = await post(http, gw.url, bad)
        assert (status, body) == (202, None)


async def test_observe_with_id_is_invalid_request(gw, http):
    note = {
        "jsonrpc": "2.0",
        "id": 5,
        "method": "hooks/observe",
        "params": {"protocolVersion": "draft", "event": tool_before()},
    }
    _, body = await post(http, gw.url, note)
    assert body["error"]["code"] == -32600


async def test_http_binding_rejects_other_methods_and_media_types(gw, http):
    async with http.get(gw.url) as response:
        assert response.status == 405
    status, _ = await post(http, gw.url, intercept(tool_before()), content_type="text/plain")
    assert status == 415


async def test_oversized_body_is_413_without_reading_it(gateway_factory, stub_factory, http):
    stub = await stub_factory()
    cfg = gateway_config([hook("org.example.up", stub.url)])
    cfg["limits"]["maxBodyBytes"] = 2048
    server = await gateway_factory(cfg)
    big = intercept(tool_before("x" * 5000))
    status, _ = await post(http, server.url, big)
    assert status == 413

    async def chunks():
        yield json.dumps(big).encode()

    async with http.post(server.url, data=chunks(), headers={"Content-Type": "application/json"}) as response:
        assert response.status == 413
    assert stub.received == []


async def test_unknown_interceptable_event_without_subscription_is_empty(gw, http):
    """AHP-REG-002: no matching subscription means no decision step and no upstream call."""
    event = tool_before()
    event["type"] = "tool.permission.request"
    event["suggestions"] = []
    event["sandboxBypass"] = False
    req = intercept(event, {"effects": ["deny", "allow"]})
    status, body = await post(http, gw.url, req)
    assert status == 200, body
    assert body["result"]["effects"] == []
    assert gw.stub.received == []


async def test_capabilities_manifest_is_honest_and_schema_valid(gw, http):
    from gateway.protocol.schemas import load

    req = {"jsonrpc": "2.0", "id": "cap-1", "method": "hooks/capabilities", "params": {"protocolVersion": "draft"}}
    status, body = await post(http, gw.url, req)
    assert status == 200
    assert load().capabilities_response.ok(body)
    manifest = body["result"]["manifest"]
    assert set(manifest) == {
        "events",
        "gaps",
        "transports",
        "authentication",
        "toolPaths",
        "contentCategories",
        "limits",
        "managedPolicy",
        "correlationIdentityFields",
    }
    assert "identity" not in manifest
    events = {e["event"]: e for e in manifest["events"]}
    assert set(events) == {"tool.before"}
    assert events["tool.before"]["modes"] == ["intercept", "observe"]
    gap_paths = {g["path"] for g in manifest["gaps"]}
    assert "events.turn.start" in gap_paths


async def test_configuration_answer_never_bypasses(gw, http):
    """SDK harnesses skip a backend on an empty/erroring/upload configuration: always answer
    with an intercept subscription per served event plus an observe subscription."""
    from gateway.protocol.schemas import load

    req = {"jsonrpc": "2.0", "id": 7, "method": "hooks/configuration", "params": {"protocolVersion": "draft"}}
    _, body = await post(http, gw.url, req)
    assert load().configuration_response.ok(body)
    subs = body["result"]["configuration"]["subscriptions"]
    intercepts = [s for s in subs if s["mode"] == "intercept"]
    assert intercepts == [
        {
            "events": ["tool.before"],
            "mode": "intercept",
            "timeoutMs": 2500,
            "failurePolicy": "fail-closed",
            "content": {"default": "body"},
        }
    ]
    assert any(s["mode"] == "observe" for s in subs)
    assert all("upload" not in s for s in subs)
