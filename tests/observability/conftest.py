"""Fixtures for the dashboard and alert tests: promtool, the Prometheus server, the PromQL parser.

The artefact helpers the tests import live in tests/support/grafana.py."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.grafana import require_binary, require_module


@pytest.fixture(scope="session")
def promtool() -> str:
    return require_binary("promtool", "promtool")


@pytest.fixture(scope="session")
def prometheus_bin() -> str:
    return require_binary("prometheus", "the prometheus server")


@pytest.fixture(scope="session")
def promql() -> Any:
    return require_module("promql_parser", "promql-parser==0.12.0")
