"""The Claude-family codec: Claude Code, Codex CLI and Copilot CLI share Claude Code's hook
dialect (native-hooks §0.1) and differ in strictness, which a :class:`Profile` captures.

- claude-code: ``hookSpecificOutput`` JSON on exit 0; every field of the mapping table.
- codex: the same shape, but its parser treats any unknown field or unsupported value (``ask``,
  bare ``allow``, ``continue:false`` on PreToolUse, ...) as a failed hook and then fails OPEN. So
  the advertisement holds only what its published output schemas accept and every answer is
  built from those fields alone.
- copilot: camelCase payloads (``toolName``; ``toolArgs`` an object in 1.0.x, a JSON string in
  older versions; ``toolInput`` and ``hookName`` on ``permissionRequest``) or, when configured
  with PascalCase event names, snake_case ones; answers carry the CLI's top-level fields and the
  VS Code ``hookSpecificOutput`` copy (both ignore what they do not know). Copilot shows
  ``permissionDecisionReason`` for ``ask`` too, so an ask always carries one: the answer's
  ``message`` effects (the gateway's policies send the asking rule's reason that way, the AHP
  ``ask`` having no text), else a generic one.

Continuations at ``Stop``: the payload only says whether the hook already continued the turn
(``stop_hook_active``), so the adapter grants one continuation per stop: ``continuationCount`` 1
and ``remainingContinuations`` 0 when it is set, else 0 and 1 (a loop guard).
"""

from __future__ import annotations

from typing import Any, NamedTuple

from gateway.native import ahp, events
from gateway.native.ahp import BadAnswer, Json, Settled
from gateway.native.model import NativeAnswer, NativePayloadError, Translation, dumps, get, text

_caps = ahp.capabilities
_STOP_FAMILY = ("Stop", "SubagentStop")

_CLAUDE_CAPS: dict[str, Json | None] = {
    "PreToolUse": _caps(
        ("deny", "allow", "ask", "message"), modify={"input": (True, True)}, flow=("stop",), inject=("now",)
    ),
    "PermissionRequest": _caps(("allow", "deny", "message"), modify={"input": (True, True)}, flow=("stop",)),
    "PostToolUse": _caps(("message",), flow=("stop",), inject=("now",)),
    "PostToolUseFailure": _caps(("message",), flow=("stop",), inject=("now",)),
    "PostToolBatch": _caps(("message",), flow=("stop",), inject=("now",)),
    "UserPromptSubmit": _caps(("deny", "message"), flow=("stop",), inject=("now",)),
    "SessionStart": _caps(("message",), inject=("now",)),
    "Stop": _caps(("message",), flow=("stop", "continue")),
    "SubagentStop": _caps(("message",), flow=("stop", "continue")),
    "PreCompact": _caps(("deny",)),
    "SessionEnd": None,
    "Notification": None,
}
_CODEX_CAPS: dict[str, Json | None] = {
    "PreToolUse": _caps(("deny", "message"), modify={"input": (True, False)}, inject=("now",)),
    "PermissionRequest": _caps(("allow", "deny")),
    "PostToolUse": _caps(("message",), flow=("stop",), inject=("now",)),
    "UserPromptSubmit": _caps(("deny", "message"), inject=("now",)),
    "SessionStart": _caps((), inject=("now",)),
    "Stop": _caps(("message",), flow=("continue",)),
}
_COPILOT_CAPS: dict[str, Json | None] = {
    "PreToolUse": _caps(("deny", "ask", "message"), modify={"input": (True, False)}),
    "PermissionRequest": _caps(("allow", "deny"), flow=("stop",)),
    "PostToolUse": _caps((), modify={"output": (True, False)}, inject=("now",)),
    "PostToolUseFailure": _caps((), inject=("now",)),
    "SessionStart": _caps((), inject=("now",)),
    "Stop": _caps((), flow=("continue",)),
    "SubagentStop": _caps((), flow=("continue",)),
    "UserPromptSubmit": None,
    "SessionEnd": None,
}
_AHP_TYPE = {
    "PreToolUse": "tool.before",
    "PermissionRequest": "tool.permission.request",
    "PostToolUse": "tool.after",
    "PostToolUseFailure": "tool.after",
    "PostToolBatch": "tool.batch.after",
    "UserPromptSubmit": "turn.start",
    "SessionStart": "session.start",
    "Stop": "turn.finish.before",
    "SubagentStop": "turn.finish.before",
    "PreCompact": "context.compact.before",
    "SessionEnd": "session.end",
    "Notification": "user.attention",
}
_COPILOT_NAMES = {
    "preToolUse": "PreToolUse",
    "permissionRequest": "PermissionRequest",
    "postToolUse": "PostToolUse",
    "postToolUseFailure": "PostToolUseFailure",
    "userPromptSubmitted": "UserPromptSubmit",
    "sessionStart": "SessionStart",
    "sessionEnd": "SessionEnd",
    "agentStop": "Stop",
    "subagentStop": "SubagentStop",
}


