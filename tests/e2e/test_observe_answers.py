"""Observe delivery answers are untrusted input too (protocol §11, AHP HTTP binding: an accepted
``hooks/observe`` is answered 202 or 204 with no body): only 202/204 count as delivered, and the
gateway never reads an observer's answer body, so an observer answering 200 with hundreds of
megabytes can neither grow the gateway's memory nor be counted as a delivery."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field

import pytest
from aiohttp import web

from tests.support.client import post, wait_for
from tests.support.config import gateway_config
from tests.support.events import tool_before
from tests.support.observe import note, observer
from tests.support.telemetry import Capture

OFFERED = 256 * 1024 * 1024
"""What the hostile observer offers to send (with an honest Content-Length)."""
READ_BOUND = 32 * 1024 * 1024
"""Far above what loopback socket buffers can hold in flight, far below what was offered: a
gateway that read the body would take all of it."""


@dataclass
class Observer:
    url: str = ""
    requests: int = 0
    sent: int = 0
    finished: list[bool] = field(default_factory=list)


@pytest.fixture
async def observer_factory() -> AsyncIterator[Callable[[int, int], Awaitable[Observer]]]:
    runners: list[web.AppRunner] = []

    async def make(status: int, body_bytes: int) -> Observer:
        state = Observer()

        async def handle(request: web.Request) -> web.StreamResponse:
            await request.read()
            state.requests += 1
            if not body_bytes:
                return web.Response(status=status)
            response = web.StreamResponse(status=status, headers={"Content-Type": "application/json"})
            response.content_length = body_bytes
            await response.prepare(request)
            chunk = b" " * 65536
            try:
                while state.sent < body_bytes:
                    await response.write(chunk)
                    state.sent += len(chunk)
            except (ConnectionError, RuntimeError):  # the gateway hung up without reading
                state.finished.append(False)
                return response
            state.finished.append(True)
            return response

        app = web.Application()
        app.router.add_post("/", handle)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        runners.append(runner)
        port = runner.addresses[0][1]
        state.url = f"http://127.0.0.1:{port}/"
        return state

    yield make
    for runner in runners:
        await runner.cleanup()


@pytest.mark.spec("AHP-HTTP-001")
@pytest.mark.parametrize(
    ("status", "body_bytes", "outcome"),
    [
        (202, 0, "ok"),
        (204, 0, "ok"),
        (200, 0, "http_status"),  # any 2xx is not enough: 200 does not confirm a notification
        (201, 0, "http_status"),
        (500, 0, "http_status"),
    ],
)
async def test_only_202_and_204_count_as_delivered(
    gateway_factory, observer_factory, http, status, body_bytes, outcome
):
    audit = await observer_factory(status, body_bytes)
    capture = Capture()
    gw = await gateway_factory(gateway_config([observer("org.example.audit", audit.url)]), telemetry=capture)
    assert await post(http, gw.url, note(tool_before())) == (202, None)
    await wait_for(lambda: len(capture.delivered) == 1)
    assert capture.delivered == [("org.example.audit", outcome)]


@pytest.mark.spec("AHP-HTTP-001")
@pytest.mark.parametrize("status", [200, 202])
async def test_huge_observer_answer_is_never_read(gateway_factory, observer_factory, http, status):
    """256 MiB offered with an honest Content-Length: the gateway hangs up after the status line
    instead of reading it (memory stays flat), and a 200 is counted as a failure, not as ok."""
    audit = await observer_factory(status, OFFERED)
    capture = Capture()
    gw = await gateway_factory(gateway_config([observer("org.example.audit", audit.url)]), telemetry=capture)
    assert await post(http, gw.url, note(tool_before())) == (202, None)
    await wait_for(lambda: len(capture.delivered) == 1)
    assert capture.delivered == [("org.example.audit", "ok" if status == 202 else "http_status")]
    await wait_for(lambda: audit.finished == [False], timeout=10)  # the observer saw the hang-up
    assert audit.sent < READ_BOUND

    # the connection was dropped, not left half-read in the pool: the next delivery still works
    assert await post(http, gw.url, note(tool_before("ls"))) == (202, None)
    await wait_for(lambda: len(capture.delivered) == 2)
    assert audit.requests == 2
