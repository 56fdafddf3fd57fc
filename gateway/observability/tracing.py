"""W3C trace context: read it from the harness request (``traceparent`` header, else the event's
``extensions["org.w3c.trace_context"]``), hand each upstream a child context in the
``traceparent`` header (the event itself is never rewritten), and optionally record OpenTelemetry
spans through opentelemetry-api (an SDK/exporter is the operator's choice; off by default)."""

from __future__ import annotations

import os
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gateway.protocol.headers import HeaderLines

_TRACEPARENT = re.compile(r"([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})")
_TRACESTATE = re.compile(r"[\x20-\x7e\t]{0,512}")
_VERSION_00_LENGTH = 55
TRACE_EXTENSION = "org.w3c.trace_context"
_POOL_BYTES = 4096


class _HexIds:
    """Random hex ids cut from one ``os.urandom`` read per 4 KiB: the OS generator (W3C Trace
    Context §3.2.2.3 asks for random trace ids) at the cost of a string slice per id. An
    all-zero id is invalid (§3.2.2.3, §3.2.2.4) and is never handed out."""

    __slots__ = ("_at", "_pool")

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        """Forget the pool (called in a forked child: workers must not hand out the same ids)."""
        self._pool = ""
        self._at = 0

    def take(self, digits: int) -> str:
        at = self._at
        if at + digits > len(self._pool):
            self._pool, at = os.urandom(_POOL_BYTES).hex(), 0
        self._at = at + digits
        value = self._pool[at : at + digits]
        return value if value.strip("0") else self.take(digits)

    def pair(self) -> tuple[str, str]:
        """A new trace id and span id (32 and 16 digits), cut from one take."""
        both = self.take(48)
        trace_id, span_id = both[:32], both[32:]
        return (trace_id, span_id) if trace_id.strip("0") and span_id.strip("0") else self.pair()


_ids = _HexIds()
os.register_at_fork(after_in_child=_ids.reset)


def parse_traceparent(value: object) -> tuple[str, str, str] | None:
    """(trace-id, parent-id, flags) of a valid W3C ``traceparent``, else None (a new trace).

    W3C Trace Context §3.2: lowercase hex only; version ``ff`` and all-zero ids are invalid;
    version ``00`` is exactly four fields; a later version is read as its first four fields, and
    whatever follows them must start with ``-`` (fields a future version may add)."""
    if not isinstance(value, str):
        return None
    value = value.strip(" \t")  # optional whitespace around an HTTP field value (RFC 9110 §5.5)
    match = _TRACEPARENT.fullmatch(value[:_VERSION_00_LENGTH])
    if match is None:
        return None
    version, trace_id, parent_id, flags = match.groups()
    rest = value[_VERSION_00_LENGTH:]
    if version == "ff" or (rest and (version == "00" or rest[0] != "-")):
        return None
    if trace_id == "0" * 32 or parent_id == "0" * 16:
        return None
    return trace_id, parent_id, flags


@dataclass(slots=True)
class TraceContext:
    trace_id: str
    parent_id: str
    flags: str
    state: str | None = None
    span: Any = None
    """The OpenTelemetry request span, when spans are on."""
    upstream_spans: dict[str, tuple[Any, int]] | None = None
    """Open upstream spans by call key, when spans are on."""


def from_request(headers: Mapping[str, str], event: Mapping[str, Any]) -> TraceContext:
    """The request's context: the ``traceparent`` header, else the event's trace extension, else
    a new trace. ``tracestate`` is read only beside a valid ``traceparent`` (W3C Trace Context
    §3.3: no tracestate without a parent) and kept only when it is a safe header value."""
    parsed = parse_traceparent(headers.get("traceparent"))
    if parsed is not None:
        return TraceContext(parsed[0], parsed[1], parsed[2], _state(headers.get("tracestate")))
    ext = event.get("extensions")
    carrier = ext.get(TRACE_EXTENSION) if isinstance(ext, dict) else None
    if isinstance(carrier, dict):
        parsed = parse_traceparent(carrier.get("traceparent"))
        if parsed is not None:
            return TraceContext(parsed[0], parsed[1], parsed[2], _state(carrier.get("tracestate")))
    trace_id, parent_id = _ids.pair()  # no incoming context: this request starts a trace
    return TraceContext(trace_id, parent_id, "01")


def _state(value: object) -> str | None:
    """``tracestate`` as it may be forwarded, else None (dropped, as W3C Trace Context §3.3.1.1
    allows). The event's carrier is the harness's JSON, not an HTTP field: a CR/LF there must not
    make every upstream call fail (a fail-open bypass), nor may a huge value get the upstream's
    431. So: printable ASCII only, at most 512 characters (what §3.3.1.5 asks a vendor to
    propagate)."""
    if isinstance(value, str) and _TRACESTATE.fullmatch(value):
        return value.strip(" \t") or None
    return None


def child_headers(ctx: TraceContext, span_id: str | None = None) -> HeaderLines:
    """The upstream's ``traceparent`` (a new span id under the request's trace) and
    ``tracestate``, with their header lines built once: every part is already checked."""
    parent = f"00-{ctx.trace_id}-{span_id or _ids.take(16)}-{ctx.flags}"
    headers = HeaderLines(traceparent=parent)
    if ctx.state:
        headers["tracestate"] = ctx.state
        headers.block = f"traceparent: {parent}\r\ntracestate: {ctx.state}\r\n".encode()
    else:
        headers.block = f"traceparent: {parent}\r\n".encode()
    return headers


class Spans:
    """OpenTelemetry spans for requests and upstream calls (no-op unless an SDK is installed)."""

    def __init__(self) -> None:
        from opentelemetry import trace
        from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

        self._trace = trace
        self._tracer = trace.get_tracer("ahp_gateway")
        self._span_context = SpanContext
        self._flags = TraceFlags
        self._non_recording = NonRecordingSpan

    def start_request(self, ctx: TraceContext, name: str) -> None:
        parent = self._span_context(
            trace_id=int(ctx.trace_id, 16),
            span_id=int(ctx.parent_id, 16),
            is_remote=True,
            trace_flags=self._flags(int(ctx.flags, 16)),
        )
        context = self._trace.set_span_in_context(self._non_recording(parent))
        ctx.span = self._tracer.start_span(name, context=context, kind=self._trace.SpanKind.SERVER)

    def start_upstream(self, ctx: TraceContext, key: str, upstream: str) -> str | None:
        if ctx.span is None:
            return None
        context = self._trace.set_span_in_context(ctx.span)
        span = self._tracer.start_span(f"ahp upstream {upstream}", context=context, kind=self._trace.SpanKind.CLIENT)
        if ctx.upstream_spans is None:
            ctx.upstream_spans = {}
        ctx.upstream_spans[key] = (span, time.time_ns())
        span_context = span.get_span_context()
        return f"{span_context.span_id:016x}" if span_context.is_valid else None

    def finish(self, ctx: TraceContext, attributes: Mapping[str, Any], steps: list[Any]) -> None:
        spans = ctx.upstream_spans or {}
        for record in steps:
            found = spans.pop(record.key, None)
            if found is None:
                continue
            span, started = found
            span.set_attribute("ahp.upstream.outcome", record.failure or record.outcome.value)
            span.end(end_time=started + int(record.latency * 1e9))
        for span, _ in spans.values():
            span.end()
        if ctx.span is not None:
            for key, value in attributes.items():
                if value is not None:
                    ctx.span.set_attribute(key, value)
            ctx.span.end()
