"""The benchmark scenarios and the gateway configurations they run.

Every gateway configuration is built here as a plain dict and written to a temporary YAML file;
ports are chosen at run time. Keys are only set when the installed configuration model has them
(the model is still evolving), so an older or newer gateway still loads the file.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
BUNDLED_POLICIES = REPO / "policies"
EXTRA_RULES = 50
DELAY_MS = 20.0
DELAY_RATE = 100
"""Request rate of the delayed-upstream variants: low enough that even three serial upstreams
leave a 2-core machine mostly idle, so their latency shows the fan-out, not queueing."""

Config = dict[str, Any]


def model_keys() -> frozenset[str]:
    """Top-level keys the installed ``GatewayConfig`` model declares."""
    try:
        from gateway.config.models import GatewayConfig
    except ImportError:  # pragma: no cover - the runner checks the import first
        return frozenset()
    return frozenset(GatewayConfig.model_fields)


def _sub_keys(key: str) -> frozenset[str]:
    try:
        from gateway.config.models import GatewayConfig
    except ImportError:  # pragma: no cover
        return frozenset()
    info = GatewayConfig.model_fields.get(key)
    annotation = getattr(info, "annotation", None)
    fields = getattr(annotation, "model_fields", None)
    return frozenset(fields) if fields else frozenset()


def _set(config: Config, key: str, values: dict[str, Any]) -> None:
    """Set ``config[key][sub] = value`` for every sub-key the model declares."""
    if key not in model_keys():
        return
    known = _sub_keys(key)
    chosen = {k: v for k, v in values.items() if not known or k in known}
    if chosen:
        config.setdefault(key, {}).update(chosen)


def intercept_sub(timeout_ms: int = 4000, events: tuple[str, ...] = ("tool.before",)) -> dict[str, Any]:
    return {
        "mode": "intercept",
        "events": list(events),
        "timeoutMs": timeout_ms,
        "failurePolicy": "fail-closed",
        "content": {"default": "body"},
    }


def http_hook(index: int, url: str, *, observe: bool = False) -> dict[str, Any]:
    sub = {"mode": "observe", "events": ["tool.before"], "content": {"default": "body"}} if observe else intercept_sub()
    return {
        "id": f"org.ahp-gateway.bench.upstream{index}",
        "transport": {"type": "http", "url": url},
        "subscriptions": [sub],
    }


def local_hook(policies: list[str], events: tuple[str, ...] = ("tool.before",)) -> dict[str, Any]:
    return {
        "id": "org.ahp-gateway.bench.policies",
        "transport": {"type": "local", "policies": policies},
        "subscriptions": [intercept_sub(events=events)],
    }


def base_config(
    name: str, port: int, admin_port: int, hooks: list[dict[str, Any]], *, fanout: str = "serial"
) -> Config:
    """The lean gateway every scenario starts from: full validation and settlement, generous
    deadlines (no synthetic timeouts under saturation), observability outputs off (decision log,
    metrics, trace propagation), immediate shutdown; everything else at its default."""
    config: Config = {
        "id": f"org.ahp-gateway.bench.{name.lower()}",
        "protocolVersions": ["draft"],
        "listen": {"host": "127.0.0.1", "port": port, "path": "/"},
        "admin": {"host": "127.0.0.1", "port": admin_port},
        "limits": {"maxBodyBytes": 1048576, "deadlineMs": 5000},
        "fanout": fanout,
        "hooks": hooks,
    }
    _set(config, "log", {"decisions": "off"})
    _set(config, "metrics", {"enabled": False})
    _set(config, "tracing", {"propagate": False, "otel": False})
    _set(config, "shutdown", {"drainDelaySeconds": 0, "drainTimeoutSeconds": 2})
    return config


def production_profile(config: Config) -> Config:
    """S7: the given configuration as it would run in production. This is the one place that
    switches on every observability feature the configuration model offers: the decision log
    (every decision, to stdout, which the runner captures like a container runtime would), the
    Prometheus metrics and W3C trace-context propagation to upstreams. Keys the installed model
    does not declare are skipped, so with a model that has none of them this is the lean
    configuration plus the ``observe`` block spelled out with its defaults. OpenTelemetry span
    recording stays off: it needs an exporter SDK to mean anything."""
    out = copy.deepcopy(config)
    out["id"] = out["id"].rsplit(".", 1)[0] + ".production"
    out["observe"] = {
        "queueSize": 2048,
        "workers": 8,
        "timeoutMs": 2000,
        "dedupEntries": 50000,
        "dedupTtlSeconds": 120,
    }
    _set(out, "log", {"decisions": "stdout", "includeContent": False, "sampleNoEffect": 1.0})
    _set(out, "metrics", {"enabled": True})
    _set(out, "tracing", {"propagate": True, "otel": False})
    return out


@dataclass(frozen=True)
class Scenario:
    key: str
    title: str
    under_test: str
    """stub | forwarder | gateway: the process whose CPU and memory are reported."""
    stubs: int = 0
    """Intercept upstream stubs (observe stubs for the observe scenario)."""
    delay_ms: float = 0.0
    body: str = "full"
    """full (deny+modify+message) | parallel (deny+message) | observe (unique-id notifications) |
    distinct (full, with a different command in every request) | realmix (the real tool calls of
    bench/realmix.py, every path renamed per run and per pass)."""
    fanout: str = "serial"
    local_policies: bool = False
    production: bool = False
    throughput: bool = True
    rates: tuple[int, ...] | None = None
    """None: the run's default rates."""
    notes: str = ""
    tags: tuple[str, ...] = field(default_factory=tuple)
    server: str = "aiohttp"
    """Forwarders: the server stack (aiohttp | granian | granian-embed, see bench/forwarder.py)."""
    client: str = "aiohttp"
    """Forwarders: the upstream client (aiohttp | pyreqwest | h1, the gateway's own)."""
    no_read: bool = False
    """Stub under test: answer without reading the request body."""
    unrouted: bool = False
    """Gateway: no subscription for the benchmark's event (``tool.before``), so every intercept
    is answered ``effects: []`` right after the front-end check (AHP-REG-002)."""
    front: str = "aiohttp"
    """Gateway: the harness-facing server: aiohttp (with the fast lane) or aiohttp-only
    (``listen.fastLane: false``)."""
    shared_limit: bool = False
    """Gateway: one ``rateLimits`` entry with ``scope: shared`` (per principal, never exceeded),
    its buckets in a ``redis-server`` on loopback the runner starts."""
    default_config: bool = False
    """Gateway: ``ahp-gateway serve`` on its embedded default configuration (the bundled policies,
    decision log to stdout, metrics on), only the ports given on the command line."""

    @property
    def expect_status(self) -> int:
        return 202 if self.body == "observe" else 200

    @property
    def unique(self) -> bool:
        """Every request's body is built around a unique id (bench.payloads.templates)."""
        return self.body in ("observe", "distinct")


