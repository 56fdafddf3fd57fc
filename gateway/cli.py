"""``ahp-gateway``: serve | check | explain | policy test. The only module that prints or exits."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from collections.abc import Sequence
from pathlib import Path

from gateway import __version__
from gateway.config.load import ConfigError, Issue, LoadedConfig, load


def _print_issues(issues: Sequence[Issue], stream: object = sys.stderr) -> None:
    for issue in issues:
        print(f"{issue.severity}: {issue}", file=stream)  # type: ignore[call-overload]


def _load_or_exit(path: str | None) -> LoadedConfig:
    try:
        return load(Path(path) if path else None)
    except ConfigError as exc:
        _print_issues(exc.issues)
        print(f"{len(exc.issues)} error(s)", file=sys.stderr)
        raise SystemExit(1) from None


def _compile_or_exit(loaded: LoadedConfig) -> object:
    from gateway.runtime import build
    from gateway.upstream.http import ClientPool

    try:
        return build(loaded, ClientPool())
    except ConfigError as exc:
        _print_issues(exc.issues)
        print(f"{len(exc.issues)} error(s)", file=sys.stderr)
        raise SystemExit(1) from None


def cmd_check(args: argparse.Namespace) -> int:
    loaded = _load_or_exit(args.config)
    snapshot = _compile_or_exit(loaded)
    from gateway.runtime import RuntimeConfig

    assert isinstance(snapshot, RuntimeConfig)
    print(summary(loaded, snapshot))
    return 0


def summary(loaded: LoadedConfig, snap: object) -> str:
    from gateway.runtime import Route, RuntimeConfig

    assert isinstance(snap, RuntimeConfig)
    cfg = loaded.config
    lines = [
        f"OK {loaded.path.name}: id {cfg.id}, protocol {', '.join(cfg.protocolVersions)}, "
        f"fanout {cfg.fanout}, deadline {cfg.limits.deadlineMs} ms",
    ]
    for warning in loaded.warnings:
        lines.append(f"warning: {warning}")

    def describe(route: Route) -> str:
        when = " [when]" if route.when else ""
        if route.mode == "observe":
            return f"{route.hook_id}{when}"
        policy = "fail-closed" if route.fail_closed else "fail-open"
        return f"{route.hook_id} ({route.upstream.kind}, {route.timeout * 1000:.0f} ms, {policy}){when}"

    def grouped(table: dict[str, tuple[Route, ...]], label: str) -> None:
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


def cmd_serve(args: argparse.Namespace) -> int:
    loaded = _load_or_exit(args.config)
    _compile_or_exit(loaded)
    for warning in loaded.warnings:
        logging.getLogger("ahp_gateway").warning("%s", warning)
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    from gateway.server.app import GatewayServer

    async def main() -> None:
        server = GatewayServer(loaded, host=args.host, port=args.port)
        await server.start()
        log = logging.getLogger("ahp_gateway")
        if loaded.is_default:
            log.warning("serving the bundled default configuration (local CEL policies, no external upstream)")
        log.info("AHP gateway %s listening on %s (admin on %s:%s)", cfg_id, server.url, server.admin_host, server.admin_port)
        await server.run_forever()

    cfg_id = loaded.config.id
    asyncio.run(main())
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ahp-gateway", description="Policy-as-code reverse proxy for AHP.")
    parser.add_argument("--version", action="version", version=f"ahp-gateway {__version__}")
    parser.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help="run the gateway")
    serve.add_argument("--config", help="gateway.yaml or .json (default: the bundled default)")
    serve.add_argument("--host", help="override listen.host")
    serve.add_argument("--port", type=int, help="override listen.port")
    serve.set_defaults(func=cmd_serve)

    check = sub.add_parser("check", help="validate a configuration and print the chain per event")
    check.add_argument("--config", required=True)
    check.set_defaults(func=cmd_check)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=args.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    return int(args.func(args))
