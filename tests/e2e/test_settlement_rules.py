"""Settlement rules pinned against the pure code (gateway/settle/, gateway/protocol/), plus the
two documented behaviours of docs/design/settlement.md ("Synthetic denials and settled state") end to end.

Each test names the requirement it pins; together they kill single-line mutations of acceptance,
folding, collapse and projection that the broader suites let survive."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from gateway.protocol import content, schemas, wire
from gateway.settle.accept import Expectation, accept, apply_modifications, json_equal
from gateway.settle.collapse import collapse, synthetic_deny
from gateway.settle.fold import ChainState
from gateway.settle.reply import Accepted, Failure, FailureClass, Reply
from tests.support.client import post, wait_for
from tests.support.config import gateway_config, hook
from tests.support.events import ALL_TOOL_BEFORE_CAPS, intercept, result, tool_before
from tests.support.events_after import tool_after

SCHEMAS = schemas.load()
UPSTREAM = "org.example.up"


def _expect(event: dict[str, Any], caps: dict[str, Any], rid: Any = None, remaining: int | None = None) -> Expectation:
    return Expectation(
        request_id=event["id"] if rid is None else rid,
        version="draft",
        event_type=event["type"],
        caps=caps,
        event=event,
        sent_event=event,
        remaining=remaining,
        response_check=SCHEMAS.response_for[event["type"]],
        event_check=SCHEMAS.event_for[event["type"]],
    )


def _answer(rid: Any, effects: list[dict[str, Any]]) -> bytes:
    return wire.dumps({"jsonrpc": "2.0", "id": rid, "result": {"protocolVersion": "draft", "effects": effects}})


def _reason(outcome: Accepted | Failure) -> str:
    """The rejection's detail; what the request did not grant is ``not_granted`` (never charged to
    the breaker: issue 28 item 1), everything else ``invalid_response``."""
    assert isinstance(outcome, Failure), outcome
    request_caused = outcome.detail.startswith(_REQUEST_CAUSED)
    assert outcome.kind is (FailureClass.NOT_GRANTED if request_caused else FailureClass.INVALID_RESPONSE), outcome
    return outcome.detail


_REQUEST_CAUSED = ("unadvertised", "continuation allowance", "compaction edits", "modification target")


# --- response id: value and JSON type ---------------------------------------------------------------


@pytest.mark.spec("AHP-CORE-004")
@pytest.mark.parametrize(
    ("request_id", "raw_id"),
    [
        (1, b"1.0"),
        (1, b"true"),
        (1, b'"1"'),
        (0, b"false"),
        (0, b"-0.0"),
        ("1", b"1"),
        (10**30, b"1e30"),
        (10**30, b"1000000000000000000000000000000.0"),
    ],
)
def test_an_answer_id_equal_in_value_but_not_json_type_is_rejected(request_id: Any, raw_id: bytes) -> None:
    """JSON-RPC correlation compares ids exactly: ``1.0`` (or ``true``) does not answer request 1."""
    event = tool_before()
    body = _answer(0, []).replace(b'"id":0', b'"id":' + raw_id)
    assert _reason(accept(Reply(body), _expect(event, {"effects": ["deny"]}, rid=request_id))) == (
        "response id does not match the event id"
    )


@pytest.mark.spec("AHP-CORE-004")
@pytest.mark.parametrize("request_id", [1, 0, "evt-1", 10**30, -(2**63) - 1])
def test_an_answer_with_the_exact_id_is_accepted(request_id: Any) -> None:
    event = tool_before()
    outcome = accept(Reply(_answer(request_id, [])), _expect(event, {"effects": ["deny"]}, rid=request_id))
    assert isinstance(outcome, Accepted) and outcome.effects == []


# --- capability grants ---------------------------------------------------------------------------------


@pytest.mark.spec("AHP-CAP-001")
@pytest.mark.spec("AHP-EDIT-001")
def test_a_merge_modify_when_only_replace_was_granted_is_rejected_whole() -> None:
    event = tool_before()
    caps = {"effects": ["deny", "modify"], "modify": {"input": {"replace": True}}}
    merge = {"type": "modify", "target": "input", "operation": "merge", "value": {"command": "ls"}}
    replace = {**merge, "operation": "replace"}
    deny = {"type": "deny", "reason": "no"}
    assert _reason(accept(Reply(_answer(event["id"], [deny, merge])), _expect(event, caps))) == (
        "unadvertised modify input/merge"
    )
    caps_false = {"effects": ["deny", "modify"], "modify": {"input": {"replace": True, "merge": False}}}
    assert _reason(accept(Reply(_answer(event["id"], [merge])), _expect(event, caps_false))) == (
        "unadvertised modify input/merge"
    )
    accepted = accept(Reply(_answer(event["id"], [replace])), _expect(event, caps))
    assert isinstance(accepted, Accepted) and accepted.event is not None
    assert accepted.event["tool"]["input"] == {"command": "ls"}


def _inject(deliver_at: str) -> dict[str, Any]:
    return {
        "type": "inject",
        "target": "context",
        "operation": "append",
        "deliverAt": deliver_at,
        "value": [
            {
                "id": "m1",
                "role": "system",
                "parts": [{"id": "p1", "kind": "text", "mediaType": "text/plain", "selection": "body", "text": "note"}],
            }
        ],
    }


@pytest.mark.spec("AHP-CAP-001")
@pytest.mark.parametrize(
    "inject_caps",
    [
        {"context": {"append": True, "deliverAt": ["next_turn"]}},
        {"context": {"append": True, "deliverAt": []}},
        {"context": {"append": False, "deliverAt": ["now"]}},
        {"context": {"deliverAt": ["now"]}},
        {},
    ],
)
def test_an_inject_whose_delivery_was_not_granted_is_rejected(inject_caps: dict[str, Any]) -> None:
    event = tool_before()
    caps = {"effects": ["deny", "inject"], "inject": inject_caps}
    assert _reason(accept(Reply(_answer(event["id"], [_inject("now")])), _expect(event, caps))) == (
        "unadvertised inject delivery"
    )


@pytest.mark.spec("AHP-CAP-001")
def test_an_inject_with_a_granted_delivery_is_accepted() -> None:
    event = tool_before()
    caps = {"effects": ["deny", "inject"], "inject": {"context": {"append": True, "deliverAt": ["now", "next_turn"]}}}
    assert isinstance(accept(Reply(_answer(event["id"], [_inject("now")])), _expect(event, caps)), Accepted)


# --- flow -------------------------------------------------------------------------------------------------

STOP = {"type": "flow", "operation": "stop", "reason": "enough"}
CONTINUE = {"type": "flow", "operation": "continue", "instruction": "keep going"}
FLOW_CAPS = {"effects": ["flow", "message"], "flow": {"operations": ["stop", "continue"], "maxContinuations": 2}}


@pytest.mark.spec("AHP-COMP-001")
@pytest.mark.parametrize("order", [[STOP, CONTINUE], [CONTINUE, STOP]])
def test_one_answer_holding_flow_stop_and_continue_settles_as_stop(order: list[dict[str, Any]]) -> None:
    """Stop wins over continue (§8.2) whatever the order inside one answer, ends decision-making
    (the upstream decided) and the continue still consumes one allowance."""
    event = tool_after()
    accepted = accept(Reply(_answer(event["id"], order)), _expect(event, FLOW_CAPS, remaining=2))
    assert isinstance(accepted, Accepted)
    chain = ChainState.start(event, None, 2)
    chain.fold(accepted, UPSTREAM)
    assert (chain.flow, chain.stop, chain.decided_by, chain.halted, chain.remaining) == (
        "stop",
        STOP,
        UPSTREAM,
        True,
        1,
    )
    assert chain.wire_state()["flow"] == "stop"
    effects = collapse(chain, None, FLOW_CAPS["effects"])
    assert effects == [CONTINUE, STOP]  # the stop comes last: a harness applying in order ends stopped


@pytest.mark.spec("AHP-COMP-001")
def test_a_continue_with_no_allowance_left_rejects_the_whole_answer() -> None:
    event = tool_after()
    assert _reason(accept(Reply(_answer(event["id"], [STOP, CONTINUE])), _expect(event, FLOW_CAPS, remaining=0))) == (
        "continuation allowance exhausted"
    )


# --- permission -------------------------------------------------------------------------------------------

ASK_STATE = {"permission": "ask", "candidate": None}


@pytest.mark.spec("AHP-COMP-001")
@pytest.mark.parametrize(
    ("state", "answers", "expected"),
    [
        (ASK_STATE, [[{"type": "ask"}]], []),  # incoming ask + upstream ask: nothing new to say
        (ASK_STATE, [[{"type": "allow"}]], []),  # ask persists despite a later allow
        (ASK_STATE, [[{"type": "ask"}], [{"type": "allow"}]], []),
        (None, [[{"type": "ask"}]], [{"type": "ask"}]),
        (None, [[{"type": "ask"}], [{"type": "allow"}]], [{"type": "ask"}]),
        (None, [[{"type": "allow"}], [{"type": "ask"}]], [{"type": "ask"}]),
        (None, [[{"type": "allow"}]], [{"type": "allow"}]),
        ({"permission": "allow", "candidate": None}, [[{"type": "allow"}]], []),  # unchanged: not re-emitted
    ],
)
def test_ask_state_and_upstream_asks_collapse_to_one_ask_only_when_the_chain_changed_it(
    state: dict[str, Any] | None, answers: list[list[dict[str, Any]]], expected: list[dict[str, Any]]
) -> None:
    event = tool_before()
    chain = ChainState.start(event, state, None)
    for effects in answers:
        chain.fold(Accepted(effects, None), UPSTREAM)
    asked = state == ASK_STATE or any(e["type"] == "ask" for a in answers for e in a)
    assert not chain.halted and (chain.permission == "ask") is asked
    assert collapse(chain, None, ["deny", "ask", "allow"]) == expected


@pytest.mark.spec("AHP-COMP-001")
def test_deny_wins_over_an_incoming_ask_and_is_the_only_permission_effect() -> None:
    event = tool_before()
    chain = ChainState.start(event, ASK_STATE, None)
    deny = {"type": "deny", "reason": "no"}
    chain.fold(Accepted([{"type": "ask"}, deny], None), UPSTREAM)
    assert chain.halted and chain.deny == deny
    assert collapse(chain, deny, ["deny", "ask"]) == [deny]


# --- content projection -----------------------------------------------------------------------------------

SLOTS = content.content_slots(SCHEMAS)


def _part(selection: str, **extra: Any) -> dict[str, Any]:
    part = {"id": f"p-{selection}", "kind": "text", "mediaType": "text/plain", "selection": selection}
    part.update(extra)
    return part


@pytest.mark.spec("AHP-CONTENT-002")
@pytest.mark.parametrize(
    ("sent", "wanted", "seen"),
    [
        ("omit", {"default": "metadata"}, "omit"),  # never upgraded
        ("omit", {"default": "body"}, "omit"),
        ("metadata", {"default": "body"}, "metadata"),
        ("omit", {"default": "omit", "text": "metadata"}, "omit"),
        ("body", {"default": "metadata"}, "metadata"),
        ("body", {"default": "body", "text": "omit"}, "omit"),
        ("body", {"default": "body"}, "body"),
    ],
)
def test_projection_only_lowers_a_part_the_harness_sent(sent: str, wanted: dict[str, str], seen: str) -> None:
    part = _part(sent, text="secret text") if sent == "body" else _part(sent, size=11)
    event = tool_before(items=[part])
    assert SCHEMAS.event_for["tool.before"].ok(event)
    identity = all(v == "body" for v in wanted.values())
    view = content.project(event, SLOTS, wanted, False, identity=identity)
    (projected,) = view["items"]
    assert projected["selection"] == seen
    assert ("text" in projected) is (seen == "body")
    assert SCHEMAS.event_for["tool.before"].ok(view)
    assert event["items"] == [part]  # the harness's event is never changed


# --- failure classes in metrics and the decision log ----------------------------------------------------


@pytest.mark.spec("AHP-FAIL-001")
async def test_failure_classes_label_metrics_and_the_decision_log(gateway_factory, stub_factory, http, tmp_path):
    status = await stub_factory(lambda r: (500, {"error": "boom"}))
    malformed = await stub_factory(lambda r: (200, b"{not json"))
    rpc_error = await stub_factory(
        lambda r: {"jsonrpc": "2.0", "id": r["id"], "error": {"code": -32603, "message": "x"}}
    )
    wrong_id = await stub_factory(lambda r: {**result(r, []), "id": r["id"] + "-other"})
    hooks = [
        hook("org.example.status", status.url, policy="fail-open"),
        hook("org.example.malformed", malformed.url, policy="fail-open"),
        hook("org.example.rpc", rpc_error.url, policy="fail-open"),
        hook("org.example.wrongid", wrong_id.url, policy="fail-open"),
        hook("org.example.down", "http://127.0.0.1:9/", policy="fail-open"),
    ]
    log_file = tmp_path / "decisions.jsonl"
    gw = await gateway_factory(gateway_config(hooks, log={"decisions": str(log_file)}))
    code, body = await post(http, gw.url, intercept(tool_before()))
    assert code == 200 and body["result"]["effects"] == []
    expected = {
        "org.example.status": "http_status",
        "org.example.malformed": "invalid_response",
        "org.example.rpc": "rpc_error",
        "org.example.wrongid": "invalid_response",
        "org.example.down": "connect",
    }
    await wait_for(lambda: log_file.exists() and log_file.read_text().count("\n") >= 1)
    (line,) = (json.loads(x) for x in log_file.read_text().splitlines())
    assert {u["id"]: (u["outcome"], u["failure"]) for u in line["upstreams"]} == {
        k: ("failed_open", v) for k, v in expected.items()
    }
    async with http.get(f"http://{gw.admin_host}:{gw.admin_port}/metrics") as response:
        text = await response.text()
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }
    for upstream, failure in expected.items():
        assert samples[("ahp_gateway_fail_open_skips_total", (("reason", failure), ("upstream", upstream)))] == 1
        assert samples[("ahp_gateway_upstream_calls_total", (("outcome", failure), ("upstream", upstream)))] == 1
    labels = {dict(k[1]).get("reason") for k in samples if k[0] == "ahp_gateway_fail_open_skips_total"}
    assert labels <= {f.value for f in FailureClass}


# --- docs/design/settlement.md ("Synthetic denials and settled state") ---------------------------------------------------------


@pytest.mark.spec("AHP-FAIL-001")
def test_a_synthetic_deny_names_gateway_upstream_kind_and_failure_class() -> None:
    deny = synthetic_deny("org.example.gateway", UPSTREAM, FailureClass.TIMEOUT.value)
    assert deny == {
        "type": "deny",
        "reason": "Required policy backend unavailable",
        "code": "org.example.gateway.upstream_unavailable",
        "extensions": {"org.example.gateway": {"upstream": UPSTREAM, "kind": "synthetic", "failure": "timeout"}},
    }


@pytest.mark.spec("AHP-FAIL-001")
async def test_a_fail_closed_failure_reaches_the_harness_with_its_failure_class(gateway_factory, stub_factory, http):
    status = await stub_factory(lambda r: (503, {"error": "busy"}))
    gw = await gateway_factory(gateway_config([hook("org.example.down", "http://127.0.0.1:9/")]), name="a.yaml")
    gw2 = await gateway_factory(gateway_config([hook("org.example.busy", status.url)]), name="b.yaml")
    for server, upstream, failure in ((gw, "org.example.down", "connect"), (gw2, "org.example.busy", "http_status")):
        _, body = await post(http, server.url, intercept(tool_before()))
        (deny,) = body["result"]["effects"]
        assert deny["extensions"]["org.example.gateway"] == {
            "upstream": upstream,
            "kind": "synthetic",
            "failure": failure,
        }


@pytest.mark.spec("AHP-COMP-001")
@pytest.mark.parametrize(
    "state",
    [
        {"permission": "deny", "candidate": None},
        {"permission": "none", "candidate": None, "flow": "stop"},
        {"permission": "ask", "candidate": None, "flow": "stop"},
    ],
)
async def test_an_incoming_state_that_already_denies_or_stops_calls_no_upstream(
    gateway_factory, stub_factory, http, state
):
    up = await stub_factory(lambda r: result(r, [{"type": "deny", "reason": "would deny"}]))
    gw = await gateway_factory(gateway_config([hook("org.example.a", up.url)]))
    event = tool_before()
    status, body = await post(http, gw.url, intercept(event, ALL_TOOL_BEFORE_CAPS, state=copy.deepcopy(state)))
    assert status == 200 and body["result"]["effects"] == []
    assert up.received == []
    # not called, so the interceptor gets the observation of this event (protocol §8.3)
    note = {"jsonrpc": "2.0", "method": "hooks/observe", "params": {"protocolVersion": "draft", "event": event}}
    assert (await post(http, gw.url, note))[0] == 202
    await wait_for(lambda: len(up.observed) == 1)
    assert up.observed[0]["params"]["event"]["id"] == event["id"]
    _, body = await post(
        http,
        gw.url,
        intercept(tool_before(), ALL_TOOL_BEFORE_CAPS, state={**state, "permission": "none", "flow": "none"}),
    )
    assert body["result"]["effects"][0]["type"] == "deny" and len(up.received) == 1  # the control: it is called


# --- the pending state handed from one upstream to the next (found by mutation testing) ------------

MODIFY = {"type": "modify", "target": "input", "operation": "replace", "value": {"command": "ls"}}
INJECT = _inject("next_turn")


@pytest.mark.spec("AHP-COMP-001")
def test_without_incoming_state_the_chain_starts_undecided() -> None:
    chain = ChainState.start(tool_before(), None, None)
    assert (chain.permission, chain.initial_permission, chain.flow) == ("none", "none", None)
    assert chain.wire_state() == {"permission": "none", "candidate": None}


@pytest.mark.spec("AHP-COMP-001")
@pytest.mark.parametrize(
    ("flow", "chain_flow", "wire_flow"),
    [("none", None, "none"), ("continue", "continue", "continue"), (None, None, None)],
)
def test_an_incoming_flow_is_kept_and_echoed(flow: str | None, chain_flow: str | None, wire_flow: str | None) -> None:
    state: dict[str, Any] = {"permission": "none", "candidate": None}
    if flow is not None:
        state["flow"] = flow
    chain = ChainState.start(tool_after(), state, None)
    assert chain.flow == chain_flow and not chain.halted
    assert chain.wire_state().get("flow") == wire_flow


@pytest.mark.spec("AHP-COMP-001")
def test_optional_state_keys_the_harness_sent_are_echoed_even_when_empty() -> None:
    state = {"permission": "none", "candidate": None, "flow": "none", "instructions": [], "injections": []}
    chain = ChainState.start(tool_before(), state, None)
    assert chain.wire_state() == state
    assert ChainState.start(tool_before(), {"permission": "none", "candidate": None}, None).wire_state() == {
        "permission": "none",
        "candidate": None,
    }


@pytest.mark.spec("AHP-COMP-001")
def test_injections_and_instructions_accumulate_into_the_next_upstreams_state() -> None:
    chain = ChainState.start(tool_after(), None, 2)
    chain.fold(Accepted([INJECT, CONTINUE], None), UPSTREAM)
    assert chain.wire_state() == {
        "permission": "none",
        "candidate": None,
        "flow": "continue",
        "instructions": ["keep going"],
        "injections": [INJECT],
    }
    assert chain.new_injections == [INJECT] and chain.remaining == 1


@pytest.mark.spec("AHP-COMP-001")
def test_an_answer_without_continue_consumes_no_allowance() -> None:
    chain = ChainState.start(tool_after(), None, 2)
    chain.fold(Accepted([{"type": "message", "text": "hi"}], None), UPSTREAM)
    assert chain.remaining == 2
    unlimited = ChainState.start(tool_after(), None, None)
    unlimited.fold(Accepted([CONTINUE], None), UPSTREAM)
    assert unlimited.remaining is None


@pytest.mark.spec("AHP-COMP-001")
def test_a_later_modification_invalidates_an_earlier_result_and_approval() -> None:
    """§8.2: relevant changes invalidate earlier approval; a supplied result does not survive an
    edit of the arguments it answered."""
    event = tool_before()
    changed = {**event, "tool": {**event["tool"], "input": {"command": "ls"}}}
    chain = ChainState.start(event, None, None)
    chain.fold(Accepted([{"type": "allow"}, {"type": "return", "value": {"stdout": "x"}}], None), "org.example.a")
    assert (chain.permission, chain.returned, chain.candidate) == ("allow", True, {"value": {"stdout": "x"}})
    chain.fold(Accepted([MODIFY], changed), "org.example.b")
    assert (chain.permission, chain.returned, chain.candidate) == ("none", False, None)
    assert chain.wire_state() == {"permission": "none", "candidate": None}
    assert collapse(chain, None, ["deny", "allow", "modify", "return"]) == [MODIFY]


@pytest.mark.spec("AHP-COMP-001")
def test_incoming_instructions_and_injections_are_kept_and_extended() -> None:
    earlier = _inject("now")
    state = {"permission": "none", "candidate": None, "instructions": ["first"], "injections": [earlier]}
    chain = ChainState.start(tool_after(), state, 2)
    chain.fold(Accepted([INJECT, CONTINUE], None), UPSTREAM)
    wire_state = chain.wire_state()
    assert wire_state["instructions"] == ["first", "keep going"]
    assert wire_state["injections"] == [earlier, INJECT]
    assert chain.new_injections == [INJECT]  # only what this chain added reaches the harness
    assert state["instructions"] == ["first"]  # the harness's own state is not changed


# --- staging modifications and JSON equality (found by mutation testing) ---------------------------


@pytest.mark.spec("AHP-EDIT-001")
@pytest.mark.parametrize(
    ("left", "right", "equal"),
    [
        (True, 1, False),  # booleans are not numbers in JSON
        (1, True, False),
        (False, 0, False),
        (True, True, True),
        (False, True, False),
        (1, 1.0, True),  # one JSON number
        (1, 2, False),
        ("a", "a", True),
        ("a", "b", False),
        (None, None, True),
        ({"a": 1, "b": [1, 2]}, {"b": [1, 2], "a": 1}, True),  # member order is irrelevant
        ({"a": 1}, {"a": 2}, False),
        ({"a": 1}, {"b": 1}, False),
        ({"a": 1}, {"a": 1, "b": 1}, False),
        ({"a": True}, {"a": 1}, False),
        ([1, 2], [1, 2], True),
        ([1, 2], [2, 1], False),  # order matters in arrays
        ([1], [1, 2], False),
        ([True], [1], False),
        ([[1]], [[1]], True),
        ([[1]], [[2]], False),
        ({"a": 1}, [["a", 1]], False),
        ([], {}, False),
    ],
)
def test_json_equality_is_json_not_python(left: Any, right: Any, equal: bool) -> None:
    assert json_equal(left, right) is equal
    assert json_equal(right, left) is equal


@pytest.mark.spec("AHP-EDIT-001")
def test_a_modification_that_changes_nothing_stages_no_new_event() -> None:
    event = tool_before()
    caps = {"effects": ["modify"], "modify": {"input": {"replace": True, "merge": True}}}
    same = {"type": "modify", "target": "input", "operation": "replace", "value": dict(event["tool"]["input"])}
    accepted = accept(Reply(_answer(event["id"], [same])), _expect(event, caps))
    assert isinstance(accepted, Accepted) and accepted.event is None
    flag = {"type": "modify", "target": "input", "operation": "merge", "value": {"flag": True}}
    accepted = accept(Reply(_answer(event["id"], [flag])), _expect(event, caps))
    assert isinstance(accepted, Accepted) and accepted.event is not None
    assert accepted.event["tool"]["input"] == {"command": "ls -la", "flag": True}
    assert event["tool"]["input"] == {"command": "ls -la"}  # copy on write: the current event is untouched


@pytest.mark.spec("AHP-EDIT-001")
def test_merges_append_lists_and_merge_objects_and_refuse_the_wrong_shape() -> None:
    part = {"id": "o1", "kind": "text", "mediaType": "text/plain", "selection": "body", "text": "out"}
    extra = {**part, "id": "o2", "text": "more"}
    after = tool_after()
    after["items"] = [part]
    merged = apply_modifications(after, [{"target": "output", "operation": "merge", "value": [extra]}], "tool.after")
    assert merged is not None and merged["items"] == [part, extra] and after["items"] == [part]
    missing = {k: v for k, v in after.items() if k != "items"}
    merged = apply_modifications(missing, [{"target": "output", "operation": "merge", "value": [extra]}], "tool.after")
    assert merged is not None and merged["items"] == [extra]  # merging into an absent list starts one
    for wrong in ({"x": 1}, "text"):
        assert (
            apply_modifications(after, [{"target": "output", "operation": "merge", "value": wrong}], "tool.after")
            is None
        )
    scalar = {**after, "items": "not a list"}
    assert (
        apply_modifications(scalar, [{"target": "output", "operation": "merge", "value": [extra]}], "tool.after")
        is None
    )
    before = tool_before()
    for wrong in ([1], "text"):
        assert (
            apply_modifications(before, [{"target": "input", "operation": "merge", "value": wrong}], "tool.before")
            is None
        )
    no_input = {**before, "tool": {**before["tool"], "input": "scalar"}}
    assert (
        apply_modifications(no_input, [{"target": "input", "operation": "merge", "value": {}}], "tool.before") is None
    )
    twice = apply_modifications(
        before,
        [
            {"target": "input", "operation": "merge", "value": {"a": 1}},
            {"target": "input", "operation": "merge", "value": {"b": 2}},
        ],
        "tool.before",
    )
    assert twice is not None and twice["tool"]["input"] == {"command": "ls -la", "a": 1, "b": 2}
    assert before["tool"]["input"] == {"command": "ls -la"} and twice["tool"] is not before["tool"]


@pytest.mark.spec("AHP-CAP-001")
@pytest.mark.parametrize(
    ("caps", "effect", "reason"),
    [
        ({"effects": ["modify"]}, MODIFY, "unadvertised modify input/replace"),  # no modify object at all
        ({"effects": ["modify"], "modify": {}}, MODIFY, "unadvertised modify input/replace"),
        ({"effects": ["inject"]}, _inject("now"), "unadvertised inject delivery"),  # no inject object
    ],
)
def test_a_missing_capability_object_grants_nothing(caps: dict[str, Any], effect: dict[str, Any], reason: str) -> None:
    event = tool_before()
    assert _reason(accept(Reply(_answer(event["id"], [effect])), _expect(event, caps))) == reason


@pytest.mark.spec("AHP-CAP-001")
def test_a_flow_effect_without_a_flow_capability_object_is_rejected() -> None:
    event = tool_after()
    assert _reason(accept(Reply(_answer(event["id"], [STOP])), _expect(event, {"effects": ["flow"]}))) == (
        "unadvertised flow stop"
    )


# --- compaction edits need the inline text the upstream was shown ------------------------------------


def _text_part(pid: str, selection: str = "body", text: str | None = "Keep decisions.") -> dict[str, Any]:
    part: dict[str, Any] = {"id": pid, "kind": "text", "mediaType": "text/plain", "selection": selection}
    if text is not None:
        part["text"] = text
    return part


COMPACT_CAPS = {
    "effects": ["modify", "return", "message"],
    "modify": {"instructions": {"replace": True, "merge": True}},
}


def _compaction(effect: dict[str, Any], sent_parts: Any) -> Accepted | Failure:
    from tests.support.fixture_events import fixture_event as _event

    event = _event("context.compact.before", "evt-compact", {})
    sent = {k: v for k, v in event.items() if k != "instructions"}
    if sent_parts is not None:
        sent["instructions"] = sent_parts
    expectation = _expect(event, COMPACT_CAPS)
    expectation.sent_event = sent
    return accept(Reply(_answer(event["id"], [effect])), expectation)


@pytest.mark.spec("AHP-EDIT-001")
@pytest.mark.parametrize("kind", ["modify", "return"])
@pytest.mark.parametrize(
    ("sent_parts", "value", "accepted"),
    [
        ([_text_part("i1")], [_text_part("n1", text="Summary.")], True),
        ([_text_part("i1", "metadata", None)], [_text_part("n1", text="Summary.")], False),  # not shown the text
        ([_text_part("i1", "omit", "leaked")], [_text_part("n1", text="Summary.")], False),  # text outside body
        (None, [_text_part("n1", text="Summary.")], False),  # not shown at all
        ("not parts", [_text_part("n1", text="Summary.")], False),
        ([_text_part("i1")], [_text_part("n1", "metadata", None)], False),  # the edit itself is not inline text
    ],
)
def test_compaction_edits_require_selected_inline_text(kind: str, sent_parts: Any, value: Any, accepted: bool) -> None:
    effect = (
        {"type": "modify", "target": "instructions", "operation": "replace", "value": value}
        if kind == "modify"
        else {"type": "return", "value": value}
    )
    outcome = _compaction(effect, sent_parts)
    if accepted:
        assert isinstance(outcome, Accepted), outcome
    else:
        assert _reason(outcome) == "compaction edits require selected inline text"


@pytest.mark.spec("AHP-EDIT-001")
def test_other_effects_at_a_compaction_boundary_need_no_inline_text() -> None:
    assert isinstance(_compaction({"type": "message", "text": "compacting"}, None), Accepted)


@pytest.mark.spec("AHP-CAP-001")
def test_an_inject_context_without_delivery_times_grants_no_delivery() -> None:
    event = tool_before()
    caps = {"effects": ["inject"], "inject": {"context": {"append": True}}}
    assert _reason(accept(Reply(_answer(event["id"], [_inject("next_turn")])), _expect(event, caps))) == (
        "unadvertised inject delivery"
    )
