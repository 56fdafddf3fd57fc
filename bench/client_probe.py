"""Check an upstream HTTP client candidate against the gateway's upstream guarantees that are
hardest to keep, on loopback, in a few seconds:

1. ``caFile`` replaces platform trust: an https server whose issuer is in the (simulated, via
   ``SSL_CERT_FILE``) platform store but not in the configured bundle must be refused;
2. asyncio cancellation aborts the call: cancelling the awaiting task must close the connection,
   so the upstream's handler is cancelled and no pooled connection stays busy;
3. no redirects are followed; 4. an answer is never read beyond a bound (streamed read, stop at
   4 MiB of a 64 MiB answer).

    python -m bench.client_probe            # aiohttp, pyreqwest and h1 (the gateway's), one line per check
"""

from __future__ import annotations

import asyncio
import os
import ssl
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from aiohttp import web

BOUND = 4 * 1024 * 1024
OFFERED = 64 * 1024 * 1024


class Upstream:
    def __init__(self) -> None:
        self.started = 0
        self.cancelled = 0
        self.sent = 0

    def app(self) -> web.Application:
        async def hang(request: web.Request) -> web.Response:
            self.started += 1
            try:
                await asyncio.sleep(5)
            except asyncio.CancelledError:
                self.cancelled += 1
                raise
            return web.Response(text="late")

        async def redirect(request: web.Request) -> web.Response:
            return web.Response(status=307, headers={"Location": "/hang"})

        async def huge(request: web.Request) -> web.StreamResponse:
            response = web.StreamResponse(headers={"Content-Type": "application/json"})
            await response.prepare(request)
            chunk = b" " * 65536
            try:
                while self.sent < OFFERED:
                    await response.write(chunk)
                    self.sent += len(chunk)
            except (ConnectionError, RuntimeError):
                pass
            return response

        async def ok(request: web.Request) -> web.Response:
            return web.Response(text="{}", content_type="application/json")

        app = web.Application()
        app.router.add_post("/hang", hang)
        app.router.add_post("/redirect", redirect)
        app.router.add_post("/huge", huge)
        app.router.add_post("/", ok)
        return app


async def serve(app: web.Application, context: ssl.SSLContext | None) -> tuple[web.AppRunner, int]:
    runner = web.AppRunner(app, access_log=None, handler_cancellation=True)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=context)
    await site.start()
    return runner, site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]


# Each candidate: post(url, ca_file) -> status; stream(url, bound) -> bytes read
Post = Callable[[str, str | None], Awaitable[int]]


def aiohttp_candidate() -> tuple[Post, Callable[[str, int], Awaitable[int]], Callable[[], Awaitable[None]]]:
    import aiohttp

    session = aiohttp.ClientSession(auto_decompress=False)

    async def post(url: str, ca_file: str | None) -> int:
        context: Any = ssl.create_default_context(cafile=ca_file) if ca_file else True
        async with session.post(url, data=b"{}", allow_redirects=False, ssl=context) as response:
            await response.read()
            return response.status

    async def stream(url: str, bound: int) -> int:
        async with session.post(url, data=b"{}") as response:
            size = 0
            async for chunk in response.content.iter_chunked(65536):
                size += len(chunk)
                if size > bound:
                    break
            return size

    return post, stream, session.close


def pyreqwest_candidate() -> tuple[Post, Callable[[str, int], Awaitable[int]], Callable[[], Awaitable[None]]]:
    from pyreqwest.client import ClientBuilder

    def build(ca_file: str | None) -> Any:
        builder = ClientBuilder().follow_redirects(False).gzip(False).brotli(False).zstd(False).deflate(False)
        if ca_file:
            builder = builder.add_root_certificate_pem(Path(ca_file).read_bytes())
        return builder.build()

    plain = build(None)
    clients: dict[str, Any] = {}

    async def post(url: str, ca_file: str | None) -> int:
        client = plain if ca_file is None else clients.setdefault(ca_file, build(ca_file))
        response = await client.post(url).body_bytes(b"{}").build().send()
        return int(response.status)

    async def stream(url: str, bound: int) -> int:
        async with plain.post(url).body_bytes(b"{}").build_streamed() as response:
            size = 0
            while (chunk := await response.body_reader.read_chunk()) is not None:
                size += len(chunk)
                if size > bound:
                    break
            return size

    async def close() -> None:
        for client in (plain, *clients.values()):
            await client.close()

    return post, stream, close


