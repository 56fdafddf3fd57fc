"""Shared parts of the real-agent tests (issue 29): the pinned install, the loopback servers (a
fake model base and the refusing proxy), one agent run in its own process group, the hook
settings ``ahp-gateway hook config`` prints, and the gateway's native-request counter.

The fixtures built on these (``proxy``, ``gateway``) live in ``conftest.py``.
"""

from __future__ import annotations

import asyncio
import http.server
import json
import os
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Awaitable, Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from gateway.server.app import GatewayServer
from tests.harnesses.install import ROOT, InstallError, install

RUN_TIMEOUT_S = 60
POLICY_REASON = "Force-pushing to a protected branch"
FORCE_PUSH = "touch pushed.marker && git push --force origin main"
BENIGN = "touch ran.marker && ls"
LOOPBACK = "127.0.0.1,localhost"


def installed(name: str) -> Path:
    """``.cache/harnesses/<name>`` with the pinned package in it; skips without node and npm."""
    try:
        return install(name)
    except InstallError as exc:
        if "not installed" in str(exc):
            pytest.skip(f"real-agent tests need node and npm ({name} is an npm package)")
        pytest.fail(str(exc))


# ------------------------------------------------------------------------- loopback servers
class FakeModel(http.server.ThreadingHTTPServer):
    """A fake model API on loopback: ``command`` is what the model has the agent run, and every
    tool result the agent sends back is recorded in ``tool_results``."""

    def __init__(self, handler: type[http.server.BaseHTTPRequestHandler]) -> None:
        super().__init__(("127.0.0.1", 0), handler)
        self.command = "true"
        self.tool_results: list[str] = []
        self.requests: list[str] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class ModelHandler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: FakeModel

    def log_message(self, *args: Any) -> None:
        pass

    def body(self) -> Any:
        self.server.requests.append(f"{self.command} {self.path}")
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        return json.loads(raw) if raw.strip() else {}

    def send(self, status: int, body: Any, kind: str = "application/json") -> None:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def send_sse(self, events: list[tuple[str | None, Any]], tail: bytes = b"") -> None:
        """A whole event stream, then the connection closes (``event:`` lines when named)."""
        chunks = []
        for name, data in events:
            head = f"event: {name}\n".encode() if name else b""
            chunks.append(head + b"data: " + json.dumps(data).encode() + b"\n\n")
        self.close_connection = True
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(b"".join(chunks) + tail)


class RefusingProxy(http.server.ThreadingHTTPServer):
    """``HTTPS_PROXY``/``HTTP_PROXY``: records every attempt and refuses it."""

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _ProxyHandler)
        self.attempts: list[str] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


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


def serve(server: http.server.ThreadingHTTPServer) -> Iterator[Any]:
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def closed_port() -> int:
    """A loopback port nothing listens on (a stopped gateway)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# ------------------------------------------------------------------------------- one run
def hook_config(harness: str, url: str, *extra: str) -> dict[str, Any]:
    """What ``ahp-gateway hook config <harness>`` prints, run as this interpreter's module."""
    proc = subprocess.run(
        [sys.executable, "-m", "gateway", "hook", "config", harness, "--url", url, *extra],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=60,
        check=True,
    )
    doc: dict[str, Any] = json.loads(proc.stdout)
    return doc


def base_env(home: Path, proxy: RefusingProxy) -> dict[str, str]:
    """A minimal environment: a temporary HOME, the refusing proxy for everything off loopback."""
    return {
        "PATH": os.pathsep.join((str(Path(sys.executable).parent), "/usr/local/bin", "/usr/bin", "/bin")),
        "HOME": str(home),
        "LANG": "C.UTF-8",
        "HTTPS_PROXY": proxy.url,
        "HTTP_PROXY": proxy.url,
        "https_proxy": proxy.url,
        "http_proxy": proxy.url,
        "ALL_PROXY": proxy.url,
        "NO_PROXY": LOOPBACK,
        "no_proxy": LOOPBACK,
        "PYTHONPATH": str(ROOT),
        "GIT_CONFIG_NOSYSTEM": "1",
    }


