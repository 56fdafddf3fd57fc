"""The local policy backend: a chain entry that answers in-process from CEL rules.

It is just another upstream: its answer is a JSON-RPC response that goes through the same atomic
acceptance and settlement as a remote one. A rule evaluation error is an operational failure of
this backend, so its subscription's failure policy applies.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gateway.policy.facts import with_facts
from gateway.policy.library import Evaluation, Library
from gateway.routing.cel import Activation, Engine
from gateway.settle.outcome import Failure, FailureClass, Reply

EMPTY_VARIABLES: Mapping[str, Any] = {
    "method": "hooks/intercept",
    "protocolVersion": "draft",
    "capabilities": {},
    "principal": {},
    "headers": {},
}


class LocalPolicyUpstream:
    kind = "local"

    def __init__(self, hook_id: str, library: Library, engine: Engine) -> None:
        self.hook_id = hook_id
        self.library = library
        self._engine = engine

    def activation_for(
        self, request: dict[str, Any], variables: Mapping[str, Any] | None, shared: Activation | None
    ) -> Activation:
        """Reuse the request-wide activation when this backend sees the very same event object."""
        event = request["params"]["event"]
        if shared is not None and shared.values.get("event") is event:
            return shared
        if variables is None:
            values = {**EMPTY_VARIABLES, "capabilities": request["params"]["capabilities"]}
        else:
            values = dict(variables)
        values["event"] = event
        return self._engine.activation(values)

    def evaluate(self, request: dict[str, Any], activation: Activation, *, trace: bool = False) -> Evaluation:
        params = request["params"]
        activation = with_facts(self._engine, activation, self.library.uses_facts)
        return self.library.evaluate(params["event"]["type"], activation, params["capabilities"], trace=trace)

    async def intercept(
        self,
        request: dict[str, Any],
        timeout: float,
        headers: Mapping[str, str] | None = None,
        *,
        variables: Mapping[str, Any] | None = None,
        shared: Activation | None = None,
    ) -> Reply | Failure:
        result = self.evaluate(request, self.activation_for(request, variables, shared))
        if result.error is not None:
            return Failure(FailureClass.INTERNAL, f"rule {result.error.rule}: {result.error.result}")
        params = request["params"]
        return Reply(
            message={
                "jsonrpc": "2.0",
                "id": request["id"],
                "result": {"protocolVersion": params["protocolVersion"], "effects": result.effects},
            }
        )

    async def observe(
        self, message: dict[str, Any], timeout: float, headers: Mapping[str, str] | None = None
    ) -> Failure | None:
        return None

    async def aclose(self) -> None:
        return None
