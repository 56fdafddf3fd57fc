"""The newcomer's path runs as written: the shell blocks of the front page (README.md) and of
docs/getting-started.md, run in order in a fresh copy of the repository, from a shell that has
no virtual environment on its PATH, as someone who just cloned it would.

What differs from a person at a terminal, and why:

* Ports: ``AHP_GATEWAY_PORT`` and ``AHP_GATEWAY_ADMIN_PORT`` (read by ``serve``, documented in
  the CLI reference) move the gateway to free ports, and the commands' and expected outputs'
  ``127.0.0.1:8080`` / ``127.0.0.1:9464`` are rewritten to them: no test binds a fixed port.
* ``serve`` runs in the foreground, so a line that starts it is run in the background in its own
  process group, polled on ``/readyz`` with a deadline, and killed at the end.
* ``./scripts/test`` is the command that runs this test; it is checked to be the script, not run.

A ```text block after a ```bash block is that command's expected output: each of its lines must
appear in the output, in order (``/path/to/ahp-gateway`` stands for the clone's directory).
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.support.paths import ROOT

PAGES = ("README.md", "docs/getting-started.md")
PLACEHOLDER = "/path/to/ahp-gateway"
INSTALL_DEADLINE = 420.0
"""A fresh virtual environment installs the package and its dependencies from the index."""

pytestmark = [
    pytest.mark.timeout(900),
    pytest.mark.skipif(shutil.which("python3") is None, reason="the documented setup needs python3 on PATH"),
]


@dataclass
class Step:
    page: str
    line: int
    script: str
    expected: list[str] = field(default_factory=list)


def steps(page: str) -> list[Step]:
    """Every ```bash block of a page, with the ```text block(s) that follow it as its output."""
    found: list[Step] = []
    text = (ROOT / page).read_text()
    for match in re.finditer(r"^```(\w*)\n(.*?)^```$", text, re.MULTILINE | re.DOTALL):
        lang, body = match[1], match[2]
        line = text.count("\n", 0, match.start()) + 1
        if lang == "bash":
            found.append(Step(page, line, body))
        elif lang == "text" and found:
            found[-1].expected += [s.strip() for s in body.splitlines() if s.strip()]
    return found


def test_the_front_page_opens_with_exactly_the_two_commands() -> None:
    readme = (ROOT / "README.md").read_text()
    first = re.search(r"^```(\w*)\n(.*?)^```$", readme, re.MULTILINE | re.DOTALL)
    assert first is not None and first[1] == "bash"
    assert first[2].splitlines() == [
        "python3 -m venv .venv && .venv/bin/pip install -q -e . && .venv/bin/ahp-gateway serve",
        "./scripts/test",
    ]
    assert len(readme.split()) <= 2500, "the front page is a door: 2,500 words at most"


def test_every_ahp_gateway_command_on_the_newcomer_pages_names_the_venv() -> None:
    """A fresh shell has no ``ahp-gateway`` on PATH: every command says ``.venv/bin/ahp-gateway``."""
    for page in PAGES:
        for step in steps(page):
            bare = re.findall(r"(?<![/\w-])ahp-gateway (?=\w)", step.script)
            assert bare == [], f"{page}:{step.line}: `ahp-gateway` without .venv/bin/"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _fresh_copy(dest: Path) -> None:
    """The files a clone has: tracked ones, and new ones not ignored (so a branch's work counts)."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=True,
        timeout=60,
    ).stdout.decode()
    for name in filter(None, listed.split("\0")):
        source = ROOT / name
        if source.is_symlink() or source.is_file():  # a deleted file is still listed until committed
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, dest / name, follow_symlinks=False)  # gateway/data/policies is a link


def _clean_env(port: int, admin: int) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME")}
    path = [p for p in env.get("PATH", "").split(os.pathsep) if p and not Path(p).resolve().is_relative_to(ROOT)]
    env["PATH"] = os.pathsep.join(path)
    env["AHP_GATEWAY_PORT"], env["AHP_GATEWAY_ADMIN_PORT"] = str(port), str(admin)
    return env


