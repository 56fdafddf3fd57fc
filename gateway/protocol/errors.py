"""JSON-RPC error codes used by AHP (base/errors.md) as named constants."""

from __future__ import annotations

from enum import IntEnum


class RpcCode(IntEnum):
    PARSE_ERROR = -32700
    INVALID_REQUEST = -32600
    METHOD_NOT_FOUND = -32601
    INVALID_PARAMS = -32602
    INTERNAL_ERROR = -32603
    UNSUPPORTED_PROTOCOL_VERSION = -32001
    UNSUPPORTED_EVENT = -32002
    BACKEND_UNAVAILABLE = -32003
    BACKEND_INTERNAL_ERROR = -32004


MESSAGES: dict[int, str] = {
    RpcCode.PARSE_ERROR: "Parse error",
    RpcCode.INVALID_REQUEST: "Invalid request",
    RpcCode.METHOD_NOT_FOUND: "Method not found",
    RpcCode.INVALID_PARAMS: "Invalid params",
    RpcCode.INTERNAL_ERROR: "Internal error",
    RpcCode.UNSUPPORTED_PROTOCOL_VERSION: "unsupported_protocol_version",
    RpcCode.UNSUPPORTED_EVENT: "unsupported_event",
    RpcCode.BACKEND_UNAVAILABLE: "backend_unavailable",
    RpcCode.BACKEND_INTERNAL_ERROR: "backend_internal_error",
}

SYNTHETIC_DENY_REASON = "Required policy backend unavailable"
"""AHP-FAIL-001: a generic local reason that exposes no network detail or credential."""
