"""A tool.after intercept body for the chain and settlement tests."""

from __future__ import annotations

from tests.support.events import tool_before


def tool_after(n: int = 1) -> dict:
    event = tool_before()
    event.update(type="tool.after", outcome="ok", execution={"status": "executed"}, items=[])
    return event
