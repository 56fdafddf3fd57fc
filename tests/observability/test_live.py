"""The dashboard and the alerts against a real Prometheus scraping a real gateway.

One gateway (in-process, scripted loopback upstreams) and one ``prometheus`` server process
(free loopback port, temporary TSDB, 1 s scrape and rule evaluation, grafana/alerts.yaml loaded)
serve the whole module. The traffic runs in two rounds with a scrape in between, so every counter
has grown between two samples and rate()/increase() see it:

- explicit deny, no-op, fail-open failure (skip), fail-closed failures (synthetic denies; the
  circuit opens after two), a fail-closed failure for a harness without ``deny`` (JSON-RPC error),
  CEL routing and a CEL evaluation error, a parse error, observe deliveries (ok, then a stalled
  observer: timeouts and queue-full drops);
- a shared rate limit in a real redis-server: intercepts over it answered -32003;
- round two also breaks the configuration file and reloads (rejected).

Then every dashboard query and every alert's signal must return data, and the alerts the traffic
provokes must be pending or firing. Both processes are stopped at teardown (Prometheus by PID).
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import socket
import subprocess
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import pytest_asyncio
import yaml
from aiohttp import web

from gateway.config.load import load
from gateway.server.app import GatewayServer
from tests.support.client import post
from tests.support.config import gateway_config, hook
from tests.support.events import ALL_TOOL_BEFORE_CAPS, intercept, result, tool_before
from tests.support.grafana import (
    ALERTS,
    NOT_FROM_THE_GATEWAY,
    NOT_PROVOKED_LIVE,
    SCRAPE_CLUSTER,
    SCRAPE_JOB,
    SCRAPE_NAMESPACE,
    alert_rules,
    all_rules,
    dashboard_queries,
    metric_names,
    recorded_names,
    recording_rules,
    sample_names,
    strip_threshold,
    substitute,
    variable_selectors,
)
from tests.support.redis_server import RedisServer

pytestmark = [pytest.mark.asyncio(loop_scope="module"), pytest.mark.timeout(120)]

GATEWAY_ID = "org.example.gateway"
POLICY, FAIL_OPEN, BROKEN, SHADOW, AUDIT = (
    "org.example.policy",
    "org.example.lint",
    "org.example.vault",
    "org.example.canary",
    "org.example.audit",
)
RM_CODE = "org.example.policy.destructive"
SYNTHETIC_CODE = f"{GATEWAY_ID}.upstream_unavailable"
PROMETHEUS_DEADLINE = 30.0
"""Prometheus 2.42 applies new targets on a 5 s tick: the first sample takes about 6 s."""

PROVOKED = {
    "AHPGatewayUpstreamFailing",
    "AHPGatewayCircuitOpen",
    "AHPGatewayFailOpenSkips",
    "AHPGatewayInterceptErrors",
    "AHPGatewayCelErrors",
    "AHPGatewayObserveDrops",
    "AHPGatewayAvailabilityFastBurn",
    "AHPGatewayAvailabilitySlowBurn",
    "AHPGatewayObserveDeliveryFailing",
    "AHPGatewayConfigReloadFailing",
}
QUIET = {
    "AHPGatewayTargetDown",
    "AHPGatewayAbsent",
    "AHPGatewayDecisionLogDrops",
    "AHPGatewayFileDescriptors",
    "AHPGatewayStateErrors",
}
FLOOD_KEY = 'event.tool.input.command.startsWith("flood ") ? "flood" : event.id'
"""One bucket for the "flood" commands, a fresh one (never exceeded) for every other intercept."""


def note(event: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "method": "hooks/observe", "params": {"protocolVersion": "draft", "event": event}}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# ------------------------------------------------------------------------------------------------
# Scripted upstreams: one loopback server, one path per upstream


@dataclass
class Upstreams:
    url: str = ""
    audit_seen: int = 0
    audit_gate: asyncio.Event = field(default_factory=asyncio.Event)

    async def handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        if body.get("method") == "hooks/observe":
            if request.path == "/audit":
                await self.audit_gate.wait()
                self.audit_seen += 1
            return web.Response(status=202)
        if request.path == "/broken" or request.path == "/lint":
            return web.Response(status=500, text="upstream failure")
        command = str(body["params"]["event"].get("tool", {}).get("input", {}).get("command", ""))
        if command.startswith("rm "):
            return web.json_response(result(body, [{"type": "deny", "reason": "destructive", "code": RM_CODE}]))
        return web.json_response(result(body, []))


def config(base: str, redis_url: str) -> dict[str, Any]:
    return gateway_config(
        [
            hook(POLICY, f"{base}/policy"),
            hook(FAIL_OPEN, f"{base}/lint", policy="fail-open", when='event.tool.input.command.startsWith("curl ")'),
            hook(
                BROKEN,
                f"{base}/broken",
                when='event.tool.input.command.startsWith("deploy ")',
                circuitBreaker={"failureThreshold": 2, "openSeconds": 600},
            ),
            hook(SHADOW, f"{base}/policy", mode="shadow"),
            {
                "id": AUDIT,
                "transport": {"type": "http", "url": f"{base}/audit"},
                "subscriptions": [{"mode": "observe", "events": ["*"], "content": {"default": "body"}}],
            },
        ],
        observe={"queueSize": 1, "workers": 1, "timeoutMs": 200},
        log={"decisions": "decisions.jsonl"},
        reload={"watch": False},
        state={"redis": {"url": redis_url, "timeoutMs": 500}},
        rateLimits=[
            {
                "id": "flood",
                "key": FLOOD_KEY,
                "requestsPerSecond": 0.001,
                "burst": 1,
                "scope": "shared",
                "onError": "skip",
            }
        ],
    )


# ------------------------------------------------------------------------------------------------
# The stack


@dataclass
class Live:
    http: aiohttp.ClientSession
    gateway: GatewayServer
    upstreams: Upstreams
    prometheus: subprocess.Popen[bytes]
    prometheus_url: str
    prometheus_log: Path
    config_path: Path

    @property
    def admin(self) -> str:
        return f"http://127.0.0.1:{self.gateway.admin_port}"

    @property
    def instance(self) -> str:
        return f"127.0.0.1:{self.gateway.admin_port}"

    def local(self, name: str, **labels: str) -> float:
        """A sample straight from the gateway's registry (the source of truth for the waits)."""
        assert self.gateway.observability is not None
        registry = self.gateway.observability.metrics.registry
        total = 0.0
        for family in registry.collect():
            for sample in family.samples:
                if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                    total += sample.value
        return total

    def log_tail(self) -> str:
        return "\n".join(self.prometheus_log.read_text(errors="replace").splitlines()[-15:])

    async def api(self, path: str, **params: str) -> dict[str, Any]:
        async with self.http.get(f"{self.prometheus_url}{path}", params=params) as response:
            body: dict[str, Any] = await response.json(content_type=None)  # a 400 carries a JSON error too
            return body

    async def query(self, expr: str) -> list[dict[str, Any]]:
        body = await self.api("/api/v1/query", query=expr)
        assert body["status"] == "success", f"{expr}: {body.get('errorType')}: {body.get('error')}"
        return list(body["data"]["result"])

    async def until(self, what: str, check: Callable[[], Any], timeout: float = PROMETHEUS_DEADLINE) -> Any:
        """Poll ``check`` (an async callable returning a truthy value when done) with a deadline."""
        deadline = time.monotonic() + timeout
        last: Any = None
        while True:
            last = await check()
            if last:
                return last
            if time.monotonic() > deadline:
                raise AssertionError(f"{what}: not reached within {timeout:.0f} s (last: {last!r})\n{self.log_tail()}")
            await asyncio.sleep(0.2)

    async def scraped_after(self, moment: float) -> None:
        """Wait for a scrape that started after ``moment`` (so it holds everything done before)."""

        async def check() -> bool:
            found = await self.query(f'timestamp(ahp_gateway_build_info{{instance="{self.instance}"}})')
            return bool(found) and float(found[0]["value"][1]) > moment

        await self.until("a scrape after the traffic", check)

    async def metrics_text(self) -> str:
        async with self.http.get(f"{self.admin}/metrics") as response:
            assert response.status == 200
            return await response.text()


