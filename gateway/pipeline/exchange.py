"""What one harness message produced: the answer for the binding and, in the same value, what
telemetry records about it (the :class:`~gateway.settle.ledger.Decision` of an intercept, the
rejection code, the observation status, ...).

The core returns it instead of reporting through side calls, so every consumer (metrics and the
decision log, ``explain``, ``replay``, benchmarks) reads the same value and none of them has to
stand in for a telemetry sink to learn the outcome.

A ``NamedTuple``, not a frozen dataclass: just as immutable, and built by one C call where a
frozen dataclass sets each of its nine fields through ``object.__setattr__`` (once per harness
message, about 1 % of an intercept's instructions). Change one with ``_replace``.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from gateway.settle.ledger import Decision


class Exchange(NamedTuple):
    answer: bytes | None
    """The response bytes; None for a notification (never answered)."""
    method: str = "?"
    """The request's method as the metrics label it (``?`` unreadable, ``other`` unknown)."""
    decision: Decision | None = None
    """The settled decision, when the message was an intercept that reached the chain stage."""
    rejected: str | None = None
    """``ahp_gateway_rejected_requests_total`` code: the JSON-RPC error code, or ``notification``
    for a request method sent without an id."""
    discovery: bool = False
    """A ``hooks/capabilities`` or ``hooks/configuration`` request that was answered."""
    observed: str | None = None
    """A ``hooks/observe`` notification: its status (queued, invalid, unrouted) or drop reason."""
    routed: tuple[str, ...] = ()
    """Hook ids the intercept was routed to (subscription and ``when`` matched)."""
    parallel_fallback: bool = False
    """``fanout: parallel`` ran serially because the capabilities were not parallel-safe."""
    trace: Any = None
    """The trace context ``Telemetry.begin`` returned for the intercept."""
