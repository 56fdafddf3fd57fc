"""Inbound authentication: who is calling the gateway (harness side), decided before any body
is read. One entry point, :func:`gateway.inbound.gate.Gate.authenticate`, returns a
:class:`~gateway.inbound.principal.Principal` or a :class:`~gateway.inbound.principal.Refusal`."""
