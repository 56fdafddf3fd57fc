"""``ahp-gateway replay``: re-decide recorded intercepts with a new configuration and show what
changes, for CI on policy pull requests (exit 1 when any outcome changes).

Input: a ``log.capture`` file (requests with the headers CEL saw and the answer the harness got),
or a decision log written with ``log.includeContent: true`` (event type, tool and input; other
event fields get the same defaults as policy tests). The old outcome is the recorded one, or the
outcome under ``--baseline OLD.yaml`` (replayed the same way as the new one).

Local policy backends are evaluated for real. Remote upstreams (http, stdio) are only called with
``--call``; otherwise they are assumed to answer with no effect, and the summary says how many
calls that concerned, so a change that depends on a remote verdict is never invented.

Every event is decided by :meth:`Decider.decide`, which runs the serving engine
(``Gateway.handle``, assembled by :mod:`gateway.assemble`) on the compiled snapshot and reads the
settled :class:`~gateway.settle.ledger.Decision` from the exchange it returns, so replay cannot
disagree with the gateway.
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gateway.assemble import Assembly
from gateway.check_cmd import load_and_build
from gateway.command_result import CommandResult, display, issue_text
from gateway.config.issues import ConfigError
from gateway.observability.capture import FORMAT
from gateway.policy.cases import complete_event
from gateway.protocol import jsonrpc, wire
from gateway.protocol.methods import INTERCEPT
from gateway.runtime import RuntimeConfig
from gateway.settle.ledger import outcome_of
from gateway.settle.reply import Failure, Reply
from gateway.telemetry import NullTelemetry
from gateway.upstream.base import Call


class ReplayInputError(Exception):
    """A line of the events file that is neither a capture record nor a decision-log line with content."""


@dataclass(frozen=True, slots=True)
class Verdict:
    outcome: str
    code: str | None = None
    effects: tuple[str, ...] = ()
    decided_by: str | None = None

    @property
    def key(self) -> tuple[str, str | None, tuple[str, ...]]:
        """What counts as a change: the outcome, the deny code and the effect types."""
        return self.outcome, self.code, self.effects

    def label(self) -> str:
        return self.outcome + (f" ({self.code})" if self.code else "")

    def as_json(self) -> dict[str, Any]:
        """camelCase, like the configuration and every other JSON output of the CLI."""
        return {"outcome": self.outcome, "code": self.code, "effects": list(self.effects), "decidedBy": self.decided_by}


@dataclass(frozen=True, slots=True)
class Recorded:
    line: int
    request: dict[str, Any]
    headers: dict[str, str]
    verdict: Verdict | None

    @property
    def event(self) -> dict[str, Any]:
        event: dict[str, Any] = self.request["params"]["event"]
        return event


@dataclass(frozen=True, slots=True)
class Change:
    recorded: Recorded
    old: Verdict
    new: Verdict


# ------------------------------------------------------------------------------------------------
# Reading recorded events


def _decider_of(effects: Sequence[Mapping[str, Any]]) -> str | None:
    """The deciding upstream (and local rule) the gateway recorded in a deny's extensions."""
    for effect in effects:
        if effect.get("type") != "deny":
            continue
        upstream = rule = None
        for value in (effect.get("extensions") or {}).values():
            if isinstance(value, dict):
                upstream = upstream or value.get("upstream")
                rule = rule or value.get("rule")
        if upstream:
            return f"{upstream} rule {rule}" if rule else str(upstream)
    return None


def verdict_of_response(response: Any) -> Verdict | None:
    if not isinstance(response, dict):
        return None
    if isinstance(response.get("error"), dict):
        return Verdict("error", str(response["error"].get("code")))
    effects = (response.get("result") or {}).get("effects")
    if not isinstance(effects, list):
        return None
    deny = next((e for e in effects if isinstance(e, dict) and e.get("type") == "deny"), None)
    return Verdict(
        outcome_of(effects).value,
        deny.get("code") if deny else None,
        tuple(str(e.get("type")) for e in effects),
        _decider_of(effects),
    )


def _from_decision_log(line: dict[str, Any], number: int, snap: RuntimeConfig) -> Recorded:
    if "input" not in line:
        raise ReplayInputError(
            f"line {number}: a decision-log line without content; write the log with log.includeContent: true"
        )
    event_fields = line.get("event") or {}
    partial: dict[str, Any] = {k: v for k, v in event_fields.items() if k in ("id", "type", "source")}
    if line.get("tool") is not None or line.get("input") is not None:
        partial["tool"] = {"name": line.get("tool") or "shell", "input": line.get("input") or {}}
    event = complete_event(partial, number)
    params = {
        "protocolVersion": snap.versions[0],
        "event": event,
        "capabilities": _bound_capabilities(snap, str(event.get("type"))),
    }
    request = jsonrpc.request(event["id"], INTERCEPT, params)
    answer = line.get("answer") if isinstance(line.get("answer"), list) else None
    effects = tuple(str(e.get("type")) for e in answer) if answer else tuple(line.get("effects") or ())
    verdict = Verdict(str(line["outcome"]), line.get("code"), effects, line.get("decidedBy"))
    return Recorded(number, request, {}, verdict)


