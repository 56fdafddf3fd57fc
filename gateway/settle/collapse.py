"""Collapse a settled chain into the one effect list the harness applies (protocol §8.5 item 4).

Applied by the harness on top of its own incoming state, the list reproduces the serial outcome:
ordered modifications (earlier ones superseded by a later ``replace`` of the same target are
dropped), the surviving supplied result, injections and messages in order, continuation steps,
permission only when the chain changed it, flow stop over continue, and at most one deny.
Nothing is ever invented: every effect comes from an accepted upstream answer, except the
synthetic denial of a fail-closed failure.
"""

from __future__ import annotations

from typing import Any

from gateway.protocol.errors import SYNTHETIC_DENY_REASON
from gateway.settle.fold import ChainState


def compress_modifications(mods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Drop modifications that a later ``replace`` of the same target overwrites anyway."""
    last_replace: dict[str, int] = {}
    for index, mod in enumerate(mods):
        if mod["operation"] == "replace":
            last_replace[mod["target"]] = index
    return [m for i, m in enumerate(mods) if i >= last_replace.get(m["target"], -1)]


def attributed_deny(effect: dict[str, Any], gateway_id: str, upstream: str) -> dict[str, Any]:
    """An explicit upstream deny with the deciding upstream recorded under the gateway's key
    (overwriting any upstream attempt to claim that namespace)."""
    out = dict(effect)
    extensions = dict(effect.get("extensions") or {})
    extensions[gateway_id] = {"upstream": upstream, "kind": "explicit"}
    out["extensions"] = extensions
    return out


def synthetic_deny(gateway_id: str, upstream: str, failure: str) -> dict[str, Any]:
    """AHP-FAIL-001: generic reason, a code distinguishable from explicit denials."""
    return {
        "type": "deny",
        "reason": SYNTHETIC_DENY_REASON,
        "code": f"{gateway_id}.upstream_unavailable",
        "extensions": {gateway_id: {"upstream": upstream, "kind": "synthetic", "failure": failure}},
    }


def collapse(
    chain: ChainState, deny: dict[str, Any] | None, advertised: list[str] | tuple[str, ...]
) -> list[dict[str, Any]]:
    """The harness-facing effect list; ``deny`` is the (attributed or synthetic) decision, if any,
    and ``advertised`` the effects the harness advertised for this request."""
    effects = compress_modifications(chain.modifications)
    if chain.returned and chain.candidate is not None:
        effects.append({"type": "return", "value": chain.candidate["value"]})
    effects.extend(chain.new_injections)
    effects.extend(chain.messages)
    effects.extend(chain.continues)
    if deny is None:
        if chain.permission == "ask" and chain.initial_permission != "ask":
            effects.append({"type": "ask"})
        elif (
            chain.permission == "allow"
            and "allow" in advertised
            and (chain.initial_permission != "allow" or chain.modifications)
        ):
            # Re-assert approval only where emitted modifications would otherwise drop it.
            effects.append({"type": "allow"})
    if chain.stop is not None:
        effects.append(chain.stop)
    if deny is not None:
        effects.append(deny)
    return effects
