"""``serve --workers N`` as real processes: crash back-off and crash-loop exit, per-worker process
metrics, and circuit gauges that follow the configuration across workers."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from gateway.server.workers import CRASH_LOOP_EXIT, RestartPolicy
from tests.support.config import gateway_config, hook
from tests.support.paths import ROOT
from tests.support.processes import free_port, wait_ready

SUPERVISOR = (
    "import logging, sys\n"
    "from gateway.server.workers import RestartPolicy, supervise\n"
    "logging.basicConfig(level=logging.INFO, format='%(message)s')\n"
    "policy = RestartPolicy(initial_delay=0.05, max_delay=0.08, max_crashes=int(sys.argv[1]), window=600)\n"
    "sys.exit(supervise(sys.argv[3:], int(sys.argv[2]), policy))\n"
)
RESTART = re.compile(r"worker (\d+) \(pid (\d+)\) exited with (-?\d+); restarting in ([0-9.]+) s")


def test_backoff_doubles_per_recent_crash_and_is_capped() -> None:
    policy = RestartPolicy(initial_delay=0.5, max_delay=4.0)
    assert [policy.delay(n) for n in range(1, 7)] == [0.5, 1.0, 2.0, 4.0, 4.0, 4.0]


def _config(tmp_path: Path, port: int, admin: int, hooks: list[dict]) -> Path:
    cfg = gateway_config(hooks, shutdown={"drainDelaySeconds": 0}, log={"decisions": "off"}, reload={"watch": False})
    cfg["listen"]["port"], cfg["admin"]["port"] = port, admin
    path = tmp_path / "gateway.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def _supervisor(config: Path, workers: int, max_crashes: int) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if k != "PROMETHEUS_MULTIPROC_DIR"}
    args = [str(max_crashes), str(workers), "--log-level", "WARNING", "serve", "--worker", "--config", str(config)]
    return subprocess.Popen(
        [sys.executable, "-c", SUPERVISOR, *args],
        cwd=ROOT,
        env=env,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def _kill_group(proc: subprocess.Popen) -> None:
    """On a failed test: the supervisor and every worker it started (its own process group)."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def _occupied(port: int) -> socket.socket:
    """A listener without SO_REUSEPORT: a worker binding the port fails at start."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", port))
    sock.listen()
    return sock


def test_a_worker_crashing_at_start_backs_off_and_the_supervisor_exits_non_zero(tmp_path) -> None:
    port, admin = free_port(), free_port()
    blocker = _occupied(port)
    proc = _supervisor(_config(tmp_path, port, admin, [hook("org.example.a", "http://127.0.0.1:9/")]), 1, 3)
    try:
        _, stderr = proc.communicate(timeout=120)
    finally:
        blocker.close()
        _kill_group(proc)
    assert proc.returncode == CRASH_LOOP_EXIT, stderr
    assert stderr.lower().count("address already in use") == 3, stderr  # each start failed to bind
    delays = [float(m.group(4)) for m in RESTART.finditer(stderr)]
    assert delays == [0.05, 0.08], stderr  # doubling (0.1) capped at 0.08, then the third crash ends it
    assert "3 worker crashes within 600 s; stopping so the orchestrator sees the crash loop" in stderr


def test_a_worker_that_crashed_is_restarted_once_its_cause_is_gone(tmp_path) -> None:
    port, admin = free_port(), free_port()
    blocker = _occupied(port)
    proc = _supervisor(_config(tmp_path, port, admin, [hook("org.example.a", "http://127.0.0.1:9/")]), 2, 50)
    lines: list[str] = []
    crashed = threading.Event()

    def read() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            lines.append(line)
            if RESTART.search(line):
                crashed.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        assert crashed.wait(60), "".join(lines)
        blocker.close()
        wait_ready(proc, admin)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
    finally:
        blocker.close()
        _kill_group(proc)
    reader.join(5)
    assert "crash loop" not in "".join(lines)


def _scrape(admin: int) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    with urllib.request.urlopen(f"http://127.0.0.1:{admin}/metrics", timeout=2) as resp:
        text = resp.read().decode()
    out: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out.setdefault(sample.name, {})[tuple(sorted(sample.labels.items()))] = sample.value
    return out


def _until(predicate, what: str, timeout: float = 30.0):
    deadline = time.monotonic() + timeout
    while True:
        try:
            value = predicate()
        except OSError:  # a scrape that reached a worker being killed or restarted
            value = None
        if value:
            return value
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def _worker_pids(admin: int) -> set[int]:
    pids: set[int] = set()
    deadline = time.monotonic() + 20
    while len(pids) < 2:
        assert time.monotonic() < deadline, pids
        with urllib.request.urlopen(f"http://127.0.0.1:{admin}/readyz", timeout=2) as resp:
            pids.add(json.loads(resp.read())["pid"])
    return pids


def _process_pids(admin: int) -> set[int]:
    return {int(dict(k)["pid"]) for k in _scrape(admin).get("ahp_gateway_process_resident_memory_bytes", {})}


@pytest.mark.spec("AHP-REG-001")
async def test_workers_export_their_process_metrics_and_drop_removed_circuits(stub_factory, tmp_path) -> None:
    stub = await stub_factory()
    port, admin = free_port(), free_port()
    both = [hook("org.example.a", stub.url), hook("org.example.b", stub.url)]
    config = _config(tmp_path, port, admin, both)
    env = {k: v for k, v in os.environ.items() if k != "PROMETHEUS_MULTIPROC_DIR"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "gateway", "serve", "--workers", "2", "--config", str(config)],
        cwd=ROOT,
        env=env,
        start_new_session=True,
    )

    def circuits() -> set[str]:
        return {dict(k)["upstream"] for k in _scrape(admin).get("ahp_gateway_upstream_circuit_open", {})}

    try:
        await asyncio.to_thread(wait_ready, proc, admin)
        workers = await asyncio.to_thread(_worker_pids, admin)
        # every scrape, whichever worker answers, shows both workers' process series
        for _ in range(6):
            assert await asyncio.to_thread(_process_pids, admin) == workers
        sample = (await asyncio.to_thread(_scrape, admin))["ahp_gateway_process_open_fds"]
        assert all(value > 0 for value in sample.values())
        assert await asyncio.to_thread(circuits) == {"org.example.a", "org.example.b"}

        _config(tmp_path, port, admin, both[:1])
        proc.send_signal(signal.SIGHUP)

        def reloaded() -> bool:
            done = _scrape(admin).get("ahp_gateway_config_reloads_total", {})
            return done.get((("result", "success"),), 0) >= 2  # summed over both workers

        await asyncio.to_thread(_until, reloaded, "both workers reloaded")
        for _ in range(6):
            assert await asyncio.to_thread(circuits) == {"org.example.a"}

        victim = min(workers)
        os.kill(victim, signal.SIGKILL)  # the supervisor restarts it; its series go with it

        def replaced() -> set[int] | None:
            pids = _process_pids(admin)
            return pids if victim not in pids and len(pids) == 2 else None

        pids = await asyncio.to_thread(_until, replaced, "the killed worker's series removed")
        assert (workers - {victim}) < pids
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.to_thread(proc.wait, 30) == 0
    finally:
        _kill_group(proc)


def test_one_process_exports_its_own_process_metrics_with_its_pid() -> None:
    from gateway.observability.metrics import Metrics

    text = Metrics().render()[0].decode()
    samples = {
        s.name: s for family in text_string_to_metric_families(text) for s in family.samples if "process" in s.name
    }
    if not Path("/proc/self/stat").exists():
        pytest.skip("no /proc: process metrics are absent")
    assert set(samples) == {
        "ahp_gateway_process_cpu_seconds_total",
        "ahp_gateway_process_resident_memory_bytes",
        "ahp_gateway_process_open_fds",
        "ahp_gateway_process_max_fds",
        "ahp_gateway_process_start_time_seconds",
    }
    assert all(s.labels == {"pid": str(os.getpid())} and s.value > 0 for s in samples.values())
