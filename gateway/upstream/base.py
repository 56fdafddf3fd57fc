"""The upstream seam, the same for every transport (http, stdio, local):
``intercept(call)`` → a :class:`Reply` or a classified :class:`Failure`, ``observe`` and ``aclose``.

A :class:`Call` is everything one upstream call needs, built once by the chain run: the
JSON-RPC request (event already projected for this subscription), the time it may take, the CEL
activation of the request (read only by the local backend) and the outbound headers (trace
context). Transports never see the snapshot, the chain or the harness connection.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from gateway.routing.cel import Activation
from gateway.settle.reply import Failure, Reply

if TYPE_CHECKING:  # policy/ imports this module: a run-time import would be a cycle
    from gateway.policy.backend import LocalPolicyUpstream


@dataclass(slots=True)
class Call:
    request: dict[str, Any]
    timeout: float
    """Seconds: min(the subscription's timeoutMs, what is left of the intercept deadline)."""
    activation: Activation | None = None
    headers: Mapping[str, str] | None = None
    """Extra outbound headers (W3C trace context); never credentials."""
    cut_short: bool = False
    """``timeout`` is well below what the configuration gives this upstream (min(timeoutMs,
    limits.deadlineMs)): earlier work of the same request used the rest of its deadline, so a
    timeout of this call is not the upstream's own fault and is not charged to its breaker."""


class Upstream(Protocol):
    kind: str

    @property
    def policy(self) -> LocalPolicyUpstream | None:
        """The in-process policy backend this upstream is, or None for a transport: the snapshot
        asks whether its rules read facts and ``explain`` traces its rules, without type checks."""

    async def intercept(self, call: Call) -> Reply | Failure: ...

    async def observe(
        self, message: dict[str, Any], timeout: float, headers: Mapping[str, str] | None = None
    ) -> Failure | None: ...

    async def aclose(self) -> None: ...