async def start_prometheus(binary: str, workdir: Path, target: str) -> tuple[subprocess.Popen[bytes], str, Path]:
    prometheus_config = workdir / "prometheus.yml"
    prometheus_config.write_text(
        yaml.safe_dump(
            {
                "global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
                "rule_files": [str(ALERTS)],
                "scrape_configs": [
                    {
                        "job_name": SCRAPE_JOB,
                        "static_configs": [
                            {"targets": [target], "labels": {"namespace": SCRAPE_NAMESPACE, "cluster": SCRAPE_CLUSTER}}
                        ],
                    }
                ],
            }
        )
    )
    log = workdir / "prometheus.log"
    for _attempt in range(3):  # the free port can be taken between probing and binding
        port = free_port()
        with log.open("ab") as out:
            proc = subprocess.Popen(
                [
                    binary,
                    f"--config.file={prometheus_config}",
                    f"--storage.tsdb.path={workdir / 'tsdb'}",
                    f"--web.listen-address=127.0.0.1:{port}",
                    "--storage.tsdb.retention.time=1h",
                    "--log.level=warn",
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 15
        async with aiohttp.ClientSession() as http:
            while proc.poll() is None and time.monotonic() < deadline:
                with contextlib.suppress(aiohttp.ClientError):
                    async with http.get(f"{url}/-/ready") as response:
                        if response.status == 200:
                            return proc, url, log
                await asyncio.sleep(0.1)
        stop_process(proc)
    raise AssertionError(f"prometheus did not become ready:\n{log.read_text(errors='replace')[-2000:]}")


def stop_process(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


# ------------------------------------------------------------------------------------------------
# Traffic


async def drive(live: Live, round_no: int) -> None:
    """One round of every kind of traffic the dashboard and the alerts are about."""
    http, url = live.http, live.gateway.url

    async def ask(command: str, caps: dict[str, Any] | None = None, event: dict[str, Any] | None = None) -> Any:
        status, body = await post(http, url, intercept(event or tool_before(command), caps))
        assert status == 200, body
        return body

    assert (await ask("ls -la"))["result"]["effects"] == []  # no-op
    (deny,) = (await ask("rm -rf /"))["result"]["effects"]  # explicit deny
    assert (deny["code"], deny["extensions"][GATEWAY_ID]["kind"]) == (RM_CODE, "explicit")
    assert (await ask("curl https://example.org"))["result"]["effects"] == []  # fail-open failure skipped
    for _ in range(2):  # fail-closed failures: synthetic denies; the circuit opens at the second
        (deny,) = (await ask("deploy production"))["result"]["effects"]
        assert (deny["code"], deny["extensions"][GATEWAY_ID]["kind"]) == (SYNTHETIC_CODE, "synthetic")
    no_deny = await ask("deploy staging", caps={"effects": ["message"]})  # no deny to carry it: JSON-RPC error
    assert no_deny["error"]["code"] == -32003, no_deny
    odd = tool_before()
    odd["tool"]["input"] = {"path": "/etc/hosts"}  # no command: both CEL conditions fail to evaluate
    assert (await ask("", caps=copy.deepcopy(ALL_TOOL_BEFORE_CAPS), event=odd))["result"]["effects"]
    limited = [await ask("flood now") for _ in range(3)]  # the shared limit: one token, then -32003
    assert [a.get("error", {}).get("code") for a in limited][1:] == [-32003, -32003], limited
    status, body = await post(http, url, b"{")  # parse error: rejected before routing
    assert (status, body["error"]["code"]) == (200, -32700)

    # observe: one delivery to a healthy observer ...
    live.upstreams.audit_gate.set()
    seen = live.upstreams.audit_seen
    assert await post(http, url, note(tool_before("echo hello"))) == (202, None)
    await live.until("observe delivery", _true_when(lambda: live.upstreams.audit_seen > seen), timeout=5)
    # ... then a stalled one: deliveries time out, the 1-slot queue overflows and drops
    live.upstreams.audit_gate = asyncio.Event()
    drops = live.local("ahp_gateway_observe_drops_total")
    queued = live.local("ahp_gateway_observe_notifications_total", status="queued")
    timeouts = live.local("ahp_gateway_observe_deliveries_total", upstream=AUDIT, outcome="timeout")
    for _ in range(20):
        await asyncio.gather(*(post(http, url, note(tool_before("echo stalled"))) for _ in range(4)))
        if live.local("ahp_gateway_observe_drops_total") > drops:
            break
    assert live.local("ahp_gateway_observe_drops_total") > drops, "no observation was dropped"
    stalled = live.local("ahp_gateway_observe_notifications_total", status="queued") - queued
    await live.until(
        "every queued observation timed out at the stalled observer",
        _true_when(
            lambda: (
                live.local("ahp_gateway_observe_deliveries_total", upstream=AUDIT, outcome="timeout") - timeouts
                >= stalled
            )
        ),
        timeout=10,
    )
    live.upstreams.audit_gate.set()

    if round_no == 2:  # a configuration change that does not load
        live.config_path.write_text(live.config_path.read_text().replace("hooks:", "hooks: [", 1))
        assert await live.gateway.reload() is False


def _true_when(predicate: Callable[[], bool]) -> Callable[[], Any]:
    async def check() -> bool:
        return predicate()

    return check


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def live(tmp_path_factory: pytest.TempPathFactory, prometheus_bin: str, promtool: str) -> AsyncIterator[Live]:
    workdir = tmp_path_factory.mktemp("observability-live")
    upstreams = Upstreams()
    app = web.Application()
    app.router.add_post("/{name}", upstreams.handle)
    runner = web.AppRunner(app, access_log=None, handler_cancellation=True, shutdown_timeout=0.5)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    upstreams.url = f"http://127.0.0.1:{runner.addresses[0][1]}"

    redis = RedisServer(workdir / "redis")
    redis.start()
    config_path = workdir / "gateway.yaml"
    config_path.write_text(yaml.safe_dump(config(upstreams.url, redis.url), sort_keys=False))
    gateway = GatewayServer(load(config_path))
    try:
        await gateway.start()
    except BaseException:
        redis.stop()
        raise
    prometheus: subprocess.Popen[bytes] | None = None
    http = aiohttp.ClientSession()
    try:
        prometheus, prometheus_url, log = await start_prometheus(
            prometheus_bin, workdir, f"127.0.0.1:{gateway.admin_port}"
        )
        stack = Live(http, gateway, upstreams, prometheus, prometheus_url, log, config_path)
        await drive(stack, 1)
        await stack.scraped_after(time.time())
        await drive(stack, 2)
        await stack.scraped_after(time.time())
        yield stack
    finally:
        upstreams.audit_gate.set()
        if prometheus is not None:
            stop_process(prometheus)
        await http.close()
        await gateway.stop()
        await runner.cleanup()
        redis.stop()


# ------------------------------------------------------------------------------------------------
# Tests


async def test_prometheus_scrapes_the_gateway(live: Live) -> None:
    targets = (await live.api("/api/v1/targets"))["data"]["activeTargets"]
    assert [(t["labels"]["job"], t["labels"]["instance"], t["health"]) for t in targets] == [
        (SCRAPE_JOB, live.instance, "up")
    ]
    async with live.http.get(f"{live.admin}/healthz") as response:
        assert response.status == 200
    async with live.http.get(f"{live.admin}/readyz") as response:
        ready = await response.json()
        assert response.status == 200 and ready["openCircuits"] == [BROKEN]


EXPECTED: list[tuple[str, float]] = [
    # (PromQL, the minimum its single value must reach after two rounds)
    ('sum(ahp_gateway_denials_total{kind="synthetic"})', 1),
    (f'ahp_gateway_denials_total{{kind="synthetic", upstream="{BROKEN}", code="{SYNTHETIC_CODE}"}}', 6),
    (f'ahp_gateway_denials_total{{kind="explicit", upstream="{POLICY}", code="{RM_CODE}"}}', 2),
    ('sum(ahp_gateway_requests_total{method="hooks/intercept", outcome="no_effect"})', 4),
    ('sum(ahp_gateway_requests_total{method="hooks/intercept", outcome="deny"})', 8),
    ('sum(ahp_gateway_requests_total{method="hooks/intercept", outcome="error"})', 2),
    (f'ahp_gateway_upstream_calls_total{{upstream="{POLICY}", outcome="ok"}}', 10),
    (f'ahp_gateway_upstream_calls_total{{upstream="{POLICY}", outcome="deny"}}', 2),
    (f'ahp_gateway_upstream_calls_total{{upstream="{FAIL_OPEN}", outcome="http_status"}}', 4),
    (f'ahp_gateway_upstream_calls_total{{upstream="{BROKEN}", outcome="http_status"}}', 2),
    (f'ahp_gateway_upstream_calls_total{{upstream="{BROKEN}", outcome="circuit_open"}}', 6),
    (f'ahp_gateway_fail_open_skips_total{{upstream="{FAIL_OPEN}", reason="http_status"}}', 4),
    (f'ahp_gateway_upstream_circuit_open{{upstream="{BROKEN}"}}', 1),
    (f'ahp_gateway_route_matches_total{{hook="{BROKEN}"}}', 6),
    (f'ahp_gateway_cel_errors_total{{expression="{FAIL_OPEN}.when"}}', 2),
    (f'ahp_gateway_shadow_verdicts_total{{upstream="{SHADOW}", verdict="deny"}}', 2),
    ('ahp_gateway_rejected_requests_total{method="other", code="-32700"}', 2),
    ('ahp_gateway_observe_notifications_total{status="queued"}', 4),
    (f'ahp_gateway_observe_deliveries_total{{upstream="{AUDIT}", outcome="ok"}}', 2),
    (f'ahp_gateway_observe_deliveries_total{{upstream="{AUDIT}", outcome="timeout"}}', 2),
    ('ahp_gateway_observe_drops_total{reason="queue_full"}', 2),
    ('ahp_gateway_config_reloads_total{result="failure"}', 1),
    ('sum(ahp_gateway_request_duration_seconds_count{method="hooks/intercept"})', 14),
    ('sum(ahp_gateway_overhead_duration_seconds_count{method="hooks/intercept"})', 14),
    ('ahp_gateway_build_info{version!="", python!=""}', 1),
]


async def test_traffic_arrives_in_prometheus(live: Live) -> None:
    problems = []
    for expr, minimum in EXPECTED:
        found = await live.query(expr)
        if len(found) != 1 or float(found[0]["value"][1]) < minimum:
            problems.append(f"{expr}: expected one series >= {minimum}, got {found}")
    reload_ok = await live.query("ahp_gateway_config_last_reload_successful")
    if [float(s["value"][1]) for s in reload_ok] != [0.0]:
        problems.append(f"ahp_gateway_config_last_reload_successful should be 0 after the rejected reload: {reload_ok}")
    assert not problems, "\n".join(problems)


async def test_metrics_pass_promtool_check_metrics(live: Live, promtool: str) -> None:
    text = await live.metrics_text()
    proc = await asyncio.create_subprocess_exec(
        promtool, "check", "metrics", stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    out, _ = await asyncio.wait_for(proc.communicate(text.encode()), timeout=30)
    assert proc.returncode == 0, out.decode()


def dashboard_values(live: Live) -> dict[str, str]:
    return {
        "cluster": SCRAPE_CLUSTER,
        "namespace": SCRAPE_NAMESPACE,
        "job": SCRAPE_JOB,
        "instance": live.instance,
        "upstream": ".+",
        "datasource": "prometheus",
    }


async def check_expression(
    live: Live, promql: Any, where: str, expr: str, exported: set[str], *, need_data: bool = True
) -> str | None:
    try:
        ast = promql.parse(expr)
    except ValueError as exc:
        return f"{where}: parse error {exc}: {expr}"
    unknown = metric_names(promql, ast) - exported - NOT_FROM_THE_GATEWAY
    if unknown:
        return f"{where}: not exported by the gateway: {sorted(unknown)}"
    body = await live.api("/api/v1/query", query=expr)
    if body["status"] != "success":
        return f"{where}: prometheus error {body.get('error')}: {expr}"
    if need_data and not body["data"]["result"]:
        return f"{where}: prometheus returned no series: {expr}"
    return None


async def test_every_dashboard_query_returns_data(live: Live, promql: Any) -> None:
    exported = sample_names(await live.metrics_text())
    values = dashboard_values(live)
    problems = []
    for query in dashboard_queries():
        expr = substitute(query.expr, values)
        unprovoked = bool(NOT_PROVOKED_LIVE & metric_names(promql, promql.parse(expr)))
        names = exported | NOT_PROVOKED_LIVE
        problem = await check_expression(live, promql, query.where, expr, names, need_data=not unprovoked)
        if problem:
            problems.append(problem)
    assert not problems, "\n".join(problems)


async def test_template_variables_find_values(live: Live, promql: Any) -> None:
    exported = sample_names(await live.metrics_text())
    values = dashboard_values(live)
    for name, selector, label in variable_selectors():
        expr = substitute(selector, values)
        assert await check_expression(live, promql, f"variable {name}", expr, exported) is None
        found = await live.query(f"count by ({label}) ({expr})")
        assert found and all(s["metric"].get(label) for s in found), f"variable {name}: no {label} values"


async def test_every_alert_signal_returns_data(live: Live, promql: Any) -> None:
    """Each alert's expression without its threshold (the left side of the top-level comparison)
    must select series of the live gateway: a typo or a renamed metric would make it silent."""
    exported = sample_names(await live.metrics_text()) | recorded_names()
    await recorded_series(live)  # burn-rate alerts read recorded series
    problems = []
    for rule in alert_rules():
        ast = promql.parse(rule["expr"])
        unknown = metric_names(promql, ast) - exported - NOT_FROM_THE_GATEWAY
        if unknown:
            problems.append(f"{rule['alert']}: not exported by the gateway: {sorted(unknown)}")
            continue
        signal = str(strip_threshold(promql, ast))
        problem = await check_expression(live, promql, rule["alert"], signal, exported)
        if problem:
            problems.append(problem)
    assert not problems, "\n".join(problems)


async def recorded_series(live: Live) -> list[Any]:
    """Every recording rule's series, once Prometheus has evaluated them all (it evaluates rule
    groups on their own schedule, so right after the scrapes they may not exist yet)."""

    async def recorded() -> list[Any] | None:
        found = [await live.query(rule["record"]) for rule in recording_rules()]
        return found if all(found) else None

    result: list[Any] = await live.until("every SLO recording rule has a value", recorded)
    return result


async def test_slo_recording_rules_record_the_live_traffic(live: Live) -> None:
    """Both SLO error ratios exist for the scraped job; the availability one is the share of
    intercepts answered with an error (2 of 14 or more per round, never none)."""
    results = await recorded_series(live)
    for rule, series in zip(recording_rules(), results, strict=True):
        assert [s["metric"] for s in series] == [
            {"__name__": rule["record"], "namespace": SCRAPE_NAMESPACE, "job": SCRAPE_JOB}
        ], rule["record"]
        value = float(series[0]["value"][1])
        assert 0 <= value <= 1, rule["record"]
        if ":slo_availability_errors:" in rule["record"]:
            assert 0 < value < 0.5, f"{rule['record']} = {value}"


async def test_rules_load_and_provoked_alerts_become_active(live: Live) -> None:
    groups = (await live.api("/api/v1/rules"))["data"]["groups"]
    loaded = {rule["name"]: rule for group in groups for rule in group["rules"]}
    assert set(loaded) == {rule.get("alert") or rule["record"] for rule in all_rules()}

    async def evaluated() -> bool:
        groups = (await live.api("/api/v1/rules"))["data"]["groups"]
        return all(r.get("lastEvaluation", "").startswith("20") for g in groups for r in g["rules"])

    await live.until("every rule evaluated", evaluated)
    groups = (await live.api("/api/v1/rules"))["data"]["groups"]
    unhealthy = {r["name"]: r.get("lastError") for g in groups for r in g["rules"] if r["health"] != "ok"}
    assert not unhealthy

    async def active() -> set[str] | None:
        alerts = (await live.api("/api/v1/alerts"))["data"]["alerts"]
        names = {a["labels"]["alertname"] for a in alerts if a["state"] in ("pending", "firing")}
        return names if PROVOKED <= names else None

    names = await live.until(f"alerts {sorted(PROVOKED)} pending or firing", active)
    assert not names & QUIET, f"alerts active without cause: {sorted(names & QUIET)}"
    alerts = (await live.api("/api/v1/alerts"))["data"]["alerts"]
    circuit = [a["labels"] for a in alerts if a["labels"]["alertname"] == "AHPGatewayCircuitOpen"]
    assert circuit == [
        {
            "alertname": "AHPGatewayCircuitOpen",
            "namespace": SCRAPE_NAMESPACE,
            "job": SCRAPE_JOB,
            "upstream": BROKEN,
            "severity": "warning",
        }
    ]
