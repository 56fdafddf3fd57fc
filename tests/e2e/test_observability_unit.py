"""Decision log, trace context propagation and optional OpenTelemetry spans (no Prometheus server
needed here; the live Prometheus checks are in tests/observability/)."""

from __future__ import annotations

import fcntl
import json
import os
import threading
import time

import pytest

# private helpers: the decision log's timestamp and line writer are tested directly, below the sink
from gateway.observability.decisions import _timestamp, _write_lines
from tests.support.client import post, wait_for
from tests.support.config import gateway_config, hook
from tests.support.events import intercept, result, tool_before

TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


async def test_decision_log_lines_are_redacted_by_default(gateway_factory, stub_factory, http, tmp_path, monkeypatch):
    monkeypatch.setenv("DECISION_TEST_TOKEN", "very-secret-token-value")
    deny = await stub_factory(
        lambda r: result(r, [{"type": "deny", "reason": "blocked: secret-ish reason", "code": "org.example.p.no"}])
    )
    entry = hook(
        "org.example.deny",
        deny.url,
        authentication={"type": "bearer", "tokenEnv": "DECISION_TEST_TOKEN"},
        when='event.tool.input.command.contains("push")',
    )
    log_file = tmp_path / "decisions.jsonl"
    gw = await gateway_factory(gateway_config([entry], log={"decisions": str(log_file)}))
    await post(http, gw.url, intercept(tool_before("git push --force /home/user/private")))
    await post(http, gw.url, intercept(tool_before("ls")))
    await wait_for(lambda: log_file.exists() and len(log_file.read_text().splitlines()) == 2)
    text = log_file.read_text()
    assert "very-secret-token-value" not in text and "/home/user/private" not in text and "secret-ish" not in text
    first, second = (json.loads(line) for line in text.splitlines())
    assert first["outcome"] == "deny" and first["decidedBy"] == "org.example.deny" and first["kind"] == "explicit"
    assert first["code"] == "org.example.p.no" and first["tool"] == "shell"
    assert first["upstreams"][0]["id"] == "org.example.deny" and first["upstreams"][0]["outcome"] == "deny"
    assert first["totalMs"] >= first["overheadMs"] >= 0 and len(first["traceId"]) == 32
    assert second["outcome"] == "no_effect" and second["upstreams"] == []
    assert "input" not in first


async def test_decision_log_content_and_sampling(gateway_factory, stub_factory, http, tmp_path):
    deny = await stub_factory(
        lambda r: (
            result(r, [{"type": "deny", "reason": "nope"}])
            if "rm" in r["params"]["event"]["tool"]["input"]["command"]
            else result(r, [])
        )
    )
    log_file = tmp_path / "d.jsonl"
    gw = await gateway_factory(
        gateway_config(
            [hook("org.example.a", deny.url)],
            log={"decisions": str(log_file), "includeContent": True, "sampleNoEffect": 0.0},
        )
    )
    for command in ("ls", "rm -rf /", "pwd"):
        await post(http, gw.url, intercept(tool_before(command)))
    await wait_for(lambda: log_file.exists() and log_file.read_text().count("\n") >= 1)
    await gw.stop()
    lines = [json.loads(x) for x in log_file.read_text().splitlines()]
    assert len(lines) == 1  # no_effect decisions sampled out entirely
    assert lines[0]["input"] == {"command": "rm -rf /"} and lines[0]["answer"][0]["reason"] == "nope"


async def test_trace_context_header_is_propagated_as_a_child(gateway_factory, stub_factory, http):
    up = await stub_factory()
    gw = await gateway_factory(gateway_config([hook("org.example.a", up.url), hook("org.example.b", up.url)]))
    body = json.dumps(intercept(tool_before()))
    async with http.post(
        gw.url,
        data=body,
        headers={"Content-Type": "application/json", "traceparent": TRACEPARENT, "tracestate": "vendor=1"},
    ) as resp:
        assert resp.status == 200
    parents = [h["traceparent"] for h in up.headers]
    assert len(parents) == 2 and len(set(parents)) == 2  # one child span per upstream call
    for value in parents:
        version, trace_id, span_id, flags = value.split("-")
        assert (version, trace_id, flags) == ("00", "0af7651916cd43dd8448eb211c80319c", "01")
        assert span_id != "b7ad6b7169203331"
    assert all(h["tracestate"] == "vendor=1" for h in up.headers)


