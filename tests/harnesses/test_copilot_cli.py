"""The real Copilot CLI (the version pinned in copilot/package-lock.json) blocked end to end by the
gateway (issue 29): ``copilot -p`` runs in a temporary HOME and project with the hook settings
that ``ahp-gateway hook config copilot`` prints, against a fake OpenAI chat-completions server on
loopback that makes the model call ``bash`` with the command a test chooses and finish after the
tool result. Checks: the hook fired (``ahp_gateway_native_requests_total``), a denied command did
not run (its marker file is absent) and the model got the policy's reason, a benign command ran,
the permission hook alone denies (Copilot sends ``toolInput`` there), and with the gateway down
the adapter and the HTTP hook block.

Nothing leaves loopback: ``COPILOT_OFFLINE``, no auto-update, no telemetry, and ``HTTPS_PROXY`` /
``HTTP_PROXY`` point at a recording proxy that refuses everything; a test fails when anything
tried it. The package is installed once into ``.cache/harnesses/copilot`` (gitignored) with
``npm ci``; without node and npm the module is skipped.
"""

from __future__ import annotations

import asyncio
import hashlib
import http.server
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from gateway.config.load import load
from gateway.server.app import GatewayServer

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
PACKAGE = HERE / "copilot"
CACHE = ROOT / ".cache" / "harnesses" / "copilot"
RUN_TIMEOUT_S = 60
POLICY_REASON = "Force-pushing to a protected branch"
FORCE_PUSH = "touch pushed.marker && git push --force origin main"
BENIGN = "touch ran.marker && ls"


# ------------------------------------------------------------------------------ installation
@pytest.fixture(scope="session")
def copilot_bin() -> Path:
    node, npm = shutil.which("node"), shutil.which("npm")
    if not node or not npm:
        pytest.skip("real-agent tests need node and npm (Copilot CLI is an npm package)")
    lock = (PACKAGE / "package-lock.json").read_bytes()
    stamp = CACHE / ".lock-sha256"
    digest = hashlib.sha256(lock).hexdigest()
    binary = CACHE / "node_modules" / ".bin" / "copilot"
    if not (binary.exists() and stamp.exists() and stamp.read_text() == digest):
        shutil.rmtree(CACHE, ignore_errors=True)
        CACHE.mkdir(parents=True)
        for name in ("package.json", "package-lock.json"):
            shutil.copy(PACKAGE / name, CACHE / name)
        proc = subprocess.run(
            [npm, "ci", "--no-audit", "--no-fund", "--ignore-scripts", "--loglevel=error"],
            cwd=CACHE,
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        if proc.returncode != 0:
            pytest.fail(f"npm ci of the pinned Copilot CLI failed:\n{proc.stderr[-2000:]}")
        stamp.write_text(digest)
    return binary


# ------------------------------------------------------------------------- loopback servers
class FakeModel(http.server.ThreadingHTTPServer):
    """Just enough of OpenAI chat completions (streamed or not) for one tool call per prompt."""

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _ModelHandler)
        self.command = "true"
        self.tool_results: list[str] = []
        self.requests = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _ModelHandler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: FakeModel

    def log_message(self, *args: Any) -> None:
        pass

    def _send(self, status: int, body: bytes, kind: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        self._send(200, json.dumps({"object": "list", "data": [{"id": "fake-model", "object": "model"}]}).encode())

    def do_POST(self) -> None:
        request = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
        self.server.requests += 1
        messages = request.get("messages") or [{}]
        tools = {t.get("function", {}).get("name") for t in request.get("tools") or ()}
        for message in messages:
            if message.get("role") == "tool":
                self.server.tool_results.append(str(message.get("content")))
        if messages[-1].get("role") == "tool" or "bash" not in tools:
            delta: dict[str, Any] = {"role": "assistant", "content": "Done."}
            finish = "stop"
        else:
            arguments = json.dumps({"command": self.server.command, "description": "run the command"})
            call = {"id": "call_1", "type": "function", "function": {"name": "bash", "arguments": arguments}}
            delta, finish = {"role": "assistant", "content": None, "tool_calls": [call]}, "tool_calls"
        usage = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
        if not request.get("stream"):
            choice = {"index": 0, "message": delta, "finish_reason": finish}
            body = {"id": "c1", "object": "chat.completion", "created": 1, "model": "fake-model", "choices": [choice]}
            self._send(200, json.dumps({**body, "usage": usage}).encode())
            return
        if "tool_calls" in delta:
            delta["tool_calls"] = [{**delta["tool_calls"][0], "index": 0}]
        chunk = {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "fake-model"}
        events = [
            {**chunk, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]},
            {**chunk, "choices": [{"index": 0, "delta": {}, "finish_reason": finish}], "usage": usage},
        ]
        stream = b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in events) + b"data: [DONE]\n\n"
        self.close_connection = True
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(stream)


