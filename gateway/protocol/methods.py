"""The AHP JSON-RPC method names, spelled once (protocol §4)."""

from __future__ import annotations

INTERCEPT = "hooks/intercept"
OBSERVE = "hooks/observe"
CAPABILITIES = "hooks/capabilities"
CONFIGURATION = "hooks/configuration"

REQUEST_METHODS = frozenset((INTERCEPT, CAPABILITIES, CONFIGURATION))
"""Methods that are requests (answered); ``hooks/observe`` is a notification."""
ALL_METHODS = frozenset((*REQUEST_METHODS, OBSERVE))
