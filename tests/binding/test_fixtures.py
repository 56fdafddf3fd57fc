"""The upstream golden fixtures (tests/vectors/ahp-spec/fixtures/draft) as test vectors.

Requests go to the gateway's front end; responses are played by an upstream stub and the gateway
must accept or reject them exactly as the manifest says. The fixtures predate the SDK 0.10.1
schema revision (which requires ``event.harness``): per protocol.md §18.0 a harness block is
added to every event first. Every remaining disagreement is listed in DISAGREEMENTS with its
reason, and that table is itself asserted so no entry can silently go stale.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from gateway.discovery import bound
from gateway.protocol.schemas import load
from tests.support.client import post, wait_for
from tests.support.config import gateway_config
from tests.support.events import HARNESS, tool_before
from tests.support.fixture_events import fixture_event
from tests.support.paths import VECTORS

FIXTURES = VECTORS / "ahp-spec" / "fixtures" / "draft"
MANIFEST = json.loads((FIXTURES / "manifest.json").read_text())["cases"]
CASES = {c["id"]: c for c in MANIFEST}

# fixture id -> why the gateway's behaviour differs from the manifest's expectation
DISAGREEMENTS: dict[str, str] = {
    "stdio.intercept-request-multiline.invalid": "a framing vector for stdio; over HTTP a pretty-printed body is one valid JSON object",
    "stdio.deny-response-multiple.invalid": "invalid only for the v0.1 single-deny schema; the draft accepts several denies (settled as deny, first reason kept)",
    "http.contextual-elicitation-content-object.valid": "form-answer edits at user.elicitation.result are narrowed out of the capabilities sent upstream, so any modify there is unadvertised",
}


def _load(case: dict[str, Any]) -> Any:
    path = VECTORS / "ahp-spec" / case["path"]
    text = path.read_text()
    if case["binding"] == "stdio-jsonl":
        return text  # raw framing preserved
    return json.loads(text)


def _with_harness(message: Any) -> Any:
    if (
        isinstance(message, dict)
        and isinstance(message.get("params"), dict)
        and isinstance(message["params"].get("event"), dict)
    ):
        message = copy.deepcopy(message)
        message["params"]["event"].setdefault("harness", dict(HARNESS))
    return message


def _is_request(case: dict[str, Any]) -> bool:
    body = _load(case)
    if isinstance(body, str):
        return '"method"' in body
    return "method" in body


REQUEST_CASES = sorted(c["id"] for c in MANIFEST if "registration" not in c["schema"] and _is_request(c))
RESPONSE_CASES = sorted(
    c["id"]
    for c in MANIFEST
    if "registration" not in c["schema"] and not _is_request(c) and "capabilities-response" not in c["schema"]
)


@pytest.fixture
async def gw(gateway_factory, stub_factory):
    stub = await stub_factory()
    entry = {
        "id": "org.example.up",
        "transport": {"type": "http", "url": stub.url},
        "subscriptions": [
            {
                "mode": "intercept",
                "events": ["*"],
                "timeoutMs": 1000,
                "failurePolicy": "fail-closed",
                "content": {"default": "body"},
            },
            {"mode": "observe", "events": ["*"], "content": {"default": "body"}},
        ],
    }
    from tests.support.telemetry import Capture

    capture = Capture()
    server = await gateway_factory(gateway_config([entry]), telemetry=capture)
    server.stub, server.capture = stub, capture  # type: ignore[attr-defined]
    return server


def _expected(case: dict[str, Any]) -> bool:
    expected = case.get("contextualExpectedValid", case["expectedValid"])
    return bool(expected) != (case["id"] in DISAGREEMENTS)


@pytest.mark.parametrize("fixture_id", REQUEST_CASES)
async def test_request_fixture(gw, http, fixture_id):
    """Valid requests are served; invalid ones get a JSON-RPC error (or, for notifications, are
    dropped without a body)."""
    case = CASES[fixture_id]
    message = _load(case)
    if isinstance(message, str):
        message = json.loads(message)  # the HTTP binding carries the same object
    message = _with_harness(message)
    status, body = await post(http, gw.url, message)
    valid = _expected(case)
    if message.get("method") == "hooks/observe" and "id" in message:
        assert body["error"]["code"] == -32600  # a notification cannot carry an id
        return
    if message.get("method") == "hooks/observe" or "id" not in message:
        assert (status, body) == (202, None)
        if valid:
            await wait_for(
                lambda: any(o["params"]["event"]["id"] == message["params"]["event"]["id"] for o in gw.stub.observed)
            )
            assert gw.capture.observed[-1] == "queued"
        else:
            assert gw.capture.observed[-1] == "invalid", fixture_id
        return
    assert status == 200
    if valid:
        assert "result" in body, body
        assert body["id"] == message["id"]
    else:
        assert body["error"]["code"] in (-32600, -32602, -32001, -32002), body


def _caps(etype: str) -> dict[str, Any]:
    caps = bound(load(), etype)
    if "continue" in caps.get("flow", {}).get("operations", ()):
        caps["flow"].update(remainingContinuations=1, continuationCount=0)
    return caps


# response fixture -> the boundary whose capabilities make its effects advertisable
RESPONSE_EVENT = {
    "flow-inject.valid": "tool.after",
    "flow-no-operation.invalid": "tool.after",
    "continue-no-instruction.valid": "tool.after",
    "stop-no-reason.invalid": "tool.after",
    "inject-wrong-operation.invalid": "tool.after",
    "atomic-unknown.invalid": "tool.after",
    "modify-prompt-merge.valid": "turn.start",
    "modify-instructions-merge.valid": "context.compact.before",
    "modify-invalid-target.invalid": "turn.start",
    "modify-invalid-path.invalid": "tool.before",
    "modify-prompt-wrong-type.invalid": "turn.start",
    "modify-instructions-message.invalid": "context.compact.before",
    "modify-attachment-bytes.invalid": "turn.start",
    "return-model-messages.valid": "model.request.before",
    "return-summary-parts.valid": "context.compact.before",
}


def _response_event(case: dict[str, Any]) -> str:
    short = case["id"].split(".", 1)[1]
    if "editContext" in case:
        return str(case["editContext"]["event"])
    return RESPONSE_EVENT.get(short, "tool.before")


@pytest.mark.parametrize("fixture_id", RESPONSE_CASES)
async def test_response_fixture_from_an_upstream(gw, http, fixture_id):
    """Each upstream answer is accepted or rejected atomically, exactly as the manifest says;
    a JSON-RPC error response is a valid message but always an operational failure."""
    case = CASES[fixture_id]
    raw = _load(case)
    answer = raw.encode() if isinstance(raw, str) else json.dumps(raw).encode()
    decoded = json.loads(raw.splitlines()[0]) if isinstance(raw, str) else raw
    etype = _response_event(case)
    event = fixture_event(etype, str(decoded["id"]), case)
    gw.stub.answer = lambda r: (200, answer)
    request = {
        "jsonrpc": "2.0",
        "id": event["id"],
        "method": "hooks/intercept",
        "params": {"protocolVersion": "draft", "event": event, "capabilities": _caps(etype)},
    }
    status, body = await post(http, gw.url, request)
    assert status == 200
    rejected = "error" in body or any(
        e.get("code") == "org.example.gateway.upstream_unavailable" for e in body["result"]["effects"]
    )
    if "error" in body:
        assert body["error"]["code"] == -32003
    accepted_expected = _expected(case) and "error" not in decoded
    assert (not rejected) == accepted_expected, (fixture_id, body)
    if not rejected:
        sent = decoded["result"].get("effects", [])
        got = body["result"]["effects"]
        assert sorted(e["type"] for e in got) == sorted(
            e["type"] for e in sent if e["type"] != "deny" or e is next(x for x in sent if x["type"] == "deny")
        )
        for effect in got:
            if effect["type"] in ("modify", "return", "inject", "message"):
                assert effect in sent


async def test_capabilities_response_fixture_is_not_an_intercept_answer(gw, http):
    """A discovery result must never be taken for an interception result."""
    raw = json.loads((FIXTURES / "http" / "capabilities-response.valid.json").read_text())
    event = tool_before()
    raw["id"] = event["id"]
    gw.stub.answer = lambda r: raw
    request = {
        "jsonrpc": "2.0",
        "id": event["id"],
        "method": "hooks/intercept",
        "params": {"protocolVersion": "draft", "event": event, "capabilities": {"effects": ["deny"]}},
    }
    _, body = await post(http, gw.url, request)
    assert body["result"]["effects"][0]["code"] == "org.example.gateway.upstream_unavailable"


def test_disagreement_table_is_current():
    """Each listed disagreement names a real fixture whose manifest expectation the gateway
    contradicts on purpose (the tests above assert the gateway's side)."""
    for fixture_id in DISAGREEMENTS:
        assert fixture_id in CASES, fixture_id


def test_fixture_hashes_match_manifest():
    import hashlib

    for case in MANIFEST:
        data = (VECTORS / "ahp-spec" / case["path"]).read_bytes()
        assert hashlib.sha256(data).hexdigest() == case["sha256"], case["id"]


def test_every_valid_fixture_passes_the_runtime_schemas_once_harnessed():
    """protocol.md §18.0: with the harness block added, valid wire fixtures validate against the
    SDK 0.10.1 schemas, and the invalid ones stay invalid except the id-mismatch vector."""
    schemas = load()
    for case in MANIFEST:
        if case["binding"] != "http-json" or "registration" in case["schema"]:
            continue
        message = _with_harness(_load(case))
        ok = schemas.aggregate.ok(message)
        expected = case["aggregateExpectedValid"]
        if case["id"] == "http.intercept-request-id-mismatch.invalid":
            assert ok  # not schema-expressible: the gateway checks it in code (-32602 above)
        elif case["id"] == "http.contextual-elicitation-content-nested.invalid":
            assert not ok  # already schema-invalid under the newer revision (protocol.md §18.0)
        else:
            assert ok == expected, case["id"]