SCENARIOS: tuple[Scenario, ...] = (
    Scenario("S0", "load → upstream stub (reference)", "stub"),
    Scenario("S1", "load → bare aiohttp forwarder → stub", "forwarder", stubs=1),
    Scenario("S2", "load → gateway → 1 upstream", "gateway", stubs=1),
    Scenario("S3", "load → gateway → 3 upstreams, serial", "gateway", stubs=3),
    Scenario(
        "S4",
        "load → gateway → 3 upstreams, parallel (deny+message request)",
        "gateway",
        stubs=3,
        body="parallel",
        fanout="parallel",
    ),
    Scenario(
        "S5", f"load → gateway, local CEL policies (bundled + {EXTRA_RULES} rules)", "gateway", local_policies=True
    ),
    Scenario(
        "S5u",
        f"load → gateway, local CEL policies (bundled + {EXTRA_RULES} rules), a different command in every request",
        "gateway",
        local_policies=True,
        body="distinct",
    ),
    Scenario("S6", "load → gateway, hooks/observe → 2 observe stubs", "gateway", stubs=2, body="observe"),
    Scenario("S7", "load → gateway → 1 upstream, production profile", "gateway", stubs=1, production=True),
    Scenario(
        "S8",
        "load → the default gateway (bundled policies, decision log on), real tool calls replayed, paths renamed per run",
        "gateway",
        body="realmix",
        default_config=True,
    ),
)

