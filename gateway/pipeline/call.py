"""One upstream call inside the chain: the circuit breaker around the transport, and atomic
acceptance of the answer (protocol §6.3-6.4) before the breaker hears the result.

The breaker judges the *validated* answer, so an upstream that answers HTTP 200 with garbage
counts as failing; a failure the caller's own request caused (``not_granted``, or a ``timeout``
within a budget that earlier work of the same request cut short, :attr:`Call.cut_short`) is not
counted. Whatever happens (an answer, a failure, a transport bug, cancellation by a
disconnecting harness or a decided parallel chain) the permit is given back exactly once; a
cancelled call is not counted and a cancelled probe frees the probe slot.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from gateway.runtime import Route
from gateway.settle.accept import Expectation, accept
from gateway.settle.reply import Accepted, Failure, FailureClass, Reply
from gateway.upstream.base import Call
from gateway.upstream.circuit import NORMAL, REFUSED

log = logging.getLogger("ahp_gateway")
CircuitSink = Callable[[str, bool], None]


def charged(failure: Failure, call: Call) -> bool:
    """Whether ``failure`` counts toward the upstream's breaker: only its own faults do."""
    if failure.kind is FailureClass.TIMEOUT and call.cut_short:
        return False
    return failure.kind.counts_toward_breaker


async def call_upstream(
    route: Route,
    call: Call,
    expectation: Expectation,
    on_circuit: CircuitSink | None = None,
) -> Accepted | Failure:
    breaker = route.breaker
    permit = breaker.acquire() if breaker is not None else NORMAL
    if permit == REFUSED:
        return Failure(FailureClass.CIRCUIT_OPEN, "circuit open after consecutive failures")
    ok: bool | None = None
    try:
        try:
            outcome: Reply | Failure = await route.upstream.intercept(call)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a transport bug must not crash the request: fail by policy
            log.exception("upstream %s raised", route.hook_id)
            outcome = Failure(FailureClass.INTERNAL, exc.__class__.__name__)
        settled = accept(outcome, expectation) if isinstance(outcome, Reply) else outcome
        # A failure this request caused (an effect it did not grant, a timeout within a budget
        # its own earlier work cut short) says nothing about the upstream's health: not
        # counted, like a cancelled call (a probe frees its slot).
        ok = None if isinstance(settled, Failure) and not charged(settled, call) else not isinstance(settled, Failure)
        return settled
    finally:
        if breaker is not None and breaker.release(permit, ok):
            log.warning("circuit for %s is now %s", route.hook_id, "open" if breaker.is_open else "closed")
            if on_circuit is not None:
                on_circuit(route.hook_id, breaker.is_open)