REFUSED_REASON = "Blocked by the AHP gateway: the hook payload was refused (too large or malformed)."
UNAUTHENTICATED_REASON = "Blocked by the AHP gateway: the hook's credentials were refused ({status})."


class Profile(NamedTuple):
    harness: str
    caps: dict[str, Json | None]
    strict: bool  # Codex: emit only schema fields, never unsupported values
    copilot: bool = False


PROFILES = {
    "claude-code": Profile("claude-code", _CLAUDE_CAPS, strict=False),
    "codex": Profile("codex", _CODEX_CAPS, strict=True),
    "copilot": Profile("copilot", _COPILOT_CAPS, strict=False, copilot=True),
}


def _mcp(name: str) -> Json | None:
    """``mcp__<server>__<tool>`` (Claude Code, Codex): an MCP tool with an inferred identity."""
    if not name.startswith("mcp__"):
        return None
    parts = name[5:].split("__", 1)
    if len(parts) != 2 or not parts[0] or not parts[1]:
        return None
    return ahp.mcp_block(parts[0], parts[1])


class ClaudeFamilyCodec:
    def __init__(self, profile: Profile) -> None:
        self.profile = profile
        self.harness = profile.harness

    # ------------------------------------------------------------------------------ inbound
    def event_name(self, payload: Json, event: str | None) -> str:
        name = event or text(payload.get("hook_event_name"))
        if self.profile.copilot:
            name = name or text(payload.get("hookName"))
            if name is None:
                name = _infer_copilot(payload)
            name = _COPILOT_NAMES.get(name, name) if name else None
        if not name:
            raise NativePayloadError("no hook event name (pass --event or hook_event_name)")
        return name

    def translate(self, payload: Json, event: str | None) -> Translation | None:
        name = self.event_name(payload, event)
        if name not in self.profile.caps:
            return None
        caps = self.profile.caps[name]
        origin = events.Origin(
            harness=self.harness,
            version="unknown",
            native_event=name,
            payload=payload,
            session=ahp.session_block(
                get(payload, "session_id", "sessionId"), payload.get("cwd"), payload.get("model")
            ),
            turn_id=text(get(payload, "turn_id", "prompt_id")),
            when=payload.get("timestamp"),
        )
        tool_name = text(get(payload, "tool_name", "toolName")) or ""
        # Copilot: ``toolArgs`` on preToolUse/postToolUse, ``toolInput`` on permissionRequest.
        tool_input = ahp.parse_input(get(payload, "tool_input", "toolInput", "toolArgs"))
        native_id = payload.get("tool_use_id")
        ahp_type = _AHP_TYPE[name]
        if ahp_type in ("tool.before", "tool.permission.request", "tool.after") and not tool_name:
            raise NativePayloadError(f"{name} payload has no tool name")
        mcp = _mcp(tool_name)
        if ahp_type == "tool.before":
            event_obj = events.tool_before(origin, tool_name, tool_input, native_id, mcp)
        elif ahp_type == "tool.permission.request":
            event_obj = events.permission_request(
                origin, tool_name, tool_input, get(payload, "permission_suggestions", "permissionSuggestions"), mcp
            )
        elif ahp_type == "tool.after":
            failed = name == "PostToolUseFailure"
            error = _error_text(payload.get("error")) if failed else None
            result = get(payload, "tool_response", "toolResult", "tool_result")
            if self.profile.copilot and isinstance(result, dict):
                result = get(result, "textResultForLlm", "text_result_for_llm") or result
            event_obj = events.tool_after(
                origin,
                tool_name,
                tool_input,
                native_id,
                output=result,
                error=error,
                mcp=mcp,
                duration_ms=payload.get("duration_ms"),
            )
        elif ahp_type == "tool.batch.after":
            event_obj = events.tool_batch_after(origin, _batch_calls(payload.get("tool_calls")))
        elif ahp_type == "turn.start":
            event_obj = events.turn_start(origin, payload.get("prompt"))
        elif ahp_type == "session.start":
            event_obj = events.session_start(
                origin, payload.get("source"), payload.get("permission_mode"), self.manifest()
            )
        elif ahp_type == "turn.finish.before":
            active = get(payload, "stop_hook_active", "stopHookActive") is True
            caps = _continuations(caps, active)
            event_obj = events.turn_finish(origin, payload.get("last_assistant_message"), 1 if active else 0)
        elif ahp_type == "context.compact.before":
            event_obj = events.compact_before(origin, payload.get("trigger"), payload.get("custom_instructions"))
        elif ahp_type == "user.attention":
            event_obj = events.user_attention(
                origin, payload.get("notification_type"), payload.get("title"), payload.get("message")
            )
        else:
            event_obj = events.session_end(origin, payload.get("reason"))
        message = ahp.observe_notification(event_obj) if caps is None else ahp.intercept_request(event_obj, caps)
        return Translation(name, message, tool_input if ahp_type.startswith("tool.") else None)

    def manifest(self) -> Json:
        return events.manifest([(_AHP_TYPE[name], caps) for name, caps in self.profile.caps.items()])

    # ----------------------------------------------------------------------------- outbound
    def refusal(self, event: str | None, reason: str = REFUSED_REASON) -> NativeAnswer:
        """This harness's own denial of a hook body the gateway will not read (too large, broken
        coding, not JSON): its HTTP hook treats any non-2xx as "proceed", so a refusal must deny
        in a 2xx body. The event's own denial when ``event`` names one that can deny, else one that
        blocks whatever the event: Copilot's preToolUse and permissionRequest denials together;
        Claude Code's ``decision: block`` with ``continue: false`` (stops the turn)."""
        settled = Settled(permission="deny", reason=reason, synthetic=True)
        try:
            name = self.event_name({}, event) if event else None
        except NativePayloadError:
            name = None
        caps = self.profile.caps.get(name) if name else None
        if name and caps is not None and "deny" in caps["effects"]:
            return self.answer(Translation(name, {"params": {"capabilities": caps}}), settled)
        out: Json
        if self.profile.copilot:
            out = {"permissionDecision": "deny", "permissionDecisionReason": reason}
            out.update(behavior="deny", message=reason)
        else:
            out = {"decision": "block", "reason": reason, "continue": False, "stopReason": reason}
        return NativeAnswer(0, dumps(out), "")

    def noop(self, tr: Translation | None) -> NativeAnswer:
        return NativeAnswer(0, "", "")

    def answer(self, tr: Translation, settled: Settled) -> NativeAnswer:
        if settled.empty:
            return self.noop(tr)
        name = tr.native_event
        if self.profile.copilot:
            out = self._copilot(name, settled)
        elif name == "PreToolUse":
            out = self._pre_tool_use(settled)
        elif name == "PermissionRequest":
            out = self._permission_request(settled)
        else:
            out = self._other(name, settled)
        answer = NativeAnswer(0, dumps(out) if out else "", "")
        if self.profile.copilot and settled.messages and settled.permission not in ("deny", "ask"):
            # Copilot shows a text only with a decision: a bare message goes to the hook's stderr
            # (its log) rather than nowhere.
            answer = answer.with_note(
                "ahp-gateway hook: message (no Copilot field shows it): " + " / ".join(settled.messages)
            )
        return answer

    def _common(self, out: Json, settled: Settled, *, stop: bool = True) -> None:
        if settled.messages:
            out["systemMessage"] = "\n".join(settled.messages)
        if stop and settled.stop is not None:
            out["continue"] = False
            out["stopReason"] = settled.stop

    def _pre_tool_use(self, s: Settled) -> Json:
        out: Json = {}
        hso: Json = {"hookEventName": "PreToolUse"}
        permission, reason = s.permission, s.reason
        if s.stop is not None and permission != "deny":
            permission, reason = "deny", s.stop  # a stopped turn must not run the pending call
        new_input = s.modified.get("input")
        if self.profile.strict:
            # Codex accepts deny (+ reason) or allow + updatedInput, nothing else (§2.4).
            if permission == "deny":
                hso["permissionDecision"], hso["permissionDecisionReason"] = "deny", reason
            elif new_input is not None:
                hso["permissionDecision"], hso["updatedInput"] = "allow", new_input
        else:
            if new_input is not None and permission is None:
                permission = "ask"  # modify alone never grants permission (§9.1): let the user see it
            if permission is not None:
                hso["permissionDecision"] = permission
            if permission == "deny":
                hso["permissionDecisionReason"] = reason
            elif new_input is not None:
                hso["updatedInput"] = new_input
        if s.context:
            hso["additionalContext"] = "\n\n".join(s.context)
        if len(hso) > 1:
            out["hookSpecificOutput"] = hso
        self._common(out, s, stop=not self.profile.strict)
        return out

    def _permission_request(self, s: Settled) -> Json:
        decision: Json
        new_input = s.modified.get("input")
        if s.stop is not None and s.permission != "deny":
            decision = {"behavior": "deny", "message": s.stop, "interrupt": True}
        elif s.permission == "deny":
            decision = {"behavior": "deny", "message": s.reason}
            if s.stop is not None:
                decision["interrupt"] = True
        elif s.permission == "allow":
            decision = {"behavior": "allow"}
            if new_input is not None:
                decision["updatedInput"] = new_input
        elif new_input is not None:
            raise BadAnswer("a modified permission request can only be expressed together with allow")
        else:
            decision = {}
        out: Json = {}
        if decision:
            out["hookSpecificOutput"] = {"hookEventName": "PermissionRequest", "decision": decision}
        self._common(out, s, stop=False)
        return out

    def _other(self, name: str, s: Settled) -> Json:
        out: Json = {}
        if name in _STOP_FAMILY:
            if s.resume is not None:
                out["decision"], out["reason"] = "block", "\n".join(s.resume) or "Continue."
        elif name == "PostToolBatch" and s.stop is not None:
            # stops the loop before the next model call (§1.4)
            out["decision"], out["reason"] = "block", s.stop
        elif s.permission == "deny":  # UserPromptSubmit, PreCompact
            out["decision"], out["reason"] = "block", s.reason
        if s.context:
            out["hookSpecificOutput"] = {"hookEventName": name, "additionalContext": "\n\n".join(s.context)}
        self._common(out, s)
        return out

    def _copilot(self, name: str, s: Settled) -> Json:
        out: Json = {}
        nested: Json = {"hookEventName": name}
        if name == "PreToolUse":
            if s.permission in ("deny", "ask"):
                out["permissionDecision"] = nested["permissionDecision"] = s.permission
                # ``permissionDecisionReason`` is the one text Copilot shows with a decision: at
                # its prompt for an ask ("No reason provided" without one) and, where nobody can
                # answer (-p), to the model with its denial. The AHP ask has no text, so an ask
                # carries the answer's messages (the asking rule's reason), else a generic one;
                # a deny carries its reason, then the messages.
                if s.permission == "deny":
                    why = "\n\n".join([s.reason or "", *s.messages]).strip()
                else:
                    why = "\n\n".join(s.messages) or ahp.ASK_REASON
                out["permissionDecisionReason"] = nested["permissionDecisionReason"] = why
            if s.permission != "deny" and "input" in s.modified:
                out["modifiedArgs"] = nested["updatedInput"] = s.modified["input"]
        elif name == "PermissionRequest":
            if s.stop is not None or s.permission == "deny":
                out["behavior"], out["message"] = "deny", s.reason or s.stop
                if s.stop is not None:
                    out["interrupt"] = True
            elif s.permission == "allow":
                out["behavior"] = "allow"
        elif name in _STOP_FAMILY:
            if s.resume is not None:
                out["decision"], out["reason"] = "block", "\n".join(s.resume) or "Continue."
        elif "output" in s.modified:
            out["modifiedResult"] = {
                "resultType": "success",
                "textResultForLlm": ahp.message_text(s.modified["output"]),
            }
        if s.context:
            out["additionalContext"] = nested["additionalContext"] = "\n\n".join(s.context)
        if len(nested) > 1:
            out["hookSpecificOutput"] = nested
        return out


