"""gateway.bounded.read_bounded: a peer's answer read to its end across any number of segments,
and refused (None) past the limit without reading more than one byte beyond it. Real HTTP over
loopback: the server writes each body in pieces with a flush between them."""

from __future__ import annotations

import asyncio

import aiohttp
import pytest
from aiohttp import web

from gateway.bounded import read_bounded

LIMIT = 1000


@pytest.fixture
async def pieces_server():
    """Serves ``/{size}/{pieces}``: ``size`` bytes of ``x`` in ``pieces`` flushed writes."""

    async def handler(request: web.Request) -> web.StreamResponse:
        size, pieces = int(request.match_info["size"]), int(request.match_info["pieces"])
        response = web.StreamResponse()
        response.content_length = size
        await response.prepare(request)
        step = -(-size // pieces) if size else 0
        for start in range(0, size, step or 1):
            await response.write(b"x" * min(step, size - start))
            await asyncio.sleep(0.005)  # a separate segment
        return response

    app = web.Application()
    app.router.add_get("/{size}/{pieces}", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    yield f"http://127.0.0.1:{port}"
    await runner.cleanup()


@pytest.mark.parametrize("pieces", [1, 3, 50])
@pytest.mark.parametrize(("size", "whole"), [(0, True), (LIMIT - 1, True), (LIMIT, True), (LIMIT + 1, False),
                                             (10 * LIMIT, False)])  # fmt: skip
async def test_a_body_is_read_whole_up_to_the_limit_and_refused_past_it(pieces_server, size, whole, pieces):
    async with aiohttp.ClientSession() as session, session.get(f"{pieces_server}/{size}/{pieces}") as response:
        body = await read_bounded(response.content, LIMIT)
    assert body == (b"x" * size if whole else None)
