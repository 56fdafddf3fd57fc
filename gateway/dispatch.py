"""L6 the one engine every front end shares: request bytes in, (HTTP status, body) out.

Harness-facing checks run in the SDK backend's order so the most useful error wins: parse
(-32700) → envelope (-32600) → method (-32601) → exact protocolVersion (-32001) → event type for
the method (-32002) → schema (-32602) → request id == event id (-32602). Intercepts then run the
ordered chain of upstreams under one deadline and collapse it into one effect list; observations
are queued and fanned out without delaying anything.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gateway import _tasks
from gateway.policy.backend import LocalPolicyUpstream
from gateway.protocol import wire
from gateway.protocol.capabilities import narrow, parallel_safe, remaining_continuations, with_remaining
from gateway.protocol.content import project
from gateway.protocol.errors import RpcCode
from gateway.protocol.events import ALL_EVENTS_SET, INTERCEPTABLE_SET
from gateway.routing.cel import Activation, EvalError
from gateway.runtime import Route, RuntimeConfig, RuntimeHolder
from gateway.settle.accept import Expectation, accept
from gateway.settle.chain import ChainState
from gateway.settle.collapse import attributed_deny, collapse, synthetic_deny
from gateway.settle.deliveries import DeliveryLedger
from gateway.settle.ledger import Decision, Outcome, StepOutcome, StepRecord
from gateway.settle.outcome import Accepted, Failure, FailureClass, Reply
from gateway.telemetry import NullTelemetry, Telemetry
from gateway.upstream.circuit import CircuitBreaker

log = logging.getLogger("ahp_gateway")

ACCEPTED = 202
INTERCEPT = "hooks/intercept"
OBSERVE = "hooks/observe"
CAPABILITIES = "hooks/capabilities"
CONFIGURATION = "hooks/configuration"
REQUEST_METHODS = frozenset((INTERCEPT, CAPABILITIES, CONFIGURATION))
_DEFAULT_STATE: dict[str, Any] = {"permission": "none", "candidate": None}
_NUL = b"\\u0000"


class Engine:
    """Owns the per-process moving parts: the observe queue and workers, the delivery ledger."""

    def __init__(self, holder: RuntimeHolder, telemetry: Telemetry | None = None) -> None:
        self.holder = holder
        self.telemetry: Telemetry = telemetry or NullTelemetry()
        cfg = holder.current.loaded.config.observe
        # Queued observations keep the raw body (a few KB) rather than the parsed event (several
        # times larger as Python objects): a full queue must not dominate a worker's memory.
        self._queue: asyncio.Queue[tuple[RuntimeConfig, bytes, Mapping[str, Any] | None]] = asyncio.Queue(cfg.queueSize)
        self._delivered = DeliveryLedger(cfg.dedupEntries, cfg.dedupTtlSeconds, time.monotonic)
        self._workers: list[asyncio.Task[None]] = []
        self._worker_count = cfg.workers
        self._background: set[asyncio.Task[Any]] = set()
        self._breakers: dict[str, CircuitBreaker] = {}
        self._users: dict[int, int] = {}
        self.uploads: Any = None
        """Per-upstream re-upload (gateway.uploads.forward.Forwarder), when the receiver is enabled."""
        self.sync_breakers(holder.current)

    def sync_breakers(self, snap: RuntimeConfig) -> None:
        """Breakers live as long as the hook id does, across reloads (state is per upstream)."""
        wanted = snap.breakers
        for hook_id in list(self._breakers):
            if hook_id not in wanted:
                del self._breakers[hook_id]
        for hook_id, (threshold, seconds) in wanted.items():
            breaker = self._breakers.get(hook_id)
            if breaker is None:
                self._breakers[hook_id] = CircuitBreaker(threshold, seconds)
            else:
                breaker.threshold, breaker.open_seconds = threshold, seconds

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        if not self._workers:
            self._workers = [
                _tasks.spawn(self._observe_worker(), name=f"observe-worker-{i}") for i in range(self._worker_count)
            ]

    async def drain(self, timeout: float) -> None:
        """Let queued observations and shadow calls finish, within ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while (self._queue.qsize() or self._background) and time.monotonic() < deadline:
            await asyncio.sleep(0.01)

    async def aclose(self) -> None:
        for task in [*self._workers, *self._background]:
            task.cancel()
        await asyncio.gather(*self._workers, *self._background, return_exceptions=True)
        self._workers = []

    # ------------------------------------------------------------------ entry point
    def circuit_states(self) -> dict[str, bool]:
        return {hook: breaker.is_open for hook, breaker in self._breakers.items()}

    def open_circuits(self) -> list[str]:
        """Upstreams whose circuit is open (reported by /readyz; never changes readiness)."""
        return sorted(h for h, b in self._breakers.items() if b.is_open)

    def users(self, snap: RuntimeConfig) -> int:
        """Requests still running on ``snap`` (a retired snapshot closes when this reaches 0)."""
        return self._users.get(id(snap), 0)

    async def handle(
        self, body: bytes, headers: Mapping[str, str] | None = None, principal: Mapping[str, Any] | None = None
    ) -> tuple[int, bytes | None]:
        snap = self.holder.current  # read once: the whole request runs on this snapshot
        key = id(snap)
        users = self._users
        users[key] = users.get(key, 0) + 1
        self.telemetry.inflight(1)
        try:
            return await self._handle(snap, body, headers, principal)
        finally:
            self.telemetry.inflight(-1)
            remaining = users[key] - 1
            if remaining:
                users[key] = remaining
            else:
                del users[key]

    async def _handle(
        self,
        snap: RuntimeConfig,
        body: bytes,
        headers: Mapping[str, str] | None,
        principal: Mapping[str, Any] | None = None,
    ) -> tuple[int, bytes | None]:
        started = time.perf_counter()
        try:
            msg = wire.loads(body)
        except wire.JSONDecodeError:
            return self._reject(None, RpcCode.PARSE_ERROR, "?")
        if not isinstance(msg, dict):
            # One object per body, never a batch (AHP-HTTP-001).
            return self._reject(None, RpcCode.INVALID_REQUEST, "?")
        has_id = "id" in msg
        rid = msg.get("id")
        if has_id and not wire.is_request_id(rid):
            return self._reject(None, RpcCode.INVALID_REQUEST, "?")
        method = msg.get("method")
        params = msg.get("params")
        if msg.get("jsonrpc") != "2.0" or not isinstance(method, str) or not method or not isinstance(params, dict):
            return (ACCEPTED, None) if not has_id else self._reject(rid, RpcCode.INVALID_REQUEST, "?")
        if method == OBSERVE:
            if has_id:
                return self._reject(rid, RpcCode.INVALID_REQUEST, OBSERVE, message="hooks/observe is a notification")
            self._accept_observation(snap, msg, params, body, principal)
            return ACCEPTED, None
        if method not in REQUEST_METHODS:
            return (ACCEPTED, None) if not has_id else self._reject(rid, RpcCode.METHOD_NOT_FOUND, "other")
        if not has_id:
            self.telemetry.rejected(method, "notification")
            return ACCEPTED, None  # a request method sent as a notification never gets a body
        version = params.get("protocolVersion")
        if version not in snap.versions:
            return self._reject(
                rid, RpcCode.UNSUPPORTED_PROTOCOL_VERSION, method, data={"supported": list(snap.versions)}
            )
        if method == INTERCEPT:
            event = params.get("event")
            etype = event.get("type") if isinstance(event, dict) else None
            if isinstance(etype, str) and etype not in INTERCEPTABLE_SET:
                return self._reject(rid, RpcCode.UNSUPPORTED_EVENT, method)
            check = snap.schemas.request_for[etype] if isinstance(etype, str) else snap.schemas.intercept_request
            if not check.ok(msg):
                return self._invalid_params(rid, method, check, msg)
            assert isinstance(event, dict) and isinstance(etype, str)
            if rid != event["id"] or type(rid) is not type(event["id"]):
                return self._reject(
                    rid, RpcCode.INVALID_PARAMS, method, data={"reason": "request id must equal params.event.id"}
                )
            return await self._intercept(snap, rid, params, event, etype, body, headers or {}, started, principal)
        check = snap.schemas.capabilities_request if method == CAPABILITIES else snap.schemas.configuration_request
        if not check.ok(msg):
            where = check.explain(msg)
            return self._reject(rid, RpcCode.INVALID_PARAMS, method, data=_where(where))
        key = "manifest" if method == CAPABILITIES else "configuration"
        value = snap.manifest if method == CAPABILITIES else snap.configuration
        self.telemetry.discovery(method)
        return 200, wire.result_body(rid, {"protocolVersion": version, key: value})

    def _reject(
        self, rid: Any, code: int, method: str, *, data: Any = None, message: str | None = None
    ) -> tuple[int, bytes]:
        self.telemetry.rejected(method, str(int(code)))
        return 200, wire.error_body(rid, code, data, message)

    def _invalid_params(self, rid: Any, method: str, check: Any, msg: dict[str, Any]) -> tuple[int, bytes]:
        """-32602 naming the first failing path and keyword (the specialised schema names the
        real field instead of the event union's ``oneOf``), never the offending value."""
        return self._reject(rid, RpcCode.INVALID_PARAMS, method, data=_where(check.explain(msg)))

    # ------------------------------------------------------------------ intercept
    def _variables(
        self,
        snap: RuntimeConfig,
        method: str,
        version: str,
        caps: Any,
        headers: Mapping[str, str],
        principal: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        allowed = snap.header_allowlist
        exposed = {k.lower(): v for k, v in headers.items() if k.lower() in allowed} if allowed else {}
        return {
            "method": method,
            "protocolVersion": version,
            "capabilities": caps,
            "principal": principal or {},
            "headers": exposed,
        }

    def _routed(
        self, routes: tuple[Route, ...], activation: Activation | None, *, count: bool
    ) -> tuple[list[Route], list[Route]]:
        """(routes whose ``when`` holds, routes filtered out). Errors follow each route's onError."""
        selected: list[Route] = []
        dropped: list[Route] = []
        for route in routes:
            keep = True
            for program, skip_on_error in zip(route.when, route.skip_on_error, strict=True):
                assert activation is not None
                result = program.eval(activation)
                if isinstance(result, EvalError):
                    self.telemetry.cel_error(program.id)
                    log.warning("CEL evaluation error in %s: %s", program.id, result.message)
                    if skip_on_error:
                        keep = False
                        break
                elif not result:
                    keep = False
                    break
            (selected if keep else dropped).append(route)
            if keep and count:
                self.telemetry.routed(route.hook_id)
        return selected, dropped

    async def _intercept(
        self,
        snap: RuntimeConfig,
        rid: Any,
        params: dict[str, Any],
        event: dict[str, Any],
        etype: str,
        body: bytes,
        headers: Mapping[str, str],
        started: float,
        principal: Mapping[str, Any] | None = None,
    ) -> tuple[int, bytes]:
        version: str = params["protocolVersion"]
        decision = Decision(
            event_id=event["id"],
            event_type=etype,
            source=event["source"],
            tool=event.get("tool", {}).get("name") if etype in ("tool.before", "tool.permission.request") else None,
        )
        decision.event = event
        decision.principal = principal.get("name") if principal else None
        trace = self.telemetry.begin(headers, event)
        routes = snap.intercept_routes.get(etype, ())
        shadows = snap.shadow_routes.get(etype, ())
        variables: dict[str, Any] | None = None
        activation: Activation | None = None
        if etype in snap.activation_events:
            variables = self._variables(snap, INTERCEPT, version, params["capabilities"], headers, principal)
            activation = snap.cel.activation({**variables, "event": event}, maybe_nul=_NUL in body or b"\x00" in body)
        dropped: list[Route] = []
        if snap.uses_cel:
            selected, dropped = self._routed(routes, activation, count=True)
            shadow_selected, _ = self._routed(shadows, activation, count=False)
        else:
            selected, shadow_selected = list(routes), list(shadows)
            for route in selected:
                self.telemetry.routed(route.hook_id)
        ident = (event["source"], event["id"])
        for route in dropped:
            self._delivered.add((*ident, route.key))
        caps = narrow(params["capabilities"], etype)
        state0 = params.get("state") or _DEFAULT_STATE
        if shadow_selected:
            self._launch_shadows(
                snap, shadow_selected, rid, version, event, caps, state0, variables, activation, decision
            )
        if not selected or state0["permission"] == "deny" or state0.get("flow") == "stop":
            # No subscription means no decision step (AHP-REG-002); a settled decision is final.
            return self._answer(snap, rid, version, etype, [], decision, started, trace)

        chain = ChainState.start(event, state0, remaining_continuations(caps))
        deadline = asyncio.get_running_loop().time() + snap.deadline
        use_parallel = snap.parallel and len(selected) > 1 and parallel_safe(caps)
        if snap.parallel and len(selected) > 1 and not use_parallel:
            self.telemetry.parallel_fallback()
        decision.parallel = use_parallel
        synthetic: tuple[str, str] | None = None
        called: list[Route] = []
        refs = None  # per-upstream re-uploads, before the chain and inside its deadline (protocol §13.2)
        if self.uploads is not None:
            owner = principal.get("name", "") if principal else ""
            refs = await self.uploads.prepare(snap.loaded, snap.slots, event, selected, owner, deadline)
        try:
            run = _Run(snap, rid, version, caps, chain, deadline, variables, activation, decision, called, trace, refs)
            synthetic = await (self._run_parallel if use_parallel else self._run_serial)(run, selected)
        finally:
            for route in called:
                self._delivered.add((*ident, route.key))
        deny = None
        if synthetic is not None:
            upstream, failure = synthetic
            if "deny" not in params["capabilities"]["effects"]:
                # No deny to carry the fail-closed decision: the harness's own policy for the
                # gateway subscription must decide (protocol §8.5 item 6).
                decision.outcome, decision.decided_by, decision.kind = Outcome.ERROR, upstream, "synthetic"
                decision.rpc_error = int(RpcCode.BACKEND_UNAVAILABLE)
                self._finish(decision, started, trace)
                return 200, wire.error_body(rid, RpcCode.BACKEND_UNAVAILABLE)
            deny = synthetic_deny(snap.gateway_id, upstream, failure)
            decision.decided_by, decision.kind = upstream, "synthetic"
        elif chain.deny is not None:
            assert chain.decided_by is not None
            deny = attributed_deny(chain.deny, snap.gateway_id, chain.decided_by)
            decision.decided_by, decision.kind = chain.decided_by, "explicit"
        elif chain.stop is not None:
            decision.decided_by = chain.decided_by
        effects = collapse(chain, deny, params["capabilities"]["effects"])
        return self._answer(snap, rid, version, etype, effects, decision, started, trace)

    def _request(
        self,
        snap: RuntimeConfig,
        route: Route,
        rid: Any,
        version: str,
        event: dict[str, Any],
        caps: dict[str, Any],
        state: dict[str, Any],
        refs: Any = None,
    ) -> dict[str, Any]:
        view = project(event, snap.slots, route.selection, route.include_native, identity=route.identity, refs=refs)
        return {
            "jsonrpc": "2.0",
            "id": rid,
            "method": INTERCEPT,
            "params": {"protocolVersion": version, "event": view, "capabilities": caps, "state": state},
        }

    async def _call(
        self,
        route: Route,
        request: dict[str, Any],
        budget: float,
        variables: dict[str, Any] | None,
        activation: Activation | None,
        trace: Any,
    ) -> Reply | Failure:
        if budget <= 0:
            return Failure(FailureClass.TIMEOUT, "gateway deadline exhausted before the call")
        upstream = route.upstream
        breaker = self._breakers.get(route.hook_id)
        if breaker is not None and not breaker.allow():
            return Failure(FailureClass.CIRCUIT_OPEN, "circuit open after consecutive failures")
        try:
            if isinstance(upstream, LocalPolicyUpstream):
                return await upstream.intercept(request, budget, variables=variables, shared=activation)
            return await upstream.intercept(
                request, budget, self.telemetry.outbound_headers(trace, route.key, route.hook_id)
            )
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a transport bug must not crash the request: fail by policy
            log.exception("upstream %s raised", route.hook_id)
            return Failure(FailureClass.INTERNAL, exc.__class__.__name__)

    def _settle_step(
        self,
        snap: RuntimeConfig,
        route: Route,
        outcome: Reply | Failure,
        request: dict[str, Any],
        chain: ChainState,
        latency: float,
        decision: Decision,
    ) -> tuple[str, str] | None:
        """Accept and fold one answer. Returns (upstream, failure class) on a fail-closed failure."""
        params = request["params"]
        settled: Accepted | Failure
        if isinstance(outcome, Reply):
            exp = Expectation(
                request_id=request["id"],
                version=params["protocolVersion"],
                event_type=chain.event["type"],
                caps=params["capabilities"],
                event=chain.event,
                sent_event=params["event"],
                remaining=chain.remaining,
                response_check=snap.schemas.response_for[chain.event["type"]],
                event_check=snap.schemas.event_for[chain.event["type"]],
            )
            settled = accept(outcome, exp)
        else:
            settled = outcome
        record = StepRecord(route.key, route.hook_id, route.upstream.kind, StepOutcome.NO_EFFECT, latency)
        decision.steps.append(record)
        breaker = self._breakers.get(route.hook_id)
        fast_failed = isinstance(settled, Failure) and settled.kind is FailureClass.CIRCUIT_OPEN
        if breaker is not None and not fast_failed and breaker.record(not isinstance(settled, Failure)):
            self.telemetry.circuit(route.hook_id, breaker.is_open)
            log.warning("circuit for %s is now %s", route.hook_id, "open" if breaker.is_open else "closed")
        if isinstance(settled, Failure):
            record.failure, record.detail = settled.kind.value, settled.detail
            log.warning(
                "upstream %s failed (%s: %s) under %s",
                route.hook_id,
                settled.kind.value,
                settled.detail,
                "fail-closed" if route.fail_closed else "fail-open",
            )
            if route.fail_closed:
                record.outcome = StepOutcome.FAILED_CLOSED
                return route.hook_id, settled.kind.value
            record.outcome = StepOutcome.FAILED_OPEN
            return None
        assert isinstance(settled, Accepted)
        record.effects = tuple(e["type"] for e in settled.effects)
        record.answer = settled.effects
        had_deny = chain.deny is not None
        chain.fold(settled, route.hook_id)
        if chain.deny is not None and not had_deny:
            record.outcome = StepOutcome.DENY
        elif chain.flow == "stop" and "flow" in record.effects:
            record.outcome = StepOutcome.STOP
        elif settled.effects:
            record.outcome = StepOutcome.EFFECTS
        return None

    async def _run_serial(self, run: _Run, routes: list[Route]) -> tuple[str, str] | None:
        loop = asyncio.get_running_loop()
        chain, decision = run.chain, run.decision
        for index, route in enumerate(routes):
            step_caps = with_remaining(run.caps, chain.remaining)
            request = self._request(
                run.snap, route, run.rid, run.version, chain.event, step_caps, chain.wire_state(), run.refs_for(route)
            )
            now = loop.time()
            run.called.append(route)
            outcome = await self._call(
                route, request, min(route.timeout, run.deadline - now), run.variables, run.activation, run.trace
            )
            latency = loop.time() - now
            decision.upstream_wait += latency
            failure = self._settle_step(run.snap, route, outcome, request, chain, latency, decision)
            if failure is not None or chain.halted:
                _not_called(decision, routes[index + 1 :], StepOutcome.NOT_CALLED)
                return failure
        return None

    async def _run_parallel(self, run: _Run, routes: list[Route]) -> tuple[str, str] | None:
        """Opt-in deviation from AHP-COMP-001, used only when every advertised effect is within
        {deny, message}: calls run at once but settle in order; after the deciding upstream,
        answers are discarded and calls still running are cancelled."""
        loop = asyncio.get_running_loop()
        chain, decision = run.chain, run.decision
        state = chain.wire_state()
        started = loop.time()
        requests = [
            self._request(run.snap, r, run.rid, run.version, chain.event, run.caps, state, run.refs_for(r))
            for r in routes
        ]
        tasks = [
            asyncio.ensure_future(
                self._call(r, req, min(r.timeout, run.deadline - started), run.variables, run.activation, run.trace)
            )
            for r, req in zip(routes, requests, strict=True)
        ]
        run.called.extend(routes)
        try:
            for index, (route, task) in enumerate(zip(routes, tasks, strict=True)):
                outcome = await task
                latency = loop.time() - started
                failure = self._settle_step(run.snap, route, outcome, requests[index], chain, latency, decision)
                if failure is not None or chain.halted:
                    for later, pending in zip(routes[index + 1 :], tasks[index + 1 :], strict=True):
                        kind = StepOutcome.NOT_CALLED if pending.done() else StepOutcome.CANCELLED
                        _not_called(decision, [later], kind)
                    return failure
            return None
        finally:
            decision.upstream_wait = loop.time() - started
            for task in tasks:
                if not task.done():
                    task.cancel()

    def _answer(
        self,
        snap: RuntimeConfig,
        rid: Any,
        version: str,
        etype: str,
        effects: list[dict[str, Any]],
        decision: Decision,
        started: float,
        trace: Any = None,
    ) -> tuple[int, bytes]:
        response = {"jsonrpc": "2.0", "id": rid, "result": {"protocolVersion": version, "effects": effects}}
        if effects and not snap.schemas.response_for[etype].ok(response):
            # A collapse bug must never reach a harness as an invalid answer.
            log.error(
                "collapsed response failed self-validation for %s: %s",
                etype,
                snap.schemas.response_for[etype].explain(response),
            )
            decision.outcome, decision.rpc_error = Outcome.ERROR, int(RpcCode.INTERNAL_ERROR)
            self._finish(decision, started, trace)
            return 200, wire.error_body(rid, RpcCode.INTERNAL_ERROR)
        decision.effects = [e["type"] for e in effects]
        decision.response_effects = effects
        decision.outcome = _outcome(effects)
        for effect in effects:
            if effect["type"] == "deny":
                decision.code = effect.get("code")
        self._finish(decision, started, trace)
        return 200, wire.dumps(response)

    def _finish(self, decision: Decision, started: float, trace: Any = None) -> None:
        decision.total = time.perf_counter() - started
        try:
            self.telemetry.settled(decision, trace)
        except Exception:  # telemetry must never turn a settled decision into an error
            log.exception("recording a decision failed")

    # ------------------------------------------------------------------ shadow
    def _launch_shadows(
        self,
        snap: RuntimeConfig,
        routes: list[Route],
        rid: Any,
        version: str,
        event: dict[str, Any],
        caps: dict[str, Any],
        state: dict[str, Any],
        variables: dict[str, Any] | None,
        activation: Activation | None,
        decision: Decision,
    ) -> None:
        """Shadow upstreams see the harness's event, run concurrently, never delay or change the
        result; their verdicts are only logged and counted."""
        for route in routes:
            task = _tasks.spawn(
                self._shadow(snap, route, rid, version, event, caps, state, variables, activation, decision),
                name=f"shadow-{route.key}",
            )
            self._background.add(task)
            task.add_done_callback(self._background.discard)

    async def _shadow(
        self,
        snap: RuntimeConfig,
        route: Route,
        rid: Any,
        version: str,
        event: dict[str, Any],
        caps: dict[str, Any],
        state: dict[str, Any],
        variables: dict[str, Any] | None,
        activation: Activation | None,
        decision: Decision,
    ) -> None:
        loop = asyncio.get_running_loop()
        chain = ChainState.start(event, state, remaining_continuations(caps))
        request = self._request(snap, route, rid, version, event, caps, chain.wire_state())
        now = loop.time()
        outcome = await self._call(route, request, min(route.timeout, snap.deadline), variables, activation, None)
        shadow = Decision(decision.event_id, decision.event_type, decision.source, decision.tool)
        self._settle_step(snap, route, outcome, request, chain, loop.time() - now, shadow)
        record = shadow.steps[0]
        record.shadow = True
        verdict = (
            "deny"
            if chain.deny is not None
            else ("error" if record.failure else _outcome(chain.messages + chain.modifications))
        )
        self.telemetry.shadow(route.hook_id, str(verdict), record)
        log.info("shadow %s verdict=%s event=%s", route.hook_id, verdict, decision.event_id)

    # ------------------------------------------------------------------ observe
    def _accept_observation(
        self,
        snap: RuntimeConfig,
        msg: dict[str, Any],
        params: dict[str, Any],
        body: bytes,
        principal: Mapping[str, Any] | None = None,
    ) -> None:
        if params.get("protocolVersion") not in snap.versions or not snap.schemas.observe_notification.ok(msg):
            self.telemetry.observe_received("invalid")
            return
        event = params["event"]
        if event["type"] not in ALL_EVENTS_SET or event["type"] not in snap.observe_routes:
            self.telemetry.observe_received("unrouted")
            return
        try:
            self._queue.put_nowait((snap, body, principal))
        except asyncio.QueueFull:
            self.telemetry.observe_dropped("queue_full")
            return
        self.telemetry.observe_received("queued")
        self.telemetry.observe_queue(self._queue.qsize())

    async def _observe_worker(self) -> None:
        while True:
            snap, body, principal = await self._queue.get()
            try:
                params = wire.loads(body)["params"]
                await self._deliver(snap, params["event"], params["protocolVersion"], principal)
            except asyncio.CancelledError:
                raise
            except Exception:  # never let one bad delivery stop the worker
                log.exception("observe delivery failed")
            finally:
                self._queue.task_done()
                self.telemetry.observe_queue(self._queue.qsize())

    async def _deliver(
        self, snap: RuntimeConfig, event: dict[str, Any], version: str, principal: Mapping[str, Any] | None = None
    ) -> None:
        """Forward to observe subscriptions and to intercept subscriptions this gateway did not
        call for this event id (protocol §8.3), once per (event, subscription)."""
        routes = snap.observe_routes.get(event["type"], ())
        activation = None
        if snap.uses_cel:
            variables = self._variables(snap, OBSERVE, version, {}, {}, principal)
            activation = snap.cel.activation({**variables, "event": event})
            routes = tuple(self._routed(routes, activation, count=False)[0])
        ident = (event["source"], event["id"])
        pending = [route for route in routes if (*ident, route.key) not in self._delivered]
        refs = None  # uploads finish before the observation is published (protocol §13.2)
        if self.uploads is not None and pending:
            owner = principal.get("name", "") if principal else ""
            deadline = asyncio.get_running_loop().time() + snap.observe_timeout
            refs = await self.uploads.prepare(snap.loaded, snap.slots, event, pending, owner, deadline)
        for route in pending:
            key = (*ident, route.key)
            if key in self._delivered:
                continue
            self._delivered.add(key)
            view = project(
                event,
                snap.slots,
                route.selection,
                route.include_native,
                identity=route.identity,
                refs=refs.get(route.key) if refs else None,
            )
            note = {"jsonrpc": "2.0", "method": OBSERVE, "params": {"protocolVersion": version, "event": view}}
            started = time.perf_counter()
            failure = await route.upstream.observe(note, snap.observe_timeout)
            self.telemetry.observe_delivered(
                route.hook_id, failure.kind.value if failure else "ok", time.perf_counter() - started
            )
            if failure is not None:
                log.warning("observe delivery to %s failed (%s: %s)", route.hook_id, failure.kind.value, failure.detail)


@dataclass(slots=True)
class _Run:
    """Everything one intercept's chain run needs, passed as one value."""

    snap: RuntimeConfig
    rid: Any
    version: str
    caps: dict[str, Any]
    chain: ChainState
    deadline: float
    variables: dict[str, Any] | None
    activation: Activation | None
    decision: Decision
    called: list[Route]
    trace: Any
    refs: Mapping[str, Any] | None = None
    """Per route key: harness ref -> that upstream's confirmed content reference."""

    def refs_for(self, route: Route) -> Any:
        return self.refs.get(route.key) if self.refs else None


def _not_called(decision: Decision, routes: list[Route], outcome: StepOutcome) -> None:
    for route in routes:
        decision.steps.append(StepRecord(route.key, route.hook_id, route.upstream.kind, outcome))


def _where(where: tuple[str, str] | None) -> dict[str, str] | None:
    if where is None:
        return None
    return {"path": where[0], "keyword": where[1]}


def _outcome(effects: list[dict[str, Any]]) -> Outcome:
    kinds = {e["type"] for e in effects}
    if not kinds:
        return Outcome.NO_EFFECT
    for kind, outcome in (
        ("deny", Outcome.DENY),
        ("ask", Outcome.ASK),
        ("return", Outcome.RETURN),
        ("modify", Outcome.MODIFIED),
        ("allow", Outcome.ALLOW),
    ):
        if kind in kinds:
            return outcome
    if any(e["type"] == "flow" and e["operation"] == "stop" for e in effects):
        return Outcome.STOP
    return Outcome.MESSAGE
