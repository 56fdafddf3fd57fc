"""Process lifecycle: start listeners on a snapshot, reload, drain and stop.

``GatewayServer`` is what ``ahp-gateway serve`` runs and what tests start on ephemeral loopback
ports. Every resource opened in :meth:`start` is closed in :meth:`stop`.
"""

from __future__ import annotations

import asyncio
import logging
import signal
from typing import Any

from aiohttp import web

from gateway.config.load import LoadedConfig
from gateway.dispatch import Engine
from gateway.runtime import RuntimeHolder, build
from gateway.server.admin import Readiness, build_admin
from gateway.server.http import build_app
from gateway.telemetry import Telemetry
from gateway.upstream.http import ClientPool

log = logging.getLogger("ahp_gateway")


class GatewayServer:
    def __init__(
        self,
        loaded: LoadedConfig,
        *,
        host: str | None = None,
        port: int | None = None,
        admin_port: int | None = None,
        telemetry: Telemetry | None = None,
        reuse_port: bool = False,
    ) -> None:
        cfg = loaded.config
        self.loaded = loaded
        self.host = host or cfg.listen.host
        self.port = cfg.listen.port if port is None else port
        self.admin_host = cfg.admin.host
        self.admin_port = cfg.admin.port if admin_port is None else admin_port
        self.telemetry = telemetry
        self.reuse_port = reuse_port
        self.readiness = Readiness()
        self.pool = ClientPool()
        self.holder: RuntimeHolder | None = None
        self.engine: Engine | None = None
        self._runners: list[web.AppRunner] = []
        self._stopped = asyncio.Event()

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}{self.loaded.config.listen.path}"

    async def start(self) -> None:
        snapshot = build(self.loaded, self.pool)
        self.holder = RuntimeHolder(snapshot)
        self.engine = Engine(self.holder, self.telemetry)
        self.engine.start()
        self.readiness.config_loaded = True
        holder = self.holder
        app = build_app(self.engine, self.loaded.config.listen.path, lambda: holder.current.loaded.config.limits.maxBodyBytes)
        self.port = await self._serve(app, self.host, self.port, handler_cancellation=True)
        metrics = getattr(self.telemetry, "render", None)
        admin = build_admin(self.readiness, metrics)
        self.admin_port = await self._serve(admin, self.admin_host, self.admin_port, handler_cancellation=False)
        self.readiness.listening = True

    async def _serve(self, app: web.Application, host: str, port: int, *, handler_cancellation: bool) -> int:
        runner = web.AppRunner(app, access_log=None, handler_cancellation=handler_cancellation)
        await runner.setup()
        site = web.TCPSite(runner, host, port, reuse_port=self.reuse_port or None, backlog=1024)
        await site.start()
        self._runners.append(runner)
        server = site._server
        assert server is not None
        sockets: Any = getattr(server, "sockets", None)
        return int(sockets[0].getsockname()[1]) if sockets else port

    async def stop(self) -> None:
        self.readiness.listening = False
        for runner in self._runners:
            await runner.cleanup()
        self._runners.clear()
        if self.engine is not None:
            await self.engine.drain(2.0)
            await self.engine.aclose()
        if self.holder is not None:
            for upstream in self.holder.current.upstreams:
                await upstream.aclose()
        await self.pool.aclose()
        self._stopped.set()

    async def run_forever(self) -> None:
        loop = asyncio.get_running_loop()
        stop = asyncio.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await stop.wait()
        log.info("shutting down")
        await self.stop()
