"""``ahp-gateway check``: validate a configuration (file or stdin), compile it exactly as ``serve``
would, and report the chain per event as text or JSON. ``--strict`` turns warnings into failures
(for CI). File names are shown relative to the working directory when they are below it."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from gateway.command_result import CommandResult, display, issue_dict, issue_text
from gateway.config.issues import ConfigError, Issue
from gateway.config.load import LoadedConfig, load
from gateway.inbound.gate import describe as describe_inbound

STDIN_NAME = "<stdin>"


def load_and_build(config: str, stdin_text: str | None = None, resolve: bool = False) -> tuple[LoadedConfig, Any]:
    """Load (``-``: from ``stdin_text``, relative paths from the working directory) and compile
    as the assembly does for ``serve``; ``resolve``: also every file and credential the
    configuration names, as ``serve`` does before it starts (:mod:`gateway.preflight`)."""
    from gateway.assemble import compile_snapshot
    from gateway.preflight import require_resolved

    loaded = load(Path.cwd() / STDIN_NAME, text=stdin_text or "") if config == "-" else load(Path(config))
    # the CA bundles at least: compiling reads them
    require_resolved(loaded, secrets=resolve, text=stdin_text if config == "-" else None)
    return loaded, compile_snapshot(loaded)


def routes_of(snap: Any) -> dict[str, dict[str, list[dict[str, Any]]]]:
    def describe(route: Any) -> dict[str, Any]:
        item: dict[str, Any] = {"hook": route.hook_id, "transport": route.upstream.kind, "when": bool(route.when)}
        if route.mode != "observe":
            item["timeoutMs"] = round(route.timeout * 1000)
            item["failurePolicy"] = "fail-closed" if route.fail_closed else "fail-open"
        return item

    observers = {e: [r for r in rs if r.mode == "observe"] for e, rs in snap.observe_routes.items()}
    return {
        "intercept": {e: [describe(r) for r in rs] for e, rs in snap.intercept_routes.items()},
        "shadow": {e: [describe(r) for r in rs] for e, rs in snap.shadow_routes.items()},
        "observe": {e: [describe(r) for r in rs] for e, rs in observers.items() if rs},
    }


def summary(loaded: LoadedConfig, snap: Any) -> str:
    """The one-screen text summary: chains grouped by identical routing."""
    cfg = loaded.config
    lines = [
        f"OK {loaded.path.name}: id {cfg.id}, protocol {', '.join(cfg.protocolVersions)}, "
        f"fanout {cfg.fanout}, deadline {cfg.limits.deadlineMs} ms",
    ]
    lines.extend(f"warning: {warning}" for warning in _displayed(loaded.warnings))
    lines.append(describe_inbound(cfg))
    if cfg.uploads is not None:
        lines.append(
            f"uploads: receiver at {cfg.uploads.path}, at most {cfg.uploads.maxBytes} bytes each, "
            f"{cfg.uploads.storage.totalBytes} bytes stored in total for {cfg.uploads.storage.ttlSeconds:g} s"
        )

    def describe(route: Any) -> str:
        when = " [when]" if route.when else ""
        if route.mode == "observe":
            return f"{route.hook_id}{when}"
        policy = "fail-closed" if route.fail_closed else "fail-open"
        return f"{route.hook_id} ({route.upstream.kind}, {route.timeout * 1000:.0f} ms, {policy}){when}"

    def grouped(table: dict[str, Sequence[Any]], label: str) -> None:
        groups: dict[str, list[str]] = {}
        for event, routes in table.items():
            text = " -> ".join(describe(r) for r in routes)
            groups.setdefault(text, []).append(event)
        if not groups:
            return
        lines.append(label)
        for text, events in groups.items():
            lines.append(f"  {', '.join(events)}:")
            lines.append(f"      {text}")

    grouped(dict(snap.intercept_routes), "intercept chains (in order):")
    grouped(dict(snap.shadow_routes), "shadow (called concurrently, never decide):")
    observers = {e: tuple(r for r in rs if r.mode == "observe") for e, rs in snap.observe_routes.items()}
    grouped({e: rs for e, rs in observers.items() if rs}, "observers:")
    lines.append(
        f"register the gateway in harnesses with timeoutMs {cfg.frontend_timeout_ms} and failurePolicy "
        f"{cfg.frontend.failurePolicy}, in both intercept and observe mode"
    )
    return "\n".join(lines)


def _displayed(issues: Sequence[Issue]) -> list[str]:
    return [issue_text(i).split(": ", 1)[1] for i in issues]


def check(
    config: str, fmt: str = "text", strict: bool = False, stdin_text: str | None = None, resolve: bool = True
) -> CommandResult:
    try:
        loaded, snap = load_and_build(config, stdin_text, resolve)
    except ConfigError as exc:
        if fmt == "json":
            body = {
                "ok": False,
                "config": _name(config),
                "errors": [issue_dict(i) for i in exc.issues],
                "warnings": [issue_dict(i) for i in exc.warnings],
            }
            return CommandResult(1, json.dumps(body, indent=2, ensure_ascii=False) + "\n")
        text = "".join(issue_text(i) + "\n" for i in [*exc.issues, *exc.warnings])
        counts = f"{len(exc.issues)} error(s)" + (f", {len(exc.warnings)} warning(s)" if exc.warnings else "")
        return CommandResult(1, stderr=text + counts + "\n")
    warnings = list(loaded.warnings)
    failed = strict and bool(warnings)
    if fmt == "json":
        cfg = loaded.config
        body = {
            "ok": not failed,
            "config": _name(config),
            "errors": [],
            "warnings": [issue_dict(i) for i in warnings],
            "gateway": {
                "id": cfg.id,
                "protocolVersions": list(cfg.protocolVersions),
                "fanout": cfg.fanout,
                "deadlineMs": cfg.limits.deadlineMs,
                "inbound": describe_inbound(cfg).removeprefix("inbound: "),
            },
            **routes_of(snap),
            "register": {"timeoutMs": cfg.frontend_timeout_ms, "failurePolicy": cfg.frontend.failurePolicy},
        }
        return CommandResult(1 if failed else 0, json.dumps(body, indent=2, ensure_ascii=False) + "\n")
    out = summary(loaded, snap) + "\n"
    if failed:  # the summary must not say OK when the exit status says otherwise
        out = "FAILED (--strict)" + out.removeprefix("OK")
        return CommandResult(1, out, f"error: {len(warnings)} warning(s) and --strict\n")
    return CommandResult(0, out)


def _name(config: str) -> str:
    return STDIN_NAME if config == "-" else display(os.path.abspath(config))