def h1_candidate() -> tuple[Post, Callable[[str, int], Awaitable[int]], Callable[[], Awaitable[None]]]:
    """The gateway's own client (gateway.upstream.h1); its bound is the answer limit itself."""
    from gateway.upstream.h1 import AnswerTooLarge, H1Client, Target

    client = H1Client()

    async def post(url: str, ca_file: str | None) -> int:
        context = ssl.create_default_context(cafile=ca_file) if ca_file else None
        return (await client.post(Target(url, {}, context), b"", b"{}", limit=BOUND)).status

    async def stream(url: str, bound: int) -> int:
        try:
            response = await client.post(Target(url, {}, None), b"", b"{}", limit=bound)
        except AnswerTooLarge:
            return bound  # failed the moment the answer passed the bound
        return len(response.body or b"")

    async def close() -> None:
        client.close()

    return post, stream, close


async def probe(name: str, make: Callable[[], Any], tmp: Path) -> list[str]:
    import trustme

    platform, pinned = trustme.CA(), trustme.CA()
    platform.cert_pem.write_to_path(str(tmp / "platform.pem"))
    pinned.cert_pem.write_to_path(str(tmp / "pinned.pem"))
    os.environ["SSL_CERT_FILE"] = str(tmp / "platform.pem")  # read when a client loads default trust
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    platform.issue_cert("127.0.0.1").configure_cert(context)
    upstream = Upstream()
    tls_runner, tls_port = await serve(upstream.app(), context)
    runner, port = await serve(upstream.app(), None)
    post, stream, close = make()
    lines = []
    try:
        try:
            status = await post(f"https://127.0.0.1:{tls_port}/", str(tmp / "pinned.pem"))
            lines.append(
                f"{name}: caFile replaces platform trust: NO (server trusted via the platform store, HTTP {status})"
            )
        except Exception as exc:  # noqa: BLE001 - any refusal is the expected outcome
            lines.append(f"{name}: caFile replaces platform trust: yes (refused: {exc.__class__.__name__})")

        task = asyncio.ensure_future(post(f"http://127.0.0.1:{port}/hang", None))
        for _ in range(200):
            await asyncio.sleep(0.01)
            if upstream.started:
                break
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            pass
        for _ in range(100):
            await asyncio.sleep(0.01)
            if upstream.cancelled:
                break
        lines.append(
            f"{name}: cancellation aborts the upstream call: "
            + (
                "yes (upstream handler cancelled)"
                if upstream.cancelled
                else "NO (upstream handler still running 1 s later)"
            )
        )

        status = await post(f"http://127.0.0.1:{port}/redirect", None)
        lines.append(f"{name}: redirects not followed: {'yes' if status == 307 else 'NO'} (HTTP {status})")

        read = await stream(f"http://127.0.0.1:{port}/huge", BOUND)
        lines.append(
            f"{name}: streamed read stops at the bound: {'yes' if read <= BOUND + (1 << 20) else 'NO'} ({read:,} bytes read)"
        )
    finally:
        await close()
        await runner.cleanup()
        await tls_runner.cleanup()
    return lines


async def main() -> None:
    candidates = {"aiohttp": aiohttp_candidate, "pyreqwest": pyreqwest_candidate, "h1": h1_candidate}
    for name, make in candidates.items():
        with tempfile.TemporaryDirectory() as tmp:
            try:
                lines = await probe(name, make, Path(tmp))
            except ImportError as exc:
                lines = [f"{name}: not installed ({exc})"]
            print("\n".join(lines))


if __name__ == "__main__":
    asyncio.run(main())
