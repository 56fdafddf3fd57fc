"""End to end: ``ahp-gateway hook <harness>`` as a real process with a native payload on stdin,
against a live gateway on loopback serving the bundled default configuration; the
``/native/<harness>`` HTTP endpoint; ``hook config``; and the adapter's import hygiene."""

from __future__ import annotations

import asyncio
import copy
import json
import os
import shlex
import socket
import sys
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from gateway.native import HARNESSES
from gateway.native.command import main as hook_main
from gateway.native.snippets import snippet
from gateway.server.app import GatewayServer
from tests.support.client import post
from tests.support.native_gateway import default_gateway, hook
from tests.support.native_payloads import ALL, event_of
from tests.support.paths import ROOT

__all__ = ["default_gateway"]  # the module-scoped gateway fixture (tests/support/native_gateway.py)

FORCE_PUSH = "git push --force origin main"
POLICY_REASON = "Force-pushing to a protected branch"
# One shell-call payload per harness, with the command in the harness's own field.
SHELL = {
    "claude-code": ("PreToolUse/Bash", ("tool_input", "command")),
    "codex": ("PreToolUse/Bash", ("tool_input", "command")),
    "gemini": ("BeforeTool/shell", ("tool_input", "command")),
    "copilot": ("preToolUse/bash", ("toolArgs",)),
    "cursor": ("preToolUse/Shell", ("tool_input", "command")),
    "windsurf": ("pre_run_command", ("tool_info", "command_line")),
}


def shell_payload(harness: str, command: str) -> tuple[dict[str, Any], str | None]:
    key, path = SHELL[harness]
    payload = copy.deepcopy(ALL[harness][key])
    if path == ("toolArgs",):
        payload["toolArgs"] = json.dumps({"command": command})
    else:
        payload[path[0]][path[1]] = command
    return payload, event_of(harness, key)


def denial_text(harness: str, code: int, out: str, err: str) -> str:
    """The reason a native answer blocks with, or '' when it does not block."""
    if harness == "windsurf":
        return err if code == 2 else ""
    assert code == 0, err
    if not out:
        return ""
    doc = json.loads(out)
    specific = doc.get("hookSpecificOutput", {})
    if specific.get("permissionDecision") == "deny":
        return str(specific["permissionDecisionReason"])
    if doc.get("decision") == "deny" or doc.get("permission") == "deny" or doc.get("permissionDecision") == "deny":
        return str(doc.get("reason") or doc.get("user_message") or doc.get("permissionDecisionReason"))
    return ""


@pytest.mark.spec("AHP-TB-001")
@pytest.mark.asyncio(loop_scope="module")
@pytest.mark.parametrize("harness", HARNESSES)
async def test_force_push_is_blocked_and_ls_passes_through_the_real_adapter(
    harness: str, default_gateway: GatewayServer
) -> None:
    payload, event = shell_payload(harness, FORCE_PUSH)
    args = [harness, "--url", default_gateway.url, *(["--event", event] if event else [])]
    code, out, err = await hook(*args, stdin=json.dumps(payload).encode())
    assert POLICY_REASON in denial_text(harness, code, out, err), (code, out, err)
    payload, event = shell_payload(harness, "ls -la")
    code, out, err = await hook(*args, stdin=json.dumps(payload).encode())
    assert code == 0 and err == ""
    assert out == ('{"permission":"allow"}' if harness == "cursor" else "")


def _closed_port() -> int:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    return port


@pytest.mark.spec("AHP-FAIL-001")
async def test_gateway_down_denies_by_default_and_allows_on_request() -> None:
    payload, _ = shell_payload("claude-code", "ls -la")
    url = f"http://127.0.0.1:{_closed_port()}/"
    code, out, err = await hook("claude-code", "--url", url, stdin=json.dumps(payload).encode())
    assert code == 0 and json.loads(out)["hookSpecificOutput"]["permissionDecision"] == "deny"
    assert err == "ahp-gateway hook: gateway unreachable (ConnectionRefusedError); denied (--on-error deny)\n"
    code, out, err = await hook("claude-code", "--url", url, "--on-error", "allow", stdin=json.dumps(payload).encode())
    assert (code, out) == (0, "") and err.endswith("proceeding (--on-error allow)\n")
    code, out, err = await hook("windsurf", "--url", url, stdin=json.dumps(shell_payload("windsurf", "ls")[0]).encode())
    assert code == 2 and "gateway unreachable" in err


