"""L5 the runtime snapshot: one immutable :class:`RuntimeConfig` compiled from a validated
configuration (upstream objects, CEL programs, routing tables per event type, discovery answers),
and the one mutable cell that points at the current snapshot.

A request reads ``holder.current`` once and uses that snapshot until it finishes, so a reload
never mixes two configurations within one request.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from gateway import heap
from gateway.config.load import ConfigError, Issue, LoadedConfig, json_path, line_of
from gateway.config.models import Backend, GatewayBackend, HttpTransport, LocalTransport, StdioTransport
from gateway.credentials.bearer import BearerToken
from gateway.credentials.oauth import ClientCredentials
from gateway.discovery import configuration_result, manifest_result
from gateway.policy.backend import LocalPolicyUpstream
from gateway.policy.library import PolicyError, load_policies, require_rules
from gateway.protocol import content, schemas
from gateway.protocol.events import ALL_EVENTS, INTERCEPTABLE, matches
from gateway.routing.cel import CelCompileError, Engine, Program
from gateway.upstream.base import Upstream
from gateway.upstream.http import ClientPool, HttpUpstream
from gateway.upstream.stdio import StdioUpstream


@dataclass(frozen=True, slots=True)
class Route:
    """One subscription of one upstream, as the router needs it."""

    key: str
    hook_id: str
    index: int
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
    cel: Engine
    header_allowlist: frozenset[str]
    observe_timeout: float
    uses_cel: bool
    activation_events: frozenset[str]
    """Event types whose intercepts need a CEL activation (a `when` or a local backend)."""
    breakers: Mapping[str, tuple[int, float]]
    """Circuit breaker settings (threshold, open seconds) per remote upstream."""
    expression_ids: tuple[str, ...] = ()
    extra: dict[str, Any] = field(default_factory=dict)


class RuntimeHolder:
    """The one mutable cell: the snapshot new requests start on."""

    def __init__(self, current: RuntimeConfig) -> None:
        self.current = current


def _selection(sub: Any) -> tuple[Mapping[str, str], bool]:
    selection = sub.content.as_dict()
    return MappingProxyType(selection), all(v == "body" for v in selection.values())


def build(loaded: LoadedConfig, pool: ClientPool, cel: Engine | None = None) -> RuntimeConfig:
    """Compile ``loaded`` into a snapshot; every CEL or policy problem becomes a ConfigError."""
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
    uses_cel = False
    breakers: dict[str, tuple[int, float]] = {}
    expression_ids: list[str] = []
    for h_index, hook in enumerate(loaded.hooks):
        at: tuple[str | int, ...] = ("hooks", h_index)
        upstream = _upstream(hook, loaded, pool, engine, issues, at)
        if upstream is None:
            continue
        upstreams.append(upstream)
        gw = hook if isinstance(hook, GatewayBackend) else None
        if upstream.kind != "local":
            cb = gw.circuitBreaker if gw else None
            if cb is None or cb.enabled:
                breakers[hook.id] = (cb.failureThreshold, cb.openSeconds) if cb else (5, 5.0)
        hook_when = compile_when(gw.when if gw else None, (*at, "when"), f"{hook.id}.when")
        hook_skip = (gw.onError == "skip",) * len(hook_when) if gw else ()
        is_shadow = bool(gw and gw.mode == "shadow")
        for s_index, sub in enumerate(hook.subscriptions):
            sub_when = compile_when(
                sub.when if gw else None, (*at, "subscriptions", s_index, "when"), f"{hook.id}#{s_index}.when"
            )
            when = hook_when + sub_when
            uses_cel = uses_cel or bool(when)
            expression_ids.extend(p.id for p in when if p.id not in expression_ids)
            selection, identity = _selection(sub)
            common: dict[str, Any] = {
                "key": f"{hook.id}#{s_index}",
                "hook_id": hook.id,
                "index": s_index,
                "upstream": upstream,
                "selection": selection,
                "identity": identity,
                "include_native": sub.includeNative,
                "when": when,
                "skip_on_error": hook_skip + (sub.onError == "skip",) * len(sub_when),
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
        cel=engine,
        header_allowlist=frozenset(h.lower() for h in cfg.headers),
        observe_timeout=cfg.observe.timeoutMs / 1000,
        uses_cel=uses_cel,
        activation_events=frozenset(
            event
            for event, routes in (*frozen_intercept.items(), *frozen_shadow.items())
            if uses_cel or any(r.upstream.kind == "local" for r in routes)
        ),
        breakers=MappingProxyType(breakers),
        expression_ids=tuple(expression_ids),
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
        authorizer: BearerToken | ClientCredentials | None = None
        if auth is not None and auth.type == "bearer":
            authorizer = BearerToken.from_config(auth.tokenEnv, auth.tokenRef, base)
        gw = hook if isinstance(hook, GatewayBackend) else None
        ca = str(Path(os.path.abspath(base / gw.caFile))) if gw and gw.caFile else None
        if auth is not None and auth.type == "oauth":
            authorizer = ClientCredentials.from_config(auth, base, pool, ca)
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
    )
