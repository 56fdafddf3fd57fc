"""The runtime snapshot: one immutable :class:`RuntimeConfig` compiled from a validated
configuration (upstream objects, CEL programs, routing tables per event type, discovery answers),
and the :class:`RuntimeHolder`, the one owner of which snapshot is live.

A request acquires the current snapshot once and uses it until it finishes, so a reload never
mixes two configurations within one request; a replaced snapshot is retired (its upstream
resources closed) once its last request has released it. What must outlive snapshots (circuit
breakers, and stdio pools whose settings did not change: their children stay warm) lives in
:class:`LiveState`, adopted on each swap; a retired snapshot never closes what the live one kept.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

from gateway import heap
from gateway.config.issues import ConfigError, Issue, json_path
from gateway.config.load import LoadedConfig, line_of
from gateway.config.models import Backend, GatewayBackend, HttpTransport, LocalTransport, StdioTransport
from gateway.credentials.bearer import BearerToken
from gateway.credentials.discovery import DiscoveredAuth, discovered_authorizer
from gateway.credentials.oauth import ClientCredentials
from gateway.discovery import configuration_result, manifest_result
from gateway.policy.backend import LocalPolicyUpstream
from gateway.policy.facts import derived_variables, references_facts
from gateway.policy.library import PolicyError, load_policies, require_rules
from gateway.protocol import content, schemas
from gateway.protocol.events import ALL_EVENTS, INTERCEPTABLE, matches
from gateway.ratelimit import Rule, compile_rules
from gateway.routing.cel import CelCompileError, Engine, Program, ValueProgram
from gateway.routing.context import ContextBuilder
from gateway.upstream.base import Upstream
from gateway.upstream.circuit import Breakers, CircuitBreaker
from gateway.upstream.http import ClientPool, HttpUpstream
from gateway.upstream.stdio import StdioUpstream
from gateway.upstream.v01 import versioned


@dataclass(frozen=True, slots=True)
class Route:
    """One subscription of one upstream, as the router needs it."""

    key: str
    hook_id: str
    mode: str
    upstream: Upstream
    selection: Mapping[str, str]
    identity: bool
    include_native: bool
    when: tuple[Program, ...]
    skip_on_error: tuple[bool, ...]
    timeout: float = 0.0
    fail_closed: bool = False
    shadow: bool = False
    breaker: CircuitBreaker | None = None
    """Shared by every route of the hook; None for the local backend (it cannot be down)."""


@dataclass(frozen=True, slots=True)
class RuntimeConfig:
    loaded: LoadedConfig
    gateway_id: str
    versions: tuple[str, ...]
    deadline: float
    parallel: bool
    intercept_routes: Mapping[str, tuple[Route, ...]]
    """Enforcing intercept subscriptions per event type, in registration order."""
    shadow_routes: Mapping[str, tuple[Route, ...]]
    observe_routes: Mapping[str, tuple[Route, ...]]
    """Observe subscriptions and intercept subscriptions (for uncalled deliveries) per event type."""
    manifest: dict[str, Any]
    configuration: dict[str, Any]
    upstreams: tuple[Upstream, ...]
    slots: Mapping[str, tuple[tuple[str, ...], ...]]
    schemas: schemas.Schemas
    cel: ContextBuilder
    """The CEL activation builder (variables, NUL guard, which events need one)."""
    observe_timeout: float
    max_inflight: int
    """Intercepts served at once before answering -32003 (0: unbounded)."""
    breakers: tuple[tuple[str, CircuitBreaker, int, float], ...]
    """(hook id, breaker, failure threshold, open seconds) per remote upstream."""
    pool: ClientPool
    """The HTTP client pool its upstreams (and their credentials) use."""
    expression_ids: tuple[str, ...] = ()
    rate_limits: tuple[Rule, ...] = ()
    """``rateLimits``, compiled (empty: no limit is checked, nothing is asked of Redis)."""
    limits_read_event: bool = True
    """Whether any rate limit key reads ``event`` (else its activation leaves it out)."""

    async def aclose(self) -> None:
        """Close what a snapshot built for one command (``explain --call``, ``replay``) opened:
        its upstreams, then their pool. A server closes upstreams per snapshot and the pool once."""
        for upstream in self.upstreams:
            with contextlib.suppress(Exception):
                await upstream.aclose()
        await self.pool.aclose()


def transport_of(upstream: Upstream) -> Upstream:
    """The transport under a protocol bridge (a 0.1 wrapper is rebuilt per snapshot, its
    transport may be kept)."""
    inner = getattr(upstream, "inner", None)
    return transport_of(inner) if inner is not None else upstream


class LiveState(Breakers):
    """The breakers and the stdio pools of the live configuration. A build reuses the pool of an
    unchanged stdio upstream (same :attr:`StdioUpstream.identity`); like breakers, nothing is
    registered until the snapshot is swapped in, so a failed build changes nothing."""

    def __init__(self) -> None:
        super().__init__()
        self.stdio: dict[tuple[Any, ...], StdioUpstream] = {}

    def adopt_pools(self, upstreams: tuple[Upstream, ...]) -> None:
        """Make exactly the stdio upstreams of the live snapshot the ones a build may keep, and
        start their ``minIdle`` children (a kept pool's are running already)."""
        pools = (transport_of(u) for u in upstreams)
        self.stdio = {u.identity: u for u in pools if isinstance(u, StdioUpstream)}
        for upstream in self.stdio.values():
            upstream.warm()

    def unready_pools(self) -> list[str]:
        """stdio upstreams whose children end without ever answering (for /readyz, like open circuits)."""
        return sorted(u.hook_id for u in self.stdio.values() if u.unready)


class RuntimeHolder:
    """The one owner of the live snapshot: what new requests start on, who still uses a
    replaced one, and the circuit breakers and stdio pools that outlive snapshots."""

    def __init__(self, current: RuntimeConfig, breakers: LiveState | None = None) -> None:
        self.current = current
        self.breakers = breakers or LiveState()
        self.breakers.adopt(current.breakers)
        self._adopt_pools(current)
        self._users: dict[int, int] = {}

    def _adopt_pools(self, snap: RuntimeConfig) -> None:
        self.breakers.adopt_pools(snap.upstreams)

    def acquire(self) -> RuntimeConfig:
        """The snapshot a new request runs on; give it back with :meth:`release`."""
        snap = self.current
        self._enter(snap)
        return snap

    def _enter(self, snap: RuntimeConfig) -> None:
        key = id(snap)
        self._users[key] = self._users.get(key, 0) + 1

    def release(self, snap: RuntimeConfig) -> None:
        key = id(snap)
        remaining = self._users[key] - 1
        if remaining:
            self._users[key] = remaining
        else:
            del self._users[key]

    def hold(self, snap: RuntimeConfig) -> Callable[[], None]:
        """One more user of ``snap`` (a queued observation); call the result to release it."""
        self._enter(snap)
        return lambda: self.release(snap)

    def users(self, snap: RuntimeConfig) -> int:
        """Requests still running on ``snap``."""
        return self._users.get(id(snap), 0)

    def swap(self, snapshot: RuntimeConfig) -> RuntimeConfig:
        """Make ``snapshot`` live (one assignment) and return the one it replaced."""
        old = self.current
        self.current = snapshot
        self.breakers.adopt(snapshot.breakers)
        self._adopt_pools(snapshot)
        return old

    async def retire(self, old: RuntimeConfig, timeout: float) -> None:
        """Close what only ``old`` used, once its last request has finished (or after
        ``timeout`` seconds)."""
        deadline = time.monotonic() + timeout
        while self.users(old) and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        live = {id(transport_of(u)) for u in self.current.upstreams}
        for upstream in old.upstreams:
            if id(transport_of(upstream)) not in live:  # a kept stdio pool is not closed
                with contextlib.suppress(Exception):
                    await upstream.aclose()


def unresolved_credentials(snap: RuntimeConfig) -> dict[str, str]:
    """Upstream hook id → why its configured credential cannot be resolved now (a token
    variable unset, a token or secret file deleted or emptied since start). Reasons name the
    variable or file, never a value; ``/readyz`` is false while this is not empty."""
    out: dict[str, str] = {}
    for hook, upstream in zip(snap.loaded.hooks, snap.upstreams, strict=False):
        check = getattr(transport_of(upstream), "unresolved", None)
        problem = check() if check is not None else None
        if problem is not None:
            out[hook.id] = problem
    return out


def _selection(sub: Any) -> tuple[Mapping[str, str], bool]:
    selection = sub.content.as_dict()
    return MappingProxyType(selection), all(v == "body" for v in selection.values())


def build(
    loaded: LoadedConfig, pool: ClientPool, cel: Engine | None = None, breakers: Breakers | None = None
) -> RuntimeConfig:
    """Compile ``loaded`` into a snapshot; every CEL or policy problem becomes a ConfigError.
    ``breakers``: the live ones, so a hook that stays keeps its breaker and, when it is a
    :class:`LiveState`, an unchanged stdio upstream keeps its pool (nothing is changed here)."""
    cfg = loaded.config
    engine = cel or Engine()
    canonical = schemas.load()
    issues: list[Issue] = []
    file_of_hooks = loaded.files[1] if cfg.registration else loaded.path

    def compile_when(source: str | None, items: tuple[str | int, ...], ident: str) -> tuple[Program, ...]:
        if source is None:
            return ()
        try:
            return (engine.compile(source, ident),)
        except CelCompileError as exc:
            where = f"{exc.line}:{exc.column}: " if exc.line else ""
            issues.append(
                Issue(str(file_of_hooks), json_path(items), f"CEL {where}{exc.message}", line_of(file_of_hooks, items))
            )
            return ()

    upstreams: list[Upstream] = []
    intercept: dict[str, list[Route]] = {e: [] for e in INTERCEPTABLE}
    shadow: dict[str, list[Route]] = {e: [] for e in INTERCEPTABLE}
    observe: dict[str, list[Route]] = {e: [] for e in ALL_EVENTS}
    live_breakers = breakers or Breakers()
    kept = breakers.stdio if isinstance(breakers, LiveState) else {}
    hook_breakers: list[tuple[str, CircuitBreaker, int, float]] = []
    expression_ids: list[str] = []
    for h_index, hook in enumerate(loaded.hooks):
        at: tuple[str | int, ...] = ("hooks", h_index)
        upstream = _upstream(hook, loaded, pool, engine, issues, at)
        if isinstance(upstream, StdioUpstream):
            upstream = kept.get(upstream.identity, upstream)
        if upstream is None:
            continue
        upstream = versioned(hook, upstream)
        upstreams.append(upstream)
        gw = hook if isinstance(hook, GatewayBackend) else None
        breaker: CircuitBreaker | None = None
        if upstream.kind != "local":
            cb = gw.circuitBreaker if gw else None
            if cb is None or cb.enabled:
                threshold, seconds = (cb.failureThreshold, cb.openSeconds) if cb else (5, 5.0)
                breaker = live_breakers.for_hook(hook.id, threshold, seconds)
                hook_breakers.append((hook.id, breaker, threshold, seconds))
        hook_when = compile_when(gw.when if gw else None, (*at, "when"), f"{hook.id}.when")
        hook_skip = (gw.onError == "skip",) * len(hook_when) if gw else ()
        is_shadow = bool(gw and gw.mode == "shadow")
        for s_index, sub in enumerate(hook.subscriptions):
            sub_when = compile_when(
                sub.when if gw else None, (*at, "subscriptions", s_index, "when"), f"{hook.id}#{s_index}.when"
            )
            when = hook_when + sub_when
            expression_ids.extend(p.id for p in when if p.id not in expression_ids)
            selection, identity = _selection(sub)
            common: dict[str, Any] = {
                "key": f"{hook.id}#{s_index}",
                "hook_id": hook.id,
                "upstream": upstream,
                "selection": selection,
                "identity": identity,
                "include_native": sub.includeNative,
                "when": when,
                "skip_on_error": hook_skip + (sub.onError == "skip",) * len(sub_when),
                "breaker": breaker,
            }
            if sub.mode == "intercept":
                closed = sub.failurePolicy == "fail-closed" or sub.scope == "managed" or sub.disableable is False
                route = Route(
                    mode="intercept",
                    timeout=sub.timeoutMs / 1000,
                    fail_closed=closed,
                    shadow=is_shadow,
                    **common,
                )
                for event in INTERCEPTABLE:
                    if any(matches(p, event) for p in sub.events):
                        (shadow if is_shadow else intercept)[event].append(route)
                        if not is_shadow:
                            observe[event].append(route)
            else:
                route = Route(mode="observe", **common)
                for event in ALL_EVENTS:
                    if any(matches(p, event) for p in sub.events):
                        observe[event].append(route)

    def compile_key(source: str, ident: str, index: int) -> ValueProgram | None:
        items: tuple[str | int, ...] = ("rateLimits", index, "key")
        try:
            return engine.compile_string(source, ident)
        except CelCompileError as exc:
            where = f"{exc.line}:{exc.column}: " if exc.line else ""
            issues.append(
                Issue(str(loaded.path), json_path(items), f"CEL {where}{exc.message}", line_of(loaded.path, items))
            )
            return None

    rate_limits = compile_rules(cfg.rateLimits, compile_key)
    expression_ids.extend(rule.key.id for rule in rate_limits)
    if issues:
        raise ConfigError(issues)
    frozen_intercept = MappingProxyType({e: tuple(r) for e, r in intercept.items() if r})
    frozen_shadow = MappingProxyType({e: tuple(r) for e, r in shadow.items() if r})
    frozen_observe = MappingProxyType({e: tuple(r) for e, r in observe.items() if r})
    served = sorted(set(frozen_intercept) | set(frozen_shadow), key=INTERCEPTABLE.index)
    observed = sorted(frozen_observe, key=ALL_EVENTS.index)
    heap.trim()
    return RuntimeConfig(
        loaded=loaded,
        gateway_id=cfg.id,
        versions=tuple(cfg.protocolVersions),
        deadline=cfg.limits.deadlineMs / 1000,
        parallel=cfg.fanout == "parallel",
        intercept_routes=frozen_intercept,
        shadow_routes=frozen_shadow,
        observe_routes=frozen_observe,
        manifest=manifest_result(cfg, served, observed, canonical),
        configuration=configuration_result(cfg, served, observed),
        upstreams=tuple(upstreams),
        slots=MappingProxyType(content.content_slots(canonical)),
        schemas=canonical,
        cel=ContextBuilder(
            engine,
            frozenset(h.lower() for h in cfg.headers),
            frozenset(
                event
                for event, routes in (*frozen_intercept.items(), *frozen_shadow.items())
                if any(r.when or r.upstream.kind == "local" for r in routes)
            ),
            any(r.when for routes in frozen_observe.values() for r in routes),
            derive=derived_variables,
            derive_events=frozenset(
                event
                for event, routes in (*frozen_intercept.items(), *frozen_shadow.items())
                if any(
                    any(references_facts(p.source) for p in r.when)
                    or (r.upstream.policy is not None and r.upstream.policy.library.uses_facts)
                    for r in routes
                )
            ),
        ),
        observe_timeout=cfg.observe.timeoutMs / 1000,
        max_inflight=cfg.limits.maxInflight,
        breakers=tuple(hook_breakers),
        pool=pool,
        expression_ids=tuple(expression_ids),
        rate_limits=rate_limits,
        limits_read_event=any(rule.reads_event for rule in rate_limits),
    )


def _upstream(
    hook: Backend,
    loaded: LoadedConfig,
    pool: ClientPool,
    engine: Engine,
    issues: list[Issue],
    at: tuple[str | int, ...],
) -> Upstream | None:
    base: Path = loaded.base_dir
    transport = hook.transport
    if isinstance(transport, HttpTransport):
        auth = hook.authentication
        authorizer: BearerToken | ClientCredentials | DiscoveredAuth | None = None
        if auth is not None and auth.type == "bearer":
            authorizer = BearerToken.from_config(auth.tokenEnv, auth.tokenRef, base)
        gw = hook if isinstance(hook, GatewayBackend) else None
        ca = str(Path(os.path.abspath(base / gw.caFile))) if gw and gw.caFile else None
        if auth is not None and auth.type == "oauth":
            authorizer = ClientCredentials.from_config(auth, base, pool, ca)
        if auth is None:  # no binding: no credential, RFC 9728 discovery on a 401 (protocol §12)
            authorizer = discovered_authorizer(transport.url, loaded, pool, ca)
        return HttpUpstream(
            url=transport.url,
            pool=pool,
            static_headers=transport.headers,
            authorizer=authorizer,
            max_response_bytes=loaded.config.limits.maxResponseBytes,
            ca_file=ca,
        )
    if isinstance(transport, LocalTransport):
        try:
            library = load_policies([Path(os.path.abspath(base / p)) for p in transport.policies], engine)
            require_rules(library, transport.allowEmpty, loaded.path, (*at, "transport"))
        except PolicyError as exc:
            issues.extend(exc.issues)
            return None
        return LocalPolicyUpstream(hook.id, library, engine)
    assert isinstance(transport, StdioTransport)
    return StdioUpstream(
        hook_id=hook.id,
        command=transport.command,
        args=list(transport.args),
        lifecycle=transport.lifecycle,
        cwd=Path(os.path.abspath(base / transport.cwd)) if transport.cwd else None,
        env=transport.env,
        max_line_bytes=loaded.config.limits.maxResponseBytes,
        pool_size=transport.pool.size if transport.pool else 1,
        min_idle=transport.pool.minIdle if transport.pool else 0,
        start_timeout=(transport.pool.startTimeoutMs if transport.pool else 5000) / 1000,
    )
