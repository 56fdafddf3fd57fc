"""Protocol versions: the vendored 0.1 schemas, the 0.1 <-> draft bridge at the harness edge,
0.1 upstreams in a draft chain, and the 0.1 golden fixtures through the live front ends."""

from __future__ import annotations

import copy
import hashlib
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from gateway.config.issues import ConfigError
from gateway.config.load import load
from gateway.protocol import schemas, v01
from tests.support.client import post, wait_for
from tests.support.config import gateway_config, hook
from tests.support.events import intercept, result, tool_before
from tests.support.paths import ROOT, VECTORS
from tests.support.stdio_run import run_stdio, write_config
from tests.support.v01 import CASES, FIXTURES, MANIFEST, fixture, v01_request

SYNTHETIC = "org.example.gateway.upstream_unavailable"
BOTH = ["draft", "0.1"]


def shared_spec() -> Path | None:
    """The read-only reference copy beside the checkout (``../shared`` in CI), if there is one."""
    for parent in ROOT.parents:
        candidate = parent / "shared" / "ahp-spec"
        if candidate.is_dir():
            return candidate
    return None


def v01_hook(hook_id: str, url: str, **extra: Any) -> dict[str, Any]:
    return hook(hook_id, url, protocolVersion="0.1", **extra)


# ------------------------------------------------------------------------------------------------
# vendored schemas and fixtures


def test_vendored_schemas_match_the_lock_and_the_upstream_manifest():
    """Each vendored document hashes to lock.json; the upstream copies also to the upstream
    0.1 manifest, and the reconstructions name the upstream hash they do not match."""
    upstream = {
        d["path"].rsplit("/", 1)[1]: d["sha256"]
        for d in json.loads((v01.DATA / "upstream-manifest.json").read_text())["documents"]
    }
    entries = v01.lock()["documents"]
    assert sorted(e["name"] for e in entries) == sorted(upstream)
    for entry in entries:
        digest = hashlib.sha256((v01.DATA / entry["name"]).read_bytes()).hexdigest()
        assert digest == entry["sha256"], entry["name"]
        if entry["origin"] == "upstream":
            assert digest == upstream[entry["name"]], entry["name"]
        else:
            assert entry["origin"] == "reconstructed" and entry["upstreamSha256"] == upstream[entry["name"]]
            assert digest != upstream[entry["name"]]
            assert "Reconstructed by AHP Gateway" in json.loads((v01.DATA / entry["name"]).read_text())["$comment"]
    assert sum(e["origin"] == "upstream" for e in entries) == 5


def test_vendored_copies_equal_the_shared_reference():
    """Against ``../shared`` when it exists beside the checkout (CI); skipped elsewhere."""
    spec = shared_spec()
    if spec is None:
        pytest.skip("no shared reference folder beside this checkout")
    shared_schemas = spec / "schemas" / "0.1.0-draft.1"
    assert (shared_schemas / "manifest.json").read_bytes() == (v01.DATA / "upstream-manifest.json").read_bytes()
    for entry in v01.lock()["documents"]:
        if entry["origin"] == "upstream":
            assert (shared_schemas / entry["name"]).read_bytes() == (v01.DATA / entry["name"]).read_bytes()
        else:
            assert not (shared_schemas / entry["name"]).exists()  # still unavailable upstream
    for case in MANIFEST:
        assert (spec / case["path"]).read_bytes() == (VECTORS / "ahp-spec" / case["path"]).read_bytes()


def test_fixture_hashes_match_their_manifest():
    for case in MANIFEST:
        data = (VECTORS / "ahp-spec" / case["path"]).read_bytes()
        assert hashlib.sha256(data).hexdigest() == case["sha256"], case["id"]


def test_a_tampered_schema_is_refused(monkeypatch, tmp_path):
    for entry in v01.lock()["documents"]:
        (tmp_path / entry["name"]).write_bytes((v01.DATA / entry["name"]).read_bytes())
    (tmp_path / "lock.json").write_bytes((v01.DATA / "lock.json").read_bytes())
    (tmp_path / "deny-effect.schema.json").write_text('{"$id": "x", "type": "object"}')
    monkeypatch.setattr(v01, "DATA", tmp_path)
    v01.load.cache_clear()
    try:
        with pytest.raises(schemas.SchemaSourceError):
            v01.load()
    finally:
        monkeypatch.undo()
        v01.load.cache_clear()