def git_project(project: Path) -> None:
    """``project`` as a git work tree on ``main`` whose ``origin`` is a local bare repository,
    so a force push that ran would succeed (and its marker shows it ran)."""
    project.mkdir(parents=True, exist_ok=True)
    remote = project.parent / "remote.git"
    env = {**os.environ, "GIT_CONFIG_NOSYSTEM": "1", "HOME": str(project.parent)}
    for argv in (
        ["git", "init", "-q", "--bare", str(remote)],
        ["git", "init", "-q", "-b", "main", str(project)],
        ["git", "-C", str(project), "remote", "add", "origin", str(remote)],
    ):
        subprocess.run(argv, check=True, capture_output=True, env=env, timeout=30)


class Run:
    def __init__(
        self, code: int, out: str, err: str, project: Path, tool_results: list[str], hung: bool = False
    ) -> None:
        self.code, self.out, self.err, self.project, self.tool_results = code, out, err, project, tool_results
        self.hung = hung  # still running at the deadline (then killed with its process group)

    def ran(self, marker: str) -> bool:
        return (self.project / marker).exists()

    def got(self, text: str) -> bool:
        """The model received ``text`` in a tool result."""
        return any(text in result for result in self.tool_results)


async def run_agent(
    name: str,
    argv: list[str],
    *,
    cwd: Path,
    env: Mapping[str, str],
    model: FakeModel,
    proxy: RefusingProxy,
    command: str,
    timeout_s: float = RUN_TIMEOUT_S,
    may_hang: bool = False,
    stdin_open: bool = False,
) -> Run:
    """One agent run in its own process group (killed whole on a timeout and afterwards, for any
    hook or shell it left behind); fails when anything tried to leave loopback. A run still
    going after ``timeout_s`` fails the test, unless ``may_hang``: then it is a ``hung`` run.
    stdin is ``/dev/null`` (at EOF), or with ``stdin_open`` a pipe nobody writes to or closes (a
    terminal nobody answers, a CI step whose stdin stays open)."""
    model.command, model.tool_results = command, []
    proc = await asyncio.create_subprocess_exec(
        *argv,
        cwd=cwd,
        env=dict(env),
        stdin=asyncio.subprocess.PIPE if stdin_open else asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        start_new_session=True,
    )

    async def outputs() -> tuple[bytes, bytes]:  # not communicate(): it would close stdin
        assert proc.stdout is not None and proc.stderr is not None
        out, err = await asyncio.gather(proc.stdout.read(), proc.stderr.read())
        await proc.wait()
        return out, err

    hung = False
    try:
        out, err = await asyncio.wait_for(outputs(), timeout_s)
    except TimeoutError:
        os.killpg(proc.pid, signal.SIGKILL)
        await proc.wait()
        if not may_hang:
            pytest.fail(f"{name} did not finish within {timeout_s} s (model requests: {model.requests})")
        hung, out, err = True, b"", b""
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        if proc.stdin is not None:
            proc.stdin.close()
    assert not proxy.attempts, f"a connection tried to leave loopback: {proxy.attempts}"
    return Run(proc.returncode or 0, out.decode(), err.decode(), cwd, list(model.tool_results), hung)


async def native_requests(gateway: GatewayServer, harness: str, **labels: str) -> float:
    """``ahp_gateway_native_requests_total{harness=...}``, summed over its other labels (or only
    those series with ``labels``, e.g. ``event_type="tool.before", outcome="ask"``)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", gateway.admin_port)
    writer.write(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    text = (await reader.read()).decode()
    writer.close()
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("ahp_gateway_native_requests_total{")
        and all(f'{k}="{v}"' in line for k, v in {"harness": harness, **labels}.items())
    )


Agent = Callable[[Path, dict[str, Any], str], Awaitable[Run]]
"""One run of an agent: (project directory, hook settings, the command the model runs) → the run."""


async def denies_a_force_push_and_runs_a_benign_command(
    harness: str, gateway: GatewayServer, hooks: dict[str, Any], run: Agent, tmp_path: Path
) -> None:
    """Every agent's first scenario: the hook reaches the gateway, the force push does not run and
    the model is told the policy's reason, and a benign command runs."""
    before = await native_requests(gateway, harness)
    denied = await run(tmp_path / "deny", hooks, FORCE_PUSH)
    assert denied.code == 0, (denied.out, denied.err)
    assert not denied.ran("pushed.marker")
    assert denied.got(POLICY_REASON), (denied.tool_results, denied.out, denied.err)
    assert await native_requests(gateway, harness) > before  # the hook reached the gateway
    benign = await run(tmp_path / "benign", hooks, BENIGN)
    assert benign.code == 0, benign.err
    assert benign.ran("ran.marker"), (benign.out, benign.err, benign.tool_results)
