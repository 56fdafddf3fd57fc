"""The local policy backend: a chain entry that answers in-process from CEL rules.

It is just another upstream behind the same :class:`~gateway.upstream.base.Call` interface. It
reuses the request's CEL activation (rebound when an earlier upstream modified the event) and
answers with its effect list directly: no JSON-RPC envelope is built and parsed again, but the
effects still go through the same grant checks and settlement as a remote answer. A rule
evaluation error is an operational failure of this backend, so its failure policy applies; a
deny the harness can carry neither as deny nor as ask is ``unenforceable``, which ends the chain
under any policy (the harness gets -32003).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gateway.policy.facts import with_facts
from gateway.policy.library import Evaluation, Library
from gateway.routing.cel import Activation, Engine
from gateway.routing.context import rebind, standalone
from gateway.settle.reply import Failure, FailureClass, Reply
from gateway.upstream.base import Call


class LocalPolicyUpstream:
    kind = "local"

    def __init__(self, hook_id: str, library: Library, engine: Engine) -> None:
        self.policy = self
        self.hook_id = hook_id
        self.library = library
        self._engine = engine

    def activation_for(self, call: Call) -> Activation:
        params = call.request["params"]
        event = params["event"]
        if call.activation is None:
            return standalone(self._engine, event, params["capabilities"], params["protocolVersion"])
        return rebind(self._engine, call.activation, event)

    def evaluate(self, call: Call, *, trace: bool = False) -> Evaluation:
        params = call.request["params"]
        activation = with_facts(self._engine, self.activation_for(call), self.library.uses_facts)
        return self.library.evaluate(params["event"]["type"], activation, params["capabilities"], trace=trace)

    async def intercept(self, call: Call) -> Reply | Failure:
        result = self.evaluate(call)
        if result.error is not None:
            return Failure(FailureClass.INTERNAL, f"rule {result.error.rule}: {result.error.result}")
        if result.unenforceable is not None:
            return Failure(
                FailureClass.UNENFORCEABLE, f"rule {result.unenforceable.rule} denies; neither deny nor ask advertised"
            )
        return Reply(effects=result.effects)

    async def observe(
        self, message: dict[str, Any], timeout: float, headers: Mapping[str, str] | None = None
    ) -> Failure | None:
        return None

    async def aclose(self) -> None:
        return None