@pytest.mark.parametrize("case_id", sorted(CASES))
def test_every_0_1_fixture_against_the_vendored_schemas(case_id):
    """Manifest expectations hold, except the two that no schema can express: request id ==
    event id (checked in code, below) and one-object-per-line framing (checked by the framer)."""
    case = CASES[case_id]
    s = v01.load()
    check = {
        "intercept-request.schema.json": s.intercept_request,
        "intercept-deny-response.schema.json": s.deny_response,
        "intercept-no-effect-response.schema.json": s.no_effect_response,
        "registration.schema.json": s.registration,
    }[case["schema"].rsplit("/", 1)[1]]
    message = fixture(case_id)
    if case_id == "stdio.intercept-request-multiline.invalid":
        assert json.loads(message)["id"] == "evt_stdio_bad_framing"  # one valid object, many lines
        return
    if isinstance(message, str):
        message = json.loads(message)
    if case_id == "http.intercept-request-id-mismatch.invalid":
        assert check.ok(message)
        return
    assert check.ok(message) == case["expectedValid"], check.explain(message)


# ------------------------------------------------------------------------------------------------
# pure translation


def test_a_0_1_request_becomes_a_valid_draft_request_with_documented_fills():
    message = fixture("http.intercept-request.valid")
    draft = v01.request_to_draft(message)
    assert schemas.load().request_for["tool.before"].ok(draft), schemas.load().request_for["tool.before"].explain(draft)
    event = draft["params"]["event"]
    assert event["harness"] == v01.FILLED_HARNESS and event["path"] == v01.FILLED_PATH
    assert event["call"] == {"id": "call_http_456"}
    assert event["tool"] == {
        "name": "write_file",
        "kind": "file_write",
        "origin": "native",
        "input": {"path": "README.md", "content": "example"},
    }
    assert draft["params"]["capabilities"] == {"effects": ["deny"]}
    assert draft["id"] == event["id"] == message["id"]


def test_a_draft_request_becomes_a_valid_0_1_request():
    event = tool_before("git push --force", session={"id": "s", "synthesized": True, "counters": {}})
    request = intercept(event, {"effects": ["deny", "allow", "message"]})
    out = v01.request_to_v01(request)
    assert v01.load().intercept_request.ok(out), v01.load().intercept_request.explain(out)
    assert out["params"]["capabilities"] == {"effects": ["deny"]}
    assert out["params"]["event"]["tool"] == {
        "callId": event["call"]["id"],
        "name": "shell",
        "kind": v01.FILLED_KIND,
        "input": {"command": "git push --force"},
    }
    assert out["params"]["event"]["session"] == {"id": "s"}
    no_session = {k: v for k, v in event.items() if k != "session"}
    assert v01.request_to_v01(intercept(no_session))["params"]["event"]["session"] == v01.FILLED_SESSION
    with pytest.raises(v01.Unbridgeable):
        v01.request_to_v01(intercept(event, {"effects": ["allow"]}))


def test_answers_translate_both_ways():
    deny = {"type": "deny", "reason": "no", "code": "org.example.x", "extensions": {"org.example.x": {"a": 1}}}
    draft = {"jsonrpc": "2.0", "id": "e", "result": {"protocolVersion": "draft", "effects": [deny, dict(deny)]}}
    assert v01.answer_to_v01(draft) == {
        "jsonrpc": "2.0",
        "id": "e",
        "result": {"protocolVersion": "0.1", "effects": [deny]},
    }
    with pytest.raises(ValueError):
        v01.answer_to_v01({"jsonrpc": "2.0", "id": "e", "result": {"effects": [{"type": "message", "text": "x"}]}})
    error = {"jsonrpc": "2.0", "id": "e", "error": {"code": -32003, "message": "backend_unavailable"}}
    assert v01.answer_to_v01(error) == error
    assert v01.answer_to_draft(v01.answer_to_v01(draft))["result"] == {"protocolVersion": "draft", "effects": [deny]}


