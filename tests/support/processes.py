"""Gateway processes started by tests: a free port, and waiting until the admin listener says ready."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
import urllib.request
from pathlib import Path


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_ready(proc, admin: int) -> None:
    deadline = time.monotonic() + 30
    while admin_ready(admin) != 200:
        assert proc.poll() is None, "gateway exited early"
        assert time.monotonic() < deadline, "gateway not ready"
        time.sleep(0.05)


def admin_ready(admin: int) -> int:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{admin}/readyz", timeout=1) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)
    except OSError:
        return 0


def pids(path: Path) -> list[int]:
    """The pids a test's wrapper script wrote to ``path``, one per line."""
    return [int(p) for p in path.read_text().split()] if path.exists() else []


def alive(pid: int) -> bool:
    """Running (a zombie is dead: it only waits for its parent to reap it)."""
    try:
        os.kill(pid, 0)
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (ProcessLookupError, FileNotFoundError):
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def run_group(
    argv: list[str], *, cwd: Path, env: dict[str, str], timeout: float, stdin: bytes | None = None
) -> subprocess.CompletedProcess[bytes]:
    """``argv`` to completion in a process group of its own, the whole group killed on timeout
    (a build's compiler children included)."""
    proc = subprocess.Popen(
        argv,
        cwd=cwd,
        env=env,
        stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(stdin, timeout=timeout)
    except BaseException:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)
