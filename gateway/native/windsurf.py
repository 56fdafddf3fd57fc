"""Windsurf Cascade codec (native-hooks §6): a pre-hook can only block, by exit code 2 with the
reason on stderr (shown with ``show_output``). No JSON decision, no input change, no context, no
ask/allow: ``deny`` is the only effect advertised, and post-hooks are observations. The
``execution_id`` is not known to be shared by pre- and post-hooks, so call ids are synthesized.
"""

from __future__ import annotations

from typing import Any

from gateway.native import ahp, events
from gateway.native.ahp import Json, Settled
from gateway.native.model import NativeAnswer, NativePayloadError, Translation, event_name, text

_DENY = ahp.capabilities(("deny",))
_TOOLS = ("run_command", "write_code", "read_code", "mcp_tool_use")
CAPS: dict[str, Json | None] = {
    **{f"pre_{tool}": _DENY for tool in _TOOLS},
    "pre_user_prompt": _DENY,
    **{f"post_{tool}": None for tool in _TOOLS},
}


def _tool(kind: str, info: Json) -> tuple[str, Json, Json | None]:
    if kind == "mcp_tool_use":
        name = text(info.get("mcp_tool_name")) or ""
        server = text(info.get("mcp_server_name")) or ""
        tool_input = ahp.parse_input(info.get("mcp_tool_arguments"))
        return name, tool_input, ahp.mcp_block(server, name)
    tool_input = {k: v for k, v in info.items() if k not in ("output", "exit_code", "mcp_result")}
    return kind, tool_input, None


class WindsurfCodec:
    harness = "windsurf"

    def translate(self, payload: Json, event: str | None) -> Translation | None:
        name = event_name(payload, event, "agent_action_name")
        if name not in CAPS:
            return None
        caps = CAPS[name]
        info = payload.get("tool_info")
        info = info if isinstance(info, dict) else {}
        origin = events.Origin(
            "windsurf",
            "unknown",
            name,
            payload,
            ahp.session_block(payload.get("trajectory_id"), info.get("cwd"), payload.get("model_name")),
            None,
            payload.get("timestamp"),
        )
        tool_input: Json | None = None
        if name == "pre_user_prompt":
            event_obj = events.turn_start(origin, info.get("user_prompt"))
        else:
            kind = name.split("_", 1)[1]
            tool_name, tool_input, mcp = _tool(kind, info)
            if not tool_name:
                raise NativePayloadError(f"{name} payload has no tool name")
            if name.startswith("pre_"):
                event_obj = events.tool_before(origin, tool_name, tool_input, None, mcp)
            else:
                output: Any = info.get("mcp_result", info.get("output"))
                event_obj = events.tool_after(origin, tool_name, tool_input, None, output=output, mcp=mcp)
        message = ahp.observe_notification(event_obj) if caps is None else ahp.intercept_request(event_obj, caps)
        return Translation(name, message, tool_input)

    def manifest(self) -> Json:
        return events.manifest(
            [
                (
                    "turn.start"
                    if n == "pre_user_prompt"
                    else ("tool.before" if n.startswith("pre_") else "tool.after"),
                    c,
                )
                for n, c in CAPS.items()
            ]
        )

    def noop(self, tr: Translation | None) -> NativeAnswer:
        return NativeAnswer(0, "", "")

    def answer(self, tr: Translation, s: Settled) -> NativeAnswer:
        if s.permission == "deny":
            return NativeAnswer(2, "", (s.reason or "denied by policy") + "\n")
        return self.noop(tr)
