"""AHP event shapes the native events map to (protocol §5), built from normalized pieces.

Content: prompts, tool results and assistant answers become canonical text messages
(AHP-CONTENT-001: structured content is serialized into text). The raw native payload is not
forwarded (``native`` stays absent): it carries local paths and transcripts the policies do not
need.
"""

from __future__ import annotations

from typing import Any

from gateway.native import ahp
from gateway.native.ahp import Json
from gateway.protocol.events import EFFECT_TYPES


class Origin:
    """The native invocation an event comes from: identities and time."""

    __slots__ = ("harness", "native_event", "payload", "session", "turn_id", "version", "when")

    def __init__(
        self,
        harness: str,
        version: str,
        native_event: str,
        payload: Json,
        session: Json,
        turn_id: str | None = None,
        when: Any = None,
    ) -> None:
        self.harness, self.version, self.native_event = harness, version, native_event
        self.payload, self.session, self.turn_id, self.when = payload, session, turn_id, when

    @property
    def session_id(self) -> str:
        return str(self.session["id"])

    def envelope(self, event_type: str) -> Json:
        eid = ahp.event_id(self.harness, self.native_event, self.payload)
        event = ahp.envelope(event_type, eid, self.harness, self.version, self.when, self.session)
        if self.turn_id:
            event["turn"] = {"id": self.turn_id}
        return event

    def call(self, native_id: Any, tool_name: str, tool_input: Json) -> Json:
        return ahp.call_identity(self.harness, native_id, self.session_id, self.turn_id, tool_name, tool_input)


def _tool_fields(
    event: Json,
    origin: Origin,
    name: str,
    tool_input: Json,
    native_id: Any,
    mcp: Json | None,
    identity: Json | None = None,
) -> Json:
    """``identity``: the part of the input a synthesized call id is derived from, when the pre-
    and post-event of one call carry different input fields (Cursor's shell hooks)."""
    event["call"] = origin.call(native_id, name, tool_input if identity is None else identity)
    event["tool"] = ahp.tool_block(name, tool_input, mcp)
    event["path"] = "mcp" if mcp else "native"
    return event


def tool_before(
    origin: Origin,
    name: str,
    tool_input: Json,
    native_id: Any = None,
    mcp: Json | None = None,
    gaps: list[Json] | None = None,
    identity: Json | None = None,
) -> Json:
    event = _tool_fields(origin.envelope("tool.before"), origin, name, tool_input, native_id, mcp, identity)
    if gaps:
        event["gaps"] = gaps
    return event


def permission_request(
    origin: Origin, name: str, tool_input: Json, suggestions: Any = None, mcp: Json | None = None
) -> Json:
    event = _tool_fields(origin.envelope("tool.permission.request"), origin, name, tool_input, None, mcp)
    event["suggestions"] = [s for s in suggestions if isinstance(s, dict)] if isinstance(suggestions, list) else []
    event["sandboxBypass"] = False
    return event


def tool_after(
    origin: Origin,
    name: str,
    tool_input: Json,
    native_id: Any = None,
    *,
    output: Any = None,
    error: str | None = None,
    mcp: Json | None = None,
    duration_ms: Any = None,
    identity: Json | None = None,
) -> Json:
    event = _tool_fields(origin.envelope("tool.after"), origin, name, tool_input, native_id, mcp, identity)
    event["execution"] = {"status": "executed"}
    if error is not None:
        event["outcome"] = "error"
        event["error"] = {"message": error or "tool failed", "class": "tool_error"}
        event["items"] = [ahp.text_message(event["id"] + "-out", "tool", error or "tool failed")]
    else:
        event["outcome"] = "ok"
        event["items"] = [] if output is None else [ahp.text_message(event["id"] + "-out", "tool", ahp.as_text(output))]
    if isinstance(duration_ms, int | float) and not isinstance(duration_ms, bool) and duration_ms >= 0:
        event["durationMs"] = duration_ms
    return event


def tool_batch_after(origin: Origin, calls: list[tuple[str, Json, Any, Json | None]]) -> Json:
    """``calls``: (tool name, input, native call id, mcp block) per finished call of the batch."""
    event = origin.envelope("tool.batch.after")
    entries: list[Json] = []
    for name, tool_input, native_id, mcp in calls:
        entries.append(
            {
                "call": origin.call(native_id, name, tool_input),
                "tool": ahp.tool_block(name, tool_input, mcp),
                "path": "mcp" if mcp else "native",
                "outcome": "ok",
                "execution": {"status": "executed"},
            }
        )
    ids = [entry["call"]["id"] for entry in entries]
    event["batch"] = {"id": "syn-" + ahp.digest("batch", origin.harness, origin.session_id, ids), "synthesized": True}
    event["calls"] = entries
    return event


def _turn(origin: Origin, seed: Any) -> Json:
    if origin.turn_id:
        return {"id": origin.turn_id}
    return {"id": "syn-" + ahp.digest("turn", origin.harness, origin.session_id, seed), "synthesized": True}


def turn_start(origin: Origin, prompt: Any) -> Json:
    event = origin.envelope("turn.start")
    event["turn"] = _turn(origin, prompt)
    event["trigger"] = "user"
    event["items"] = (
        [ahp.text_message(event["id"] + "-prompt", "user", ahp.as_text(prompt))] if prompt is not None else []
    )
    return event


