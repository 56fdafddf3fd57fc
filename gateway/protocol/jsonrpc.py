"""JSON-RPC 2.0 envelopes as plain dicts (AHP-RPC-001), spelled once.

Standard library only: the native adapters (the ``hook`` command starts once per tool call)
build and read envelopes without :mod:`gateway.protocol.wire` and its orjson; ``wire`` encodes
these same dicts.
"""

from __future__ import annotations

from typing import Any

from gateway.protocol.errors import MESSAGES

MEMBER = "jsonrpc"
VERSION = "2.0"


def request(request_id: Any, method: str, params: dict[str, Any]) -> dict[str, Any]:
    return {MEMBER: VERSION, "id": request_id, "method": method, "params": params}


def notification(method: str, params: dict[str, Any]) -> dict[str, Any]:
    return {MEMBER: VERSION, "method": method, "params": params}


def result(request_id: Any, value: dict[str, Any]) -> dict[str, Any]:
    return {MEMBER: VERSION, "id": request_id, "result": value}


def error(request_id: Any, code: int, data: Any = None, message: str | None = None) -> dict[str, Any]:
    """An error response; ``message`` defaults to the code's AHP message."""
    body: dict[str, Any] = {"code": int(code), "message": message or MESSAGES.get(code, "Error")}
    if data is not None:
        body["data"] = data
    return {MEMBER: VERSION, "id": request_id, "error": body}


def is_version(message: Any) -> bool:
    """Whether ``message`` is an object that says ``"jsonrpc": "2.0"``."""
    return isinstance(message, dict) and message.get(MEMBER) == VERSION