@pytest.mark.spec("AHP-FAIL-001")
@pytest.mark.parametrize("harness", HARNESSES)
async def test_gateway_down_and_slow_give_the_exact_native_denial(harness: str) -> None:
    from tests.support.native_answers import FAIL_DENY, SYNTHETIC

    key, code, stdout = FAIL_DENY[harness]
    payload, event = shell_payload(harness, "ls -la")
    extra = ["--event", event] if event else []
    server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)  # accepts, never answers
    slow_url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/"
    try:
        for url, why in (
            (f"http://127.0.0.1:{_closed_port()}/", "gateway unreachable (ConnectionRefusedError)"),
            (slow_url, "no answer from the gateway within 150 ms"),
        ):
            rc, out, err = await hook(
                harness, "--url", url, "--timeout-ms", "150", *extra, stdin=json.dumps(payload).encode()
            )
            assert (rc, json.loads(out) if out else None) == (code, stdout)
            note = f"ahp-gateway hook: {why}; denied (--on-error deny)\n"
            assert err == (SYNTHETIC + "\n" + note if harness == "windsurf" else note)
    finally:
        server.close()


@pytest.mark.spec("AHP-FAIL-002")
async def test_slow_gateway_is_decided_within_the_internal_deadline() -> None:
    server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)  # accepts, never answers
    port = server.sockets[0].getsockname()[1]
    try:
        payload, _ = shell_payload("codex", "ls -la")
        code, out, err = await hook(
            "codex", "--url", f"http://127.0.0.1:{port}/", "--timeout-ms", "200", stdin=json.dumps(payload).encode()
        )
    finally:
        server.close()
    assert code == 0 and json.loads(out)["hookSpecificOutput"]["permissionDecision"] == "deny"
    assert err == "ahp-gateway hook: no answer from the gateway within 200 ms; denied (--on-error deny)\n"


async def test_malformed_gateway_answer_and_token_handling(stub_factory: Any, tmp_path: Path) -> None:
    stub = await stub_factory(lambda request: (200, b'{"jsonrpc":"2.0","id":1,"result":{}}'))
    token = tmp_path / "token"
    token.write_text("s3cr3t-value\n")
    payload, event = shell_payload("copilot", "ls -la")
    code, out, err = await hook(
        "copilot",
        "--event",
        str(event),
        "--token-file",
        str(token),
        stdin=json.dumps(payload).encode(),
        env={"AHP_GATEWAY_URL": stub.url},
    )
    assert code == 0 and json.loads(out)["permissionDecision"] == "deny"
    assert "unusable gateway answer: the answer id does not match the request id" in err
    assert stub.headers[0]["Authorization"] == "Bearer s3cr3t-value"
    assert stub.headers[0]["X-AHP-Front-End"] == "native-copilot"
    assert stub.received[0]["params"]["event"]["tool"]["input"] == {"command": "ls -la"}
    assert "s3cr3t" not in out + err + json.dumps(stub.received)
    code, out, err = await hook(
        "copilot",
        "--event",
        str(event),
        "--token-file",
        str(tmp_path / "missing"),
        "--url",
        stub.url,
        stdin=json.dumps(payload).encode(),
    )
    assert "cannot read the token file" in err and json.loads(out)["permissionDecision"] == "deny"
    assert len(stub.received) == 1  # nothing was sent without the credential


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["nosuch"], 2, "usage error"),
        (["codex", "--timeout-ms", "0"], 2, "--timeout-ms"),
        (["codex", "--on-error", "allow", "--bogus"], 0, "proceeding (--on-error allow)"),
    ],
)
async def test_usage_errors_answer_in_the_native_contract(args: list[str], code: int, message: str) -> None:
    rc, out, err = await hook(*args, stdin=b"{}")
    assert (rc, out) == (code, "") and message in err


