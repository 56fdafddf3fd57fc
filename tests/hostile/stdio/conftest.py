"""Fixtures of the stdio attacks."""

from __future__ import annotations

from typing import Any

import pytest

from tests.hostile.stdio.helpers import (
    Child,
    config_for,
    loads,
    stub_answer,
    write_config,
)


@pytest.fixture
async def stub(stub_factory):
    return await stub_factory(stub_answer)


@pytest.fixture
async def children():
    """Children started by a test; killed (by their own handle) if a test left one running."""
    started: list[Child] = []
    yield started
    for child in started:
        await child.kill()


@pytest.fixture
async def stdio(tmp_path, stub, children):
    """The stdio gateway with ``--log-level DEBUG`` (the most output that could leak to stdout)."""
    child = await Child.start(write_config(tmp_path / "stdio", config_for(stub.url)), "--log-level", "DEBUG")
    children.append(child)
    return child


@pytest.fixture
async def over_http(gateway_factory, stub, http):
    """The same configuration served over HTTP: ``await over_http(body)`` is (status, answer)."""
    gw = await gateway_factory(config_for(stub.url), name="http.yaml")

    async def send(body: bytes) -> tuple[int, Any]:
        async with http.post(gw.url, data=body, headers={"Content-Type": "application/json"}) as response:
            raw = await response.read()
            return response.status, (loads(raw) if raw and response.status == 200 else None)

    return send
