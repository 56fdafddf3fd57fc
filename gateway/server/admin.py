"""The admin listener: ``/healthz`` (alive), ``/readyz`` (config loaded, listeners up, not
draining, every configured upstream credential resolvable) and ``/metrics`` (Prometheus text
format, when observability is wired in)."""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from gateway.server.limits import without_versions


@dataclass
class Readiness:
    config_loaded: bool = False
    listening: bool = False
    draining: bool = False
    credentials: Callable[[], dict[str, str]] | None = None
    """Upstream → why its credential cannot be resolved now (never the secret); not ready while any."""

    @property
    def ready(self) -> bool:
        return self.config_loaded and self.listening and not self.draining


def build_admin(
    readiness: Readiness,
    metrics: Callable[[], Awaitable[tuple[bytes, str]]] | None = None,
    extra: Callable[[], dict[str, Any]] | None = None,
) -> web.Application:
    app = web.Application()

    async def healthz(_: web.Request) -> web.Response:
        return web.json_response({"status": "alive"})

    async def readyz(_: web.Request) -> web.Response:
        unresolved = readiness.credentials() if readiness.credentials is not None else {}
        ready = readiness.ready and not unresolved
        body = {
            "ready": ready,
            "configLoaded": readiness.config_loaded,
            "listening": readiness.listening,
            "draining": readiness.draining,
            "pid": os.getpid(),
            "unresolvedCredentials": unresolved,
            **(extra() if extra is not None else {}),
        }
        return web.json_response(body, status=200 if ready else 503)

    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    if metrics is not None:

        async def metrics_handler(_: web.Request) -> web.Response:
            payload, content_type = await metrics()
            return web.Response(body=payload, headers={"Content-Type": content_type})

        app.router.add_get("/metrics", metrics_handler)
    return without_versions(app)
