"""The harness-facing check (AHP-RPC-001, AHP-HTTP-001): request bytes in, one value out.

Pure: no I/O, no clock, no transport. Checks run in the SDK backend's order so the most useful
error wins: parse (-32700) → envelope (-32600) → method (-32601) → exact protocolVersion
(-32001) → event type for the method (-32002) → schema (-32602) → request id == event id
(-32602). Each server binding (HTTP, stdio, native adapters) maps the four results to its own
framing: :class:`Rejected` and :class:`Discovery` are answered, :class:`Notification` never is,
:class:`Intercept` goes on to the chain.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gateway.protocol import jsonrpc, wire
from gateway.protocol.errors import RpcCode
from gateway.protocol.events import INTERCEPTABLE_SET
from gateway.protocol.methods import CAPABILITIES, INTERCEPT, OBSERVE, REQUEST_METHODS
from gateway.protocol.schemas import Check, Schemas

UNKNOWN = "?"
"""Method label of a request whose method could not be read."""


@dataclass(slots=True)
class Rejected:
    """A JSON-RPC error answer. ``method`` is the metric label (``?`` or ``other`` when the
    method is unknown); ``data`` never carries the offending values."""

    id: Any
    code: int
    method: str
    data: Any = None
    message: str | None = None


@dataclass(slots=True)
class Notification:
    """No answer. ``observe`` holds a ``hooks/observe`` message with its raw body when it was
    one; ``reason`` labels a request method sent without an id."""

    observe: dict[str, Any] | None = None
    body: bytes = b""
    reason: str | None = None


@dataclass(slots=True)
class Discovery:
    """``hooks/capabilities`` or ``hooks/configuration``, validated."""

    id: Any
    method: str
    version: str


@dataclass(slots=True)
class Intercept:
    """A validated ``hooks/intercept`` request."""

    id: Any
    version: str
    event: dict[str, Any]
    event_type: str
    capabilities: dict[str, Any]
    state: dict[str, Any] | None
    body: bytes


Checked = Rejected | Notification | Discovery | Intercept


def where(check: Check, doc: object) -> dict[str, str] | None:
    """The first failing path and keyword (the specialised schema names the real field instead
    of the event union's ``oneOf``), never the value."""
    found = check.explain(doc)
    return None if found is None else {"path": found[0], "keyword": found[1]}


def _envelope(path: str, keyword: str) -> dict[str, str]:
    """``data`` of a -32600 answer: the member and the JSON Schema keyword it fails, in the shape
    of :func:`where` (never the value, which may be a secret the harness put in the wrong place)."""
    return {"path": path, "keyword": keyword}


def _envelope_problem(msg: dict[str, Any]) -> dict[str, str] | None:
    if msg.get(jsonrpc.MEMBER) != jsonrpc.VERSION:
        return _envelope(f"/{jsonrpc.MEMBER}", "required" if jsonrpc.MEMBER not in msg else "const")
    method = msg.get("method")
    if not isinstance(method, str) or not method:
        return _envelope("/method", "required" if "method" not in msg else ("type" if method != "" else "minLength"))
    if not isinstance(msg.get("params"), dict):
        return _envelope("/params", "required" if "params" not in msg else "type")
    return None


def check(body: bytes, versions: tuple[str, ...], schemas: Schemas) -> Checked:
    try:
        msg = wire.loads(body)
    except wire.JSONDecodeError:
        return Rejected(None, RpcCode.PARSE_ERROR, UNKNOWN)
    if not isinstance(msg, dict):
        # one object per body, never a batch
        return Rejected(None, RpcCode.INVALID_REQUEST, UNKNOWN, data=_envelope("", "type"))
    has_id = "id" in msg
    rid = msg.get("id")
    if has_id and not wire.is_request_id(rid):
        return Rejected(None, RpcCode.INVALID_REQUEST, UNKNOWN, data=_envelope("/id", "type"))
    method = msg.get("method")
    params = msg.get("params")
    problem = _envelope_problem(msg)
    if problem is not None:
        return Notification() if not has_id else Rejected(rid, RpcCode.INVALID_REQUEST, UNKNOWN, data=problem)
    assert isinstance(method, str) and isinstance(params, dict)
    if method == OBSERVE:
        if has_id:
            return Rejected(
                rid,
                RpcCode.INVALID_REQUEST,
                OBSERVE,
                data=_envelope("/id", "not"),
                message=f"{OBSERVE} is a notification",
            )
        return Notification(observe=msg, body=body)
    if method not in REQUEST_METHODS:
        return Notification() if not has_id else Rejected(rid, RpcCode.METHOD_NOT_FOUND, "other")
    if not has_id:
        return Notification(reason=method)  # a request method sent as a notification never gets a body
    version = params.get("protocolVersion")
    if version not in versions:
        return Rejected(rid, RpcCode.UNSUPPORTED_PROTOCOL_VERSION, method, data={"supported": list(versions)})
    if method != INTERCEPT:
        validator = schemas.capabilities_request if method == CAPABILITIES else schemas.configuration_request
        if not validator.ok(msg):
            return Rejected(rid, RpcCode.INVALID_PARAMS, method, data=where(validator, msg))
        return Discovery(rid, method, version)
    event = params.get("event")
    etype = event.get("type") if isinstance(event, dict) else None
    if isinstance(etype, str) and etype not in INTERCEPTABLE_SET:
        return Rejected(rid, RpcCode.UNSUPPORTED_EVENT, method)
    validator = schemas.request_for[etype] if isinstance(etype, str) else schemas.intercept_request
    if not validator.ok(msg):
        return Rejected(rid, RpcCode.INVALID_PARAMS, method, data=where(validator, msg))
    assert isinstance(event, dict) and isinstance(etype, str)
    if rid != event["id"] or type(rid) is not type(event["id"]):
        return Rejected(rid, RpcCode.INVALID_PARAMS, method, data={"reason": "request id must equal params.event.id"})
    return Intercept(rid, version, event, etype, params["capabilities"], params.get("state"), body)
