"""Values an upstream call produces: a raw Reply, or a classified operational Failure.

Plain slotted dataclasses (not frozen: they are created per call on the hot path and a frozen
``__init__`` is several times slower); nobody mutates them after construction."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any


class FailureClass(StrEnum):
    """Operational failures (base/failure.md §9.1); also the metric label vocabulary."""

    TIMEOUT = "timeout"
    CONNECT = "connect"
    HTTP_STATUS = "http_status"
    INVALID_RESPONSE = "invalid_response"
    NOT_GRANTED = "not_granted"
    """Well-formed, but invalid for *this* request: an effect, modify target or operation, flow
    operation, inject delivery or continuation its capabilities did not grant, or an edit its own
    event cannot take. The caller's request caused it, so the failure policy applies to that
    request but the upstream's breaker is never charged (one caller must not open a breaker that
    every caller shares)."""
    RPC_ERROR = "rpc_error"
    AUTH = "auth"
    TOO_LARGE = "too_large"
    INTERNAL = "internal"
    CIRCUIT_OPEN = "circuit_open"
    UNENFORCEABLE = "unenforceable"
    """Not a fault but a decision the request cannot carry: the local policy backend denies and the
    harness advertised neither ``deny`` nor ``ask``. Never settled as fail-open (a deny must not
    become "no objection"): the chain ends and the harness gets -32003. Never charged to a breaker."""
    DEADLINE_EXHAUSTED = "deadline_exhausted"
    """Not called at all: earlier upstreams used the whole intercept deadline. Never charged to
    this upstream's breaker or latency; its failure policy still applies."""

    @property
    def counts_toward_breaker(self) -> bool:
        """Only the upstream's own faults open its circuit; a failure the caller's request caused,
        a call never made and a call refused by the open circuit itself do not."""
        return self not in _NOT_CHARGED


_NOT_CHARGED = frozenset(
    (FailureClass.NOT_GRANTED, FailureClass.UNENFORCEABLE, FailureClass.CIRCUIT_OPEN, FailureClass.DEADLINE_EXHAUSTED)
)


@dataclass(slots=True)
class Reply:
    """A transport-level success: the answer's bytes (http, stdio), or the effect list of the
    in-process policy backend (``effects``; it has no JSON-RPC envelope to check)."""

    body: bytes = b""
    effects: list[dict[str, Any]] | None = None


@dataclass(slots=True)
class Failure:
    """An operational failure; ``detail`` is for logs only and never carries secrets or bodies."""

    kind: FailureClass
    detail: str = ""


@dataclass(slots=True)
class Accepted:
    """A whole upstream answer that passed atomic validation against the capabilities sent.

    ``event`` is the staged event after this answer's modifications, or None when unchanged.
    """

    effects: list[dict[str, Any]]
    event: dict[str, Any] | None
