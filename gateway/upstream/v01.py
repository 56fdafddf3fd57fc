"""An upstream that speaks AHP 0.1 (``protocolVersion: "0.1"`` on its ``hooks`` entry).

It wraps the real transport (http or stdio): each draft request is put to the backend as a 0.1
request advertising only ``deny`` (:func:`gateway.protocol.v01.request_to_v01`), the answer is
validated against the 0.1 schemas as untrusted input (``effects: []`` or exactly one deny;
anything else is an operational failure under the subscription's policy) and handed to
settlement as the equivalent draft answer, so it settles in the same chain as draft backends.
A request 0.1 cannot express (an event other than ``tool.before``, a harness that did not
advertise deny) is an operational failure too, never a silent pass. Observations are not sent:
0.1 observation is not bridged.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from gateway.protocol import v01, wire
from gateway.settle.reply import Failure, FailureClass, Reply
from gateway.upstream.base import Call, Upstream


class V01Upstream:
    protocol_version = v01.VERSION
    policy = None
    """A 0.1 bridge is never evaluated in process (explain does not trace through it)."""

    def __init__(self, inner: Upstream) -> None:
        self.inner = inner
        self.kind = inner.kind
        self._schemas = v01.load()

    async def intercept(self, call: Call) -> Reply | Failure:
        try:
            translated = v01.request_to_v01(call.request)
        except v01.Unbridgeable as exc:
            return Failure(FailureClass.INTERNAL, str(exc))
        outcome = await self.inner.intercept(replace(call, request=translated))
        if isinstance(outcome, Failure):
            return outcome
        if outcome.effects is not None:  # an in-process backend has no 0.1 wire form to check
            return outcome
        try:
            message = wire.loads(outcome.body)
        except wire.JSONDecodeError:
            return Failure(FailureClass.INVALID_RESPONSE, "malformed JSON")
        if not isinstance(message, dict):
            return Failure(FailureClass.INVALID_RESPONSE, "not a JSON-RPC object")
        if "error" in message:
            return outcome  # settlement classifies it (an error is never a decision)
        if not self._schemas.answer_ok(message):
            where = self._schemas.explain_answer(message)
            return Failure(
                FailureClass.INVALID_RESPONSE, f"0.1 schema: {where[0]} ({where[1]})" if where else "0.1 schema"
            )
        return Reply(wire.dumps(v01.answer_to_draft(message)))

    async def observe(
        self, message: dict[str, Any], timeout: float, headers: Mapping[str, str] | None = None
    ) -> Failure | None:
        return None

    async def aclose(self) -> None:
        await self.inner.aclose()


def versioned(hook: Any, upstream: Upstream) -> Upstream:
    """``upstream`` as the gateway must speak to it (a hooks entry's ``protocolVersion``)."""
    return V01Upstream(upstream) if getattr(hook, "protocolVersion", v01.DRAFT) == v01.VERSION else upstream