# ------------------------------------------------------------------------------------------------
# the bridge at the harness edge (live HTTP front end)


@pytest.fixture
async def bridged(gateway_factory, stub_factory):
    stub = await stub_factory()
    gw = await gateway_factory(gateway_config([hook("org.example.up", stub.url)], protocolVersions=BOTH))
    gw.stub = stub  # type: ignore[attr-defined]
    return gw


@pytest.mark.spec("AHP-VER-001")
async def test_0_1_is_rejected_unless_listed(gateway_factory, stub_factory, http):
    stub = await stub_factory()
    gw = await gateway_factory(gateway_config([hook("org.example.up", stub.url)]))
    _, body = await post(http, gw.url, v01_request())
    assert body["error"]["code"] == -32001 and body["error"]["data"] == {"supported": ["draft"]}
    assert stub.received == []


@pytest.mark.spec("AHP-DEC-001")
async def test_0_1_harness_gets_0_1_answers(bridged, http):
    bridged.stub.answer = lambda r: result(r, [{"type": "deny", "reason": "a"}, {"type": "deny", "reason": "b"}])
    request = v01_request("rm -rf /", caps=["deny", "com.example.extra"])
    _, body = await post(http, bridged.url, request)
    assert body == {
        "jsonrpc": "2.0",
        "id": request["id"],
        "result": {
            "protocolVersion": "0.1",
            "effects": [{"type": "deny", "reason": "a", "extensions": body["result"]["effects"][0]["extensions"]}],
        },
    }
    assert v01.load().deny_response.ok(body)
    sent = bridged.stub.received[-1]["params"]
    assert sent["protocolVersion"] == "draft" and sent["capabilities"] == {"effects": ["deny"]}
    assert sent["event"]["harness"] == v01.FILLED_HARNESS
    bridged.stub.answer = None
    _, body = await post(http, bridged.url, v01_request("ls"))
    assert body["result"] == {"protocolVersion": "0.1", "effects": []}


@pytest.mark.parametrize(
    ("mutate", "code"),
    [
        (lambda m: m.update(method="hooks/capabilities", params={"protocolVersion": "0.1"}), -32601),
        (lambda m: m["params"]["event"].update(type="tool.after"), -32002),
        (lambda m: m["params"]["event"]["tool"].pop("callId"), -32602),
        (lambda m: m["params"]["event"].pop("session"), -32602),
        (lambda m: m["params"].update(capabilities={}), -32602),
        (
            lambda m: (
                m["params"]["event"].update(harness={"name": "x", "version": "1"}, path="native")
                or m["params"]["event"]["tool"].update(origin="native")
            ),
            None,
        ),
        (lambda m: m["params"]["event"].update(id="other"), -32602),
        (lambda m: m["params"]["capabilities"].update(effects=["deny", "modify"]), -32602),
        (lambda m: m.update(method="hooks/configuration", params={"protocolVersion": "0.1"}), -32601),
    ],
)
async def test_0_1_request_checks(bridged, http, mutate, code):
    request = v01_request()
    mutate(request)
    _, body = await post(http, bridged.url, request)
    if code is None:
        assert body["result"]["effects"] == []  # unknown fields are ignored (AHP-CORE-003)
    else:
        assert body["error"]["code"] == code, body
        assert bridged.stub.received == []


async def test_draft_fields_cannot_be_smuggled_through_a_0_1_request(bridged, http):
    """Only what 0.1 defines is carried across: a pending ``state``, draft-only event fields and
    extra tool fields in a 0.1 request never reach upstreams (they are unknown fields in 0.1)."""
    request = v01_request("git push --force")
    request["params"]["state"] = {"permission": "allow", "candidate": {"value": {"stdout": "x"}}}
    event = request["params"]["event"]
    event.update(call={"id": "spoofed"}, path="../elsewhere", harness={"name": "trusted", "version": "9"})
    event["tool"].update(origin="mcp", mcp={"server": {"id": "s"}})
    _, body = await post(http, bridged.url, request)
    assert body["result"] == {"protocolVersion": "0.1", "effects": []}
    sent = bridged.stub.received[-1]["params"]
    assert sent.get("state") == {"permission": "none", "candidate": None}  # the gateway's own default
    assert sent["event"]["call"] == {"id": event["tool"]["callId"]}
    assert sent["event"]["path"] == v01.FILLED_PATH and sent["event"]["harness"] == v01.FILLED_HARNESS
    assert sent["event"]["tool"]["origin"] == "native" and "mcp" not in sent["event"]["tool"]


