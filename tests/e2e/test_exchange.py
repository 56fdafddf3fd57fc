"""``Gateway.handle`` returns an :class:`Exchange`: the answer and, in the same value, what
telemetry records (the decision of an intercept, the rejection code, the observation status).
Real engine on a real compiled configuration (a local policy backend); telemetry receives each
exchange exactly once, and the production sink turns it into the same metrics as before."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from gateway.assemble import Assembly
from gateway.config.load import load
from gateway.observability.metrics import Metrics
from gateway.observability.sink import Observability
from gateway.pipeline.exchange import Exchange
from gateway.settle.ledger import Outcome
from gateway.telemetry import NullTelemetry
from tests.support.events import intercept, tool_before
from tests.support.local_policy import write_config
from tests.support.telemetry import Capture
from tests.support.v01 import v01_request

Make = Callable[..., Assembly]


@pytest.fixture
async def assemble(tmp_path: Path) -> AsyncIterator[Make]:
    made: list[Assembly] = []

    def make(telemetry: Any = None, **extra: Any) -> Assembly:
        assembly = Assembly(load(write_config(tmp_path, **extra)), telemetry=telemetry or Capture())
        assembly.start()
        made.append(assembly)
        return assembly

    yield make
    for assembly in made:
        await assembly.aclose(1.0)


def dumps(message: dict[str, Any]) -> bytes:
    return json.dumps(message).encode()


async def test_an_intercept_returns_its_answer_and_its_decision(assemble: Make) -> None:
    capture = Capture()
    assembly = assemble(capture)
    request = intercept(tool_before("sudo rm -rf /"))
    exchange = await assembly.gateway.handle(dumps(request), {})
    assert exchange.answer is not None
    effects = json.loads(exchange.answer)["result"]["effects"]
    assert [e["type"] for e in effects] == ["deny"]
    decision = exchange.decision
    assert decision is not None
    assert decision.event_id == request["params"]["event"]["id"]
    assert decision.outcome is Outcome.DENY and decision.decided_by == "org.example.policies"
    assert decision.response_effects == effects  # the decision is of this very answer
    assert exchange.method == "hooks/intercept" and exchange.rejected is None
    assert exchange.routed == ("org.example.policies",)
    assert capture.exchanges == [exchange]  # recorded once, the value the binding got


async def test_other_messages_carry_what_telemetry_counts(assemble: Make) -> None:
    capture = Capture()
    gateway = assemble(capture).gateway
    parse = await gateway.handle(b"{not json", {})
    assert parse.answer is not None and json.loads(parse.answer)["error"]["code"] == -32700
    assert (parse.method, parse.rejected, parse.decision) == ("?", "-32700", None)

    capabilities = {"jsonrpc": "2.0", "id": 7, "method": "hooks/capabilities", "params": {"protocolVersion": "draft"}}
    discovery = await gateway.handle(dumps(capabilities), {})
    assert discovery.discovery and discovery.rejected is None and discovery.method == "hooks/capabilities"
    assert discovery.answer is not None and "manifest" in json.loads(discovery.answer)["result"]

    unanswered = dict(capabilities)
    del unanswered["id"]
    notification = await gateway.handle(dumps(unanswered), {})
    assert (notification.answer, notification.method, notification.rejected) == (
        None,
        "hooks/capabilities",
        "notification",
    )

    observe = {"jsonrpc": "2.0", "method": "hooks/observe", "params": {"protocolVersion": "draft"}}
    observed = await gateway.handle(dumps(observe), {})
    assert (observed.answer, observed.observed, observed.decision) == (None, "invalid", None)
    assert capture.exchanges == [parse, discovery, notification, observed]


async def test_an_overloaded_gateway_answers_at_once_and_counts_the_rejection(assemble: Make) -> None:
    gateway = assemble(limits={"maxInflight": 1}).gateway
    # private: holding an intercept in flight publicly needs a slow upstream; the counter is what maxInflight reads
    gateway._running = 1  # one intercept is running: the next one is over the limit
    exchange = await gateway.handle(dumps(intercept(tool_before("ls"))), {})
    assert exchange.answer is not None and json.loads(exchange.answer)["error"]["code"] == -32003
    assert (exchange.rejected, exchange.decision) == ("-32003", None)


async def test_a_0_1_intercept_keeps_the_draft_decision_with_the_0_1_answer(assemble: Make) -> None:
    gateway = assemble(protocolVersions=["draft", "0.1"]).gateway
    request = v01_request("sudo ls", ["deny"])
    exchange = await gateway.handle(dumps(request), {})
    assert exchange.answer is not None
    answer = json.loads(exchange.answer)
    assert answer["result"]["protocolVersion"] == "0.1", answer
    assert [e["type"] for e in answer["result"]["effects"]] == ["deny"]
    assert exchange.decision is not None and exchange.decision.outcome is Outcome.DENY
    wrong = dict(request, method="hooks/configuration")
    refused = await gateway.handle(dumps(wrong), {})
    assert (refused.method, refused.rejected, refused.decision) == ("other", "-32601", None)


async def test_the_production_sink_counts_from_the_exchange(assemble: Make) -> None:
    metrics = Metrics()
    gateway = assemble(Observability(metrics)).gateway
    await gateway.handle(b"[]", {})
    await gateway.handle(dumps(intercept(tool_before("sudo ls"))), {})
    await gateway.handle(dumps(intercept(tool_before("ls"))), {})
    text = metrics.render()[0].decode()
    assert 'ahp_gateway_rejected_requests_total{code="-32600",method="other"} 1.0' in text
    assert 'ahp_gateway_route_matches_total{hook="org.example.policies"} 2.0' in text
    deny = 'ahp_gateway_requests_total{event_type="tool.before",method="hooks/intercept",outcome="deny"} 1.0'
    none = 'ahp_gateway_requests_total{event_type="tool.before",method="hooks/intercept",outcome="no_effect"} 1.0'
    assert deny in text and none in text


class Broken(NullTelemetry):
    def exchanged(self, exchange: Exchange) -> None:
        raise RuntimeError("the sink is broken")


async def test_a_failing_sink_never_changes_the_answer(assemble: Make) -> None:
    gateway = assemble(Broken()).gateway
    exchange = await gateway.handle(dumps(intercept(tool_before("sudo ls"))), {})
    assert exchange.answer is not None and json.loads(exchange.answer)["result"]["effects"][0]["type"] == "deny"


def test_an_exchange_is_a_frozen_value() -> None:
    exchange = Exchange(b"{}")
    with pytest.raises(AttributeError):
        exchange.answer = None  # type: ignore[misc]
    assert not hasattr(exchange, "__dict__")
