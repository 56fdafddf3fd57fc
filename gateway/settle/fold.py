"""Serial settlement of accepted answers (AHP-COMP-001, protocol §8.1-8.2).

Each accepted answer is folded over the current effective event and pending state exactly as a
harness applies it: modifications chain over the current value and invalidate an earlier candidate
and an earlier ``allow``; deny > ask > allow; stop wins over continue; messages, injections and
continuation instructions accumulate in order. Pure: no I/O, no clock.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gateway.settle.reply import Accepted

_OPTIONAL_KEYS = frozenset(("flow", "instructions", "injections"))


@dataclass(slots=True)
class ChainState:
    event: dict[str, Any]
    permission: str
    candidate: dict[str, Any] | None
    flow: str | None
    instructions: list[str]
    injections: list[dict[str, Any]]
    remaining: int | None
    initial_permission: str
    state_keys: frozenset[str]
    """Optional state keys the harness sent, echoed to upstreams even when empty."""
    modifications: list[dict[str, Any]] = field(default_factory=list)
    new_injections: list[dict[str, Any]] = field(default_factory=list)
    messages: list[dict[str, Any]] = field(default_factory=list)
    continues: list[dict[str, Any]] = field(default_factory=list)
    stop: dict[str, Any] | None = None
    deny: dict[str, Any] | None = None
    returned: bool = False
    decided_by: str | None = None

    @classmethod
    def start(cls, event: dict[str, Any], state: dict[str, Any] | None, remaining: int | None) -> ChainState:
        state = state or {"permission": "none", "candidate": None}
        flow = state.get("flow")
        return cls(
            event=event,
            permission=state["permission"],
            candidate=state["candidate"],
            flow=None if flow in (None, "none") else flow,
            instructions=list(state.get("instructions", ())),
            injections=list(state.get("injections", ())),
            remaining=remaining,
            initial_permission=state["permission"],
            state_keys=frozenset(state.keys() & _OPTIONAL_KEYS),
        )

    @property
    def halted(self) -> bool:
        """Decision-making stops on deny or flow stop (and on fail-closed, handled by the caller)."""
        return self.deny is not None or self.permission == "deny" or self.flow == "stop"

    def wire_state(self) -> dict[str, Any]:
        """The pending ``params.state`` for the next upstream."""
        state: dict[str, Any] = {"permission": self.permission, "candidate": self.candidate}
        if self.flow is not None or "flow" in self.state_keys:
            state["flow"] = self.flow or "none"
        if self.instructions or "instructions" in self.state_keys:
            state["instructions"] = self.instructions
        if self.injections or "injections" in self.state_keys:
            state["injections"] = self.injections
        return state

    def fold(self, accepted: Accepted, upstream: str) -> None:
        if accepted.event is not None:
            # A relevant change invalidates an earlier supplied result and approval (§8.2).
            self.event = accepted.event
            self.candidate = None
            self.returned = False
            if self.permission == "allow":
                self.permission = "none"
        consumed = False
        for effect in accepted.effects:
            kind = effect["type"]
            if kind == "modify":
                self.modifications.append(effect)
            elif kind == "deny":
                if self.deny is None:
                    self.deny = effect
                    self.decided_by = upstream
            elif kind == "ask":
                self.permission = "ask"
            elif kind == "allow":
                if self.permission != "ask":
                    self.permission = "allow"
            elif kind == "return":
                self.candidate = {"value": effect["value"]}
                self.returned = True
            elif kind == "message":
                self.messages.append(effect)
            elif kind == "inject":
                self.injections.append(effect)
                self.new_injections.append(effect)
            elif kind == "flow":
                if effect["operation"] == "continue":
                    consumed = True
                    self.continues.append(effect)
                    if "instruction" in effect:
                        self.instructions.append(effect["instruction"])
                    if self.flow != "stop":
                        self.flow = "continue"
                else:
                    if self.stop is None:
                        self.stop = effect
                        if self.decided_by is None:
                            self.decided_by = upstream
                    self.flow = "stop"
        if consumed and self.remaining is not None:
            self.remaining -= 1