def turn_finish(origin: Origin, last_message: Any, continuation_count: int) -> Json:
    event = origin.envelope("turn.finish.before")
    event["turn"] = _turn(origin, last_message)
    event["outcome"] = "completed"
    event["continuationCount"] = continuation_count
    event["items"] = (
        [ahp.text_message(event["id"] + "-answer", "assistant", ahp.as_text(last_message))]
        if isinstance(last_message, str) and last_message
        else []
    )
    return event


_TRIGGERS = {"startup": "startup", "resume": "resume", "compact": "compact", "new": "startup"}


def session_start(origin: Origin, source: Any, permission_mode: Any, manifest: Json) -> Json:
    event = origin.envelope("session.start")
    event.pop("turn", None)
    trigger = _TRIGGERS.get(source) if isinstance(source, str) else None
    event["trigger"] = trigger or "startup"
    if trigger is None and source is not None:
        # clear/fork need the prior session's id (resumedFrom), which no native payload carries.
        event["gaps"] = [
            {"path": "trigger", "reason": f"native source {ahp.as_text(source)[:40]} has no AHP equivalent here"}
        ]
    event["permissionMode"] = permission_mode if isinstance(permission_mode, str) and permission_mode else "default"
    event["manifest"] = manifest
    event["items"] = []
    return event


_ENDS = {
    "clear": "completed",
    "logout": "completed",
    "prompt_input_exit": "completed",
    "exit": "completed",
    "complete": "completed",
    "user_exit": "completed",
    "error": "error",
    "abort": "cancelled",
    "timeout": "error",
}


def session_end(origin: Origin, reason: Any) -> Json:
    event = origin.envelope("session.end")
    event.pop("turn", None)
    event["outcome"] = _ENDS.get(reason, "unknown") if isinstance(reason, str) else "unknown"
    event["reason"] = reason if isinstance(reason, str) and reason else "unknown"
    return event


def compact_before(origin: Origin, trigger: Any, instructions: Any) -> Json:
    event = origin.envelope("context.compact.before")
    event["trigger"] = trigger if trigger in ("auto", "manual") else "auto"
    event["items"] = []
    if isinstance(instructions, str) and instructions:
        part = {"id": event["id"] + "-i0", "kind": "text", "mediaType": "text/plain", "selection": "body"}
        event["instructions"] = [{**part, "text": instructions}]
    return event


def _text_parts(event_id: str, slot: str, value: str) -> list[Json]:
    return [{"id": f"{event_id}-{slot}", "kind": "text", "mediaType": "text/plain", "selection": "body", "text": value}]


def user_attention(origin: Origin, kind: Any, title: Any, message: Any) -> Json:
    event = origin.envelope("user.attention")
    event["attention"] = {
        "kind": kind if isinstance(kind, str) and kind else "notification",
        "title": _text_parts(event["id"], "title", title if isinstance(title, str) and title else "Notification"),
        "message": _text_parts(event["id"], "message", ahp.as_text(message) if message is not None else ""),
    }
    return event


def file_changed(origin: Origin, path: str, operation: str) -> Json:
    event = origin.envelope("file.changed")
    event["changes"] = [{"path": path, "operation": operation, "agentCaused": True}]
    return event


# ------------------------------------------------------------------------------------ manifest
def manifest(entries: list[tuple[str, Json | None]]) -> Json:
    """The adapter's static manifest for ``session.start`` (protocol §7.1): the AHP events this
    codec can emit, intercept bounds = the union over the native events that map to each, and
    the gaps (every limit it cannot state)."""
    merged: dict[str, Json | None] = {}
    for event_type, caps in entries:
        if caps is None:
            merged.setdefault(event_type, None)
            continue
        have = merged.get(event_type)
        merged[event_type] = caps if have is None else _union(have, caps)
    events = []
    for event_type, caps in merged.items():
        if caps is None:
            events.append({"event": event_type, "modes": ["observe"], "capabilities": {"effects": []}})
        else:
            events.append({"event": event_type, "modes": ["intercept"], "capabilities": caps})
    unknown = "the native hook system does not publish it"
    return {
        "events": events,
        "gaps": [
            {"path": "limits.maxContinuations", "reason": unknown},
            {"path": "limits.minTimeoutMs", "reason": unknown},
            {"path": "limits.maxTimeoutMs", "reason": unknown},
            {"path": "limits.maxUploadBytes", "reason": "the adapter sends no uploads"},
        ],
        "transports": ["http"],
        "authentication": ["bearer"],
        "toolPaths": ["native", "mcp"],
        "contentCategories": ["text"],
        "limits": {},
        "managedPolicy": {"scopes": ["user", "project"], "disableable": True},
        "correlationIdentityFields": ["id", "source", "session.id", "turn.id", "call.id"],
    }


def _union(a: Json, b: Json) -> Json:
    effects = tuple(e for e in EFFECT_TYPES if e in a["effects"] or e in b["effects"])
    modify: dict[str, tuple[bool, bool]] = {}
    for caps in (a, b):
        for target, ops in caps.get("modify", {}).items():
            r, m = modify.get(target, (False, False))
            modify[target] = (r or ops["replace"], m or ops["merge"])
    flow = tuple(
        op
        for op in ("stop", "continue")
        if op in a.get("flow", {}).get("operations", ()) or op in b.get("flow", {}).get("operations", ())
    )
    deliver = tuple(
        d
        for d in ("now", "next_turn")
        if any(d in c.get("inject", {}).get("context", {}).get("deliverAt", ()) for c in (a, b))
    )
    return ahp.capabilities(
        tuple(e for e in effects if e not in ("modify", "flow", "inject")),
        modify=modify or None,
        flow=flow,
        continuations=(0, 1) if "continue" in flow else None,
        inject=deliver,
    )
