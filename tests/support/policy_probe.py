"""The bundled policy library as a red-team probe sees it: which rules deny or ask about one call."""

from __future__ import annotations

from typing import Any

from gateway.policy.cases import complete_event, default_capabilities
from gateway.policy.facts import with_facts
from gateway.policy.library import Library, load_policies
from gateway.routing.cel import Engine
from tests.support.paths import ROOT as REPO

SESSION = {"id": "s1", "cwd": "/home/ana/payments", "workspaceRoots": ["/home/ana/payments"]}
ENGINE = Engine()
LIBRARY: Library = load_policies(sorted(p for p in (REPO / "policies").glob("*.yaml") if p.name != "mcp.yaml"), ENGINE)
"""Without ``mcp.yaml``: its allow-list would deny every filesystem-server call first, whatever it reads."""
NOT_A_VERDICT = {"prefer-force-with-lease"}


def flagged(tool: str, inp: dict[str, Any]) -> set[str]:
    """The ids of the rules that denied or asked about one tool call."""
    tool_field: dict[str, Any] = {"name": tool, "input": inp}
    if tool.startswith("mcp__"):
        server = tool.split("__")[1]
        tool_field["origin"] = "mcp"
        tool_field["mcp"] = {"server": {"id": server}, "toolName": tool.split("__")[2], "provenance": "runtime"}
    event = complete_event({"type": "tool.before", "session": SESSION, "tool": tool_field}, 0)
    caps = default_capabilities("tool.before")
    values = {"event": event, "method": "hooks/intercept", "protocolVersion": "draft", "capabilities": caps}
    activation = ENGINE.activation({**values, "principal": {}, "headers": {}})
    result = LIBRARY.evaluate("tool.before", with_facts(ENGINE, activation, LIBRARY.uses_facts), caps, trace=True)
    assert result.error is None, result.error
    emitted = {e.rule for e in result.trace if e.result is True and e.emitted not in (None, "suppressed")}
    return emitted - NOT_A_VERDICT
