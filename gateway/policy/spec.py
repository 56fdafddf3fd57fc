"""The policy-file format as pydantic models: what ``ahp-gateway schema --kind policy`` prints and
docs/reference/policy-files.md lists (the field docstrings are the descriptions). Kept apart from
:mod:`gateway.policy.library`, which evaluates the rules, so that the library can be compiled by
mypyc (setup.py) and these models stay interpreted (mypyc cannot compile a pydantic model).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from gateway.config.models import REVERSE_DNS, check_events
from gateway.protocol.events import ALL_EVENTS_SET


class _Strict(BaseModel):
    # field docstrings are the descriptions of `ahp-gateway schema --kind policy` and its reference page
    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)


class DenySpec(_Strict):
    reason: str = Field(min_length=1)
    """Shown to the user and the agent: say what is not allowed and what to do instead."""
    code: str | None = Field(None, pattern=REVERSE_DNS)
    """Deny code, reverse-DNS (default: <namespace>.<rule id>)."""


class MessageSpec(_Strict):
    text: str = Field(min_length=1)
    """A message shown to the user."""


class InjectSpec(_Strict):
    text: str = Field(min_length=1)
    """Context added to the agent's conversation."""
    deliverAt: Literal["now", "next_turn"] = "next_turn"
    """now, or with the next turn."""
    role: Literal["system", "developer", "user"] = "system"
    """The role the injected text speaks as."""


class AskSpec(_Strict):
    """``ask: {}`` or ``ask: {reason: ...}``: the AHP ask effect carries no fields; the harness
    prompts with its own text, and the reason goes beside it as a ``message``."""

    reason: str | None = Field(default=None, min_length=1)
    """Why the rule asks, for the person asked (sent as a message beside the ask when the harness
    advertised message; without it, the rule's description)."""


RULE_EFFECTS = ("deny", "ask", "message", "inject")
"""The AHP effect types a local rule may emit (a subset of ``protocol.events.EFFECT_TYPES``), one
key each in a rule."""


class EffectSpec(_Strict):
    deny: DenySpec | None = None
    """Deny the operation."""
    ask: AskSpec | None = None
    """Ask the user (only when the harness advertised ask; otherwise the rule's fallback applies)."""
    message: MessageSpec | None = None
    """Show a message."""
    inject: InjectSpec | None = None
    """Inject context."""

    @model_validator(mode="after")
    def _one(self) -> EffectSpec:
        chosen = [k for k in RULE_EFFECTS if getattr(self, k) is not None]
        if len(chosen) != 1:
            raise ValueError("exactly one of deny, ask, message or inject is required")
        return self

    @property
    def kind(self) -> str:
        return next(k for k in RULE_EFFECTS if getattr(self, k) is not None)


class RuleSpec(EffectSpec):
    id: str = Field(pattern=r"^[A-Za-z][A-Za-z0-9_-]*$")
    """The rule's name, unique in its file; part of the default deny code."""
    description: str = ""
    """What the rule is for (shown by explain and coverage)."""
    events: list[str] = Field(min_length=1)
    """Event types the rule applies to: exact names, '*' or 'family.*'."""
    when: str = Field(min_length=1)
    """CEL condition over event, facts, principal and headers; the rule's effect applies when true."""
    fallback: EffectSpec | None = None
    """The effect used instead of ask when the harness cannot ask (keep a deny here)."""

    @model_validator(mode="after")
    def _events(self) -> RuleSpec:
        check_events(self.events, ALL_EVENTS_SET, "rule")
        return self


class CaseSpec(_Strict):
    name: str = Field(min_length=1)
    """The test's name: shown in reports, matched by policy test --run."""
    event: dict[str, Any]
    """A partial AHP event; envelope fields, call, path, tool.origin and tool.input get defaults."""
    capabilities: dict[str, Any] | None = None
    """What the harness advertises (default: effects deny, ask, message, inject)."""
    principal: dict[str, Any] = Field(default_factory=dict)
    """The caller, as {name, attributes}, for rules that read principal."""
    headers: dict[str, str] = Field(default_factory=dict)
    """Request headers, for rules that read headers."""
    expect: list[dict[str, Any]]
    """The expected effects in order, each a subset of the actual one ([] means no effect)."""
    facts: dict[str, Any] | None = None
    """Optional: a subset the event's facts must contain (lists element by element)."""


class PolicyFileSpec(_Strict):
    namespace: str = Field("local.policy", pattern=REVERSE_DNS)
    """Reverse-DNS namespace: the default deny code prefix and the effects' extension key."""
    description: str = ""
    """What the file is for."""
    # validated rule by rule, so every broken rule is reported at once
    rules: list[dict[str, Any]] = Field(default_factory=list)
    tests: list[CaseSpec] = Field(default_factory=list)
    """Test cases run by ahp-gateway policy test, against this file's rules alone."""
