"""Per-request capabilities (AHP-CAP-001/002): what the gateway may advertise to upstreams.

The gateway only ever narrows what the harness advertised (protocol §8.5 item 5): it drops what it
cannot settle itself (extension effect names, modify targets it cannot apply) and tracks the
continuation allowance as upstreams consume it.
"""

from __future__ import annotations

from typing import Any

import orjson

from gateway.protocol.events import EFFECT_TYPES, MODIFY_TARGETS

Caps = dict[str, Any]
PARALLEL_SAFE = frozenset(("deny", "message"))


_MEMO: dict[bytes, Caps] = {}
_MEMO_LIMIT = 4096


def narrow(harness: Caps, event_type: str) -> Caps:
    """The largest advertisement the gateway can honour for ``event_type``; never wider than
    ``harness`` (which the request schema has already validated). Harnesses send the same few
    advertisements over and over, so results are memoised; they are shared and never mutated."""
    try:
        key = event_type.encode() + orjson.dumps(harness, option=orjson.OPT_SORT_KEYS)
    except TypeError:  # a number beyond 64 bits (valid JSON): too rare to memoise
        return _narrow(harness, event_type)
    found = _MEMO.get(key)
    if found is None:
        found = _narrow(harness, event_type)
        if len(_MEMO) >= _MEMO_LIMIT:
            _MEMO.clear()
        _MEMO[key] = found
    return found


def _narrow(harness: Caps, event_type: str) -> Caps:
    effects = [e for e in harness.get("effects", ()) if e in EFFECT_TYPES]
    out: Caps = {"effects": effects}
    if "modify" in effects:
        targets = MODIFY_TARGETS.get(event_type, {})
        modify = {
            target: {"replace": op.get("replace") is True, "merge": op.get("merge") is True}
            for target, op in harness.get("modify", {}).items()
            if target in targets and isinstance(op, dict) and (op.get("replace") is True or op.get("merge") is True)
        }
        if modify:
            out["modify"] = modify
        else:
            effects.remove("modify")
    if "flow" in effects:
        flow = harness["flow"]
        out["flow"] = {
            k: flow[k]
            for k in ("operations", "remainingContinuations", "continuationCount", "maxContinuations")
            if k in flow
        }
    if "inject" in effects:
        context = harness["inject"]["context"]
        out["inject"] = {"context": {"append": context["append"], "deliverAt": list(context["deliverAt"])}}
    if "elicitation" in harness and isinstance(harness["elicitation"], dict):
        out["elicitation"] = {k: v for k, v in harness["elicitation"].items() if k in ("form", "url")}
    return out


def remaining_continuations(caps: Caps) -> int | None:
    """The allowance a ``continue`` may consume, or None when continuation is not advertised."""
    flow = caps.get("flow")
    if not flow or "continue" not in flow.get("operations", ()):
        return None
    if "remainingContinuations" in flow:
        return int(flow["remainingContinuations"])
    return int(flow.get("maxContinuations", 0)) - int(flow.get("continuationCount", 0))


def with_remaining(caps: Caps, remaining: int | None) -> Caps:
    """``caps`` advertising ``remaining`` continuations (a copy only when it changes)."""
    if remaining is None or caps["flow"].get("remainingContinuations") == remaining:
        return caps
    out = dict(caps)
    out["flow"] = {**caps["flow"], "remainingContinuations": max(0, remaining)}
    return out


def parallel_safe(caps: Caps) -> bool:
    """AHP-COMP-001 deviation guard: concurrent calls equal the serial chain only when no upstream
    can change the event or the state, i.e. the advertised effects are within {deny, message}."""
    return PARALLEL_SAFE.issuperset(caps["effects"])
