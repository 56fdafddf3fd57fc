"""JSON (orjson) and JSON-RPC 2.0 envelopes: decoding, id rules and response encoding."""

from __future__ import annotations

from typing import Any

import orjson

from gateway.protocol.errors import MESSAGES, RpcCode

JSONDecodeError = orjson.JSONDecodeError
Json = Any


def loads(data: bytes | str) -> Json:
    """Strict UTF-8 JSON (AHP-RPC-001): invalid UTF-8, NaN and duplicate-free parsing via orjson."""
    return orjson.loads(data)


def dumps(value: Json) -> bytes:
    return orjson.dumps(value)


def is_request_id(value: object) -> bool:
    """A JSON-RPC id as AHP allows it: a non-empty string or an integer (never a bool)."""
    if isinstance(value, str):
        return bool(value)
    return type(value) is int


def error_body(request_id: Json, code: int, data: Json = None, message: str | None = None) -> bytes:
    error: dict[str, Any] = {"code": int(code), "message": message or MESSAGES.get(code, "Error")}
    if data is not None:
        error["data"] = data
    return orjson.dumps({"jsonrpc": "2.0", "id": request_id, "error": error})


def result_body(request_id: Json, result: dict[str, Any]) -> bytes:
    return orjson.dumps({"jsonrpc": "2.0", "id": request_id, "result": result})


__all__ = [
    "JSONDecodeError",
    "RpcCode",
    "dumps",
    "error_body",
    "is_request_id",
    "loads",
    "result_body",
]
