"""Every Prometheus metric the gateway exports, in its own registry, with bounded label sets.

Labels only take values from closed vocabularies (methods, event types, outcome enums) or from
the configuration (hook ids, CEL expression ids); deny codes chosen by upstreams are capped per
upstream. With several worker processes the prometheus-client multiprocess mode aggregates all
workers (``PROMETHEUS_MULTIPROC_DIR``), so any worker's /metrics shows the whole pod.
"""

from __future__ import annotations

import os
import platform
import time
from collections.abc import Iterable
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, disable_created_metrics, generate_latest
from prometheus_client import multiprocess as _multiprocess
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from gateway import __version__
from gateway.protocol.events import ALL_EVENTS_SET

BUCKETS = (0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
METHODS = frozenset(("hooks/intercept", "hooks/observe", "hooks/capabilities", "hooks/configuration"))
MAX_CODES_PER_UPSTREAM = 50
disable_created_metrics()  # type: ignore[no-untyped-call]  # the *_created series double the series count and nobody queries them


def multiprocess_dir() -> str | None:
    return os.environ.get("PROMETHEUS_MULTIPROC_DIR") or None


def event_label(event_type: str | None) -> str:
    return event_type if event_type in ALL_EVENTS_SET else "other"


def method_label(method: str) -> str:
    return method if method in METHODS else "other"


class Metrics:
    """Metric families plus a cache of bound children (label lookups are not free)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry(auto_describe=True)
        self.multiprocess = multiprocess_dir() is not None
        r = self.registry
        self.requests = Counter(
            "ahp_gateway_requests_total",
            "Harness requests by method, event type and outcome.",
            ["method", "event_type", "outcome"],
            registry=r,
        )
        self.rejected = Counter(
            "ahp_gateway_rejected_requests_total",
            "Harness requests answered with a JSON-RPC error, by method and code.",
            ["method", "code"],
            registry=r,
        )
        self.duration = Histogram(
            "ahp_gateway_request_duration_seconds",
            "End-to-end intercept latency inside the gateway.",
            ["method", "event_type"],
            buckets=BUCKETS,
            registry=r,
        )
        self.overhead = Histogram(
            "ahp_gateway_overhead_duration_seconds",
            "Intercept latency minus time spent waiting on upstreams.",
            ["method", "event_type"],
            buckets=BUCKETS,
            registry=r,
        )
        self.upstream_duration = Histogram(
            "ahp_gateway_upstream_duration_seconds",
            "Latency of one upstream intercept call.",
            ["upstream", "transport"],
            buckets=BUCKETS,
            registry=r,
        )
        self.upstream_calls = Counter(
            "ahp_gateway_upstream_calls_total",
            "Upstream intercept calls by outcome (ok, deny or a failure class).",
            ["upstream", "outcome"],
            registry=r,
        )
        self.denials = Counter(
            "ahp_gateway_denials_total",
            "Denials returned to harnesses by deciding upstream, code and kind (explicit or synthetic).",
            ["upstream", "code", "kind"],
            registry=r,
        )
        self.fail_open = Counter(
            "ahp_gateway_fail_open_skips_total",
            "Upstream failures skipped under fail-open, by upstream and failure class.",
            ["upstream", "reason"],
            registry=r,
        )
        self.route_matches = Counter(
            "ahp_gateway_route_matches_total",
            "Intercepts routed to a hooks entry (subscription and when matched).",
            ["hook"],
            registry=r,
        )
        self.cel_errors = Counter(
            "ahp_gateway_cel_errors_total",
            "CEL evaluation errors by expression id.",
            ["expression"],
            registry=r,
        )
        self.parallel_fallbacks = Counter(
            "ahp_gateway_parallel_fallbacks_total",
            "Requests run serially although fanout is parallel (capabilities can change state).",
            registry=r,
        )
        self.shadow = Counter(
            "ahp_gateway_shadow_verdicts_total",
            "Verdicts of shadow upstreams (never enforced).",
            ["upstream", "verdict"],
            registry=r,
        )
        self.observe_received = Counter(
            "ahp_gateway_observe_notifications_total",
            "hooks/observe notifications by status (queued, invalid, unrouted, dropped).",
            ["status"],
            registry=r,
        )
        self.observe_deliveries = Counter(
            "ahp_gateway_observe_deliveries_total",
            "Observation deliveries to upstreams by outcome.",
            ["upstream", "outcome"],
            registry=r,
        )
        self.observe_drops = Counter(
            "ahp_gateway_observe_drops_total",
            "Observations dropped before delivery, by reason.",
            ["reason"],
            registry=r,
        )
        self.observe_queue = Gauge(
            "ahp_gateway_observe_queue_depth",
            "Observations waiting for delivery.",
            registry=r,
            multiprocess_mode="livesum",
        )
        self.inflight = Gauge(
            "ahp_gateway_inflight_requests",
            "Harness requests being processed.",
            registry=r,
            multiprocess_mode="livesum",
        )
        self.reloads = Counter(
            "ahp_gateway_config_reloads_total",
            "Configuration reload attempts by result.",
            ["result"],
            registry=r,
        )
        self.last_reload = Gauge(
            "ahp_gateway_config_last_success_timestamp_seconds",
            "Unix time of the last configuration that loaded successfully.",
            registry=r,
            multiprocess_mode="max",
        )
        self.config_ok = Gauge(
            "ahp_gateway_config_last_reload_successful",
            "1 when the last reload attempt succeeded, 0 when it failed.",
            registry=r,
            multiprocess_mode="min",
        )
        self.circuit_open = Gauge(
            "ahp_gateway_upstream_circuit_open",
            "1 while an upstream's circuit breaker is open (calls fail fast).",
            ["upstream"],
            registry=r,
            multiprocess_mode="max",
        )
        self.decision_log_drops = Counter(
            "ahp_gateway_decision_log_drops_total",
            "Decision log lines dropped because the writer fell behind.",
            registry=r,
        )
        self.build_info = Gauge(
            "ahp_gateway_build_info",
            "Build information (value is always 1).",
            ["version", "python"],
            registry=r,
            multiprocess_mode="max",
        )
        self.build_info.labels(__version__, platform.python_version()).set(1)
        self.reloads.labels("success")
        self.reloads.labels("failure")
        self.observe_drops.labels("queue_full")
        self.config_ok.set(1)
        self.last_reload.set(time.time())
        self._children: dict[tuple[Any, ...], Any] = {}
        self._codes: dict[str, set[str]] = {}

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
        """Set every circuit gauge from breaker state; drop series of upstreams that are gone."""
        for family, *labels in list(self._children):
            if family == id(self.circuit_open) and labels[0] not in states:
                del self._children[(family, *labels)]
                self.circuit_open.remove(*labels)
        for hook, is_open in states.items():
            self.child(self.circuit_open, hook).set(1 if is_open else 0)

    def render(self) -> tuple[bytes, str]:
        if self.multiprocess:
            registry = CollectorRegistry()
            _multiprocess.MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
            return generate_latest(registry), CONTENT_TYPE_LATEST
        return generate_latest(self.registry), CONTENT_TYPE_LATEST