class RefusingProxy(http.server.ThreadingHTTPServer):
    """``HTTPS_PROXY``/``HTTP_PROXY``: records every attempt and refuses it."""

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _ProxyHandler)
        self.attempts: list[str] = []


class _ProxyHandler(http.server.BaseHTTPRequestHandler):
    server: RefusingProxy

    def log_message(self, *args: Any) -> None:
        pass

    def _refuse(self) -> None:
        self.server.attempts.append(f"{self.command} {self.path}")
        self.send_response(403)
        self.send_header("Content-Length", "0")
        self.send_header("Connection", "close")
        self.end_headers()

    do_CONNECT = do_GET = do_POST = do_PUT = do_HEAD = _refuse


def _serve(server: http.server.ThreadingHTTPServer) -> Iterator[Any]:
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="module")
def model() -> Iterator[FakeModel]:
    yield from _serve(FakeModel())


@pytest.fixture(scope="module")
def proxy() -> Iterator[RefusingProxy]:
    yield from _serve(RefusingProxy())


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def gateway() -> AsyncIterator[GatewayServer]:
    server = GatewayServer(load(None), port=0, admin_port=0)
    await server.start()
    yield server
    await server.stop()


# ------------------------------------------------------------------------------- one run
def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def hook_config(url: str, *extra: str) -> dict[str, Any]:
    """What ``ahp-gateway hook config copilot`` prints, run as this interpreter's module."""
    proc = subprocess.run(
        [sys.executable, "-m", "gateway", "hook", "config", "copilot", "--url", url, *extra],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=60,
        check=True,
    )
    doc: dict[str, Any] = json.loads(proc.stdout)
    return doc


class Run:
    def __init__(self, code: int, out: str, err: str, project: Path, tool_results: list[str]) -> None:
        self.code, self.out, self.err, self.project, self.tool_results = code, out, err, project, tool_results

    def ran(self, marker: str) -> bool:
        return (self.project / marker).exists()


async def run_copilot(
    binary: Path, model: FakeModel, proxy: RefusingProxy, tmp: Path, hooks: dict[str, Any], command: str
) -> Run:
    home, project = tmp / "home", tmp / "project"
    (project / ".github" / "hooks").mkdir(parents=True)
    home.mkdir()
    (project / ".github" / "hooks" / "ahp-gateway.json").write_text(json.dumps(hooks))
    model.command, model.tool_results = command, []
    proxy_url = f"http://127.0.0.1:{proxy.server_address[1]}"
    env = {
        "PATH": os.pathsep.join((str(Path(sys.executable).parent), "/usr/local/bin", "/usr/bin", "/bin")),
        "HOME": str(home),
        "XDG_CACHE_HOME": str(CACHE / "xdg-cache"),  # the CLI unpacks itself there once
        "LANG": "C.UTF-8",
        "COPILOT_OFFLINE": "true",
        "COPILOT_PROVIDER_BASE_URL": model.url,
        "COPILOT_PROVIDER_API_KEY": "fake-key",
        "COPILOT_MODEL": "fake-model",
        "COPILOT_ALLOW_ALL": "true",  # loads .github/hooks/ without a trust prompt
        "COPILOT_HOOK_ALLOW_LOCALHOST": "1",  # plain http to the loopback gateway
        "HTTPS_PROXY": proxy_url,
        "HTTP_PROXY": proxy_url,
        "https_proxy": proxy_url,
        "http_proxy": proxy_url,
        "NO_PROXY": "127.0.0.1,localhost",
        "no_proxy": "127.0.0.1,localhost",
        "PYTHONPATH": str(ROOT),
    }
    argv = [str(binary), "-p", "Run the command.", "--allow-all-tools", "--allow-all-paths"]
    argv += ["--no-auto-update", "--disable-client-telemetry"]
    proc = await asyncio.create_subprocess_exec(
        *argv,
        cwd=project,
        env=env,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        start_new_session=True,  # its own process group, killed whole on a timeout
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(), RUN_TIMEOUT_S)
    except TimeoutError:
        os.killpg(proc.pid, signal.SIGKILL)
        await proc.wait()
        pytest.fail(f"copilot did not finish within {RUN_TIMEOUT_S} s")
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # hooks or shells it left behind
        except (ProcessLookupError, PermissionError):
            pass
    assert not proxy.attempts, f"a connection tried to leave loopback: {proxy.attempts}"
    return Run(proc.returncode or 0, out.decode(), err.decode(), project, list(model.tool_results))