@pytest.mark.parametrize("case_id", ["http.intercept-request.valid", "http.intercept-request-id-mismatch.invalid"])
async def test_golden_0_1_request_fixtures_verbatim(bridged, http, case_id):
    """The 0.1 request vectors byte for byte through the live HTTP front end."""
    raw = (VECTORS / "ahp-spec" / CASES[case_id]["path"]).read_bytes()
    _, body = await post(http, bridged.url, raw)
    if CASES[case_id]["expectedValid"]:
        assert v01.load().no_effect_response.ok(body), body
        assert body["id"] == json.loads(raw)["id"]
    else:
        assert body["error"]["code"] == -32602
        assert body["error"]["data"] == {"reason": "request id must equal params.event.id"}


async def test_escaped_version_is_still_0_1_and_draft_mentioning_0_1_is_still_draft(bridged, http):
    request = v01_request()
    raw = json.dumps(request).replace('"protocolVersion": "0.1"', '"protocolVersion": "0\\u002e1"')
    _, body = await post(http, bridged.url, raw)
    assert body["result"]["protocolVersion"] == "0.1"
    draft = intercept(tool_before('echo "0.1"'))
    _, body = await post(http, bridged.url, draft)
    assert body["result"] == {"protocolVersion": "draft", "effects": []}


async def test_0_1_without_deny_advertised_cannot_be_denied(bridged, http):
    """Only deny can be enforced by a 0.1 harness; without it upstreams are asked with nothing to
    return, and a fail-closed failure becomes -32003 for the harness's own policy."""
    bridged.stub.answer = lambda r: (500, b"")
    _, body = await post(http, bridged.url, v01_request(caps=["com.example.extra"]))
    assert body["error"]["code"] == -32003
    assert bridged.stub.received[-1]["params"]["capabilities"] == {"effects": []}


async def test_capabilities_report_both_versions(bridged, http):
    _, body = await post(
        http,
        bridged.url,
        {"jsonrpc": "2.0", "id": 1, "method": "hooks/capabilities", "params": {"protocolVersion": "draft"}},
    )
    manifest = body["result"]["manifest"]
    assert {"http", "stdio"} <= set(manifest["transports"])
    assert any(g["path"] == "protocolVersions.0.1" for g in manifest["gaps"])
    assert schemas.load().capabilities_response.ok(body)
    _, body = await post(http, bridged.url, intercept(tool_before()) | {"params": {"protocolVersion": "0.2"}})
    assert body["error"]["data"] == {"supported": BOTH}


async def test_0_1_observations_are_dropped_not_answered(bridged, http):
    message = fixture("http.intercept-request.valid")
    note = {
        "jsonrpc": "2.0",
        "method": "hooks/observe",
        "params": {"protocolVersion": "0.1", "event": message["params"]["event"]},
    }
    status, body = await post(http, bridged.url, note)
    assert (status, body) == (202, None)
    assert bridged.stub.observed == []


# ------------------------------------------------------------------------------------------------
# 0.1 upstreams in a draft chain


def v01_backend_answer(effects: list[dict[str, Any]]):
    def answer(request: dict[str, Any]) -> Any:
        assert v01.load().intercept_request.ok(request), v01.load().intercept_request.explain(request)
        return {"jsonrpc": "2.0", "id": request["id"], "result": {"protocolVersion": "0.1", "effects": effects}}

    return answer


