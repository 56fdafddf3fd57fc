"""W3C trace context: read it from the harness request (``traceparent`` header, else the event's
``extensions["org.w3c.trace_context"]``), hand each upstream a child context in the
``traceparent`` header (the event itself is never rewritten), and optionally record OpenTelemetry
spans through opentelemetry-api (an SDK/exporter is the operator's choice; off by default)."""

from __future__ import annotations

import random
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

_bits = random.getrandbits
"""Ids only need to be unique, not secret; the seeded Mersenne Twister avoids a syscall per id."""
_TRACEPARENT = re.compile(r"([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})")
_VERSION_00_LENGTH = 55
TRACE_EXTENSION = "org.w3c.trace_context"


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
    upstream_spans: dict[str, tuple[Any, int]] = field(default_factory=dict)


def from_request(headers: Mapping[str, str], event: Mapping[str, Any]) -> TraceContext:
    parsed = parse_traceparent(headers.get("traceparent"))
    state = headers.get("tracestate")
    if parsed is None:
        ext = event.get("extensions")
        carrier = ext.get(TRACE_EXTENSION) if isinstance(ext, dict) else None
        if isinstance(carrier, dict):
            parsed = parse_traceparent(carrier.get("traceparent"))
            state = carrier.get("tracestate") if isinstance(carrier.get("tracestate"), str) else None
    if parsed is None:  # no incoming context: this request starts a trace
        return TraceContext(f"{_bits(128):032x}", f"{_bits(64):016x}", "01")
    return TraceContext(parsed[0], parsed[1], parsed[2], state)


def child_headers(ctx: TraceContext, span_id: str | None = None) -> dict[str, str]:
    headers = {"traceparent": f"00-{ctx.trace_id}-{span_id or f'{_bits(64):016x}'}-{ctx.flags}"}
    if ctx.state:
        headers["tracestate"] = ctx.state
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
        ctx.upstream_spans[key] = (span, time.time_ns())
        span_context = span.get_span_context()
        return f"{span_context.span_id:016x}" if span_context.is_valid else None

    def finish(self, ctx: TraceContext, attributes: Mapping[str, Any], steps: list[Any]) -> None:
        for record in steps:
            found = ctx.upstream_spans.pop(record.key, None)
            if found is None:
                continue
            span, started = found
            span.set_attribute("ahp.upstream.outcome", record.failure or record.outcome.value)
            span.end(end_time=started + int(record.latency * 1e9))
        for span, _ in ctx.upstream_spans.values():
            span.end()
        if ctx.span is not None:
            for key, value in attributes.items():
                if value is not None:
                    ctx.span.set_attribute(key, value)
            ctx.span.end()
