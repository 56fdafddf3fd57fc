"""The result of inbound authentication: a principal (a workload or client, never a human or a
role, capability-auth) or a refusal with its HTTP status, metric reason and challenge."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

ANONYMOUS_NAME = ""


@dataclass(frozen=True, slots=True)
class Principal:
    name: str
    attributes: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    method: str = "none"
    """How it was established: bearer, oauth, mtls or none (unauthenticated)."""

    @property
    def authenticated(self) -> bool:
        return self.method != "none"

    def as_cel(self) -> dict[str, Any]:
        """The ``principal`` CEL variable (and policy-case input): ``{name, attributes}``."""
        return {"name": self.name, "attributes": dict(self.attributes)}

    @property
    def scope_key(self) -> str:
        """What upload refs are scoped to: the principal's name, never the credential (one
        inbound mode is active at a time; unauthenticated callers share the empty name)."""
        return self.name


ANONYMOUS = Principal(ANONYMOUS_NAME)

REASONS = (
    "missing",
    "malformed",
    "unknown_token",
    "invalid_token",
    "expired",
    "wrong_issuer",
    "wrong_audience",
    "unknown_key",
    "insufficient_scope",
    "issuer_unavailable",
    "not_loopback",
)
"""The closed vocabulary of ``ahp_gateway_auth_failures_total{reason}``."""


@dataclass(frozen=True, slots=True)
class Refusal:
    status: int
    """401 (no or bad credentials) or 403 (authenticated but not permitted)."""
    reason: str
    """One of :data:`REASONS`; safe for logs and metrics (never contains the credential)."""
    challenge: str | None = None
    """The ``WWW-Authenticate`` value, if any."""

    def __post_init__(self) -> None:
        assert self.reason in REASONS, self.reason


def parse_principal(text: str) -> dict[str, Any]:
    """``explain --principal``: inline JSON or a file with ``{name, attributes}``."""
    import json
    from pathlib import Path

    source = text if text.lstrip().startswith("{") else Path(text).read_text(encoding="utf-8")
    try:
        value = json.loads(source)
    except json.JSONDecodeError as exc:
        raise ValueError(f"not JSON ({exc.msg})") from None
    if not isinstance(value, dict) or not isinstance(value.get("name"), str) or set(value) - {"name", "attributes"}:
        raise ValueError('expected {"name": "...", "attributes": {...}}')
    attributes = value.get("attributes", {})
    if not isinstance(attributes, dict):
        raise ValueError("attributes must be an object")
    return {"name": value["name"], "attributes": attributes}