@pytest.mark.spec("AHP-COMP-001")
@pytest.mark.parametrize(
    ("old_says", "new_says", "reason"),
    [("no", "ok", "old"), ("ok", "no", "new"), ("ok", "ok", None)],
)
async def test_0_1_harness_in_front_of_a_0_1_and_a_draft_backend(
    gateway_factory, stub_factory, http, old_says, new_says, reason
):
    """A deny from either backend of the chain (0.1 first, then a draft SDK backend) reaches the
    0.1 harness as a 0.1 deny; the chain stops at the first deny."""
    from tests.support.sdk_peers import SdkBackend, serve_backends

    old = await stub_factory(v01_backend_answer([{"type": "deny", "reason": "old"}] if old_says == "no" else []))
    new = SdkBackend(lambda ctx: ({"type": "deny", "reason": "new"},) if new_says == "no" else ())
    async with serve_backends([new]) as (new_url,):
        gw = await gateway_factory(
            gateway_config(
                [v01_hook("org.example.old", old.url), hook("org.example.new", new_url)], protocolVersions=BOTH
            )
        )
        request = v01_request("git push --force")
        _, body = await post(http, gw.url, request)
    assert body["result"]["protocolVersion"] == "0.1"
    assert v01.load().answer_ok(body), body
    assert [e["reason"] for e in body["result"]["effects"]] == ([reason] if reason else [])
    assert len(new.intercepts) == (0 if old_says == "no" else 1)
    assert old.received[0]["params"]["event"]["tool"]["callId"] == request["params"]["event"]["tool"]["callId"]


@pytest.mark.parametrize(
    "answer",
    [
        lambda r: {"jsonrpc": "2.0", "id": r["id"], "result": {"protocolVersion": "draft", "effects": []}},
        lambda r: {
            "jsonrpc": "2.0",
            "id": r["id"],
            "result": {"protocolVersion": "0.1", "effects": [{"type": "message", "text": "x"}]},
        },
        lambda r: {
            "jsonrpc": "2.0",
            "id": r["id"],
            "result": {"protocolVersion": "0.1", "effects": [{"type": "deny", "reason": "x", "extra": 1}]},
        },
        lambda r: {"jsonrpc": "2.0", "id": "other", "result": {"protocolVersion": "0.1", "effects": []}},
        lambda r: {"jsonrpc": "2.0", "id": r["id"], "error": {"code": -32003, "message": "backend_unavailable"}},
        lambda r: (200, b"not json"),
    ],
    ids=["draft-version", "message-effect", "closed-deny", "wrong-id", "rpc-error", "garbage"],
)
async def test_a_0_1_backend_answer_is_untrusted(gateway_factory, stub_factory, http, answer):
    old = await stub_factory(answer)
    gw = await gateway_factory(gateway_config([v01_hook("org.example.old", old.url)]))
    _, body = await post(http, gw.url, intercept(tool_before(), {"effects": ["deny", "message"]}))
    assert body["result"]["effects"][0]["code"] == SYNTHETIC, body
    assert old.received[0]["params"]["capabilities"] == {"effects": ["deny"]}  # never more than deny


async def test_a_0_1_backend_is_not_asked_without_deny_and_gets_no_observations(gateway_factory, stub_factory, http):
    old = await stub_factory(v01_backend_answer([]))
    watcher = await stub_factory()
    observer = hook("org.example.watch", watcher.url)
    observer["subscriptions"] = [{"mode": "observe", "events": ["*"], "content": {"default": "body"}}]
    gw = await gateway_factory(gateway_config([v01_hook("org.example.old", old.url, policy="fail-open"), observer]))
    _, body = await post(http, gw.url, intercept(tool_before(), {"effects": ["message"]}))
    assert body["result"]["effects"] == []
    event = tool_before()
    note = {"jsonrpc": "2.0", "method": "hooks/observe", "params": {"protocolVersion": "draft", "event": event}}
    await post(http, gw.url, note)
    await wait_for(lambda: any(o["params"]["event"]["id"] == event["id"] for o in watcher.observed))
    await gw.gateway.drain(2)
    assert old.received == [] and old.observed == []


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        (
            {"subscriptions": [{"mode": "observe", "events": ["tool.before"], "content": {"default": "body"}}]},
            "exactly one kind",
        ),
        (
            {
                "subscriptions": [
                    {
                        "mode": "intercept",
                        "events": ["*"],
                        "timeoutMs": 100,
                        "failurePolicy": "fail-open",
                        "content": {"default": "body"},
                    }
                ]
            },
            "exactly one kind",
        ),
        ({"transport": {"type": "local", "policies": ["p/"]}}, "http and stdio upstreams only"),
        ({"protocolVersion": "0.2"}, "protocolVersion"),
    ],
)
def test_0_1_upstream_config_rules(tmp_path, change, reason):
    entry = v01_hook("org.example.old", "http://127.0.0.1:9/") | change
    path = tmp_path / "gateway.json"
    path.write_text(json.dumps(gateway_config([entry])))
    with pytest.raises(ConfigError) as info:
        load(path)
    assert reason in str(info.value.issues)


