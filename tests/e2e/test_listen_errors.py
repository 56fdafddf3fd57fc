"""issue 28 ("a new user"): a port already in use printed a 29-line traceback. ``serve`` says in
one line which address it could not listen on, and exits 1."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys

import pytest

from tests.support.paths import ROOT


@pytest.mark.parametrize("listener", ["main", "admin"])
def test_a_port_in_use_is_one_line_naming_the_address(listener: str) -> None:
    held = socket.socket()
    held.bind(("127.0.0.1", 0))
    held.listen()
    port = held.getsockname()[1]
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    admin = probe.getsockname()[1]
    probe.close()
    if listener == "admin":
        port, admin = admin, port
    argv = [sys.executable, "-m", "gateway", "serve", "--port", str(port), "--admin-port", str(admin)]
    proc = subprocess.Popen(
        argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        out, err = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        raise
    finally:
        held.close()
    errors = [line for line in err.splitlines() if "error" in line.lower() or "Traceback" in line]
    assert proc.returncode == 1, err
    held_port = admin if listener == "admin" else port
    assert errors == [f"error: cannot listen on 127.0.0.1:{held_port}: address already in use"], err