def _in_order(expected: list[str], output: str, where: str) -> None:
    position = 0
    for line in expected:
        found = output.find(line, position)
        assert found >= 0, f"{where}: expected output line not found (in order):\n  {line}\n--- output ---\n{output}"
        position = found + len(line)


class Newcomer:
    """One shell session in a fresh copy: foreground commands run to completion, ``serve`` in the
    background (own process group), every background process killed at the end."""

    def __init__(self, work: Path) -> None:
        self.work = work
        self.port, self.admin = _free_port(), _free_port()
        self.env = _clean_env(self.port, self.admin)
        self.servers: list[tuple[subprocess.Popen[bytes], Path]] = []

    def localize(self, text: str) -> str:
        text = text.replace("127.0.0.1:8080", f"127.0.0.1:{self.port}")
        text = text.replace("127.0.0.1:9464", f"127.0.0.1:{self.admin}")
        return text.replace(PLACEHOLDER, str(self.work))

    def run(self, step: Step) -> None:
        where = f"{step.page}:{step.line}"
        expected = [self.localize(line) for line in step.expected]
        output = ""
        for command in _commands(step.script):
            if command == "./scripts/test":
                # the suite this test belongs to: check that it is the script, do not run it again
                assert os.access(self.work / "scripts" / "test", os.X_OK), f"{where}: ./scripts/test is not executable"
                continue
            if re.search(r"ahp-gateway serve$", command):
                output += self.serve(self.localize(command), where)
                continue
            proc = subprocess.run(
                ["bash", "-euo", "pipefail", "-c", self.localize(command)],
                cwd=self.work,
                env=self.env,
                capture_output=True,
                timeout=INSTALL_DEADLINE,
                start_new_session=True,
            )
            output += proc.stdout.decode() + proc.stderr.decode()
            assert proc.returncode == 0, f"{where}: `{command}` exited {proc.returncode}\n{output}"
        _in_order(expected, output, where)

    def serve(self, command: str, where: str) -> str:
        self.stop()  # a page that starts its own gateway replaces the previous one, as Ctrl-C would
        log = self.work / f"serve-{len(self.servers)}.log"
        with log.open("wb") as sink:
            proc = subprocess.Popen(
                ["bash", "-euo", "pipefail", "-c", command],
                cwd=self.work,
                env=self.env,
                stdout=sink,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.servers.append((proc, log))
        deadline = time.monotonic() + INSTALL_DEADLINE
        while time.monotonic() < deadline:
            assert proc.poll() is None, f"{where}: `{command}` exited {proc.returncode}\n{log.read_text()}"
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.admin}/readyz", timeout=2) as answer:
                    if answer.status == 200:
                        return log.read_text()
            except OSError:
                pass
            time.sleep(0.25)
        pytest.fail(f"{where}: the gateway was not ready within {INSTALL_DEADLINE:.0f} s\n{log.read_text()}")

    def stop(self) -> None:
        while self.servers:
            proc, _log = self.servers.pop()
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
                try:
                    proc.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait(timeout=15)


def _commands(script: str) -> Iterator[str]:
    """The block's commands: one per line, except a quoted argument that spans lines (curl -d '{...}')."""
    pending = ""
    for line in script.splitlines():
        pending = f"{pending}\n{line}" if pending else line
        if pending.count("'") % 2 == 0 and not pending.endswith("\\"):
            if pending.strip():
                yield pending.strip()
            pending = ""
    assert not pending, f"unterminated command: {pending}"


def test_the_front_page_and_getting_started_run_as_written(tmp_path: Path) -> None:
    work = tmp_path / "ahp-gateway"
    work.mkdir()
    _fresh_copy(work)
    user = Newcomer(work)
    try:
        for page in PAGES:
            for step in steps(page):
                user.run(step)
    finally:
        user.stop()
