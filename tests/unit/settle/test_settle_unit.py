"""Pure settlement pieces without sockets: collapse compression, the delivery ledger, narrowing."""

from __future__ import annotations

from gateway.protocol.capabilities import narrow, parallel_safe, remaining_continuations, with_remaining
from gateway.settle.collapse import collapse, compress_modifications
from gateway.settle.deliveries import DeliveryLedger
from gateway.settle.fold import ChainState
from gateway.settle.reply import Accepted


def _mod(op, value, target="input"):
    return {"type": "modify", "target": target, "operation": op, "value": value}


def test_compress_keeps_everything_from_the_last_replace_per_target():
    mods = [_mod("merge", {"a": 1}), _mod("replace", {"b": 1}), _mod("merge", {"c": 1}), _mod("merge", [1], "output")]
    assert compress_modifications(mods) == mods[1:]


def test_delivery_ledger_is_bounded_and_expires():
    now = [0.0]
    ledger = DeliveryLedger(4, 10.0, lambda: now[0])
    ledger.add("a")
    assert "a" in ledger
    now[0] = 6.0
    ledger.add("b")  # rotation: "a" moves to the previous generation
    assert "a" in ledger and "b" in ledger
    now[0] = 12.0
    ledger.add("c")
    assert "a" not in ledger and "b" in ledger
    for key in "defgh":
        ledger.add(key)
    assert len(ledger) <= 4


def test_narrow_drops_what_cannot_be_settled_and_is_memoised():
    harness = {"effects": ["deny", "modify", "message"], "modify": {"content": {"replace": True, "merge": False}}}
    narrowed = narrow(harness, "user.elicitation.result")
    assert narrowed == {"effects": ["deny", "message"]}
    assert narrow(dict(harness), "user.elicitation.result") is narrowed
    assert parallel_safe(narrowed)


def test_remaining_continuations():
    caps = {"effects": ["flow"], "flow": {"operations": ["continue"], "maxContinuations": 3, "continuationCount": 1}}
    assert remaining_continuations(caps) == 2
    assert with_remaining(caps, 1)["flow"]["remainingContinuations"] == 1
    assert remaining_continuations({"effects": ["flow"], "flow": {"operations": ["stop"]}}) is None


def test_allow_is_only_reemitted_when_advertised_and_needed():
    event = {"type": "tool.before", "tool": {"input": {}}}
    chain = ChainState.start(event, {"permission": "allow", "candidate": None}, None)
    chain.fold(Accepted([_mod("merge", {})], None), "org.example.a")  # a no-op merge
    assert collapse(chain, None, ["deny", "modify"]) == [_mod("merge", {})]
    assert collapse(chain, None, ["deny", "modify", "allow"]) == [_mod("merge", {}), {"type": "allow"}]
