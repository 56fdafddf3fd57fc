"""What happened during one settlement, step by step: the single record that feeds the
response attribution, the decision log, the metrics and ``explain``, so they cannot disagree."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any


class StepOutcome(StrEnum):
    NO_EFFECT = "no_effect"
    EFFECTS = "effects"
    DENY = "deny"
    STOP = "stop"
    FAILED_OPEN = "failed_open"
    FAILED_CLOSED = "failed_closed"
    NOT_CALLED = "not_called"
    CANCELLED = "cancelled"


@dataclass(slots=True)
class StepRecord:
    key: str
    hook_id: str
    kind: str
    """Transport kind: http / local."""
    outcome: StepOutcome
    latency: float = 0.0
    failure: str | None = None
    """FailureClass value when the call failed."""
    detail: str = ""
    effects: tuple[str, ...] = ()
    answer: list[dict[str, Any]] | None = None
    """The accepted effects (shared, never copied); not logged unless content logging is on."""
    shadow: bool = False
    called: bool = True
    """False when the upstream was never reached (deadline exhausted before its turn)."""


class Outcome(StrEnum):
    """Harness-visible result of one intercept (metric label vocabulary)."""

    NO_EFFECT = "no_effect"
    DENY = "deny"
    ASK = "ask"
    ALLOW = "allow"
    MODIFIED = "modified"
    RETURN = "return"
    STOP = "stop"
    MESSAGE = "message"
    ERROR = "error"


@dataclass(slots=True)
class Decision:
    event_id: str
    event_type: str
    source: str
    tool: str | None
    outcome: Outcome = Outcome.NO_EFFECT
    decided_by: str | None = None
    kind: str | None = None
    """explicit / synthetic for denials."""
    code: str | None = None
    steps: list[StepRecord] = field(default_factory=list)
    total: float = 0.0
    upstream_wait: float = 0.0
    parallel: bool = False
    rpc_error: int | None = None
    effects: list[str] = field(default_factory=list)
    wall_time: float = 0.0
    principal: str | None = None
    trace_id: str | None = None
    event: dict[str, Any] | None = None
    """The harness's event (a reference, never copied); only logged with includeContent."""
    response_effects: list[dict[str, Any]] | None = None


_BY_PRECEDENCE = (
    ("deny", Outcome.DENY),
    ("ask", Outcome.ASK),
    ("return", Outcome.RETURN),
    ("modify", Outcome.MODIFIED),
    ("allow", Outcome.ALLOW),
)


def outcome_of(effects: Sequence[Mapping[str, Any]]) -> Outcome:
    """The harness-visible outcome of an effect list: the strongest effect wins (deny > ask >
    return > modify > allow > flow stop); anything else advisory (message, inject, continue)
    is ``message``. The one definition: the verdict, shadow verdicts and ``replay`` (which reads
    recorded answers, hence ``get``) all use it."""
    if not effects:
        return Outcome.NO_EFFECT
    kinds = {e.get("type") for e in effects}
    for kind, outcome in _BY_PRECEDENCE:
        if kind in kinds:
            return outcome
    if any(e.get("type") == "flow" and e.get("operation") == "stop" for e in effects):
        return Outcome.STOP
    return Outcome.MESSAGE