async def test_no_gateway_url_is_a_gateway_failure() -> None:
    payload, _ = shell_payload("gemini", "ls")
    code, out, err = await hook("gemini", stdin=json.dumps(payload).encode())
    assert code == 0 and json.loads(out)["decision"] == "deny" and "no gateway URL" in err


# ------------------------------------------------------------------------------ HTTP endpoint
@pytest.mark.spec("AHP-HTTP-001")
@pytest.mark.asyncio(loop_scope="module")
async def test_native_claude_code_http_endpoint(default_gateway: GatewayServer) -> None:
    async with aiohttp.ClientSession() as http:
        await _endpoint_checks(default_gateway, http)


async def _native_denials(server: GatewayServer, harness: str) -> float:
    assert server.observability is not None
    text = (await server.observability.render())[0].decode()
    series = f'ahp_gateway_native_requests_total{{event_type="tool.before",harness="{harness}",outcome="deny"}} '
    return sum(float(line[len(series) :]) for line in text.splitlines() if line.startswith(series))


async def _endpoint_checks(default_gateway: GatewayServer, http: aiohttp.ClientSession) -> None:
    base = default_gateway.url.rstrip("/")
    before = {h: await _native_denials(default_gateway, h) for h in ("claude-code", "copilot")}
    payload, _ = shell_payload("claude-code", FORCE_PUSH)
    status, body = await post(http, f"{base}/native/claude-code", payload)
    assert status == 200 and POLICY_REASON in body["hookSpecificOutput"]["permissionDecisionReason"]
    assert body["hookSpecificOutput"]["permissionDecision"] == "deny"
    payload, _ = shell_payload("claude-code", "ls -la")
    assert await post(http, f"{base}/native/claude-code", payload) == (200, {})
    permission = {**ALL["claude-code"]["PermissionRequest/Bash"], "tool_input": {"command": FORCE_PUSH}}
    status, body = await post(http, f"{base}/native/claude-code", permission)
    assert body["hookSpecificOutput"]["decision"]["behavior"] == "deny"
    copilot, _ = shell_payload("copilot", FORCE_PUSH)
    status, body = await post(http, f"{base}/native/copilot?event=preToolUse", copilot)
    assert status == 200 and body["permissionDecision"] == "deny"
    for harness in ("claude-code", "copilot"):  # one denied tool.before each, counted by front end
        assert await _native_denials(default_gateway, harness) == before[harness] + 1
    status, body = await post(http, f"{base}/native/gemini", {})
    assert status == 404 and b"command adapter" in body
    status, body = await post(http, f"{base}/native/claude-code", b"{not json")
    assert status == 200 and body["decision"] == "block"  # never a non-2xx: the hook would proceed


