"""The one place a gateway is put together: client pool, snapshot holder, telemetry, uploads
forwarder, capture, the ``state.redis`` client and rate limiter, and the :class:`~gateway.pipeline.gateway.Gateway` over them, and the order
they start, drain and close in.

Every runner uses it (``serve``, ``stdio``, ``explain --call``, ``replay``, the benchmarks), so a
resource added to the engine is opened and closed everywhere at once, in the same order. What is
not the engine's stays with the runner: listeners, the inbound gate and the reload watcher.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import TYPE_CHECKING

from gateway.config.issues import ConfigError, Issue, json_path
from gateway.config.load import LoadedConfig
from gateway.observability.capture import Capture, capture_for
from gateway.observability.decisions import DecisionLog
from gateway.observability.metrics import Metrics
from gateway.observability.sink import Observability
from gateway.pipeline.gateway import Gateway
from gateway.pipeline.intercept import cel_error_sink
from gateway.ratelimit import RateLimiter
from gateway.runtime import RuntimeConfig, RuntimeHolder, build, unresolved_credentials
from gateway.telemetry import Telemetry
from gateway.uploads.forward import Forwarder
from gateway.uploads.store import UploadStore
from gateway.upstream.http import ClientPool

if TYPE_CHECKING:
    from gateway.state.redis import RedisStore
    from gateway.uploads.redis_store import RedisUploadStore


def observability_for(loaded: LoadedConfig) -> Observability:
    """Metrics, the decision log (``log.decisions``) and tracing as the configuration sets them."""
    cfg = loaded.config
    metrics = Metrics()
    decisions = None
    target = cfg.log.decisions
    if target != "off":
        if target not in ("stdout", "stderr"):
            target = str(loaded.base_dir / target)
        decisions = DecisionLog(
            target,
            include_content=cfg.log.includeContent,
            sample_no_effect=cfg.log.sampleNoEffect,
            on_drop=metrics.decision_log_drops.inc,
        )
    return Observability(metrics, decisions, propagate=cfg.tracing.propagate, spans=cfg.tracing.otel)


def compile_snapshot(loaded: LoadedConfig, pool: ClientPool | None = None) -> RuntimeConfig:
    """The runtime snapshot exactly as ``serve`` compiles it (``check`` reports this one)."""
    return build(loaded, pool if pool is not None else ClientPool())


def state_for(
    loaded: LoadedConfig, metrics: Metrics | None, *, uploads: bool = True, limits: bool = True
) -> RedisStore | None:
    """The ``state.redis`` client (connections are opened on first use) of a runner that may
    store uploads or enforce limits (a reload may add a shared limit, so it exists whenever
    ``state.redis`` is configured). Nothing else imports the Redis client."""
    redis = loaded.config.state.redis
    if redis is None or not (uploads or limits):
        return None
    from gateway.state.redis import RedisStore

    on_timing: Callable[[str, float], None] | None = None
    on_error: Callable[[str], None] | None = None
    if metrics is not None:

        def on_timing(op: str, seconds: float) -> None:
            metrics.child(metrics.state_seconds, op).observe(seconds)

        def on_error(op: str) -> None:
            metrics.child(metrics.state_errors, op).inc()

        for op in ("ratelimit", "upload_reserve", "upload_commit", "upload_release", "upload_get", "ping"):
            metrics.child(metrics.state_errors, op)
    try:
        return RedisStore(redis, loaded.base_dir, on_timing=on_timing, on_error=on_error)
    except OSError as exc:  # the password file: a clean configuration error, never a traceback
        where = json_path(("state", "redis", "passwordFile"))
        raise ConfigError([Issue(str(loaded.path), where, f"cannot read it ({exc.strerror})")]) from None


def limiter_for(
    loaded: LoadedConfig, metrics: Metrics | None, state: RedisStore | None, telemetry: Telemetry
) -> RateLimiter:
    """Local buckets, in-flight counts and the shared client; ``ahp_gateway_rate_limited_total``,
    and a key that fails to evaluate counted and logged as a routing condition's would be."""
    on_limited: Callable[[str], None] | None = None
    if metrics is not None:

        def on_limited(limit: str) -> None:
            metrics.child(metrics.rate_limited, limit).inc()

        for limit in loaded.config.rateLimits:
            metrics.child(metrics.rate_limited, limit.id)
    return RateLimiter(state, on_limited, on_error=cel_error_sink(telemetry))


def uploads_for(
    loaded: LoadedConfig, metrics: Metrics | None, state: RedisStore | None = None
) -> tuple[UploadStore | RedisUploadStore | None, Forwarder | None]:
    """The upload store (what the receiver route writes) and the per-upstream forwarder (what the
    pipeline re-uploads from), when ``uploads`` is configured."""
    cfg = loaded.config
    if cfg.uploads is None:
        return None, None
    on_bytes: Callable[[str, int], None] | None = None
    on_outcome: Callable[[str, str], None] | None = None
    if metrics is not None:

        def on_bytes(tier: str, value: int) -> None:
            metrics.child(metrics.upload_bytes, tier).set(value)

        def on_outcome(hook: str, outcome: str) -> None:
            metrics.child(metrics.upstream_uploads, hook, outcome).inc()

    store: UploadStore | RedisUploadStore
    if cfg.uploads.storage.type == "redis" and state is not None:
        from gateway.uploads.redis_store import RedisUploadStore

        store = RedisUploadStore(cfg.uploads.storage, state, hold_seconds=cfg.limits.bodyTimeoutMs / 1000)
    else:
        store = UploadStore(cfg.uploads.storage, loaded.base_dir, on_bytes=on_bytes)
    return store, Forwarder(store, on_outcome, reuse_seconds=cfg.uploads.reuseSeconds)