def _bound_capabilities(snap: RuntimeConfig, event_type: str) -> dict[str, Any]:
    """The widest capabilities the gateway registers for the event type (as ``explain`` assumes)."""
    for entry in snap.manifest["events"]:
        if entry["event"] == event_type and "capabilities" in entry:
            return copy.deepcopy(entry["capabilities"])
    return {"effects": ["deny", "message"]}


def read_events(path: Path, snap: RuntimeConfig) -> list[Recorded]:
    events: list[Recorded] = []
    for number, text in _lines(path):
        try:
            line = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ReplayInputError(f"line {number}: not JSON ({exc.msg})") from None
        if not isinstance(line, dict):
            raise ReplayInputError(f"line {number}: expected a JSON object")
        if "request" in line:
            if line.get("format") != FORMAT:
                raise ReplayInputError(f"line {number}: unknown capture format {line.get('format')!r}")
            request = line["request"]
            if not isinstance(request, dict) or request.get("method") != INTERCEPT:
                raise ReplayInputError(f"line {number}: the request is not a hooks/intercept request")
            if not isinstance((request.get("params") or {}).get("event"), dict):
                raise ReplayInputError(f"line {number}: the request has no event")
            headers = {str(k): str(v) for k, v in (line.get("headers") or {}).items()}
            events.append(Recorded(number, request, headers, verdict_of_response(line.get("response"))))
        elif "event" in line and "outcome" in line:
            events.append(_from_decision_log(line, number, snap))
        else:
            raise ReplayInputError(f"line {number}: neither a log.capture record nor a decision-log line")
    return events


def _lines(path: Path) -> Iterator[tuple[int, str]]:
    with path.open(encoding="utf-8") as handle:
        for number, text in enumerate(handle, 1):
            if text.strip():
                yield number, text


# ------------------------------------------------------------------------------------------------
# Deciding