# ------------------------------------------------------------------------------------------------
# the 0.1 golden fixtures through the live front ends


RESPONSE_CASES = sorted(c["id"] for c in MANIFEST if "response" in c["schema"] and c["binding"] == "http-json")


@pytest.mark.parametrize("case_id", RESPONSE_CASES)
async def test_0_1_response_fixture_from_a_0_1_upstream(gateway_factory, stub_factory, http, case_id):
    raw = fixture(case_id)
    old = await stub_factory(lambda r: {**raw, "id": r["id"]})
    gw = await gateway_factory(gateway_config([v01_hook("org.example.old", old.url)], protocolVersions=BOTH))
    _, body = await post(http, gw.url, v01_request())
    effects = body["result"]["effects"]
    rejected = bool(effects) and effects[0].get("code") == SYNTHETIC
    assert rejected != CASES[case_id]["expectedValid"], body
    if not rejected:
        assert [e["reason"] for e in effects] == [e["reason"] for e in raw["result"]["effects"]]


@pytest.mark.spec("AHP-STDIO-001")
async def test_0_1_stdio_fixtures_through_ahp_gateway_stdio(tmp_path):
    """The 0.1 stdio vectors over the real process: the request from the harness side, the three
    response vectors played by a real 0.1 stdio child, the multi-line vector as framing."""
    stdio_dir = FIXTURES / "stdio"
    entry = {
        "id": "org.example.old",
        "protocolVersion": "0.1",
        "transport": {
            "type": "stdio",
            "command": sys.executable,
            "args": ["-m", "tests.support.stdio_scripted", "fixture", str(stdio_dir)],
            "lifecycle": "persistent",
            "cwd": str(ROOT),
        },
        "subscriptions": [
            {
                "mode": "intercept",
                "events": ["tool.before"],
                "timeoutMs": 5000,
                "failurePolicy": "fail-closed",
                "content": {"default": "body"},
            }
        ],
    }
    config = write_config(tmp_path, [entry], protocolVersions=BOTH, limits={"deadlineMs": 8000})
    request = json.loads(fixture("stdio.intercept-request.valid"))

    def line(name: str) -> bytes:
        message = copy.deepcopy(request)
        message["params"]["event"]["tool"]["input"]["command"] = name
        return json.dumps(message).encode() + b"\n"

    stdin = (
        line("no-effect-response.valid.jsonl")
        + line("deny-response.valid.jsonl")
        + fixture("stdio.intercept-request-multiline.invalid").encode()
        + line("deny-response-multiple.invalid.jsonl")
    )
    code, lines, err = await run_stdio(config, stdin)
    assert code == 0, err
    answers = [json.loads(x) for x in lines]
    assert [a["id"] for a in answers] == ["evt_stdio_001", "evt_stdio_001", "evt_stdio_bad_framing", "evt_stdio_001"]
    s = v01.load()
    assert answers[0]["result"] == {"protocolVersion": "0.1", "effects": []}
    assert (
        s.deny_response.ok(answers[1]) and answers[1]["result"]["effects"][0]["code"] == "com.example.policy.force_push"
    )
    assert answers[2]["error"]["code"] == -32600
    assert (
        s.deny_response.ok(answers[3]) and answers[3]["result"]["effects"][0]["code"] == SYNTHETIC
    )  # two denies: invalid in 0.1
