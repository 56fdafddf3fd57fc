"""``ahp-gateway hook <harness>`` and ``ahp-gateway hook config <harness>``.

The hook reads the native payload on stdin, POSTs one AHP message to the gateway and answers in
the native format. It never exits with anything but the native contract's codes (0, or 2 where
that blocks), whatever goes wrong: usage errors and internal faults follow ``--on-error`` too.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

from gateway.native import HARNESSES, HTTP_HARNESSES

DEFAULT_TIMEOUT_MS = 3000
HOOK_USAGE = f"""usage: ahp-gateway hook <harness> [--url URL] [--event EVENT] [--token-file FILE]
                          [--on-error deny|allow] [--timeout-ms N] [--non-interactive]
       ahp-gateway hook config <harness> --url URL [--token-file FILE] [--non-interactive] [--http]

Run as the native hook of a coding agent: native payload on stdin, native answer out.

harness        one of {", ".join(HARNESSES)}
--url          the gateway's AHP endpoint (default: $AHP_GATEWAY_URL)
--event        the native event name (default: read from the payload)
--token-file   file holding the gateway bearer token (default: $AHP_GATEWAY_TOKEN_FILE)
--on-error     decision when the gateway is unreachable, slow or answers badly (default: deny)
--timeout-ms   internal deadline; keep it well below the native hook timeout (default: {DEFAULT_TIMEOUT_MS})
--non-interactive
               nobody can answer a prompt (gemini -p, copilot -p, CI): ask is not advertised,
               so each asking rule's fallback (its deny) applies

hook config prints the settings as JSON on stdout (where they go, and the failure behaviour, on
stderr); --http prints the native HTTP hook instead (claude-code, copilot).
"""
_HOOK_OPTIONS = frozenset(("--url", "--event", "--token-file", "--on-error", "--timeout-ms", "--non-interactive"))
_CONFIG_OPTIONS = frozenset(("--url", "--token-file", "--non-interactive", "--http"))
_FLAGS = frozenset(("--non-interactive", "--http"))


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
        self.non_interactive = "--non-interactive" in options
        self.http = "--http" in options
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
            if name in _FLAGS:
                if eq:
                    raise _Usage(f"{name} takes no value")
            elif not eq:
                following = next(items, None)
                if following is None:
                    raise _Usage(f"{name} needs a value")
                value = following
            options[name] = value
        else:
            positional.append(arg)
    if len(positional) == 1 and positional[0] not in HARNESSES:
        raise _Usage(f"unknown harness {positional[0][:40]!r}")
    if len(positional) != 1:
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
        url = ns.url or os.environ.get("AHP_GATEWAY_URL")
        if not url:
            raise _Usage("--url is required (or set AHP_GATEWAY_URL)")
        _check_url(url)
        token_file = _check_token_file(ns.token_file) if ns.token_file else None
        if ns.http and ns.harness not in HTTP_HARNESSES:
            raise _Usage(f"{ns.harness} has no native HTTP hook (--http: {', '.join(HTTP_HARNESSES)})")
    except _Usage as exc:
        sys.stderr.write(f"ahp-gateway hook config: {exc}\n")
        if str(exc).startswith("unknown harness"):
            sys.stderr.write(f"harnesses: {', '.join(HARNESSES)}\n")
        return 2
    out = snippet(ns.harness, url, token_file, exe=executable(), interactive=not ns.non_interactive, http=ns.http)
    sys.stdout.write(out.document)
    sys.stdout.flush()
    sys.stderr.write(out.comments)
    return 0


def executable() -> list[str]:
    """How the agent should start this ``ahp-gateway``: the absolute path of the console script
    that is running, else this interpreter with ``-m gateway``."""
    import shutil

    argv0 = sys.argv[0] if sys.argv else ""
    if os.path.basename(argv0).startswith("ahp-gateway"):
        found = argv0 if os.sep in argv0 or (os.altsep and os.altsep in argv0) else shutil.which(argv0)
        if found and os.path.isfile(found):
            return [os.path.abspath(found)]
    return [os.path.abspath(sys.executable), "-m", "gateway"]


def _check_url(url: str) -> None:
    from gateway.native import client

    try:
        client.split_url(url)
    except client.Unreachable as exc:
        raise _Usage(f"invalid --url {url!r}: {exc}") from None


def _check_token_file(path: str) -> str:
    """The token file as an absolute path (the agent runs the hook from its own working
    directory), refused now if the hook could not use it."""
    full = os.path.abspath(path)
    try:
        with open(full, encoding="utf-8") as handle:
            token = handle.read().strip()
    except (OSError, UnicodeDecodeError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else type(exc).__name__
        raise _Usage(f"cannot read the token file {full}: {why}") from None
    if not token or any(c in token for c in "\r\n\0"):
        raise _Usage(f"the token file {full} holds no usable token (one line, not empty)")
    return full


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
    from gateway.native import client, flow, versions

    codec = flow.codec_for(ns.harness)
    raw = sys.stdin.buffer.read(flow.MAX_PAYLOAD_BYTES + 1)
    version = versions.from_environment(ns.harness, os.environ)
    prepared = flow.prepare(codec, raw, ns.event, ns.on_error, ask=not ns.non_interactive, version=version)
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