async def native_requests(gateway: GatewayServer) -> float:
    """``ahp_gateway_native_requests_total{harness="copilot"}``, summed."""
    reader, writer = await asyncio.open_connection("127.0.0.1", gateway.admin_port)
    writer.write(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    text = (await reader.read()).decode()
    writer.close()
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("ahp_gateway_native_requests_total{") and 'harness="copilot"' in line
    )


# --------------------------------------------------------------------------------- the tests
pytestmark = pytest.mark.asyncio(loop_scope="module")


async def test_command_hook_denies_a_force_push_and_runs_a_benign_command(
    copilot_bin: Path, model: FakeModel, proxy: RefusingProxy, gateway: GatewayServer, tmp_path: Path
) -> None:
    hooks = hook_config(gateway.url)
    before = await native_requests(gateway)
    denied = await run_copilot(copilot_bin, model, proxy, tmp_path / "deny", hooks, FORCE_PUSH)
    assert denied.code == 0, denied.err
    assert not denied.ran("pushed.marker")
    assert any(POLICY_REASON in r for r in denied.tool_results), denied.tool_results
    assert await native_requests(gateway) > before  # the hook reached the gateway
    benign = await run_copilot(copilot_bin, model, proxy, tmp_path / "benign", hooks, BENIGN)
    assert benign.code == 0, benign.err
    assert benign.ran("ran.marker"), (benign.out, benign.tool_results)


async def test_the_permission_hook_alone_denies_on_copilots_tool_input(
    copilot_bin: Path, model: FakeModel, proxy: RefusingProxy, gateway: GatewayServer, tmp_path: Path
) -> None:
    """issue 29: Copilot's permissionRequest payload carries ``toolInput``; read as ``{}`` it let
    the force push run."""
    hooks = hook_config(gateway.url)
    hooks["hooks"] = {"permissionRequest": hooks["hooks"]["permissionRequest"]}
    run = await run_copilot(copilot_bin, model, proxy, tmp_path, hooks, FORCE_PUSH)
    assert not run.ran("pushed.marker")
    assert any(POLICY_REASON in r for r in run.tool_results), run.tool_results


async def test_http_hook_denies_through_the_native_endpoint(
    copilot_bin: Path, model: FakeModel, proxy: RefusingProxy, gateway: GatewayServer, tmp_path: Path
) -> None:
    hooks = hook_config(gateway.url, "--http")
    run = await run_copilot(copilot_bin, model, proxy, tmp_path, hooks, FORCE_PUSH)
    assert not run.ran("pushed.marker")
    assert any(POLICY_REASON in r for r in run.tool_results), run.tool_results


@pytest.mark.parametrize("kind", ["command", "http"])
async def test_gateway_down_blocks(
    kind: str, copilot_bin: Path, model: FakeModel, proxy: RefusingProxy, tmp_path: Path
) -> None:
    """The README's failure table: with the gateway stopped the command adapter denies by itself
    (--on-error deny), and Copilot 1.0.102 denies when its HTTP hook's connection is refused."""
    down = f"http://127.0.0.1:{_closed_port()}/"
    hooks = hook_config(down, *(["--http"] if kind == "http" else []))
    run = await run_copilot(copilot_bin, model, proxy, tmp_path, hooks, BENIGN)
    assert not run.ran("ran.marker"), run.tool_results
    expected = "policy gateway could not be reached" if kind == "command" else "hook errored"
    assert any(expected in r for r in run.tool_results), run.tool_results


@pytest.mark.parametrize("non_interactive", [False, True])
async def test_ask_in_a_headless_run(
    non_interactive: bool,
    copilot_bin: Path,
    model: FakeModel,
    proxy: RefusingProxy,
    gateway: GatewayServer,
    tmp_path: Path,
) -> None:
    """issue 29: a rule's ask reaches ``copilot -p`` with a reason (it showed "No reason
    provided"); Copilot denies it, nobody being there to confirm. With ``--non-interactive`` the
    model gets the asking rule's own fallback reason instead."""
    hooks = hook_config(gateway.url, *(["--non-interactive"] if non_interactive else []))
    command = "touch asked.marker && rm -rf /opt/ahp-harness-does-not-exist"  # the bundled policy asks
    run = await run_copilot(copilot_bin, model, proxy, tmp_path, hooks, command)
    assert not run.ran("asked.marker"), run.tool_results
    if non_interactive:
        expected = "Denied by preToolUse hook: Recursive deletes outside the workspace"
    else:
        expected = "(unable to ask user for confirmation): The policy gateway asks for confirmation"
    assert any(expected in r for r in run.tool_results), run.tool_results
