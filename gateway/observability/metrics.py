"""Every Prometheus metric the gateway exports, in its own registry, with bounded label sets.

Labels only take values from closed vocabularies (methods, event types, outcome enums) or from
the configuration (hook ids, CEL expression ids); deny codes chosen by upstreams are capped per
upstream. With several worker processes the prometheus-client multiprocess mode aggregates all
workers (``PROMETHEUS_MULTIPROC_DIR``), so any worker's /metrics shows the whole pod.
"""

from __future__ import annotations

import itertools
import os
import platform
import time
from bisect import bisect_left
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, disable_created_metrics, generate_latest
from prometheus_client import multiprocess as _multiprocess
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from gateway import __version__
from gateway.build import facts_build
from gateway.observability import process
from gateway.protocol.events import ALL_EVENTS_SET
from gateway.protocol.methods import ALL_METHODS, OBSERVE
from gateway.upstream import stdio as _stdio

BUCKETS = (0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
MAX_CODES_PER_UPSTREAM = 50
disable_created_metrics()  # type: ignore[no-untyped-call]  # the *_created series double the series count and nobody queries them


def multiprocess_dir() -> str | None:
    return os.environ.get("PROMETHEUS_MULTIPROC_DIR") or None


def event_label(event_type: str | None) -> str:
    return event_type if event_type in ALL_EVENTS_SET else "other"


def method_label(method: str) -> str:
    return method if method in ALL_METHODS else "other"


@dataclass(frozen=True)
class Spec:
    """One metric family: the single definition both back ends and the docs tests read."""

    attr: str
    kind: str
    """counter, gauge or histogram"""
    name: str
    help: str
    labels: tuple[str, ...] = ()
    multiprocess_mode: str = "livesum"
    sampled: bool = False
    """Read from the process at scrape time (process metrics), never updated by the gateway."""


SPECS: tuple[Spec, ...] = (
    Spec(
        "requests",
        "counter",
        "ahp_gateway_requests_total",
        "Harness requests by method, event type and outcome.",
        ("method", "event_type", "outcome"),
    ),
    Spec(
        "native_requests",
        "counter",
        "ahp_gateway_native_requests_total",
        "Intercepts from native hook adapters by harness, event type and outcome.",
        ("harness", "event_type", "outcome"),
    ),
    Spec(
        "rejected",
        "counter",
        "ahp_gateway_rejected_requests_total",
        "Harness requests answered with a JSON-RPC error, by method and code.",
        ("method", "code"),
    ),
    Spec(
        "duration",
        "histogram",
        "ahp_gateway_request_duration_seconds",
        "End-to-end intercept latency inside the gateway.",
        ("method", "event_type"),
    ),
    Spec(
        "overhead",
        "histogram",
        "ahp_gateway_overhead_duration_seconds",
        "Intercept latency minus time spent waiting on upstreams.",
        ("method", "event_type"),
    ),
    Spec(
        "upstream_duration",
        "histogram",
        "ahp_gateway_upstream_duration_seconds",
        "Latency of one upstream intercept call.",
        ("upstream", "transport"),
    ),
    Spec(
        "upstream_calls",
        "counter",
        "ahp_gateway_upstream_calls_total",
        "Upstream intercept calls by outcome (ok, deny or a failure class).",
        ("upstream", "outcome"),
    ),
    Spec(
        "denials",
        "counter",
        "ahp_gateway_denials_total",
        "Denials returned to harnesses by deciding upstream, code and kind (explicit or synthetic).",
        ("upstream", "code", "kind"),
    ),
    Spec(
        "fail_open",
        "counter",
        "ahp_gateway_fail_open_skips_total",
        "Upstream failures skipped under fail-open, by upstream and failure class.",
        ("upstream", "reason"),
    ),
    Spec(
        "route_matches",
        "counter",
        "ahp_gateway_route_matches_total",
        "Intercepts routed to a hooks entry (subscription and when matched).",
        ("hook",),
    ),
    Spec(
        "cel_errors",
        "counter",
        "ahp_gateway_cel_errors_total",
        "CEL evaluation errors by expression id.",
        ("expression",),
    ),
    Spec(
        "parallel_fallbacks",
        "counter",
        "ahp_gateway_parallel_fallbacks_total",
        "Requests run serially although fanout is parallel (capabilities can change state).",
        (),
    ),
    Spec(
        "shadow",
        "counter",
        "ahp_gateway_shadow_verdicts_total",
        "Verdicts of shadow upstreams (never enforced).",
        ("upstream", "verdict"),
    ),
    Spec(
        "observe_received",
        "counter",
        "ahp_gateway_observe_notifications_total",
        f"{OBSERVE} notifications by status (queued, invalid, unrouted, dropped).",
        ("status",),
    ),
    Spec(
        "observe_deliveries",
        "counter",
        "ahp_gateway_observe_deliveries_total",
        "Observation deliveries to upstreams by outcome.",
        ("upstream", "outcome"),
    ),
    Spec(
        "observe_drops",
        "counter",
        "ahp_gateway_observe_drops_total",
        "Observations dropped before delivery, by reason.",
        ("reason",),
    ),
    Spec(
        "observe_queue", "gauge", "ahp_gateway_observe_queue_depth", "Observations waiting for delivery.", (), "livesum"
    ),
    Spec("inflight", "gauge", "ahp_gateway_inflight_requests", "Harness requests being processed.", (), "livesum"),
    Spec(
        "reloads",
        "counter",
        "ahp_gateway_config_reloads_total",
        "Configuration reload attempts by result.",
        ("result",),
    ),
    Spec(
        "last_reload",
        "gauge",
        "ahp_gateway_config_last_success_timestamp_seconds",
        "Unix time of the last configuration that loaded successfully.",
        (),
        "max",
    ),
    Spec(
        "config_ok",
        "gauge",
        "ahp_gateway_config_last_reload_successful",
        "1 when the last reload attempt succeeded, 0 when it failed.",
        (),
        "min",
    ),
    Spec(
        "circuit_open",
        "gauge",
        "ahp_gateway_upstream_circuit_open",
        "1 while an upstream's circuit breaker is open (calls fail fast).",
        ("upstream",),
        "livemax",
    ),
    Spec(
        "pool_unready",
        "gauge",
        "ahp_gateway_stdio_pool_unready",
        "1 while a persistent stdio upstream has no child that ever became ready to answer.",
        ("upstream",),
        "livemax",
    ),
    Spec(
        "credential_unresolved",
        "gauge",
        "ahp_gateway_upstream_credential_unresolved",
        "1 while an upstream's configured credential cannot be resolved (token variable unset, token or "
        "secret file missing or empty); /readyz is false meanwhile.",
        ("upstream",),
        "livemax",
    ),
    Spec(
        "stderr_dropped",
        "counter",
        "ahp_gateway_stdio_stderr_dropped_bytes_total",
        "Bytes of stdio children's stderr read and dropped unlogged (rate limit).",
        ("upstream",),
    ),
    Spec(
        "connections_open",
        "gauge",
        "ahp_gateway_open_connections",
        "Open client connections per listener (main or admin).",
        ("listener",),
        "livesum",
    ),
    Spec(
        "connections_closed",
        "counter",
        "ahp_gateway_connections_closed_total",
        "Client connections closed by a limit (limit, header_timeout, body_timeout).",
        ("listener", "reason"),
    ),
    Spec(
        "decision_log_drops",
        "counter",
        "ahp_gateway_decision_log_drops_total",
        "Decision log lines dropped because the writer fell behind.",
        (),
    ),
    Spec(
        "auth_failures",
        "counter",
        "ahp_gateway_auth_failures_total",
        "Harness requests and uploads refused by inbound authentication, by reason.",
        ("reason",),
    ),
    Spec(
        "uploads",
        "counter",
        "ahp_gateway_uploads_total",
        "Uploads to the gateway's receiver by outcome (stored or a refusal reason).",
        ("outcome",),
    ),
    Spec(
        "upload_bytes",
        "gauge",
        "ahp_gateway_upload_stored_bytes",
        "Bytes of uploads held for reference, by tier (memory or spool).",
        ("tier",),
        "livesum",
    ),
    Spec(
        "upstream_uploads",
        "counter",
        "ahp_gateway_upstream_uploads_total",
        "Re-uploads of attachment bytes to upstream receivers, by upstream and outcome.",
        ("upstream", "outcome"),
    ),
    Spec(
        "rate_limited",
        "counter",
        "ahp_gateway_rate_limited_total",
        "Intercepts answered -32003 and observations dropped by a rate limit, by limit id.",
        ("limit",),
    ),
    Spec(
        "state_seconds",
        "histogram",
        "ahp_gateway_state_seconds",
        "Latency of one state.redis operation that answered, by operation.",
        ("op",),
    ),
    Spec(
        "state_errors",
        "counter",
        "ahp_gateway_state_errors_total",
        "state.redis operations that failed or were not tried (Redis down, timeout), by operation.",
        ("op",),
    ),
    Spec(
        "build_info",
        "gauge",
        "ahp_gateway_build_info",
        "Build information (value is always 1); facts: compiled (mypyc) or interpreted.",
        ("version", "python", "facts"),
        "max",
    ),
    Spec(
        "process_cpu",
        "counter",
        "ahp_gateway_process_cpu_seconds_total",
        "CPU time (user and system) of one gateway process.",
        ("pid",),
        sampled=True,
    ),
    Spec(
        "process_rss",
        "gauge",
        "ahp_gateway_process_resident_memory_bytes",
        "Resident memory of one gateway process.",
        ("pid",),
        sampled=True,
    ),
    Spec(
        "process_fds",
        "gauge",
        "ahp_gateway_process_open_fds",
        "Open file descriptors of one gateway process.",
        ("pid",),
        sampled=True,
    ),
    Spec(
        "process_max_fds",
        "gauge",
        "ahp_gateway_process_max_fds",
        "File descriptor limit of one gateway process.",
        ("pid",),
        sampled=True,
    ),
    Spec(
        "process_start",
        "gauge",
        "ahp_gateway_process_start_time_seconds",
        "Start time of one gateway process (Unix seconds).",
        ("pid",),
        sampled=True,
    ),
)


class _Child:
    """A counter or gauge value. The event loop is the only writer, so no lock is needed."""

    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = 0.0

    def inc(self, amount: float = 1.0) -> None:
        self.value += amount

    def set(self, value: float) -> None:
        self.value = float(value)


class _HistogramChild:
    __slots__ = ("buckets", "sum")

    def __init__(self) -> None:
        self.buckets = [0] * (len(BUCKETS) + 1)
        self.sum = 0.0

    def observe(self, amount: float) -> None:
        self.buckets[bisect_left(BUCKETS, amount)] += 1  # ``le`` bounds are inclusive
        self.sum += amount


class _Family:
    """Single-process metric family: plain Python numbers, exported by :class:`_Collector` at
    scrape time. Per-request updates are a dict lookup and an add (prometheus-client takes a
    lock and, for histograms, scans every bucket in Python)."""

    def __init__(self, spec: Spec) -> None:
        self.spec = spec
        self._name = spec.name.removesuffix("_total") if spec.kind == "counter" else spec.name
        self._type = spec.kind
        self._labelnames = spec.labels
        self._children: dict[tuple[str, ...], Any] = {}
        self._factory = _HistogramChild if spec.kind == "histogram" else _Child
        if not spec.labels:
            self.labels()  # label-less series exist from the start, as with prometheus-client

    def labels(self, *values: str) -> Any:
        found = self._children.get(values)
        if found is None:
            found = self._children[values] = self._factory()
        return found

    def remove(self, *values: str) -> None:
        self._children.pop(values, None)

    def inc(self, amount: float = 1.0) -> None:
        self.labels().inc(amount)

    def set(self, value: float) -> None:
        self.labels().set(value)

    def observe(self, amount: float) -> None:
        self.labels().observe(amount)


class _Collector:
    def __init__(self, families: list[_Family]) -> None:
        self._families = families

    def collect(self) -> Iterator[Any]:
        bounds = [repr(b) for b in BUCKETS] + ["+Inf"]
        for family in self._families:
            spec = family.spec
            items = list(family._children.items())
            if spec.kind == "counter":
                out: Any = CounterMetricFamily(family._name, spec.help, labels=spec.labels)
                for values, child in items:
                    out.add_metric(values, child.value)
            elif spec.kind == "gauge":
                out = GaugeMetricFamily(spec.name, spec.help, labels=spec.labels)
                for values, child in items:
                    out.add_metric(values, child.value)
            else:
                out = HistogramMetricFamily(spec.name, spec.help, labels=spec.labels)
                for values, child in items:
                    cumulative = list(itertools.accumulate(child.buckets))
                    out.add_metric(values, list(zip(bounds, cumulative, strict=True)), child.sum)
            yield out


def _prometheus_family(spec: Spec, registry: CollectorRegistry) -> Any:
    if spec.kind == "counter":
        return Counter(spec.name, spec.help, spec.labels, registry=registry)
    if spec.kind == "gauge":
        mode: Any = spec.multiprocess_mode
        return Gauge(spec.name, spec.help, spec.labels, registry=registry, multiprocess_mode=mode)
    return Histogram(spec.name, spec.help, spec.labels, buckets=BUCKETS, registry=registry)


class Metrics:
    """Metric families plus a cache of bound children (label lookups are not free).

    One process: lock-free families exported by a custom collector. Several workers
    (``PROMETHEUS_MULTIPROC_DIR`` set): prometheus-client's multiprocess values, aggregated across
    workers at scrape time. Both expose the same ``labels()/inc()/set()/observe()`` API.
    """

    requests: Any
    native_requests: Any
    rejected: Any
    duration: Any
    overhead: Any
    upstream_duration: Any
    upstream_calls: Any
    denials: Any
    fail_open: Any
    route_matches: Any
    cel_errors: Any
    parallel_fallbacks: Any
    shadow: Any
    observe_received: Any
    observe_deliveries: Any
    observe_drops: Any
    observe_queue: Any
    inflight: Any
    reloads: Any
    last_reload: Any
    config_ok: Any
    circuit_open: Any
    pool_unready: Any
    credential_unresolved: Any
    stderr_dropped: Any
    connections_open: Any
    connections_closed: Any
    decision_log_drops: Any
    auth_failures: Any
    uploads: Any
    upload_bytes: Any
    upstream_uploads: Any
    rate_limited: Any
    state_seconds: Any
    state_errors: Any
    build_info: Any
    process_cpu: Any
    process_rss: Any
    process_fds: Any
    process_max_fds: Any
    process_start: Any

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry(auto_describe=True)
        directory = multiprocess_dir()
        self.multiprocess = directory is not None
        self._publisher: process.Publisher | None = None
        self._circuit_hooks: set[str] = set()
        self._credential_hooks: set[str] = set()
        if directory is not None:
            for spec in SPECS:
                if spec.sampled:  # exported from every worker's file by process.FilesCollector
                    setattr(self, spec.attr, _Family(spec))
                else:
                    setattr(self, spec.attr, _prometheus_family(spec, self.registry))
            self._publisher = process.Publisher(directory)
        else:
            families = [_Family(spec) for spec in SPECS]
            for family in families:
                setattr(self, family.spec.attr, family)
            self.registry.register(_Collector(families))
        self.build_info.labels(__version__, platform.python_version(), facts_build()).set(1)
        self.reloads.labels("success")
        self.reloads.labels("failure")
        self.observe_drops.labels("queue_full")
        for tier in ("memory", "spool"):
            self.upload_bytes.labels(tier).set(0)
        self.config_ok.set(1)
        self.last_reload.set(time.time())
        self._children: dict[tuple[Any, ...], Any] = {}
        self._codes: dict[str, set[str]] = {}
        _stdio.WATCHERS.add(self)  # stdio transports hold no metrics object: they notify watchers

    def stdio_stderr_dropped(self, upstream: str, nbytes: int) -> None:
        self.child(self.stderr_dropped, upstream).inc(nbytes)

    def stdio_unready(self, upstream: str, unready: bool) -> None:
        self.child(self.pool_unready, upstream).set(1 if unready else 0)

    def credentials(self, unresolved: Iterable[str]) -> None:
        """Set the credential gauges: 1 for ``unresolved`` upstreams, 0 for those set before."""
        found = set(unresolved)
        for hook in found | self._credential_hooks:
            self.child(self.credential_unresolved, hook).set(1 if hook in found else 0)
        self._credential_hooks |= found

    def child(self, family: Any, *labels: str) -> Any:
        """The bound child for ``labels`` (cached: a labels() lookup costs microseconds)."""
        key = (id(family), *labels)
        found = self._children.get(key)
        if found is None:
            found = family.labels(*labels)
            self._children[key] = found
        return found

    def bounded_code(self, upstream: str, code: str | None) -> str:
        if not code:
            return "none"
        seen = self._codes.setdefault(upstream, set())
        if code in seen:
            return code
        if len(seen) >= MAX_CODES_PER_UPSTREAM:
            return "other"
        seen.add(code)
        return code

    def preregister(self, hooks: Iterable[str], remote: Iterable[str], expressions: Iterable[str]) -> None:
        """Create the per-hook series at start, so dashboards and alerts see zeros, not gaps.
        Circuit gauges are not touched here: their value comes from the breakers."""
        for hook in hooks:
            self.child(self.route_matches, hook)
        for hook in remote:
            self.child(self.upstream_calls, hook, "ok")
        for expression in expressions:
            self.child(self.cel_errors, expression)

    def circuits(self, states: dict[str, bool]) -> None:
        """Set every circuit gauge from breaker state; drop series of upstreams that are gone
        (with several workers the shared files keep old values: :meth:`render` filters them)."""
        self._circuit_hooks = set(states)
        for family, *labels in list(self._children):
            if family == id(self.circuit_open) and labels[0] not in states:
                del self._children[(family, *labels)]
                if not self.multiprocess:  # shared value files cannot forget a series: render() filters
                    self.circuit_open.remove(*labels)
        for hook, is_open in states.items():
            self.child(self.circuit_open, hook).set(1 if is_open else 0)

    def render(self) -> tuple[bytes, str]:
        directory = multiprocess_dir()
        if self.multiprocess and directory is not None:
            process.write(directory)  # this worker's sample is as fresh as the scrape
            registry = CollectorRegistry()
            collector = _multiprocess.MultiProcessCollector(None, path=directory)  # type: ignore[no-untyped-call]
            registry.register(_WithoutRemovedCircuits(collector, self._circuit_hooks))
            helps = {spec.name: spec.help for spec in SPECS if spec.sampled}
            registry.register(process.FilesCollector(directory, helps))
            return generate_latest(registry), CONTENT_TYPE_LATEST
        pid = str(os.getpid())
        values = process.sample()
        for spec in SPECS:
            if spec.sampled and spec.name in values:
                getattr(self, spec.attr).labels(pid).set(values[spec.name])
        return generate_latest(self.registry), CONTENT_TYPE_LATEST

    def close(self) -> None:
        if self._publisher is not None:
            self._publisher.close()


_CIRCUIT = next(spec.name for spec in SPECS if spec.attr == "circuit_open")


class _WithoutRemovedCircuits:
    """The multiprocess families, minus circuit gauges of upstreams no longer configured: the
    shared value files cannot forget a series, so the scraped worker's configuration decides."""

    def __init__(self, inner: Any, keep: set[str]) -> None:
        self._inner = inner
        self._keep = keep

    def collect(self) -> Iterator[Any]:
        for family in self._inner.collect():
            if family.name == _CIRCUIT:
                family.samples = [s for s in family.samples if s.labels.get("upstream") in self._keep]
            yield family
