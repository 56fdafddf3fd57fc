"""The bundled-configuration gateway for the native hook tests (a module fixture) and the ``hook`` command run as a real process."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import AsyncIterator

import pytest_asyncio

from gateway.config.load import load
from gateway.server.app import GatewayServer
from tests.support.paths import ROOT


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def default_gateway() -> AsyncIterator[GatewayServer]:
    """One gateway with the bundled configuration for the module (compiling the policy library
    takes seconds); tests using it run on the module's event loop."""
    server = GatewayServer(load(None), port=0, admin_port=0)
    await server.start()
    yield server
    await server.stop()


async def hook(*args: str, stdin: bytes, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("AHP_GATEWAY_")}
    environment.update(PYTHONPATH=str(ROOT), **(env or {}))
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "gateway",
        "hook",
        *args,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=environment,
    )
    out, err = await asyncio.wait_for(proc.communicate(stdin), 60)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()
