"""The verdict: a settlement becomes the one answer for the harness and the one decision record.

Attribution (an explicit deny keeps the upstream's reason and code, with the deciding upstream
under the gateway's id), a synthetic deny for a fail-closed failure (AHP-FAIL-001) — or JSON-RPC
-32003 when the harness did not advertise ``deny``, so its own policy for the gateway decides
(protocol §8.5 item 6) —, the collapse into one effect list (protocol §8.5 item 4), and
self-validation: a collapse bug must never reach a harness as an invalid answer. The
:class:`~gateway.settle.ledger.Decision` is built here, once, from everything that happened.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Any

from gateway.pipeline.chain import Settlement
from gateway.pipeline.frontend import Intercept
from gateway.protocol import jsonrpc, wire
from gateway.protocol.errors import RpcCode
from gateway.runtime import RuntimeConfig
from gateway.settle.collapse import attributed_deny, collapse, synthetic_deny
from gateway.settle.ledger import Decision, Outcome, outcome_of

log = logging.getLogger("ahp_gateway")
_TOOL_EVENTS = frozenset(("tool.before", "tool.permission.request"))


def verdict(
    snap: RuntimeConfig,
    req: Intercept,
    settlement: Settlement | None,
    started: float,
    principal: Mapping[str, Any] | None = None,
) -> tuple[bytes, Decision]:
    """(the response body, the decision record). ``settlement`` is None when no upstream was
    consulted (no subscription matched, or the incoming state was already decided)."""
    advertised = req.capabilities["effects"]
    deny: dict[str, Any] | None = None
    decided_by: str | None = None
    kind: str | None = None
    rpc_error: int | None = None
    effects: list[dict[str, Any]] = []
    if settlement is not None:
        chain = settlement.chain
        if settlement.failed_closed is not None:
            decided_by, failure = settlement.failed_closed
            kind = "synthetic"
            if "deny" in advertised:
                deny = synthetic_deny(snap.gateway_id, decided_by, failure)
            else:
                rpc_error = int(RpcCode.BACKEND_UNAVAILABLE)
        elif chain.deny is not None:
            assert chain.decided_by is not None
            decided_by, kind = chain.decided_by, "explicit"
            deny = attributed_deny(chain.deny, snap.gateway_id, decided_by)
        elif chain.stop is not None:
            decided_by = chain.decided_by
        if rpc_error is None:
            effects = collapse(chain, deny, advertised)
    body: bytes
    if rpc_error is None:
        response = jsonrpc.result(req.id, {"protocolVersion": req.version, "effects": effects})
        check = snap.schemas.response_for[req.event_type] if effects else None
        if check is not None and not check.ok(response):
            log.error("collapsed response failed self-validation for %s: %s", req.event_type, check.explain(response))
            rpc_error = int(RpcCode.INTERNAL_ERROR)
        else:
            body = wire.dumps(response)
    if rpc_error is not None:
        body = wire.error_body(req.id, rpc_error)
        effects = []
    event = req.event
    decision = Decision(
        event_id=event["id"],
        event_type=req.event_type,
        source=event["source"],
        tool=event.get("tool", {}).get("name") if req.event_type in _TOOL_EVENTS else None,
        outcome=Outcome.ERROR if rpc_error is not None else outcome_of(effects),
        decided_by=decided_by,
        kind=kind,
        code=deny.get("code") if deny is not None and rpc_error is None else None,
        steps=settlement.steps if settlement is not None else [],
        upstream_wait=settlement.upstream_wait if settlement is not None else 0.0,
        parallel=settlement.parallel if settlement is not None else False,
        rpc_error=rpc_error,
        effects=[e["type"] for e in effects],
        principal=principal.get("name") if principal else None,
        event=event,
        response_effects=effects,
        total=time.perf_counter() - started,
    )
    return body, decision