REFERENCE_SCENARIOS: tuple[Scenario, ...] = (
    Scenario("S0n", "load → aiohttp stub answering without reading the request", "stub", no_read=True),
    Scenario(
        "F1", "load → aiohttp server + pyreqwest client forwarder → stub", "forwarder", stubs=1, client="pyreqwest"
    ),
    Scenario(
        "F2", "load → granian (RSGI, worker) + aiohttp client forwarder → stub", "forwarder", stubs=1, server="granian"
    ),
    Scenario(
        "F3",
        "load → granian (RSGI, worker) + pyreqwest client forwarder → stub",
        "forwarder",
        stubs=1,
        server="granian",
        client="pyreqwest",
    ),
    Scenario(
        "F4",
        "load → granian embedded in asyncio + pyreqwest client forwarder → stub",
        "forwarder",
        stubs=1,
        server="granian-embed",
        client="pyreqwest",
    ),
    Scenario(
        "F5",
        "load → granian embedded in asyncio + aiohttp client forwarder → stub",
        "forwarder",
        stubs=1,
        server="granian-embed",
    ),
    Scenario(
        "F6",
        "load → aiohttp server + the gateway's h1 client forwarder → stub",
        "forwarder",
        stubs=1,
        client="h1",
    ),
    Scenario(
        "F7",
        "load → the gateway's fast-lane server + h1 client forwarder → stub (the gateway's own HTTP stack)",
        "forwarder",
        stubs=1,
        server="fastlane",
        client="h1",
    ),
    Scenario(
        "S5n",
        "load → gateway, no subscription for the event (front-end check and an empty answer: the floor under S5)",
        "gateway",
        unrouted=True,
    ),
    Scenario(
        "S2L",
        "load → gateway → 1 upstream, one shared rate limit (Redis on loopback)",
        "gateway",
        stubs=1,
        shared_limit=True,
    ),
    Scenario(
        "S2a",
        "load → gateway with the fast lane off (aiohttp serves every request) → 1 upstream",
        "gateway",
        stubs=1,
        front="aiohttp-only",
    ),
)
"""The HTTP-layer A/B references: bare forwarders on other server/client stacks (S1 is aiohttp +
aiohttp), the cheapest possible answer for the local-policy target (S0n) and the gateway's own
floor under S5 (S5n: the same request, routed nowhere)."""

DELAY_SCENARIOS: tuple[Scenario, ...] = (
    Scenario(
        "S2d",
        f"gateway → 1 upstream of {DELAY_MS:.0f} ms (deny+message request)",
        "gateway",
        stubs=1,
        delay_ms=DELAY_MS,
        body="parallel",
        throughput=False,
        rates=(DELAY_RATE,),
    ),
    Scenario(
        "S3d",
        f"gateway → 3 upstreams of {DELAY_MS:.0f} ms, serial",
        "gateway",
        stubs=3,
        delay_ms=DELAY_MS,
        throughput=False,
        rates=(DELAY_RATE,),
    ),
    Scenario(
        "S4d",
        f"gateway → 3 upstreams of {DELAY_MS:.0f} ms, parallel",
        "gateway",
        stubs=3,
        delay_ms=DELAY_MS,
        body="parallel",
        fanout="parallel",
        throughput=False,
        rates=(DELAY_RATE,),
    ),
)

ALL = SCENARIOS + REFERENCE_SCENARIOS + DELAY_SCENARIOS
BY_KEY = {s.key: s for s in ALL}


SHARED_LIMIT = {
    "id": "per-principal",
    "key": "principal.?name.orValue('anonymous')",
    "requestsPerSecond": 1_000_000,
    "burst": 1_000_000,
    "scope": "shared",
    "onStateError": "fail-closed",
}
"""S2L's limit: the issue's per-principal limit (the benchmark's requests carry no credential, so
every one is ``anonymous``), every request checked in Redis, none refused (fail-closed: a Redis
that does not answer shows up as errors, not as a faster run)."""


def gateway_config(
    scenario: Scenario,
    port: int,
    admin_port: int,
    stub_urls: list[str],
    workdir: Path,
    redis_url: str | None = None,
) -> Config:
    if scenario.unrouted:
        hooks = [local_hook([str(BUNDLED_POLICIES)], events=("tool.permission.request",))]
    elif scenario.local_policies:
        extra = workdir / "extra-rules.yaml"
        from bench.payloads import extra_rules

        extra.write_text(extra_rules(EXTRA_RULES), encoding="utf-8")
        hooks = [local_hook([str(BUNDLED_POLICIES), str(extra)])]
    else:
        observe = scenario.body == "observe"
        hooks = [http_hook(i + 1, url, observe=observe) for i, url in enumerate(stub_urls)]
    config = base_config(scenario.key, port, admin_port, hooks, fanout=scenario.fanout)
    if scenario.front == "aiohttp-only" and "fastLane" in _sub_keys("listen"):
        config["listen"]["fastLane"] = False
    if scenario.shared_limit:
        if redis_url is None:
            raise ValueError(f"{scenario.key} needs a Redis URL")
        config["state"] = {"redis": {"url": redis_url, "timeoutMs": 200}}
        config["rateLimits"] = [dict(SHARED_LIMIT)]
    return production_profile(config) if scenario.production else config