async def test_trace_context_from_the_event_extension_and_event_untouched(gateway_factory, stub_factory, http):
    up = await stub_factory()
    gw = await gateway_factory(gateway_config([hook("org.example.a", up.url)]))
    event = tool_before()
    event["extensions"] = {"org.w3c.trace_context": {"traceparent": TRACEPARENT}}
    await post(http, gw.url, intercept(event))
    assert up.headers[0]["traceparent"].split("-")[1] == "0af7651916cd43dd8448eb211c80319c"
    assert up.received[0]["params"]["event"]["extensions"] == event["extensions"]


async def test_no_incoming_context_starts_a_trace_and_propagation_can_be_off(gateway_factory, stub_factory, http):
    up = await stub_factory()
    gw = await gateway_factory(gateway_config([hook("org.example.a", up.url)]), name="on.yaml")
    await post(http, gw.url, intercept(tool_before()))
    assert len(up.headers[0]["traceparent"].split("-")[1]) == 32
    off = await gateway_factory(
        gateway_config([hook("org.example.a", up.url)], tracing={"propagate": False}), name="off.yaml"
    )
    await post(http, off.url, intercept(tool_before()))
    assert "traceparent" not in up.headers[1]


async def test_opentelemetry_spans_when_enabled(gateway_factory, stub_factory, http):
    trace_sdk = pytest.importorskip("opentelemetry.sdk.trace")
    from opentelemetry import trace
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = trace_sdk.TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace._TRACER_PROVIDER_SET_ONCE._done = False  # tests only: allow installing a provider
    trace.set_tracer_provider(provider)
    up = await stub_factory()
    gw = await gateway_factory(gateway_config([hook("org.example.a", up.url)], tracing={"otel": True}))
    body = json.dumps(intercept(tool_before()))
    async with http.post(
        gw.url, data=body, headers={"Content-Type": "application/json", "traceparent": TRACEPARENT}
    ) as resp:
        assert resp.status == 200
    spans = {s.name: s for s in exporter.get_finished_spans()}
    request, upstream = spans["ahp intercept tool.before"], spans["ahp upstream org.example.a"]
    assert f"{request.context.trace_id:032x}" == "0af7651916cd43dd8448eb211c80319c"
    assert upstream.parent.span_id == request.context.span_id
    assert up.headers[0]["traceparent"].split("-")[2] == f"{upstream.context.span_id:016x}"
    assert request.attributes["ahp.outcome"] == "no_effect"


async def test_a_failing_telemetry_sink_never_breaks_a_decision(gateway_factory, stub_factory, http):
    from tests.support.telemetry import Capture

    class Broken(Capture):
        def settled(self, decision, trace=None):
            raise RuntimeError("sink bug")

    up = await stub_factory(lambda r: result(r, [{"type": "deny", "reason": "no"}]))
    gw = await gateway_factory(gateway_config([hook("org.example.a", up.url)]), telemetry=Broken())
    _, body = await post(http, gw.url, intercept(tool_before()))
    assert body["result"]["effects"][0]["reason"] == "no"


def test_a_batch_written_through_a_small_pipe_arrives_whole_and_in_order() -> None:
    """One ``writev`` per batch; a short write (here a 4 KiB pipe far smaller than the batch) is
    completed from where it stopped, so no line is lost, cut or reordered."""
    read, write = os.pipe()
    fcntl.fcntl(write, fcntl.F_SETPIPE_SZ, 4096)
    lines = [json.dumps({"n": n, "pad": "x" * (n % 700)}).encode() + b"\n" for n in range(700)]
    received = bytearray()

    def drain() -> None:
        while chunk := os.read(read, 1000):
            received.extend(chunk)

    reader = threading.Thread(target=drain)
    reader.start()
    _write_lines(write, lines)
    os.close(write)
    reader.join(10)
    os.close(read)
    assert bytes(received) == b"".join(lines)


def test_decision_timestamps_are_rfc3339_milliseconds_across_second_and_millisecond_edges() -> None:
    """The stamp is cached per millisecond and its prefix per second: every edge must show."""
    base = 1_796_000_000.0  # 2026-11-30T...
    for wall in (base, base + 0.0004, base + 0.001, base + 0.999, base + 1.0, base + 1.0015, base - 0.5):
        expected = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(int(wall))) + f".{int(wall * 1000) % 1000:03d}Z"
        assert _timestamp(wall) == expected
