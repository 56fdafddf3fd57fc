"""The gateway's own discovery answers, built once per configuration snapshot.

``hooks/capabilities``: an honest manifest (protocol §7.1): only events the routing can deliver,
per-event bounds the gateway can settle, every uncovered thing in ``gaps``, no identity block.
``hooks/configuration``: the subscriptions a harness should register the gateway with. SDK
harnesses silently skip a backend whose answer is empty, errors or carries ``upload``, which would
be a full policy bypass, so the answer always holds an intercept and an observe subscription.
"""

from __future__ import annotations

from typing import Any

from gateway.config.models import GatewayConfig
from gateway.protocol.events import ALL_EVENTS, INTERCEPTABLE, MODIFY_TARGETS
from gateway.protocol.schemas import BASE, Schemas

CORRELATION_FIELDS = ["id", "source", "parentEventId", "session.id", "turn.id", "call.id", "items.id"]


def bound(schemas: Schemas, event: str) -> dict[str, Any]:
    """The event's capability bound from capabilities.schema.json, narrowed to what the gateway
    can apply (modify targets it settles itself)."""
    defs = schemas.documents[BASE + "capabilities.schema.json"]["$defs"][event]
    props = defs["allOf"][1]["properties"]
    effects = list(props["effects"]["items"]["enum"])
    caps: dict[str, Any] = {}
    if "modify" in effects:
        targets = [t for t in props["modify"]["propertyNames"]["enum"] if t in MODIFY_TARGETS.get(event, {})]
        if targets:
            caps["modify"] = {t: {"replace": True, "merge": True} for t in targets}
        else:
            effects.remove("modify")
    if "flow" in effects:
        caps["flow"] = {"operations": list(props["flow"]["properties"]["operations"]["items"]["enum"])}
    if "inject" in effects:
        caps["inject"] = {"context": {"append": True, "deliverAt": ["now", "next_turn"]}}
    return {"effects": effects, **caps}


def manifest_result(
    cfg: GatewayConfig,
    served: list[str],
    observed: list[str],
    schemas: Schemas,
) -> dict[str, Any]:
    events = []
    gaps = []
    for event in ALL_EVENTS:
        modes = []
        if event in served:
            modes.append("intercept")
        if event in observed:
            modes.append("observe")
        if not modes:
            gaps.append({"path": f"events.{event}", "reason": "no upstream subscription routes this event"})
            continue
        entry: dict[str, Any] = {"event": event, "modes": modes}
        if "intercept" in modes:
            entry["capabilities"] = bound(schemas, event)
        events.append(entry)
    if "user.elicitation.result" in served:
        gaps.append(
            {"path": "user.elicitation.result.modify", "reason": "form-answer edits are not settled by the gateway"}
        )
    gaps += [
        {"path": "effects.extensions", "reason": "extension effect names are not forwarded to upstreams"},
        {"path": "items.body", "reason": "attachment bytes are not re-uploaded; upstreams receive gaps"},
        {"path": "limits.maxContinuations", "reason": "set by the harness per request"},
        {
            "path": "limits.maxTimeoutMs",
            "reason": "none: the gateway answers within limits.deadlineMs, so any longer harness timeout works",
        },
        {"path": "toolPaths", "reason": "tool paths are whatever the harness reports"},
    ]
    if "0.1" in cfg.protocolVersions:
        gaps.append(
            {
                "path": "protocolVersions.0.1",
                "reason": "protocolVersion 0.1 is accepted for hooks/intercept of tool.before with deny only; "
                "0.1 observations and discovery are not served",
            }
        )
    manifest = {
        "events": events,
        "gaps": gaps,
        "transports": ["http", "stdio"],
        "authentication": [],
        "toolPaths": [],
        "contentCategories": ["text"],
        "limits": {
            "maxUploadBytes": 0,
            "minTimeoutMs": cfg.limits.deadlineMs + 1,
        },
        "managedPolicy": {"scopes": ["managed"], "disableable": False},
        "correlationIdentityFields": CORRELATION_FIELDS,
    }
    return manifest


def configuration_result(cfg: GatewayConfig, served: list[str], observed: list[str]) -> dict[str, Any]:
    intercept_events = served or ["tool.before"]
    observe_events = ["*"] if len(observed) == len(ALL_EVENTS) else (observed or intercept_events)
    return {
        "subscriptions": [
            {
                "events": intercept_events if len(intercept_events) < len(INTERCEPTABLE) else ["*"],
                "mode": "intercept",
                "timeoutMs": cfg.frontend_timeout_ms,
                "failurePolicy": cfg.frontend.failurePolicy,
                "content": {"default": "body"},
            },
            {"events": observe_events, "mode": "observe", "content": {"default": "body"}},
        ]
    }