class _NotCalled:
    """Stands in for a remote upstream without ``--call``: answers no effect, counts the calls."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.calls = 0

    async def intercept(self, call: Call) -> Reply | Failure:
        self.calls += 1
        return Reply(effects=[])

    async def observe(
        self, message: dict[str, Any], timeout: float, headers: Mapping[str, str] | None = None
    ) -> Failure | None:
        return None

    async def aclose(self) -> None:
        return None


def offline(snap: RuntimeConfig) -> tuple[RuntimeConfig, list[_NotCalled]]:
    """``snap`` with every non-local upstream of the intercept and shadow chains replaced by a stub."""
    stubs: dict[int, _NotCalled] = {}

    def swap(table: Mapping[str, tuple[Any, ...]]) -> dict[str, tuple[Any, ...]]:
        out = {}
        for event, routes in table.items():
            replaced = []
            for route in routes:
                if route.upstream.kind != "local":
                    stub = stubs.setdefault(id(route.upstream), _NotCalled(route.upstream.kind))
                    route = dataclasses.replace(route, upstream=stub)
                replaced.append(route)
            out[event] = tuple(replaced)
        return out

    changed = dataclasses.replace(
        snap, intercept_routes=swap(snap.intercept_routes), shadow_routes=swap(snap.shadow_routes)
    )
    return changed, list(stubs.values())


class Decider:
    """One configuration, compiled once; :meth:`decide` is the only path to the engine."""

    def __init__(self, snap: RuntimeConfig, *, call: bool) -> None:
        self.original = snap
        self.snap, self.stubs = (snap, []) if call else offline(snap)
        self.assembly = Assembly(snap.loaded, snapshot=self.snap, telemetry=NullTelemetry())

    async def decide(self, request: dict[str, Any], headers: Mapping[str, str]) -> Verdict:
        exchange = await self.assembly.gateway.handle(wire.dumps(request), headers)
        body = exchange.answer
        answer = verdict_of_response(json.loads(body) if body else None)
        decision = exchange.decision
        if decision is None or answer is None:
            return answer or Verdict("error", "no answer")
        deciders = [s.hook_id for s in decision.steps if s.effects and not s.shadow]
        by = _decider_of(decision.response_effects or []) or decision.decided_by or (deciders[0] if deciders else None)
        return dataclasses.replace(answer, decided_by=by)

    @property
    def skipped_calls(self) -> int:
        return sum(stub.calls for stub in self.stubs)

    async def aclose(self) -> None:
        """Shadow calls get a second to finish; then the upstreams (the real ones, which the
        offline snapshot still lists) and their pool close."""
        await self.assembly.aclose(1.0)


# ------------------------------------------------------------------------------------------------
# The command


@dataclass(frozen=True)
class Options:
    config: str
    events: Path
    baseline: str | None = None
    call: bool = False
    fmt: str = "text"
    all_events: bool = False


def replay(options: Options) -> CommandResult:
    try:
        return asyncio.run(_replay(options))
    except ConfigError as exc:
        return CommandResult(2, stderr="".join(issue_text(i) + "\n" for i in exc.issues))
    except ReplayInputError as exc:
        return CommandResult(2, stderr=f"error: {display(options.events)}: {exc}\n")
    except OSError as exc:
        return CommandResult(2, stderr=f"error: cannot read {display(options.events)}: {exc.strerror or exc}\n")


async def _replay(options: Options) -> CommandResult:
    _, snap = load_and_build(options.config)
    new = Decider(snap, call=options.call)
    old: Decider | None = None
    try:
        if options.baseline:
            _, base_snap = load_and_build(options.baseline)
            old = Decider(base_snap, call=options.call)
        events = read_events(options.events, snap)
        rows: list[tuple[Recorded, Verdict, Verdict]] = []
        for recorded in events:
            if old is not None:
                before = await old.decide(recorded.request, recorded.headers)
            elif recorded.verdict is not None:
                before = recorded.verdict
            else:
                raise ReplayInputError(f"line {recorded.line}: no recorded answer; replay it with --baseline OLD.yaml")
            after = await new.decide(recorded.request, recorded.headers)
            rows.append((recorded, before, after))
        skipped = new.skipped_calls + (old.skipped_calls if old is not None else 0)
    finally:
        await new.aclose()
        if old is not None:
            await old.aclose()
    changes = [Change(r, b, a) for r, b, a in rows if b.key != a.key]
    baseline = f"baseline {display(options.baseline)}" if options.baseline else "baseline: recorded answers"
    code = 1 if changes else 0
    if options.fmt == "json":
        return CommandResult(code, json.dumps(_json(rows, changes, baseline, skipped, options), indent=2) + "\n")
    return CommandResult(code, _table(rows, changes, baseline, skipped, options))


def _row(recorded: Recorded, old: Verdict, new: Verdict) -> dict[str, Any]:
    event = recorded.event
    tool = event.get("tool") if isinstance(event.get("tool"), dict) else {}
    return {
        "line": recorded.line,
        "event": event.get("id"),
        "type": event.get("type"),
        "tool": tool.get("name") if tool else None,
        "old": old.as_json(),
        "new": new.as_json(),
        "changed": old.key != new.key,
    }


def _json(
    rows: Sequence[tuple[Recorded, Verdict, Verdict]],
    changes: Sequence[Change],
    baseline: str,
    skipped: int,
    options: Options,
) -> dict[str, Any]:
    shown = rows if options.all_events else [(c.recorded, c.old, c.new) for c in changes]
    return {
        "events": len(rows),
        "changed": len(changes),
        "baseline": baseline,
        "remoteCallsNotMade": skipped,
        "rows": [_row(*row) for row in shown],
    }


def _table(
    rows: Sequence[tuple[Recorded, Verdict, Verdict]],
    changes: Sequence[Change],
    baseline: str,
    skipped: int,
    options: Options,
) -> str:
    shown = rows if options.all_events else [(c.recorded, c.old, c.new) for c in changes]
    header = ("LINE", "EVENT", "TYPE", "TOOL", "OLD", "", "NEW", "DECIDED BY (NEW)")
    table = [header]
    for recorded, old, new in shown:
        event = recorded.event
        tool = event.get("tool") if isinstance(event.get("tool"), dict) else {}
        arrow = "->" if old.key != new.key else "=="
        table.append(
            (
                str(recorded.line),
                str(event.get("id")),
                str(event.get("type")),
                str(tool.get("name") if tool else "-"),
                old.label(),
                arrow,
                new.label(),
                new.decided_by or "-",
            )
        )
    lines: list[str] = []
    if len(table) > 1:
        widths = [max(len(row[i]) for row in table) for i in range(len(header))]
        lines = ["  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)).rstrip() for row in table]
    transitions: dict[str, int] = {}
    for change in changes:
        step = f"{change.old.outcome} -> {change.new.outcome}"
        transitions[step] = transitions.get(step, 0) + 1
    detail = ", ".join(f"{n} {step}" for step, n in sorted(transitions.items(), key=lambda kv: (-kv[1], kv[0])))
    summary = f"{len(changes)} of {len(rows)} events change" + (f": {detail}" if detail else "") + f" ({baseline})"
    lines.append(summary)
    if skipped:
        lines.append(
            f"note: {skipped} remote upstream call(s) not made (assumed to answer no effect); --call makes them"
        )
    return "\n".join(lines) + "\n"
