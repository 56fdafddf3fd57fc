"""``ahp-gateway hook <harness>`` and ``ahp-gateway hook config <harness>``.

The hook reads the native payload on stdin, POSTs one AHP message to the gateway and answers in
the native format. It never exits with anything but the native contract's codes (0, or 2 where
that blocks), whatever goes wrong: usage errors and internal faults follow ``--on-error`` too.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

from gateway.native import HARNESSES

DEFAULT_TIMEOUT_MS = 3000
HOOK_USAGE = f"""usage: ahp-gateway hook <harness> [--url URL] [--event EVENT] [--token-file FILE]
                          [--on-error deny|allow] [--timeout-ms N]
       ahp-gateway hook config <harness> --url URL [--token-file FILE]

Run as the native hook of a coding agent: native payload on stdin, native answer out.

harness        one of {", ".join(HARNESSES)}
--url          the gateway's AHP endpoint (default: $AHP_GATEWAY_URL)
--event        the native event name (default: read from the payload)
--token-file   file holding the gateway bearer token (default: $AHP_GATEWAY_TOKEN_FILE)
--on-error     decision when the gateway is unreachable, slow or answers badly (default: deny)
--timeout-ms   internal deadline; keep it well below the native hook timeout (default: {DEFAULT_TIMEOUT_MS})
"""
_HOOK_OPTIONS = frozenset(("--url", "--event", "--token-file", "--on-error", "--timeout-ms"))
_CONFIG_OPTIONS = frozenset(("--url", "--token-file"))


class _Usage(Exception):
    pass


class _Args:
    """Parsed options (a hand-written parser: argparse alone costs several ms per tool call)."""

    def __init__(self, harness: str, options: dict[str, str]) -> None:
        self.harness = harness
        self.url = options.get("--url")
        self.event = options.get("--event")
        self.token_file = options.get("--token-file")
        self.on_error = options.get("--on-error", "deny")
        timeout = options.get("--timeout-ms", str(DEFAULT_TIMEOUT_MS))
        if self.on_error not in ("deny", "allow"):
            raise _Usage("--on-error must be deny or allow")
        if not timeout.isdigit() or not 1 <= int(timeout) <= 600_000:
            raise _Usage("--timeout-ms must be an integer between 1 and 600000")
        self.timeout_ms = int(timeout)


def _parse(argv: Sequence[str], allowed: frozenset[str]) -> _Args:
    positional: list[str] = []
    options: dict[str, str] = {}
    items = iter(argv)
    for arg in items:
        if arg.startswith("--"):
            name, eq, value = arg.partition("=")
            if name not in allowed:
                raise _Usage(f"unknown option {name[:40]}")
            if not eq:
                following = next(items, None)
                if following is None:
                    raise _Usage(f"{name} needs a value")
                value = following
            options[name] = value
        else:
            positional.append(arg)
    if len(positional) != 1 or positional[0] not in HARNESSES:
        raise _Usage(f"expected exactly one harness: {', '.join(HARNESSES)}")
    return _Args(positional[0], options)


def main(argv: Sequence[str]) -> int:
    args = list(argv)
    if any(a in ("-h", "--help") for a in args):
        sys.stdout.write(HOOK_USAGE)
        return 0
    if args[:1] == ["config"]:
        return _config(args[1:])
    return _hook(args)


def _config(argv: list[str]) -> int:
    from gateway.native.snippets import snippet

    try:
        ns = _parse(argv, _CONFIG_OPTIONS)
    except _Usage as exc:
        sys.stderr.write(f"ahp-gateway hook config: {exc}\n")
        return 2
    url = ns.url or os.environ.get("AHP_GATEWAY_URL")
    if not url:
        sys.stderr.write("ahp-gateway hook config: --url is required (or set AHP_GATEWAY_URL)\n")
        return 2
    sys.stdout.write(snippet(ns.harness, url, ns.token_file))
    return 0


def _hook(argv: list[str]) -> int:
    on_error = "allow" if _flag(argv, "--on-error") == "allow" else "deny"
    try:
        ns = _parse(argv, _HOOK_OPTIONS)
    except _Usage as exc:
        return _emit_bare(on_error, f"usage error: {exc}")
    try:
        return _run(ns)
    except Exception as exc:  # noqa: BLE001 - the native contract allows no other exit code than 0/2
        return _emit_bare(on_error, f"internal error ({type(exc).__name__})")


def _run(ns: _Args) -> int:
    from gateway.native import client, flow

    codec = flow.codec_for(ns.harness)
    raw = sys.stdin.buffer.read(flow.MAX_PAYLOAD_BYTES + 1)
    prepared = flow.prepare(codec, raw, ns.event, ns.on_error)
    if prepared.answer is not None:
        return _emit(prepared.answer)
    assert prepared.tr is not None and prepared.body is not None
    url = ns.url or os.environ.get("AHP_GATEWAY_URL")
    if not url:
        return _emit(flow.failure(codec, prepared.tr, ns.on_error, "no gateway URL (--url or AHP_GATEWAY_URL)"))
    token = None
    token_file = ns.token_file or os.environ.get("AHP_GATEWAY_TOKEN_FILE")
    if token_file:
        try:
            with open(token_file, encoding="utf-8") as handle:
                token = handle.read().strip()
        except OSError:
            return _emit(flow.failure(codec, prepared.tr, ns.on_error, "cannot read the token file"))
        if not token or any(c in token for c in "\r\n\0"):
            return _emit(flow.failure(codec, prepared.tr, ns.on_error, "the token file holds no usable token"))
    try:
        status, body = client.post(
            url, prepared.body, deadline_s=ns.timeout_ms / 1000, token=token, front_end=ns.harness
        )
    except client.Unreachable as exc:
        return _emit(flow.failure(codec, prepared.tr, ns.on_error, str(exc)))
    return _emit(flow.conclude(codec, prepared.tr, status, body, ns.on_error))


def _emit(answer: object) -> int:
    from gateway.native.model import NativeAnswer

    assert isinstance(answer, NativeAnswer)
    if answer.stdout:
        sys.stdout.write(answer.stdout)
        sys.stdout.flush()
    if answer.stderr:
        sys.stderr.write(answer.stderr)
        sys.stderr.flush()
    return answer.exit_code


def _emit_bare(on_error: str, why: str) -> int:
    """Before a codec can answer: exit 2 blocks in every supported harness's command hooks."""
    verdict = "proceeding (--on-error allow)" if on_error == "allow" else "blocking (--on-error deny)"
    sys.stderr.write(f"ahp-gateway hook: {why}; {verdict}\n")
    return 0 if on_error == "allow" else 2


def _flag(argv: list[str], name: str) -> str | None:
    for i, arg in enumerate(argv):
        if arg == name and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith(name + "="):
            return arg.split("=", 1)[1]
    return None
