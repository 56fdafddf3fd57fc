"""The CEL activation for one request: the only place that knows the declared variables, how
headers are exposed, the NUL guard, and which events need an activation at all.

Built once per request and shared by routing (``when``), the local policy backend and shadow
routes; an upstream that sees a modified event gets the same variables bound to that event
(:meth:`ContextBuilder.rebind`). Events that no expression or local backend reads get none, so
plain forwarding never pays for CEL.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gateway.protocol.methods import INTERCEPT, OBSERVE
from gateway.routing.cel import Activation, Derive, Engine, clean

_NUL_ESCAPE = b"\\u0000"
NO_PRINCIPAL: Mapping[str, Any] = {}
DERIVED = frozenset(("facts",))
"""Variables computed from ``event`` (only for the event types whose local rules read them)."""


class ContextBuilder:
    """Per snapshot: the engine, the header allow-list and the events that need CEL."""

    __slots__ = ("_allowed", "_derive", "_derive_events", "_engine", "intercept_events", "observe_needed")

    def __init__(
        self,
        engine: Engine,
        header_allowlist: frozenset[str],
        intercept_events: frozenset[str],
        observe_needed: bool,
        derive: Derive | None = None,
        derive_events: frozenset[str] = frozenset(),
    ) -> None:
        self._engine = engine
        self._allowed = header_allowlist
        self._derive = derive
        self._derive_events = derive_events
        """Event types whose activation carries the derived variables, computed once per request
        into the one activation (a local backend's rules then read it as it is)."""
        self.intercept_events = intercept_events
        """Event types whose intercepts need an activation (a ``when`` or a local backend)."""
        self.observe_needed = observe_needed
        """Whether any observe route has a ``when``."""

    def variables(
        self,
        method: str,
        version: str,
        capabilities: Mapping[str, Any],
        headers: Mapping[str, str] | None,
        principal: Mapping[str, Any] | None,
    ) -> dict[str, Any]:
        """The declared variables except ``event`` (docs/policies/index.md, "Routing with CEL"). The principal and
        the headers do not come from the body, whose NUL scan decides whether the event needs
        sanitising, so they are sanitised here (a claim ``admin\x00x`` must not read as
        ``admin``)."""
        allowed = self._allowed
        exposed = {k.lower(): v for k, v in headers.items() if k.lower() in allowed} if allowed and headers else {}
        return {
            "method": method,
            "protocolVersion": version,
            "capabilities": capabilities,
            "principal": clean(principal) if principal else NO_PRINCIPAL,
            "headers": clean(exposed) if exposed else exposed,
        }

    def for_intercept(
        self,
        event: dict[str, Any],
        version: str,
        capabilities: Mapping[str, Any],
        headers: Mapping[str, str] | None,
        principal: Mapping[str, Any] | None,
        raw: bytes | None,
    ) -> Activation | None:
        """The request's activation, or None when nothing evaluates CEL for this event type.
        ``raw`` is the request body: without a NUL escape in it the NUL scan is skipped."""
        if event["type"] not in self.intercept_events:
            return None
        values = self.variables(INTERCEPT, version, capabilities, headers, principal)
        values["event"] = event
        maybe_nul = raw is None or _NUL_ESCAPE in raw or b"\x00" in raw
        derive = self._derive if event["type"] in self._derive_events else None
        # derived from the sanitised event (a NUL must not cut a command short), on first use
        return self._engine.activation(values, maybe_nul=maybe_nul, derive=derive)

    def for_limits(
        self,
        method: str,
        event: dict[str, Any],
        version: str,
        capabilities: Mapping[str, Any],
        headers: Mapping[str, str] | None,
        principal: Mapping[str, Any] | None,
        raw: bytes | None,
        with_event: bool = True,
    ) -> Activation:
        """The activation a rate limit's ``key`` reads (the routing variables), for every event
        type: limits apply whether or not routing evaluates CEL. ``with_event`` False: no key
        reads ``event``, so it is left out (converting it for the engine is most of the cost)."""
        values = self.variables(method, version, capabilities, headers, principal)
        if with_event:
            values["event"] = event
        maybe_nul = raw is None or _NUL_ESCAPE in raw or b"\x00" in raw  # capabilities come from the body too
        return self._engine.activation(values, maybe_nul=maybe_nul)

    def for_observe(
        self, event: dict[str, Any], version: str, principal: Mapping[str, Any] | None = None
    ) -> Activation | None:
        if not self.observe_needed:
            return None
        values = self.variables(OBSERVE, version, {}, None, principal)
        values["event"] = event
        return self._engine.activation(values)

    def rebind(self, activation: Activation, event: dict[str, Any]) -> Activation:
        return rebind(self._engine, activation, event)


def standalone(engine: Engine, event: dict[str, Any], capabilities: Mapping[str, Any], version: str) -> Activation:
    """An activation outside any request (``policy test``, a local backend called alone)."""
    values = {
        "method": INTERCEPT,
        "protocolVersion": version,
        "capabilities": capabilities,
        "principal": NO_PRINCIPAL,
        "headers": {},
        "event": event,
    }
    return engine.activation(values)


def rebind(engine: Engine, activation: Activation, event: dict[str, Any]) -> Activation:
    """The same variables bound to another (modified) event; what was derived from the old
    event (``facts``) is dropped, to be derived again."""
    if activation.given.get("event") is event:
        return activation
    values = {k: v for k, v in activation.given.items() if k not in DERIVED}
    values["event"] = event
    return engine.activation(values)
