"""S1: the bare one-hop floor. Reads the request body, POSTs the bytes upstream with one pooled
``aiohttp.ClientSession``, returns the upstream's status and bytes. No parsing, no validation.

    python -m bench.forwarder --port 9000 --upstream http://127.0.0.1:9001/
"""

from __future__ import annotations

import argparse
import asyncio
import signal

import aiohttp
from aiohttp import web

_JSON = "application/json"


async def serve(host: str, port: int, upstream: str) -> None:
    session = aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=0, limit_per_host=256, keepalive_timeout=30.0),
        auto_decompress=False,
        skip_auto_headers=("User-Agent", "Accept-Encoding"),
    )
    headers = {"Content-Type": _JSON, "Accept": _JSON}

    async def handle(request: web.Request) -> web.Response:
        body = await request.read()
        async with session.post(upstream, data=body, headers=headers, allow_redirects=False) as response:
            answer = await response.read()
            if not answer:
                return web.Response(status=response.status)
            return web.Response(status=response.status, body=answer, content_type=_JSON)

    app = web.Application()
    app.router.add_post("/", handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, host, port, backlog=1024).start()
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await runner.cleanup()
    await session.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--upstream", required=True)
    args = parser.parse_args(argv)
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    asyncio.run(serve(args.host, args.port, args.upstream))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
