"""Process lifecycle: start listeners on a snapshot, hot reload, drain and stop.

``GatewayServer`` is what ``ahp-gateway serve`` runs (once per worker) and what tests start on
ephemeral loopback ports. The engine and what it owns come from :mod:`gateway.assemble`; the server
adds the listeners, the inbound gate, the admin listener and the reload watcher. Every resource
opened in :meth:`start` is closed in :meth:`stop`.

Reload (SIGHUP, or a change of any configuration or policy file, ConfigMap symlink swaps
included): the new configuration is validated and compiled completely beside the live one, then
swapped in one assignment; requests already running finish on the snapshot they started with, and
the old snapshot's upstream resources close once its last request is done. A bad configuration
keeps the last good one, logs every error and sets the reload metrics.

Shutdown (SIGTERM): not ready at once, keep serving for ``shutdown.drainDelaySeconds`` (endpoint
removal lags in Kubernetes), stop accepting, let in-flight requests finish within
``shutdown.drainTimeoutSeconds``, flush observations, close upstream sessions, exit 0.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
import signal
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from aiohttp import web

from gateway import tasks
from gateway.assemble import Assembly, observability_for
from gateway.config.issues import ConfigError
from gateway.config.load import LoadedConfig, load
from gateway.config.models import Limits, LocalTransport
from gateway.observability.capture import Capture
from gateway.observability.sink import Observability
from gateway.pipeline.gateway import Gateway
from gateway.preflight import require_resolved
from gateway.runtime import RuntimeHolder
from gateway.server.admin import Readiness, build_admin
from gateway.server.fastlane import FastLane, Lane
from gateway.server.guard import Guard, build_guard, transport_peer
from gateway.server.http import build_app
from gateway.server.limits import GuardedSite, Listeners
from gateway.telemetry import Telemetry

log = logging.getLogger("ahp_gateway")
RESTART_ONLY = ("listen", "admin", "observe", "metrics", "log", "tracing", "inbound", "uploads", "state")


def watched_paths(loaded: LoadedConfig) -> list[Path]:
    """The configuration, registration and policy files/directories a reload depends on."""
    paths = list(loaded.files)
    for hook in loaded.hooks:
        if isinstance(hook.transport, LocalTransport):
            paths.extend(loaded.base_dir / p for p in hook.transport.policies)
    return paths


def signature(paths: list[Path]) -> tuple[Any, ...]:
    """Cheap change detector; stat() follows symlinks, so a ConfigMap ``..data`` swap shows."""
    out: list[Any] = []
    for path in paths:
        try:
            if path.is_dir():
                for child in sorted(path.rglob("*")):
                    if child.suffix in (".yaml", ".yml"):
                        st = child.stat()
                        out.append((str(child), st.st_ino, st.st_mtime_ns, st.st_size))
            else:
                st = path.stat()
                out.append((str(path), st.st_ino, st.st_mtime_ns, st.st_size))
        except OSError:
            out.append((str(path), None))
    return tuple(out)


def fast_lane(gateway: Gateway, guard: Guard, guards: Listeners, path: str, limits: Any) -> Lane:
    """The main listener's fast lane, authenticating exactly as the aiohttp routes do."""
    gate = guard.gate
    lane = Lane(
        path,
        gateway.handle,
        limits,
        authenticate=gate.authenticate,
        peer=lambda transport: transport_peer(transport, gate),
        on_body_timeout=guards.body_timeout,
        native=True,
    )
    main = guards.main
    main.fast = lambda header_timeout: FastLane(main, header_timeout, lane)
    return lane


def _fresh(observability: Observability, assembly: Assembly) -> Callable[[], Awaitable[tuple[bytes, str]]]:
    """``/metrics`` with the credential gauges as fresh as the scrape."""

    async def render() -> tuple[bytes, str]:
        assembly.unresolved_credentials()
        return await observability.render()

    return render


