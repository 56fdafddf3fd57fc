"""issue 28 ("a new user"): the aiohttp path named Python's and aiohttp's versions in ``Server``
(``Python/3.11 aiohttp/3.x``), which tells an attacker which known flaws to try. Every answer of
both listeners names the product only; the fast lane sends no ``Server`` at all."""

from __future__ import annotations

import aiohttp

from tests.support.config import gateway_config, hook
from tests.support.events import intercept, tool_before


async def test_no_answer_names_a_version(gateway_factory, stub_factory, http):
    stub = await stub_factory()
    server = await gateway_factory(gateway_config([hook("org.example.a", stub.url)]))
    base = server.url.rsplit("/", 1)[0]
    answers = []
    async with http.get(base + "/nowhere") as r:  # aiohttp: 404
        answers.append((r.status, r.headers))
    async with http.post(server.url, data=b"x", headers={"Content-Type": "text/plain"}) as r:  # 415
        answers.append((r.status, r.headers))
    async with http.get(f"http://127.0.0.1:{server.admin_port}/healthz") as r:
        answers.append((r.status, r.headers))
    for status, headers in answers:
        assert headers.get("Server") == "ahp-gateway", (status, dict(headers))
        assert not any("python" in v.lower() or "aiohttp" in v.lower() for v in headers.values()), dict(headers)
    async with aiohttp.ClientSession() as fresh:  # a connection aiohttp never took over: the fast lane
        async with fresh.post(server.url, json=intercept(tool_before())) as r:
            assert r.status == 200 and "Server" not in r.headers, dict(r.headers)
