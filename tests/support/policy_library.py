"""The shipped policy library evaluated on one tool call in process: the ids of the rules that emitted an effect."""

from __future__ import annotations

from typing import Any

from gateway.policy.cases import complete_event, default_capabilities
from gateway.policy.facts import with_facts
from gateway.policy.library import Library, load_policies
from gateway.routing.cel import Engine
from tests.support.paths import ROOT as REPO

SESSION = {"id": "s1", "cwd": "/home/ana/payments", "workspaceRoots": ["/home/ana/payments"]}


ENGINE = Engine()


LIBRARY: Library = load_policies([REPO / "policies"], ENGINE)


def decide(tool: str, inp: dict[str, Any], session: dict[str, Any] | None = None) -> set[str]:
    """The ids of the rules whose effect was emitted (deny, ask or message)."""
    event = complete_event(
        {"type": "tool.before", "session": session or SESSION, "tool": {"name": tool, "input": inp}}, 0
    )
    caps = default_capabilities("tool.before")
    activation = ENGINE.activation(
        {
            "event": event,
            "method": "hooks/intercept",
            "protocolVersion": "draft",
            "capabilities": caps,
            "principal": {},
            "headers": {},
        }
    )
    result = LIBRARY.evaluate("tool.before", with_facts(ENGINE, activation, LIBRARY.uses_facts), caps, trace=True)
    assert result.error is None, result.error
    return {e.rule for e in result.trace if e.result is True and e.emitted not in (None, "suppressed")}


def shell(command: str) -> set[str]:
    return decide("Bash", {"command": command})
