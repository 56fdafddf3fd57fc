"""``ahp-gateway``: serve | stdio | check | explain | policy test | schema | replay | hook. The only
module that prints or exits; each command's logic lives in its own module.

``hook`` runs once per native tool call, so it is dispatched before anything heavy is imported
(its logic lives in :mod:`gateway.native.command`)."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import gateway

if TYPE_CHECKING:
    import argparse

    from gateway.config.issues import Issue
    from gateway.config.load import LoadedConfig

# argparse, logging, pathlib and the config stack are imported where used: `hook` must start fast.

LOG_LEVELS = ["DEBUG", "INFO", "WARNING", "ERROR"]
PORT_ENV = "AHP_GATEWAY_PORT"
ADMIN_PORT_ENV = "AHP_GATEWAY_ADMIN_PORT"
"""Ports for ``serve`` when no flag gives one: a pasted ``ahp-gateway serve`` can move off a busy port
without editing the command (the manual's commands are run as written in tests this way)."""


def _print_issues(issues: Sequence[Issue], stream: object = sys.stderr) -> None:
    for issue in issues:
        print(f"{issue.severity}: {issue}", file=stream)  # type: ignore[call-overload]


def _load_or_exit(path: str | None) -> LoadedConfig:
    from pathlib import Path

    from gateway.config.issues import ConfigError
    from gateway.config.load import load

    try:
        return load(Path(path) if path else None)
    except ConfigError as exc:
        _print_issues([*exc.issues, *exc.warnings])
        print(f"{len(exc.issues)} error(s)", file=sys.stderr)
        raise SystemExit(1) from None


def _resolve_or_exit(loaded: LoadedConfig) -> None:
    """``serve`` refuses to start on a file or credential it cannot use, as ``check`` reports it."""
    from gateway.preflight import unresolved

    issues = unresolved(loaded)
    if issues:
        _print_issues(issues)
        print(f"{len(issues)} error(s)", file=sys.stderr)
        raise SystemExit(1)


def _compile_or_exit(loaded: LoadedConfig) -> object:
    from gateway.assemble import compile_snapshot
    from gateway.config.issues import ConfigError

    try:
        return compile_snapshot(loaded)
    except ConfigError as exc:
        _print_issues(exc.issues)
        print(f"{len(exc.issues)} error(s)", file=sys.stderr)
        raise SystemExit(1) from None


def _emit(outcome: Any) -> int:
    sys.stdout.write(outcome.stdout)
    sys.stderr.write(outcome.stderr)
    return int(outcome.code)


def cmd_check(args: argparse.Namespace) -> int:
    from gateway.check_cmd import check

    stdin_text = sys.stdin.read() if args.config == "-" else None
    return _emit(check(args.config, args.format, args.strict, stdin_text, resolve=not args.no_resolve))


def cmd_replay(args: argparse.Namespace) -> int:
    from pathlib import Path

    from gateway.replay import Options, replay

    options = Options(args.config, Path(args.events), args.baseline, args.call, args.format, args.all)
    return _emit(replay(options))


def cmd_schema(args: argparse.Namespace) -> int:
    from gateway.schema_cmd import render

    sys.stdout.write(render(args.kind))
    return 0


def _port_or_env(flag: int | None, name: str) -> int | None:
    import os

    if flag is not None or not (raw := os.environ.get(name, "").strip()):
        return flag
    if not raw.isdigit() or int(raw) > 65535:
        raise ValueError(f"${name} must be a port number from 0 to 65535, not {raw!r}")
    return int(raw)


def cmd_serve(args: argparse.Namespace) -> int:
    import asyncio
    import logging

    try:
        args.port = _port_or_env(args.port, PORT_ENV)
        args.admin_port = _port_or_env(args.admin_port, ADMIN_PORT_ENV)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    loaded = _load_or_exit(args.config)
    if loaded.config.log.format == "json":  # the supervisor's lines too, not only the workers'
        from gateway.logformat import configure

        configure(args.log_level, "json")
    _resolve_or_exit(loaded)
    _compile_or_exit(loaded)
    if args.workers > 1:
        port = args.port if args.port is not None else loaded.config.listen.port
        if port == 0:
            print("error: --workers needs a fixed listen port", file=sys.stderr)
            return 2
        from gateway.server.workers import supervise

        child = ["--log-level", args.log_level, "serve", "--worker"]
        for flag, value in (
            ("--config", args.config),
            ("--host", args.host),
            ("--port", args.port),
            ("--admin-port", args.admin_port),
        ):
            if value is not None:
                child += [flag, str(value)]
        return supervise(child, args.workers)
    for warning in loaded.warnings:
        logging.getLogger("ahp_gateway").warning("%s", warning)
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    from gateway.server.app import GatewayServer, ListenError

    async def main() -> None:
        server = GatewayServer(
            loaded, host=args.host, port=args.port, admin_port=args.admin_port, reuse_port=args.worker
        )
        await server.start()
        log = logging.getLogger("ahp_gateway")
        if loaded.is_default:
            log.warning("serving the bundled default configuration (local CEL policies, no external upstream)")
        log.info(
            "AHP gateway %s listening on %s (admin on %s:%s)", cfg_id, server.url, server.admin_host, server.admin_port
        )
        await server.run_forever()

    from gateway.config.issues import ConfigError

    cfg_id = loaded.config.id
    try:
        asyncio.run(main())
    except ConfigError as exc:  # found while starting (inbound tokens, listener exposure)
        _print_issues(exc.issues)
        return 1
    except ListenError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


def cmd_stdio(args: argparse.Namespace) -> int:
    from gateway.config.issues import ConfigError
    from gateway.server import stdio

    channel = stdio.claim_stdout()  # first: nothing but responses may ever reach stdout
    loaded = _load_or_exit(args.config)
    try:
        return stdio.run(loaded, channel, admin_port=args.admin_port, per_event=args.per_event)
    except ConfigError as exc:
        _print_issues(exc.issues)
        return 1


def cmd_hook(args: argparse.Namespace) -> int:
    from gateway.native.command import main as hook_main

    return hook_main(args.hook_args)


def cmd_policy_test(args: argparse.Namespace) -> int:
    from pathlib import Path

    from gateway.policy.report import Options, policy_test

    paths = [Path(p) for p in (args.paths or ["policies"])]
    options = Options(paths, args.run, args.format, args.verbose, args.coverage, args.fail_under)
    return _emit(policy_test(options))


def _unknown_event_type(etype: object) -> str | None:
    """The stderr warning for an event type AHP does not define (a typo routes to nothing and
    would otherwise look like "no subscription"), naming the closest known type."""
    import difflib

    from gateway.protocol.events import ALL_EVENTS, ALL_EVENTS_SET

    if etype in ALL_EVENTS_SET:
        return None
    close = difflib.get_close_matches(str(etype), ALL_EVENTS, n=1) if isinstance(etype, str) else []
    hint = f" (did you mean `{close[0]}`?)" if close else ""
    return f"warning: unknown event type {etype!r}{hint}; no subscription can match it"


def cmd_explain(args: argparse.Namespace) -> int:
    import asyncio
    from pathlib import Path

    from gateway.explain import explain, explain_call, request_from
    from gateway.runtime import RuntimeConfig

    loaded = _load_or_exit(args.config)
    snap = _compile_or_exit(loaded)
    assert isinstance(snap, RuntimeConfig)
    try:
        document = json.loads(Path(args.event).read_text(encoding="utf-8"))
        caps = json.loads(Path(args.capabilities).read_text(encoding="utf-8")) if args.capabilities else None
    except (OSError, json.JSONDecodeError) as exc:
        print(f"error: cannot read input: {exc}", file=sys.stderr)
        return 1
    if not isinstance(document, dict):
        print("error: the event file must hold a JSON object", file=sys.stderr)
        return 1
    request = request_from(document, caps, snap)
    unknown = _unknown_event_type(request["params"]["event"].get("type"))
    from gateway.inbound.principal import parse_principal

    try:
        principal = parse_principal(args.principal) if args.principal else None
    except ValueError as exc:
        print(f"error: --principal: {exc}", file=sys.stderr)
        return 1
    if unknown:
        print(unknown, file=sys.stderr)
    for line in explain(snap, request, principal):
        print(line)
    if args.call:
        for line in asyncio.run(explain_call(snap, request, principal)):
            print(line)
    return 1 if unknown else 0  # the explanation is still shown, but a script must notice the typo


def build_parser() -> argparse.ArgumentParser:
    import argparse

    parser = argparse.ArgumentParser(
        prog="ahp-gateway",
        description="Policy-as-code reverse proxy for AHP. --log-level is accepted before or after the "
        "subcommand, in any case.",
    )
    parser.add_argument("--version", action="version", version=f"ahp-gateway {gateway.__version__}")
    parser.add_argument(
        "--log-level", default="INFO", type=str.upper, choices=LOG_LEVELS, help="the gateway's own log (any case)"
    )
    sub = parser.add_subparsers(dest="command", required=True)
    # --log-level is also accepted after the subcommand (it only overrides when given there)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--log-level",
        default=argparse.SUPPRESS,
        type=str.upper,
        choices=LOG_LEVELS,
        help="also accepted after the subcommand (default: INFO)",
    )

    serve = sub.add_parser(
        "serve",
        help="run the gateway",
        description="Run the gateway. Without --config it serves the bundled default configuration (one local "
        "CEL policy backend with the policies/ library, no external upstream) and says so at startup.",
        epilog="Signals: SIGHUP reloads the configuration; SIGTERM drains gracefully; SIGINT stops without the "
        "drain delay. With --workers N a worker that exits unexpectedly is restarted after 0.5 s, doubling with "
        "each recent crash of that worker up to 30 s; 5 crashes within 60 s stop the supervisor with exit status "
        "1, so the orchestrator sees the crash loop (Kubernetes CrashLoopBackOff) instead of a pod that restarts "
        "workers forever.",
        parents=[common],
    )
    serve.add_argument("--config", help="gateway.yaml or .json (default: the bundled default)")
    serve.add_argument("--host", help="override listen.host")
    serve.add_argument("--port", type=int, help=f"override listen.port (else ${PORT_ENV}, else the configuration)")
    serve.add_argument(
        "--admin-port", type=int, help=f"override admin.port (else ${ADMIN_PORT_ENV}, else the configuration)"
    )
    serve.add_argument("--workers", type=int, default=1, help="worker processes sharing the port (SO_REUSEPORT)")
    serve.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    serve.set_defaults(func=cmd_serve)

    stdio = sub.add_parser(
        "stdio",
        help="serve AHP over stdin/stdout (one stdio backend for a harness)",
        description="Serve AHP over stdin/stdout as one stdio backend of a harness (see the manual's stdio page).",
        parents=[common],
    )
    stdio.add_argument("--config", help="gateway.yaml or .json (default: the bundled default)")
    stdio.add_argument("--admin-port", type=int, help="also serve /healthz /readyz /metrics on this port")
    stdio.add_argument("--per-event", action="store_true", help="serve one message, then exit (no EOF needed)")
    stdio.set_defaults(func=cmd_stdio)

    check = sub.add_parser(
        "check",
        help="validate a configuration and print the chain per event",
        description="Validate a configuration: exit 0 and a one-screen summary of the chain per event, or exit 1 "
        "with every error (file, line, JSON path, reason). --format json prints ok, every error and warning, the "
        "chains per event and the registration to use. With --config - relative paths are read from the working "
        "directory. Every file and credential the configuration names is read as serve would (TLS and CA files, the "
        "inbound tokens file, tokenEnv/tokenRef/clientSecretRef/privateKeyRef, the log and spool targets), so check "
        "fails whatever serve would refuse to start on.",
        parents=[common],
    )
    check.add_argument("--config", required=True, help="gateway.yaml or .json; - reads it from stdin")
    check.add_argument("--format", choices=["text", "json"], default="text", help="json: one document for scripts")
    check.add_argument("--strict", action="store_true", help="warnings fail the check (exit 1)")
    check.add_argument(
        "--no-resolve",
        action="store_true",
        help="do not read the files and credentials the configuration names (TLS, CA, tokens, secrets): "
        "for CI or a test pod where the secrets are not mounted",
    )
    check.set_defaults(func=cmd_check)

    explain = sub.add_parser(
        "explain",
        help="show routing, rule results and effects for one event",
        description="Show routing, the `when` values, local rule results and the local effect list for one event, "
        "without calling upstreams; --call also calls them and shows every answer and the collapsed result. An "
        "event type AHP does not define is reported on stderr with the closest known type, and the exit status "
        "is 1.",
        parents=[common],
    )
    explain.add_argument("--config", required=True, help="gateway.yaml or .json")
    explain.add_argument("--event", required=True, help="JSON: an event (partial allowed) or an intercept request")
    explain.add_argument("--capabilities", help="JSON capabilities (default: the request's or the event's bound)")
    explain.add_argument("--call", action="store_true", help="also call the real upstreams")
    explain.add_argument("--principal", help='JSON {"name": ..., "attributes": {...}} or a file holding it')
    explain.set_defaults(func=cmd_explain)

    hook = sub.add_parser(
        "hook", help="run as a native hook of a coding agent (hook <harness> ...; hook config <harness> ...)"
    )
    hook.add_argument("hook_args", nargs=argparse.REMAINDER, help="see `ahp-gateway hook --help`")
    hook.set_defaults(func=cmd_hook)

    policy = sub.add_parser("policy", help="policy-as-code tools", parents=[common])
    policy_sub = policy.add_subparsers(dest="policy_command", required=True)
    ptest = policy_sub.add_parser(
        "test",
        help="run the tests: of policy files",
        description="Run the tests: of policy files like `opa test`: N passed, M failed, a diff per failure, "
        "exit 1 on failure. --format json reports every test with the rules it fired.",
        parents=[common],
    )
    ptest.add_argument("paths", nargs="*", help="policy files or directories (default: policies/)")
    ptest.add_argument("-v", "--verbose", action="store_true", help="also list passing tests")
    ptest.add_argument("--run", metavar="PATTERN", help="only tests whose name matches this regular expression")
    ptest.add_argument("--format", choices=["text", "json"], default="text", help="json: one document for scripts")
    ptest.add_argument("--coverage", action="store_true", help="list every rule that no test makes fire")
    ptest.add_argument("--fail-under", type=float, metavar="N", help="exit 1 when under N %% of the rules fire")
    ptest.set_defaults(func=cmd_policy_test)

    replay = sub.add_parser(
        "replay",
        help="re-decide recorded events with a new configuration",
        description="Re-decide recorded intercepts with a new configuration: a table of the events whose outcome "
        "changes (old -> new, deny code, deciding upstream and rule), a summary line, exit 1 when anything "
        "changed. The events come from a log.capture file (off by default and SENSITIVE: it holds full events, is "
        "created owner-only, rotated at captureMaxBytes keeping captureFiles files, and never holds credential "
        "headers) or from a decision log written with includeContent: true. The old outcome is the recorded "
        "answer, or the --baseline configuration's. Local policies run for real; remote upstreams only with "
        "--call (otherwise they are assumed to answer no effect, and counted).",
        parents=[common],
    )
    replay.add_argument("--config", required=True, help="the new gateway.yaml")
    replay.add_argument("--events", required=True, help="log.capture file, or a decision log with includeContent")
    replay.add_argument("--baseline", metavar="OLD.yaml", help="decide the old outcome with this configuration")
    replay.add_argument("--call", action="store_true", help="also call remote upstreams (default: assume no effect)")
    replay.add_argument("--format", choices=["text", "json"], default="text", help="json: one document for scripts")
    replay.add_argument("--all", action="store_true", help="list unchanged events too")
    replay.set_defaults(func=cmd_replay)

    schema = sub.add_parser(
        "schema",
        help="print the JSON Schema of a file kind (for editors)",
        description="Print the JSON Schema (2020-12) of gateway.yaml (default), of policy files or of registration "
        "documents, generated from the validating models, for editor completion and validation (e.g. "
        "`# yaml-language-server: $schema=gateway.schema.json`). It is stricter than the loader in one way: "
        "unknown keys are errors.",
        parents=[common],
    )
    schema.add_argument(
        "--kind",
        choices=["config", "policy", "registration"],
        default="config",
        help="gateway.yaml, a policy file or a registration document",
    )
    schema.set_defaults(func=cmd_schema)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    if args_list[:1] == ["hook"]:  # fast path: no server stack, no logging setup
        from gateway.native.command import main as hook_main

        return hook_main(args_list[1:])

    parser = build_parser()
    args = parser.parse_args(argv)
    from gateway.logformat import configure

    configure(args.log_level)
    return int(args.func(args))