class Assembly:
    """A gateway and everything it owns. Built in order (pool, snapshot, holder, uploads,
    capture, gateway); :meth:`start` starts the observation workers; stopping runs
    :meth:`drain`, :meth:`release`, :meth:`close_uploads`, :meth:`close_sinks` (:meth:`aclose`
    does all four), so a runner with listeners can close them, and its gate, in between.

    ``snapshot``: an already compiled one (``explain``, ``replay``); ``telemetry``: the sink
    (default: :func:`observability_for`); ``uploads`` / ``capture``: build the uploads store and
    forwarder, and ``log.capture``, as configured (a server does, one-shot commands do not);
    ``limits``: enforce ``rateLimits`` (default: when no snapshot is given, as a server; a
    replayed or explained call must not spend anyone's tokens)."""

    def __init__(
        self,
        loaded: LoadedConfig,
        *,
        snapshot: RuntimeConfig | None = None,
        telemetry: Telemetry | None = None,
        uploads: bool = False,
        capture: bool = False,
        limits: bool | None = None,
    ) -> None:
        self.loaded = loaded
        self.pool = snapshot.pool if snapshot is not None else ClientPool()
        self.telemetry: Telemetry = telemetry if telemetry is not None else observability_for(loaded)
        self.holder = RuntimeHolder(snapshot if snapshot is not None else compile_snapshot(loaded, self.pool))
        metrics = self.observability.metrics if self.observability is not None else None
        serving = snapshot is None if limits is None else limits
        self.state = state_for(loaded, metrics, uploads=uploads, limits=serving)
        self.store, self.forwarder = uploads_for(loaded, metrics, self.state) if uploads else (None, None)
        self.capture: Capture | None = capture_for(loaded) if capture else None
        self.limiter = limiter_for(loaded, metrics, self.state, self.telemetry) if serving else None
        self.gateway = Gateway(
            self.holder, self.telemetry, uploads=self.forwarder, capture=self.capture, limiter=self.limiter
        )

    @property
    def observability(self) -> Observability | None:
        """The production sink, when that is what telemetry is (metrics, admin ``/metrics``)."""
        return self.telemetry if isinstance(self.telemetry, Observability) else None

    def compile(self, loaded: LoadedConfig) -> RuntimeConfig:
        """A new snapshot for a reload: same pool, the live circuit breakers."""
        return build(loaded, self.pool, breakers=self.holder.breakers)

    def preregister(self, snap: RuntimeConfig) -> None:
        """Metric series of ``snap``'s hooks, breakers and expressions, present from zero."""
        if self.observability is not None:
            metrics = self.observability.metrics
            metrics.preregister([h.id for h in snap.loaded.hooks], [b[0] for b in snap.breakers], snap.expression_ids)
            metrics.circuits(self.holder.breakers.states())

    def unresolved_credentials(self) -> dict[str, str]:
        """Upstream → why its credential cannot be resolved now (``/readyz``; the gauge is set)."""
        current = self.holder.current
        found = unresolved_credentials(current)
        if self.forwarder is not None:  # upload bindings: their own credentials (protocol §13.2)
            for target in self.forwarder.targets(current.loaded).values():
                check = getattr(target.authorizer, "unresolved", None)
                problem = check() if check is not None else None
                if problem is not None:
                    found.setdefault(f"{target.hook_id}/upload", problem)
        if self.observability is not None:
            self.observability.metrics.credentials(found)
        return found

    def start(self) -> None:
        self.gateway.start()
        if self.state is not None:
            self.state.start()
        self.preregister(self.holder.current)

    async def drain(self, timeout: float) -> None:
        """Queued observations and shadow calls finish, within ``timeout`` seconds."""
        await self.gateway.drain(timeout)

    async def release(self) -> None:
        """Stop the engine, then close the live snapshot's upstreams and the pool they share."""
        await self.gateway.aclose()
        for upstream in self.holder.current.upstreams:
            with contextlib.suppress(Exception):
                await upstream.aclose()
        await self.pool.aclose()

    async def close_uploads(self) -> None:
        if self.forwarder is not None:
            await self.forwarder.aclose()
        if self.store is not None:
            self.store.close()
        if self.state is not None:  # after the uploads that use it
            await self.state.aclose()

    def close_sinks(self) -> None:
        """Last, so everything before could still be recorded: the decision log and capture."""
        close = getattr(self.telemetry, "close", None)
        if close is not None:
            close()
        if self.capture is not None:
            self.capture.close()
            self.capture = None

    async def aclose(self, drain_timeout: float) -> None:
        await self.drain(drain_timeout)
        await self.release()
        await self.close_uploads()
        self.close_sinks()
