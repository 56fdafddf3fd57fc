"""Gemini CLI codec (native-hooks §4): decisions as top-level ``decision``/``reason`` JSON on
exit 0, input replacement in ``hookSpecificOutput.tool_input`` (the source rebuilds the call from
that object alone, so only ``replace`` is advertised and the full object is sent). No native call
id exists: every call id is synthesized. ``allow`` has no effect in Gemini and is not advertised.
"""

from __future__ import annotations

from typing import Any

from gateway.native import ahp, events
from gateway.native.ahp import Json, Settled
from gateway.native.model import NativeAnswer, NativePayloadError, Translation, dumps, event_name, text

_caps = ahp.capabilities
CAPS: dict[str, Json | None] = {
    "BeforeTool": _caps(("deny", "ask", "message"), modify={"input": (True, False)}, flow=("stop",)),
    "AfterTool": _caps(("message",), modify={"output": (True, False)}, flow=("stop",), inject=("now",)),
    "BeforeAgent": _caps(("deny", "message"), flow=("stop",), inject=("now",)),
    "AfterAgent": _caps((), flow=("stop", "continue")),
    "SessionStart": _caps((), inject=("now",)),
    "SessionEnd": None,
    "Notification": None,
}
_AHP_TYPE = {
    "BeforeTool": "tool.before",
    "AfterTool": "tool.after",
    "BeforeAgent": "turn.start",
    "AfterAgent": "turn.finish.before",
    "SessionStart": "session.start",
    "SessionEnd": "session.end",
    "Notification": "user.attention",
}


def _mcp(payload: Json) -> Json | None:
    ctx = payload.get("mcp_context")
    if not isinstance(ctx, dict):
        return None
    return ahp.mcp_block(
        str(ctx.get("server_name") or ""),
        str(ctx.get("tool_name") or ""),
        ctx.get("url"),
        ctx.get("command"),
        ctx.get("args"),
        ctx.get("cwd"),
    )


class GeminiCodec:
    harness = "gemini"

    def translate(self, payload: Json, event: str | None) -> Translation | None:
        name = event_name(payload, event)
        if name not in CAPS:
            return None
        caps = CAPS[name]
        origin = events.Origin(
            "gemini",
            "unknown",
            name,
            payload,
            ahp.session_block(payload.get("session_id"), payload.get("cwd")),
            None,
            payload.get("timestamp"),
        )
        tool_name = text(payload.get("tool_name")) or ""
        tool_input = ahp.parse_input(payload.get("tool_input"))
        ahp_type = _AHP_TYPE[name]
        if ahp_type.startswith("tool.") and not tool_name:
            raise NativePayloadError(f"{name} payload has no tool name")
        mcp = _mcp(payload)
        event_obj: Json
        if ahp_type == "tool.before":
            event_obj = events.tool_before(origin, tool_name, tool_input, None, mcp)
        elif ahp_type == "tool.after":
            response: Any = payload.get("tool_response")
            error = None
            if isinstance(response, dict):
                if response.get("error"):
                    error = ahp.as_text(response["error"])
                response = response.get("llmContent", response)
            event_obj = events.tool_after(origin, tool_name, tool_input, None, output=response, error=error, mcp=mcp)
        elif ahp_type == "turn.start":
            event_obj = events.turn_start(origin, payload.get("prompt"))
        elif ahp_type == "turn.finish.before":
            active = payload.get("stop_hook_active") is True
            caps = ahp.capabilities((), flow=("stop", "continue"), continuations=(1, 0) if active else (0, 1))
            event_obj = events.turn_finish(origin, payload.get("prompt_response"), 1 if active else 0)
        elif ahp_type == "session.start":
            event_obj = events.session_start(origin, payload.get("source"), None, self.manifest())
        elif ahp_type == "user.attention":
            event_obj = events.user_attention(origin, payload.get("notification_type"), None, payload.get("message"))
        else:
            event_obj = events.session_end(origin, payload.get("reason"))
        message = ahp.observe_notification(event_obj) if caps is None else ahp.intercept_request(event_obj, caps)
        return Translation(name, message, tool_input if ahp_type.startswith("tool.") else None)

    def manifest(self) -> Json:
        return events.manifest([(_AHP_TYPE[name], caps) for name, caps in CAPS.items()])

    def noop(self, tr: Translation | None) -> NativeAnswer:
        return NativeAnswer(0, "", "")

    def answer(self, tr: Translation, s: Settled) -> NativeAnswer:
        if s.empty:
            return self.noop(tr)
        name = tr.native_event
        out: Json = {}
        hso: Json = {"hookEventName": name}
        if name == "BeforeTool":
            if s.permission == "deny" or s.stop is not None:
                out["decision"], out["reason"] = "deny", s.reason or s.stop
            elif s.permission == "ask":
                out["decision"] = "ask"
            if "input" in s.modified and out.get("decision") != "deny":
                hso["tool_input"] = s.modified["input"]
        elif name == "AfterTool" and "output" in s.modified:
            # Gemini replaces the tool result with the reason of a deny (§4.5).
            out["decision"], out["reason"] = "deny", ahp.message_text(s.modified["output"]) or "(result removed)"
        elif name == "BeforeAgent" and s.permission == "deny":
            out["decision"], out["reason"] = "deny", s.reason
        elif name == "AfterAgent" and s.resume is not None:
            out["decision"], out["reason"] = "deny", "\n".join(s.resume) or "Continue."
        if s.context:
            hso["additionalContext"] = "\n\n".join(s.context)
        if len(hso) > 1:
            out["hookSpecificOutput"] = hso
        if s.messages:
            out["systemMessage"] = "\n".join(s.messages)
        if s.stop is not None:
            out["continue"], out["stopReason"] = False, s.stop
        return NativeAnswer(0, dumps(out) if out else "", "")