# ------------------------------------------------------------------------------- hook config
def _config(
    capsys: pytest.CaptureFixture[str], *args: str, argv0: str | None = None, monkeypatch: pytest.MonkeyPatch
) -> tuple[int, str, str]:
    if argv0 is not None:
        monkeypatch.setattr(sys, "argv", [argv0])
    code = hook_main(["config", *args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.fixture
def token_file(tmp_path: Path) -> Path:
    path = tmp_path / "token"
    path.write_text("t0k3n\n")
    return path


@pytest.fixture
def console_script(tmp_path: Path) -> Path:
    """Stands for the installed ``ahp-gateway`` script (only its path is read)."""
    path = tmp_path / "venv" / "bin" / "ahp-gateway"
    path.parent.mkdir(parents=True)
    path.write_text("#!/bin/sh\n")
    return path


@pytest.mark.parametrize("harness", HARNESSES)
def test_hook_config_prints_one_json_document_and_the_comments_on_stderr(
    harness: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    token_file: Path,
    console_script: Path,
) -> None:
    """issue 29: stdout is valid JSON that can be merged into the agent's settings; every command
    names the absolute path of the ``ahp-gateway`` that printed it (a bare ``ahp-gateway`` is not
    on the agent's PATH after a venv install) and the token file by its absolute path."""
    monkeypatch.chdir(token_file.parent)
    code, out, err = _config(
        capsys,
        harness,
        "--url",
        "http://127.0.0.1:8080/",
        "--token-file",
        "token",
        argv0=str(console_script),
        monkeypatch=monkeypatch,
    )
    assert code == 0, err
    doc = json.loads(out)
    assert out == snippet(harness, "http://127.0.0.1:8080/", str(token_file), exe=[str(console_script)]).document
    assert err.startswith("# merge into ") and "# failure behaviour" in err
    assert all(line.startswith("#") for line in err.splitlines())
    commands = [c for c in _strings(doc) if c.startswith(str(console_script))]
    assert commands and not [c for c in _strings(doc) if c.startswith("ahp-gateway ")]
    for command in commands:
        argv = shlex.split(command)
        assert argv[:3] == [str(console_script), "hook", harness] and "--event" in argv
        assert argv[argv.index("--token-file") + 1] == str(token_file)
        assert "--non-interactive" not in argv
    if harness == "claude-code":
        pre = doc["hooks"]["PreToolUse"][0]["hooks"][0]
        assert pre["onFailure"] == "block" and pre["timeout"] == 10
        assert "FAIL-CLOSED on the entries with onFailure: block" in err and "--http" in err
    if harness == "codex":
        assert "always FAIL-OPEN" in err and "FAIL-CLOSED" not in err
    if harness == "cursor":
        assert doc["hooks"]["preToolUse"][0]["failClosed"] is True
        # One tool layer only: Cursor fires preToolUse and beforeShellExecution for one Shell call.
        assert not {"beforeShellExecution", "beforeMCPExecution", "beforeReadFile"} & set(doc["hooks"])
    if harness in ("gemini", "windsurf"):
        assert "FAIL-CLOSED" not in err
    if harness == "gemini":
        assert "--non-interactive" in err
    if harness == "copilot":
        assert "native timeout: FAIL-OPEN" in err
        assert "1.0.102: connection refused or a non-2xx answer FAIL-CLOSED" in err
        # One casing only: both casings make the CLI fire twice.
        assert all(name[0].islower() for name in doc["hooks"])


@pytest.mark.parametrize("harness", ["claude-code", "copilot"])
def test_hook_config_http_prints_the_native_http_hook(
    harness: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    code, out, err = _config(capsys, harness, "--url", "http://127.0.0.1:8080/ahp", "--http", monkeypatch=monkeypatch)
    assert code == 0, err
    doc = json.loads(out)
    urls = [h["url"] for entries in doc["hooks"].values() for e in entries for h in e.get("hooks", [e])]
    if harness == "claude-code":
        assert urls == ["http://127.0.0.1:8080/native/claude-code"] * 2
        assert doc["hooks"]["PreToolUse"][0]["hooks"][0]["onFailure"] == "block"
    else:
        assert urls == [f"http://127.0.0.1:8080/native/copilot?event={e}" for e in ("preToolUse", "permissionRequest")]
        assert "COPILOT_HOOK_ALLOW_LOCALHOST=1" in err


def test_hook_config_non_interactive_and_module_fallback(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """issue 29: ``--non-interactive`` goes into every command; run as ``python -m gateway`` the
    commands name this interpreter."""
    code, out, err = _config(
        capsys,
        "gemini",
        "--url",
        "http://127.0.0.1:8080/",
        "--non-interactive",
        argv0=str(ROOT / "gateway" / "__main__.py"),
        monkeypatch=monkeypatch,
    )
    assert code == 0, err
    for command in _strings(json.loads(out)):
        if " hook " in command:
            argv = shlex.split(command)
            assert argv[:4] == [os.path.abspath(sys.executable), "-m", "gateway", "hook"]
            assert argv[-1] == "--non-interactive"
    assert "headless" not in err  # the note is for the interactive snippet


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["x", "--url", "http://h/"], "ahp-gateway hook config: unknown harness 'x'\n"),
        (["codex", "--url", "ftp://h/"], "invalid --url 'ftp://h/'"),
        (["codex", "--url", "http://h:99999/"], "invalid --url 'http://h:99999/'"),
        (["codex", "--url", "http://h/", "--token-file", "missing"], "cannot read the token file /"),
        (["codex", "--url", "http://h/", "--http"], "codex has no native HTTP hook"),
        (["codex", "--url", "http://h/", "--non-interactive=1"], "--non-interactive takes no value"),
    ],
)
def test_hook_config_refuses_what_the_hook_could_not_use(
    args: list[str], message: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """issue 29: an unknown harness, an invalid URL or an unreadable token file is refused when
    the snippet is printed (naming the path), not found at the first tool call."""
    monkeypatch.chdir(tmp_path)
    code, out, err = _config(capsys, *args, monkeypatch=monkeypatch)
    assert (code, out) == (2, "") and message in err, err
    if "token file" in message:
        assert str(tmp_path / "missing") in err


def test_hook_config_refuses_an_empty_token_file(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    (tmp_path / "empty").write_text("\n")
    code, out, err = _config(
        capsys, "codex", "--url", "http://h/", "--token-file", str(tmp_path / "empty"), monkeypatch=monkeypatch
    )
    assert (code, out) == (2, "") and f"the token file {tmp_path / 'empty'} holds no usable token" in err


CONSOLE_SCRIPT = Path(sys.executable).parent / "ahp-gateway"


@pytest.mark.skipif(not CONSOLE_SCRIPT.is_file(), reason="no ahp-gateway console script next to this interpreter")
@pytest.mark.asyncio(loop_scope="module")
async def test_the_printed_command_runs_without_ahp_gateway_on_path(
    default_gateway: GatewayServer, tmp_path: Path
) -> None:
    """issue 29: the command ``hook config`` prints (run by the console script) works from another
    directory with a PATH that does not hold the virtual environment."""
    proc = await asyncio.create_subprocess_exec(
        str(CONSOLE_SCRIPT),
        "hook",
        "config",
        "claude-code",
        "--url",
        default_gateway.url,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, err
    command = json.loads(out)["hooks"]["PreToolUse"][0]["hooks"][0]["command"]
    assert shlex.split(command)[0] == str(CONSOLE_SCRIPT)
    payload, _ = shell_payload("claude-code", FORCE_PUSH)
    env = {k: v for k, v in os.environ.items() if not k.startswith("AHP_GATEWAY_")}
    env["PATH"] = "/usr/bin:/bin"
    proc = await asyncio.create_subprocess_exec(
        "/bin/sh",
        "-c",
        command,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        cwd=tmp_path,
        env=env,
    )
    out, err = await asyncio.wait_for(proc.communicate(json.dumps(payload).encode()), 60)
    assert POLICY_REASON in denial_text("claude-code", proc.returncode or 0, out.decode(), err.decode())


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return []


async def test_hook_config_without_url_is_a_usage_error() -> None:
    rc, out, err = await hook("config", "codex", stdin=b"")
    assert rc == 2 and "--url is required" in err


async def test_the_hook_command_never_imports_the_server_stack() -> None:
    script = (
        "import sys, io\n"
        "from gateway.cli import main\n"
        "sys.stdin = io.TextIOWrapper(io.BytesIO(sys.argv[1].encode()))\n"
        "rc = main(['hook', 'claude-code', '--url', sys.argv[2]])\n"
        "heavy = sorted(m for m in sys.modules if m.split('.')[0] in "
        "('aiohttp', 'pydantic', 'jsonschema_rs', 'cel_expr_python', 'yaml', 'orjson', 'asyncio', 'http', 'email')"
        " or m.startswith(('gateway.server', 'gateway.pipeline', 'gateway.config', 'gateway.policy')))\n"
        "sys.stderr.write('HEAVY=' + ','.join(heavy) + '\\n')\n"
    )
    payload = json.dumps(shell_payload("claude-code", "ls")[0])
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        script,
        payload,
        f"http://127.0.0.1:{_closed_port()}/",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    _, err = await proc.communicate()
    assert "HEAVY=\n" in err.decode(), err.decode()


def test_the_metrics_label_set_is_exactly_the_harness_list() -> None:
    from gateway.observability.sink import NATIVE_HARNESSES, native_harness

    assert frozenset(HARNESSES) == NATIVE_HARNESSES
    assert native_harness("urn:ahp-adapter:cursor") == "cursor"
    assert native_harness("urn:ahp-adapter:cursor2") is None  # clients cannot mint label values
    assert native_harness("urn:example:harness") is None


def test_option_parsing_forms_and_errors(capsys: pytest.CaptureFixture[str]) -> None:
    # private: the hook command's argument parser (stdlib only, no public parser object) is tested directly
    from gateway.native.command import _HOOK_OPTIONS, _parse, _Usage

    ns = _parse(["--url=http://h/", "cursor", "--event", "preToolUse", "--timeout-ms", "250"], _HOOK_OPTIONS)
    assert (ns.harness, ns.url, ns.event, ns.timeout_ms, ns.on_error) == (
        "cursor",
        "http://h/",
        "preToolUse",
        250,
        "deny",
    )
    for argv, message in (
        (["cursor", "--url"], "--url needs a value"),
        (["cursor", "codex"], "exactly one harness"),
        (["Cursor"], "unknown harness 'Cursor'"),
        (["cursor", "--on-error", "maybe"], "deny or allow"),
        (["cursor", "--timeout-ms", "-5"], "between 1 and 600000"),
        (["cursor", "--token"], "unknown option --token"),
    ):
        with pytest.raises(_Usage, match=message):
            _parse(argv, _HOOK_OPTIONS)
    assert hook_main(["--help"]) == 0
    assert "ahp-gateway hook <harness>" in capsys.readouterr().out


@pytest.mark.spec("AHP-HTTP-001")
async def test_https_gateway_is_verified_against_the_trust_store(tmp_path: Path) -> None:
    """Remote endpoints use https with certificate validation; an untrusted certificate is a
    gateway failure (no downgrade, no unverified fallback)."""
    import ssl

    import trustme
    from aiohttp import web

    ca = trustme.CA()
    ca_file = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(ca_file))
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(context)
    seen: list[dict[str, Any]] = []

    async def handle(request: web.Request) -> web.Response:
        body = await request.json()
        seen.append(body)
        answer = {
            "jsonrpc": "2.0",
            "id": body["id"],
            "result": {"protocolVersion": "draft", "effects": [{"type": "deny", "reason": "blocked over TLS"}]},
        }
        return web.json_response(answer)

    app = web.Application()
    app.router.add_post("/", handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=context)
    await site.start()
    url = f"https://127.0.0.1:{runner.addresses[0][1]}/"
    payload = json.dumps(shell_payload("claude-code", "ls")[0]).encode()
    try:
        rc, out, err = await hook("claude-code", "--url", url, stdin=payload, env={"SSL_CERT_FILE": str(ca_file)})
        assert rc == 0 and json.loads(out)["hookSpecificOutput"]["permissionDecisionReason"] == "blocked over TLS"
        rc, out, err = await hook("claude-code", "--url", url, "--on-error", "allow", stdin=payload)
        assert (rc, out) == (0, "") and "gateway unreachable (SSLCertVerificationError)" in err
        assert len(seen) == 1
    finally:
        await runner.cleanup()


async def test_native_endpoint_decides_itself_when_the_pipeline_faults() -> None:
    """A pipeline fault (no real peer can produce one on purpose, hence a stand-in ``decide``)
    still gives the harness a native denial, never a 500 that Claude Code would treat as fail-open."""
    from gateway.native.endpoint import handle_native

    seen: list[tuple[bytes, dict[str, str]]] = []

    async def broken(body: bytes, headers: Any) -> tuple[int, bytes | None]:
        seen.append((body, dict(headers)))
        raise RuntimeError("pipeline bug")

    payload = json.dumps(shell_payload("claude-code", "ls")[0]).encode()
    status, body = await handle_native("claude-code", payload, {"x-ahp-front-end": "native-codex"}, broken)
    assert status == 200
    assert json.loads(body)["hookSpecificOutput"]["permissionDecision"] == "deny"
    assert seen[0][1] == {"X-AHP-Front-End": "native-claude-code"}  # the caller cannot pick the front end

    async def garbage(body: bytes, headers: Any) -> tuple[int, bytes | None]:
        return 200, b"\x00not json"

    status, body = await handle_native("claude-code", payload, {}, garbage)
    assert (status, json.loads(body)["hookSpecificOutput"]["permissionDecision"]) == (200, "deny")
    observe = json.dumps(ALL["claude-code"]["SessionEnd"]).encode()
    assert await handle_native("claude-code", observe, {}, garbage) == (200, b"{}")  # observations never block
