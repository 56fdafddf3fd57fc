"""AHP messages the tests send: tool.before events, hooks/intercept requests and their results."""

from __future__ import annotations

import copy
import itertools
from typing import Any

HARNESS = {"name": "test-harness", "version": "1.0"}
_ids = itertools.count(1)


def tool_before(command: str = "ls -la", **extra: Any) -> dict[str, Any]:
    """A valid tool.before event (SDK 0.10.1 schema: harness block required)."""
    n = next(_ids)
    event: dict[str, Any] = {
        "id": f"evt-{n}",
        "source": "urn:example:harness",
        "type": "tool.before",
        "time": "2026-11-30T10:00:00Z",
        "harness": dict(HARNESS),
        "session": {"id": "sess-1", "cwd": "/home/dev/project", "workspaceRoots": ["/home/dev/project"]},
        "call": {"id": f"call-{n}"},
        "path": "native",
        "tool": {"name": "shell", "origin": "native", "input": {"command": command}},
    }
    event.update(extra)
    return event


ALL_TOOL_BEFORE_CAPS: dict[str, Any] = {
    "effects": ["deny", "allow", "ask", "modify", "message", "return", "flow", "inject"],
    "modify": {"input": {"replace": True, "merge": True}},
    "flow": {"operations": ["stop"]},
    "inject": {"context": {"append": True, "deliverAt": ["now", "next_turn"]}},
}


def intercept(
    event: dict[str, Any], caps: dict[str, Any] | None = None, state: dict[str, Any] | None = None, rid: Any = None
) -> dict[str, Any]:
    params: dict[str, Any] = {
        "protocolVersion": "draft",
        "event": event,
        "capabilities": copy.deepcopy(caps or {"effects": ["deny"]}),
    }
    if state is not None:
        params["state"] = state
    return {"jsonrpc": "2.0", "id": event["id"] if rid is None else rid, "method": "hooks/intercept", "params": params}


def result(request: dict[str, Any], effects: list[dict[str, Any]]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request["id"], "result": {"protocolVersion": "draft", "effects": effects}}
