"""Capability grants (AHP-CAP-001, protocol §6.3): one rule for whether an effect was advertised.

The gateway applies it to upstream answers (:mod:`gateway.settle.accept`) and the native adapters
to the gateway's answer (:mod:`gateway.native.ahp`, which imports nothing outside the standard
library and ``gateway.protocol``'s stdlib-only modules). Standard library only.
"""

from __future__ import annotations

from collections.abc import Container, Mapping
from typing import Any


def grant_problem(
    effect: Mapping[str, Any],
    caps: Mapping[str, Any],
    remaining: int | None,
    targets: Container[str] | None = None,
) -> str | None:
    """Why ``effect`` was not granted by ``caps``, or None: its type, modify target and operation,
    flow operation (``continue`` also needs ``remaining`` > 0) and inject delivery must all have
    been advertised. ``targets``: the modify targets the receiver can apply (None: any advertised
    one). Only the members are checked, not their shape (a schema or the caller does that)."""
    kind = effect["type"]
    if kind not in caps["effects"]:
        return f"unadvertised effect {kind}"
    if kind == "modify":
        target, op = effect["target"], effect["operation"]
        granted = caps.get("modify", {}).get(target) if isinstance(target, str) else None
        if (
            not isinstance(granted, dict)
            or (targets is not None and target not in targets)
            or not isinstance(op, str)
            or granted.get(op) is not True
        ):
            return f"unadvertised modify {target}/{op}"
    elif kind == "flow":
        op = effect["operation"]
        if not isinstance(op, str) or op not in caps.get("flow", {}).get("operations", ()):
            return f"unadvertised flow {op}"
        if op == "continue" and (remaining is None or remaining <= 0):
            return "continuation allowance exhausted"
    elif kind == "inject":
        context = caps.get("inject", {}).get("context", {})
        if context.get("append") is not True or effect["deliverAt"] not in context.get("deliverAt", ()):
            return "unadvertised inject delivery"
    return None