def _batch_calls(value: Any) -> list[tuple[str, Json, Any, Json | None]]:
    calls = []
    for entry in value if isinstance(value, list) else ():
        name = text(entry.get("tool_name")) if isinstance(entry, dict) else None
        if name:
            calls.append((name, ahp.parse_input(entry.get("tool_input")), entry.get("tool_use_id"), _mcp(name)))
    if not calls:
        raise NativePayloadError("PostToolBatch payload has no tool calls")
    return calls


def _continuations(caps: Json | None, active: bool) -> Json | None:
    if caps is None or "continue" not in caps.get("flow", {}).get("operations", ()):
        return caps
    flow = {**caps["flow"], "continuationCount": 1 if active else 0, "remainingContinuations": 0 if active else 1}
    return {**caps, "flow": flow}


def _error_text(value: Any) -> str:
    if isinstance(value, dict):
        value = value.get("message", value)
    return (
        text(value) if isinstance(value, str) else (ahp.as_text(value) if value is not None else None)
    ) or "tool failed"


def _infer_copilot(payload: Json) -> str | None:
    """camelCase payloads carry no event name; the installer passes ``--event`` (hook config
    does), this is the fallback."""
    if "toolName" in payload:
        if "toolInput" in payload and "toolArgs" not in payload:
            return "permissionRequest"
        if "toolResult" in payload:
            return "postToolUse"
        return "postToolUseFailure" if "error" in payload else "preToolUse"
    if "stopReason" in payload:
        return "agentStop"
    if "source" in payload:
        return "sessionStart"
    if "reason" in payload:
        return "sessionEnd"
    if "prompt" in payload:
        return "userPromptSubmitted"
    return None
