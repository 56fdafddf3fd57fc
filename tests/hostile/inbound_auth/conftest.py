"""Fixtures of the inbound authentication attacks: the hostile issuer and JWKS on loopback."""

from __future__ import annotations

import ssl
from pathlib import Path
from typing import Any

import pytest
import trustme
from aiohttp import web

from tests.hostile.inbound_auth.helpers import (
    Hostile,
)


@pytest.fixture
async def hostile(tmp_path: Path) -> Any:
    ca = trustme.CA()
    ca_file = tmp_path / "hostile-ca.pem"
    ca.cert_pem.write_to_path(str(ca_file))
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(context)
    state = Hostile(ca_file=str(ca_file))

    async def handle(request: web.Request) -> web.StreamResponse:
        state.hits[request.path] = state.hits.get(request.path, 0) + 1
        answer = state.routes.get(request.path)
        return web.Response(status=404) if answer is None else await answer(request)

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handle)
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.1, handler_cancellation=True)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=context)
    await site.start()
    state.url = f"https://127.0.0.1:{runner.addresses[0][1]}"
    yield state
    state.stop.set()
    await runner.cleanup()
