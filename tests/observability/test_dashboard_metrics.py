"""Every metric the dashboard and the rules name is one the gateway really exports.

A gateway (in-process, loopback ports, the repository's policies as a local hook, bearer inbound
auth) answers a few requests, then its admin ``/metrics`` is scraped. Each name in a panel query,
a template variable, an alert or a recording rule must be a sample of a family in
``gateway.observability.metrics.SPECS`` (the single list of metrics) or appear in that scrape;
``up`` is Prometheus's own. Unlike the live Prometheus module this needs no prometheus server.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from gateway.observability.metrics import SPECS
from tests.support.client import post
from tests.support.config import gateway_config
from tests.support.events import intercept, tool_before
from tests.support.grafana import (
    NOT_FROM_THE_GATEWAY,
    REPO,
    all_rules,
    dashboard_queries,
    metric_names,
    recorded_names,
    sample_names,
    substitute,
    variable_selectors,
)

VALUES = {"cluster": ".*", "namespace": ".*", "job": ".+", "instance": ".+", "upstream": ".+", "datasource": "p"}
SUFFIXES = {"counter": ("_total",), "gauge": ("",), "histogram": ("_bucket", "_sum", "_count")}
TOKEN = "dashboard-test-token"


def spec_sample_names() -> set[str]:
    names = set()
    for spec in SPECS:
        base = spec.name.removesuffix("_total") if spec.kind == "counter" else spec.name
        names |= {base + suffix for suffix in SUFFIXES[spec.kind]}
    return names


async def scrape_live_gateway(gateway_factory: Any, tmp_path: Path) -> str:
    tokens = tmp_path / "tokens.yaml"
    digest = hashlib.sha256(TOKEN.encode()).hexdigest()
    tokens.write_text(f"- {{sha256: '{digest}', principal: {{name: dashboard}}}}\n")
    local = {
        "id": "org.example.policies",
        "transport": {"type": "local", "policies": [str(REPO / "policies")]},
        "subscriptions": [
            {
                "mode": "intercept",
                "events": ["tool.before"],
                "timeoutMs": 1000,
                "failurePolicy": "fail-closed",
                "content": {"default": "body"},
            }
        ],
    }
    config = gateway_config([local], inbound={"auth": {"type": "bearer", "tokensFile": str(tokens)}})
    server = await gateway_factory(config)
    auth = {"Authorization": f"Bearer {TOKEN}"}
    async with aiohttp.ClientSession(headers=auth) as http:
        for command in ("ls -la", "git push --force origin main", "cat ~/.ssh/id_rsa"):
            status, _ = await post(http, server.url, intercept(tool_before(command)))
            assert status == 200
        assert (await post(http, server.url, b"{"))[0] == 200  # a rejected request
    async with aiohttp.ClientSession() as anonymous:
        assert (await post(anonymous, server.url, intercept(tool_before())))[0] == 401
        async with anonymous.get(f"http://127.0.0.1:{server.admin_port}/metrics") as response:
            assert response.status == 200
            return await response.text()


async def test_dashboard_and_rules_name_only_exported_metrics(
    gateway_factory: Any, tmp_path: Path, promql: Any
) -> None:
    scraped = sample_names(await scrape_live_gateway(gateway_factory, tmp_path))
    assert {"ahp_gateway_process_open_fds", "ahp_gateway_auth_failures_total"} <= scraped
    known = spec_sample_names() | scraped | NOT_FROM_THE_GATEWAY
    problems = []
    expressions = [(q.where, substitute(q.expr, VALUES)) for q in dashboard_queries()]
    expressions += [(f"variable {name}", substitute(sel, VALUES)) for name, sel, _ in variable_selectors()]
    expressions += [(rule.get("alert") or rule["record"], rule["expr"]) for rule in all_rules()]
    for where, expr in expressions:
        unknown = metric_names(promql, promql.parse(expr)) - known - recorded_names()
        if unknown:
            problems.append(f"{where}: neither in SPECS nor exported: {sorted(unknown)}")
    assert not problems, "\n".join(problems)


def test_process_metrics_are_the_gateway_s_own(promql: Any) -> None:
    """The CPU and memory panels once read prometheus-client's unprefixed process_* names, which
    the gateway does not export (its ahp_gateway_process_* families carry a pid label instead)."""
    names = set()
    for query in dashboard_queries():
        names |= metric_names(promql, promql.parse(substitute(query.expr, VALUES)))
    assert not [n for n in names if n.startswith("process_")]
    assert {"ahp_gateway_process_cpu_seconds_total", "ahp_gateway_process_open_fds"} <= names


pytestmark = [pytest.mark.timeout(60)]
