"""Fixtures of the real-agent tests: one refusing proxy and one in-process gateway per module."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest
import pytest_asyncio

from gateway.config.load import load
from gateway.server.app import GatewayServer
from tests.harnesses.common import RefusingProxy, serve


@pytest.fixture(scope="module")
def proxy() -> Iterator[RefusingProxy]:
    yield from serve(RefusingProxy())


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def gateway() -> AsyncIterator[GatewayServer]:
    server = GatewayServer(load(None), port=0, admin_port=0)
    await server.start()
    yield server
    await server.stop()
