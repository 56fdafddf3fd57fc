"""AHP event names, interceptable set, subscription wildcards and modify targets."""

from __future__ import annotations

import re
from collections.abc import Iterable

INTERCEPTABLE: tuple[str, ...] = (
    "tool.before",
    "tool.after",
    "session.start",
    "config.change.before",
    "turn.start",
    "turn.finish.before",
    "model.request.before",
    "model.switch.before",
    "tool.permission.request",
    "tool.batch.after",
    "context.compact.before",
    "context.compact.after",
    "task.change.before",
    "user.elicitation.request",
    "user.elicitation.result",
    "user.message.inbound",
    "user.message.outbound",
    "workspace.change.before",
    "model.response.after",
)
INTERCEPTABLE_SET = frozenset(INTERCEPTABLE)

OBSERVE_ONLY: tuple[str, ...] = (
    "session.end",
    "config.change.after",
    "turn.end",
    "turn.progress",
    "model.error",
    "model.switch.after",
    "tool.permission.resolved",
    "tool.progress",
    "task.change.after",
    "user.attention",
    "workspace.change.after",
    "file.changed",
    "hook.failure",
)
ALL_EVENTS: tuple[str, ...] = INTERCEPTABLE + OBSERVE_ONLY
ALL_EVENTS_SET = frozenset(ALL_EVENTS)

WILDCARD = re.compile(r"^(?:\*|[a-z][a-z0-9]*\.\*)$")

EFFECT_TYPES: tuple[str, ...] = ("deny", "allow", "ask", "modify", "message", "return", "flow", "inject")
"""The AHP effect types, in the order capability lists are written (a test keeps them equal to
the schema's)."""


def matches(pattern: str, event: str) -> bool:
    """AHP-REG-002: an exact name, ``*`` or a whole ``family.*`` (never an arbitrary pattern)."""
    if pattern == "*":
        return True
    if pattern.endswith(".*"):
        return event.startswith(pattern[:-1])
    return pattern == event


def expand(patterns: Iterable[str], universe: Iterable[str]) -> tuple[str, ...]:
    """The events of ``universe`` that any of ``patterns`` selects, in universe order."""
    pats = tuple(patterns)
    return tuple(e for e in universe if any(matches(p, e) for p in pats))


# Modify targets the gateway can apply itself, per event: (path in the event, value kind).
# "object" merges shallowly; "list" (message or text-part lists) merges by ordered append.
MODIFY_TARGETS: dict[str, dict[str, tuple[tuple[str, ...], str]]] = {
    "tool.before": {"input": (("tool", "input"), "object")},
    "tool.permission.request": {"input": (("tool", "input"), "object")},
    "tool.after": {"output": (("items",), "list")},
    "turn.start": {"prompt": (("items",), "list")},
    "turn.finish.before": {"response": (("items",), "list")},
    "model.request.before": {"request": (("items",), "list")},
    "model.response.after": {"response": (("items",), "list")},
    "context.compact.before": {"instructions": (("instructions",), "list")},
    "context.compact.after": {"summary": (("summary",), "list")},
    "workspace.change.before": {"workspace": (("workspace", "change"), "object")},
    "user.message.inbound": {"prompt": (("message", "messages"), "list")},
    "user.message.outbound": {"content": (("message", "messages"), "list")},
}
"""``user.elicitation.result`` (modify of the parsed MCP form answer) is not applied by the gateway:
that target is narrowed out of the capabilities sent upstream (docs/design/protocol.md, "Protocol decisions")."""
