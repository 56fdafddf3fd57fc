"""JSON (orjson) and JSON-RPC 2.0 envelopes: decoding, id rules and response encoding.

Numbers: JSON sets no range on numbers, but orjson refuses those beyond a double (``1e309``, an
integer of 310 digits) and reads integers beyond 64 bits as lossy doubles. Such documents are
parsed again with the standard library: integers stay exact ``int`` (``Decimal`` past 4000 digits,
where ``int`` parsing turns quadratic), floats beyond a double become ``Decimal`` with their exact
value. :func:`dumps` writes both back as the same number, so what upstreams receive is the number
the harness sent. ``NaN`` and ``Infinity`` are not JSON and stay parse errors.
"""

from __future__ import annotations

import json
import math
from decimal import Decimal
from typing import Any

import orjson

from gateway.protocol import jsonrpc
from gateway.protocol.errors import RpcCode

JSONDecodeError = json.JSONDecodeError
"""The parent of ``orjson.JSONDecodeError``: catching it catches both parsers' errors."""
Json = Any

_DIGITS = bytes(0x30 if 0x30 <= i <= 0x39 else i if i == 0x2D else 0x20 for i in range(256))
_LONG_RUN = b"0" * 20
_LONG_NEGATIVE = b"-" + b"0" * 19
"""20 digits in a row, or a minus and 19: an integer that may not fit 64 bits (orjson would read
it as a lossy double)."""
_RANGE_ERROR = "number is infinity"
_MAX_INT_DIGITS = 4000
_I64_MIN = -(2**63)
_U64_MAX = 2**64 - 1


def loads(data: bytes | str) -> Json:
    """Strict UTF-8 JSON (AHP-RPC-001): invalid UTF-8, lone surrogates and ``NaN`` are errors;
    every number JSON allows parses, exactly (see the module docstring)."""
    try:
        value = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        if not str(exc).startswith(_RANGE_ERROR):
            raise
        return _exact(data)
    raw = data if isinstance(data, bytes) else data.encode("utf-8", "surrogatepass")
    digits = raw.translate(_DIGITS)  # about 1 µs per KiB; a digit run inside a string is a false alarm
    if _LONG_RUN in digits or _LONG_NEGATIVE in digits:
        return _exact(data)
    return value


def _refuse(constant: str) -> Any:
    raise ValueError(f"{constant} is not a JSON value")


def _float(text: str) -> float | Decimal:
    value = float(text)
    return value if math.isfinite(value) else Decimal(text)


def _int(text: str) -> int | Decimal:
    return int(text) if len(text) <= _MAX_INT_DIGITS else Decimal(text)


def _exact(data: bytes | str) -> Json:
    """The standard-library parse, held to orjson's strictness (UTF-8 only, no lone surrogates)."""
    try:
        text = data.decode("utf-8") if isinstance(data, bytes) else data
        value = json.loads(text, parse_constant=_refuse, parse_float=_float, parse_int=_int)
        dumps(value)  # lone surrogates, which the standard library accepts in escapes, fail here
    except json.JSONDecodeError:
        raise
    except (ValueError, TypeError, RecursionError) as exc:
        raise JSONDecodeError(f"invalid JSON: {exc.__class__.__name__}", "", 0) from None
    return value


def _default(value: Any) -> Any:
    if isinstance(value, Decimal) and value.is_finite():
        return orjson.Fragment(str(value).encode())
    raise TypeError(f"Type is not JSON serializable: {type(value).__name__}")


def _fragments(value: Any) -> Any:
    """A copy of ``value`` with integers orjson cannot write as pre-serialised JSON fragments."""
    if type(value) is int and not _I64_MIN <= value <= _U64_MAX:
        return orjson.Fragment(str(value).encode())
    if isinstance(value, dict):
        return {k: _fragments(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_fragments(v) for v in value]
    return value


def dumps(value: Json) -> bytes:
    """orjson, plus the numbers :func:`loads` may produce that orjson cannot write itself."""
    try:
        return orjson.dumps(value, default=_default)
    except orjson.JSONEncodeError as exc:
        return _wide(value, exc, 0)


def dumps_line(value: Json) -> bytes:
    """:func:`dumps` with a trailing newline (a JSON Lines record), added by orjson itself."""
    try:
        return orjson.dumps(value, default=_default, option=orjson.OPT_APPEND_NEWLINE)
    except orjson.JSONEncodeError as exc:
        return _wide(value, exc, orjson.OPT_APPEND_NEWLINE)


def _wide(value: Json, exc: orjson.JSONEncodeError, option: int) -> bytes:
    """The second try, only for integers beyond 64 bits (the first one stays a direct call)."""
    if "64-bit" not in str(exc):
        raise exc
    return orjson.dumps(_fragments(value), default=_default, option=option)


def is_request_id(value: object) -> bool:
    """A JSON-RPC id as AHP allows it: a non-empty string or an integer (never a bool), of any
    length: an integer of more than 4000 digits is read as an integral ``Decimal`` (see the
    module docstring) and is an id all the same."""
    if isinstance(value, str):
        return bool(value)
    if type(value) is int:
        return True
    return type(value) is Decimal and value.is_finite() and value.as_tuple().exponent == 0


def error_body(request_id: Json, code: int, data: Json = None, message: str | None = None) -> bytes:
    return dumps(jsonrpc.error(request_id, code, data, message))


def result_body(request_id: Json, result: dict[str, Any]) -> bytes:
    return dumps(jsonrpc.result(request_id, result))


__all__ = [
    "JSONDecodeError",
    "RpcCode",
    "dumps",
    "error_body",
    "is_request_id",
    "loads",
    "result_body",
]
