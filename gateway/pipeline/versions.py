"""Version bridging at the harness edge: bytes in, an exchange out, around the draft pipeline.

A request whose ``params.protocolVersion`` is ``"0.1"`` (accepted only when ``protocolVersions``
lists it) is checked in the order the draft front end uses (-32601 for methods 0.1 does not have,
-32002 for events other than ``tool.before``, -32602 for the 0.1 schema and for request id !=
event id), translated to draft advertising only ``deny``, run through the normal pipeline, and
answered in 0.1: ``effects: []`` or exactly one deny (AHP-DEC-001). Everything else, 0.1
notifications included (0.1 observation is not bridged; the engine drops them as invalid),
passes through unchanged. The common case costs one substring test: only bodies containing
``"0.1"`` or a ``\\u`` escape are parsed here.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from gateway.pipeline.exchange import Exchange
from gateway.protocol import jsonrpc, v01, wire
from gateway.protocol.errors import RpcCode
from gateway.protocol.methods import INTERCEPT, OBSERVE

log = logging.getLogger("ahp_gateway")
Inner = Callable[[bytes, Mapping[str, str] | None, Mapping[str, Any] | None], Awaitable[Exchange]]
"""The draft request path (``Gateway.handle_draft``)."""


def maybe_v01(body: bytes) -> bool:
    """Cheap pre-test: only such bodies can hold a 0.1 request."""
    return b'"0.1"' in body or b"\\u" in body


class VersionBridge:
    def __init__(self, inner: Inner, *, preload: bool) -> None:
        self.inner = inner
        if preload:
            v01.load()  # a tampered or missing 0.1 schema stops the start, not the first request

    async def handle(
        self, body: bytes, headers: Mapping[str, str] | None = None, principal: Mapping[str, Any] | None = None
    ) -> Exchange:
        """``body`` was pre-tested with :func:`maybe_v01` and 0.1 is an accepted version. A
        translated intercept keeps the draft exchange's decision, with the 0.1 answer."""
        try:
            message = wire.loads(body)
        except wire.JSONDecodeError:
            message = None
        params = message.get("params") if isinstance(message, dict) else None
        if (
            not jsonrpc.is_version(message)
            or not isinstance(params, dict)
            or params.get("protocolVersion") != v01.VERSION
            or not wire.is_request_id(message.get("id"))
        ):
            return await self.inner(body, headers, principal)  # not a 0.1 request: the engine decides
        rid = message["id"]
        method = message.get("method")
        if method != INTERCEPT:
            if not isinstance(method, str) or method == OBSERVE:
                return await self.inner(body, headers, principal)
            return self._reject(rid, RpcCode.METHOD_NOT_FOUND, "other", {"reason": f"{method} is not part of 0.1"})
        schemas = v01.load()
        event = params.get("event")
        etype = event.get("type") if isinstance(event, dict) else None
        if isinstance(etype, str) and etype != "tool.before":
            return self._reject(rid, RpcCode.UNSUPPORTED_EVENT, INTERCEPT)
        check = schemas.intercept_request
        if not check.ok(message):
            where = check.explain(message)
            return self._reject(
                rid, RpcCode.INVALID_PARAMS, INTERCEPT, where and {"path": where[0], "keyword": where[1]}
            )
        assert isinstance(event, dict)
        if rid != event["id"] or type(rid) is not type(event["id"]):
            return self._reject(
                rid, RpcCode.INVALID_PARAMS, INTERCEPT, {"reason": "request id must equal params.event.id"}
            )
        draft = await self.inner(wire.dumps(v01.request_to_draft(message)), headers, principal)
        payload = draft.answer
        if payload is None:
            return draft
        try:
            answer = v01.answer_to_v01(wire.loads(payload))
        except (ValueError, KeyError, TypeError):
            answer = None
        if answer is not None and ("error" in answer or schemas.answer_ok(answer)):
            return draft._replace(answer=wire.dumps(answer))
        log.error("a draft answer could not be expressed in 0.1 for %r", rid)  # a bug: never a bad answer
        return draft._replace(answer=wire.error_body(rid, RpcCode.INTERNAL_ERROR))

    def _reject(self, rid: Any, code: int, method: str, data: Any = None) -> Exchange:
        return Exchange(wire.error_body(rid, code, data), method, rejected=str(int(code)))
