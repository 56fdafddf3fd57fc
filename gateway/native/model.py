"""Shared shapes of the adapters: a translated native invocation and a native answer."""

from __future__ import annotations

import json
from typing import Any, NamedTuple, Protocol

from gateway.native.ahp import Json, Settled


class NativeAnswer(NamedTuple):
    """Exactly what the hook process returns to the harness."""

    exit_code: int = 0
    stdout: str = ""
    stderr: str = ""

    def with_note(self, note: str) -> NativeAnswer:
        stderr = self.stderr + ("\n" if self.stderr and not self.stderr.endswith("\n") else "") + note + "\n"
        return NativeAnswer(self.exit_code, self.stdout, stderr)


class Translation:
    """One native invocation as an AHP message, plus what the codec needs to answer it."""

    __slots__ = ("message", "native_event", "tool_input")

    def __init__(self, native_event: str, message: Json, tool_input: Json | None = None) -> None:
        self.native_event = native_event  # the native event name as the harness spells it
        self.message = message  # hooks/intercept request or hooks/observe notification
        self.tool_input = tool_input  # the input modifications apply to

    @property
    def caps(self) -> Json | None:
        caps = self.message["params"].get("capabilities")
        return caps if isinstance(caps, dict) else None

    @property
    def intercept(self) -> bool:
        return self.caps is not None

    @property
    def can_deny(self) -> bool:
        caps = self.caps
        return caps is not None and "deny" in caps["effects"]


class Codec(Protocol):
    harness: str

    def translate(self, payload: Json, event: str | None) -> Translation | None:
        """The AHP message for this payload; None for a native event the adapter does not map
        (it then answers the native no-op without calling the gateway)."""

    def answer(self, tr: Translation, settled: Settled) -> NativeAnswer:
        """The native answer for a settled result; raises :class:`gateway.native.ahp.BadAnswer`
        when the result cannot be expressed (never silently dropped)."""

    def noop(self, tr: Translation | None) -> NativeAnswer:
        """The native "no decision" answer."""


class NativePayloadError(ValueError):
    """The native payload is unusable (not JSON, not an object, unknown event)."""


def dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def get(payload: Json, *names: str) -> Any:
    for name in names:
        if name in payload:
            return payload[name]
    return None


def text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def event_name(payload: Json, event: str | None, field: str = "hook_event_name") -> str:
    """The native event: ``--event`` if given, else the payload's ``field``; none is an error."""
    name = event or text(payload.get(field))
    if not name:
        raise NativePayloadError(f"no hook event name (pass --event or {field})")
    return name