class ListenError(OSError):
    """A listener could not bind its address (in use, not local, not permitted): one line for the
    operator naming it, not a traceback."""

    ERRNOS = frozenset({errno.EADDRINUSE, errno.EADDRNOTAVAIL, errno.EACCES})

    def __init__(self, code: int, address: str) -> None:
        super().__init__(code, os.strerror(code).lower())
        self.address = address

    def __str__(self) -> str:
        return f"cannot listen on {self.address}: {self.strerror}"


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
        self.telemetry: Telemetry = telemetry or observability_for(loaded)
        self.reuse_port = reuse_port
        self.readiness = Readiness()
        self.assembly: Assembly | None = None
        self.guard: Guard | None = None
        self._app_runner: web.AppRunner | None = None
        self._site: GuardedSite | None = None
        self._lane: Lane | None = None
        self._admin_runner: web.AppRunner | None = None
        self._admin_site: GuardedSite | None = None
        self._watch_task: asyncio.Task[None] | None = None
        self._signature: tuple[Any, ...] = ()
        self._reload_lock = asyncio.Lock()
        self._rewatch = asyncio.Event()
        self.guards: Listeners | None = None

    @property
    def url(self) -> str:
        scheme = "https" if self.loaded.config.inbound.tls is not None else "http"
        return f"{scheme}://{self.host}:{self.port}{self.loaded.config.listen.path}"

    @property
    def observability(self) -> Observability | None:
        return self.telemetry if isinstance(self.telemetry, Observability) else None

    @property
    def holder(self) -> RuntimeHolder | None:
        return self.assembly.holder if self.assembly is not None else None

    @property
    def gateway(self) -> Gateway | None:
        return self.assembly.gateway if self.assembly is not None else None

    @property
    def lane(self) -> Lane | None:
        """The main listener's fast lane and its connections (None with ``listen.fastLane: false``)."""
        return self._lane

    @property
    def recording(self) -> Capture | None:
        """log.capture: the intercepts received, for replay (None when off)."""
        return self.assembly.capture if self.assembly is not None else None

    async def start(self) -> None:
        assembly = Assembly(self.loaded, telemetry=self.telemetry, uploads=True, capture=True)
        holder, gateway = assembly.holder, assembly.gateway
        cfg = self.loaded.config
        metrics_ = self.observability.metrics if self.observability is not None else None
        try:
            self.guard = build_guard(cfg, self.loaded.base_dir, self.host, metrics_, assembly.store)
        except BaseException:  # a refused exposure or a broken tokens file: nothing stays open
            await assembly.aclose(0.0)
            raise
        self.assembly = assembly
        assembly.start()
        self.readiness.config_loaded = True
        uploads = cfg.uploads.path if cfg.uploads is not None else None
        self.guards = guards = Listeners(
            lambda: holder.current.loaded.config.limits, getattr(self.observability, "metrics", None)
        )

        def limits() -> Limits:
            return holder.current.loaded.config.limits

        app = build_app(gateway, cfg.listen.path, limits, guards.body_timeout, self.guard, uploads)
        if cfg.listen.fastLane:
            self._lane = fast_lane(gateway, self.guard, guards, cfg.listen.path, limits)
        self._app_runner, self._site = await self._serve(
            app, self.host, self.port, cancel=True, guards=guards, ssl_context=self.guard.ssl_context
        )
        self.port = self._site.bound_port
        metrics = None
        if self.observability is not None and cfg.metrics.enabled:
            metrics = _fresh(self.observability, assembly)

        self.readiness.credentials = assembly.unresolved_credentials
        admin = build_admin(
            self.readiness,
            metrics,
            extra=lambda: {
                "openCircuits": holder.breakers.open(),
                "unreadyStdio": holder.breakers.unready_pools(),
                **({"stateRedis": assembly.state.status()} if assembly.state is not None else {}),
            },
        )
        self._admin_runner, self._admin_site = await self._serve(
            admin, self.admin_host, self.admin_port, cancel=False, guards=guards
        )
        self.admin_port = self._admin_site.bound_port
        self.readiness.listening = True
        self._signature = signature(watched_paths(self.loaded))
        if cfg.reload.watch:
            self._watch_task = tasks.spawn(self._watch(), name="config-watch")

    async def _serve(
        self,
        app: web.Application,
        host: str,
        port: int,
        *,
        cancel: bool,
        guards: Listeners,
        ssl_context: Any = None,
    ) -> tuple[web.AppRunner, GuardedSite]:
        timeout = self.loaded.config.shutdown.drainTimeoutSeconds
        options = guards.runner_options(main=cancel)
        runner = web.AppRunner(app, handler_cancellation=cancel, shutdown_timeout=timeout, **options)
        await runner.setup()
        guard = guards.main if cancel else guards.admin
        site = GuardedSite(
            runner,
            host,
            port,
            guard=guard,
            options=options,
            reuse_port=self.reuse_port or None,
            backlog=1024,
            ssl_context=ssl_context,
        )
        try:
            await site.start()
        except OSError as exc:
            await runner.cleanup()
            if exc.errno in ListenError.ERRNOS:
                raise ListenError(exc.errno, f"{host}:{port}") from exc
            raise
        return runner, site

    # ------------------------------------------------------------------ reload
    async def reload(self) -> bool:
        """Validate and compile the configuration again; swap only if all of it is good."""
        assembly = self.assembly
        assert assembly is not None
        async with self._reload_lock:
            started = time.perf_counter()
            try:
                loaded = await asyncio.to_thread(load, self.loaded.path)
                changed = [k for k in RESTART_ONLY if getattr(self.loaded.config, k) != getattr(loaded.config, k)]
                if changed:
                    # Applying the rest while these stay as they were would report a success that
                    # is not one (a revoked token still valid, capture still on): refuse it whole,
                    # before anything of it is compiled or started.
                    log.error(
                        "reload rejected: %s changed, which only a restart applies; "
                        "keeping the last good configuration",
                        ", ".join(changed),
                    )
                    self._reloaded(False)
                    return False
                require_resolved(loaded)  # a credential or file serve could not use: as at start
                snapshot = assembly.compile(loaded)
            except ConfigError as exc:
                for issue in exc.issues:
                    log.error("reload rejected: %s", issue)
                log.error("keeping the last good configuration (%d error(s))", len(exc.issues))
                self._reloaded(False)
                return False
            except Exception:  # a loader bug must fail the reload, never the watcher or the server
                log.exception("reload failed; keeping the last good configuration")
                self._reloaded(False)
                return False
            holder = assembly.holder
            old = holder.current
            holder.swap(snapshot)
            self.loaded = loaded
            assembly.preregister(snapshot)
            self._reloaded(True)
            self._rewatch.set()
            watching = self._watch_task is not None and not self._watch_task.done()
            if loaded.config.reload.watch and not watching:  # reload.watch turned on
                self._watch_task = tasks.spawn(self._watch(), name="config-watch")
            log.info("configuration reloaded in %.1f ms", (time.perf_counter() - started) * 1000)
            tasks.spawn(holder.retire(old, loaded.config.shutdown.drainTimeoutSeconds), name="retire-snapshot")
            return True

    def _reloaded(self, ok: bool) -> None:
        self._signature = signature(watched_paths(self.loaded))
        if self.observability is not None:
            self.observability.reloaded(ok)

    def _watching(self) -> bool:
        return self.loaded.config.reload.watch

    async def _watch(self) -> None:
        """Poll the watched files; ``reload.watch`` and ``reload.intervalSeconds`` are read from
        the live configuration each time, so a reload applies them too."""
        while self._watching():
            self._rewatch.clear()
            with contextlib.suppress(TimeoutError):  # a reload wakes it: a new interval applies now
                await asyncio.wait_for(self._rewatch.wait(), self.loaded.config.reload.intervalSeconds)
            if not self._watching():
                break
            current = await asyncio.to_thread(signature, watched_paths(self.loaded))
            if current != self._signature:
                log.info("configuration files changed; reloading")
                await self.reload()

    # ------------------------------------------------------------------ shutdown
    async def drain_and_stop(self, delay: float | None = None) -> None:
        """SIGTERM: not ready now, still serving for ``delay`` seconds, then drain and stop."""
        self.readiness.draining = True
        delay = self.loaded.config.shutdown.drainDelaySeconds if delay is None else delay
        log.info("draining: not ready; serving for %.1f s more before closing the listener", delay)
        await asyncio.sleep(delay)
        await self.stop()

    async def stop(self) -> None:
        self.readiness.listening = False
        if self._watch_task is not None:
            self._watch_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._watch_task
        if self._app_runner is not None:
            if self._site is not None:
                self._site.close_listener()  # the drain starts
            if self._lane is not None:
                await self._lane.drain(self.loaded.config.shutdown.drainTimeoutSeconds)
            await self._app_runner.cleanup()  # stops accepting, waits for in-flight handlers
            self._app_runner = None
        assembly = self.assembly
        if assembly is not None:
            await assembly.drain(self.loaded.config.shutdown.drainTimeoutSeconds)
            await assembly.release()
        if self.guard is not None:
            await self.guard.aclose()
        if assembly is not None:
            await assembly.close_uploads()
        if self._admin_runner is not None:
            if self._admin_site is not None:
                self._admin_site.close_listener()
            await self._admin_runner.cleanup()
            self._admin_runner = None
        if assembly is not None:
            assembly.close_sinks()

    async def run_forever(self) -> None:
        loop = asyncio.get_running_loop()
        stop = asyncio.Event()
        fast = asyncio.Event()
        loop.add_signal_handler(signal.SIGTERM, stop.set)

        def interrupt() -> None:
            fast.set()
            stop.set()

        loop.add_signal_handler(signal.SIGINT, interrupt)
        loop.add_signal_handler(signal.SIGHUP, lambda: tasks.spawn(self.reload(), name="sighup-reload"))
        await stop.wait()
        await self.drain_and_stop(0.0 if fast.is_set() else None)
        log.info("stopped (pid %d)", os.getpid())
