"""``serve --workers N``: N independent worker processes sharing the listen and admin ports with
SO_REUSEPORT, supervised by this parent. Metrics use prometheus-client's multiprocess mode
(``PROMETHEUS_MULTIPROC_DIR``, a private temporary directory unless set), so /metrics on any
worker reports the whole pod. Signals are forwarded: SIGHUP reloads every worker, SIGTERM drains
them all.

A worker that dies unexpectedly is restarted after a back-off that doubles with each recent crash
of that worker (capped). When the pod as a whole sees :attr:`RestartPolicy.max_crashes` crashes
within :attr:`RestartPolicy.window` seconds, the supervisor stops the remaining workers and exits
non-zero: a crash loop belongs to the orchestrator (Kubernetes shows ``CrashLoopBackOff`` and
applies its own back-off), not to an endless restart loop inside a pod that looks alive."""

from __future__ import annotations

import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

from gateway.observability import process

log = logging.getLogger("ahp_gateway")

CRASH_LOOP_EXIT = 1
"""Exit status of the supervisor when it gives up on a crash loop."""


@dataclass(frozen=True)
class RestartPolicy:
    initial_delay: float = 0.5
    """Seconds before the first restart of a crashed worker."""
    max_delay: float = 30.0
    """Cap of the doubling back-off."""
    max_crashes: int = 5
    """Crashes (of any worker) within ``window`` after which the supervisor exits."""
    window: float = 60.0

    def delay(self, recent_crashes: int) -> float:
        """Back-off before restarting a worker that has crashed ``recent_crashes`` times lately."""
        return float(min(self.max_delay, self.initial_delay * 2 ** max(0, recent_crashes - 1)))


def supervise(worker_argv: Sequence[str], workers: int, policy: RestartPolicy | None = None) -> int:
    policy = policy or RestartPolicy()
    metrics_dir = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    owned = metrics_dir is None
    if metrics_dir is None:
        metrics_dir = tempfile.mkdtemp(prefix="ahp-gateway-metrics-")
    else:
        for stale in os.listdir(metrics_dir):  # files of a previous run would be summed in
            if stale.endswith(".db"):
                os.unlink(os.path.join(metrics_dir, stale))
        process.remove_all(metrics_dir)
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": metrics_dir}
    argv = [sys.executable, "-m", "gateway", *worker_argv]
    children: dict[int, subprocess.Popen[bytes]] = {}
    pending: dict[int, float] = {}
    """Slot -> monotonic time at which a crashed worker is started again."""
    crashes: deque[tuple[float, int]] = deque()
    """(time, slot) of every crash within the policy window."""
    stopping = False
    status = 0

    def start(slot: int) -> None:
        children[slot] = subprocess.Popen(argv, env=env)

    def forward(signum: int, _frame: object) -> None:
        nonlocal stopping
        if signum in (signal.SIGTERM, signal.SIGINT):
            stopping = True
            pending.clear()
        for child in children.values():
            if child.poll() is None:
                child.send_signal(signum)

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, forward)
    for slot in range(workers):
        start(slot)
    log.info("supervising %d workers (metrics dir %s)", workers, metrics_dir)
    try:
        while children or pending:
            time.sleep(0.05)
            now = time.monotonic()
            for slot, child in list(children.items()):
                code = child.poll()
                if code is None:
                    continue
                _mark_dead(child.pid, metrics_dir)
                del children[slot]
                if stopping:
                    # a worker still starting when the forwarded SIGTERM arrived dies of it: a clean stop
                    status = status or (0 if code in (-signal.SIGTERM, -signal.SIGINT) else code)
                    continue
                crashes.append((now, slot))
                while crashes and crashes[0][0] < now - policy.window:
                    crashes.popleft()
                if len(crashes) >= policy.max_crashes:
                    log.error(
                        "worker %d (pid %d) exited with %s: %d worker crashes within %.0f s; "
                        "stopping so the orchestrator sees the crash loop",
                        slot,
                        child.pid,
                        code,
                        len(crashes),
                        policy.window,
                    )
                    _stop_all(children, metrics_dir)
                    pending.clear()
                    return CRASH_LOOP_EXIT
                delay = policy.delay(sum(1 for _, s in crashes if s == slot))
                log.error("worker %d (pid %d) exited with %s; restarting in %.2f s", slot, child.pid, code, delay)
                pending[slot] = now + delay
            for slot, when in list(pending.items()):
                if now >= when and not stopping:
                    del pending[slot]
                    start(slot)
    finally:
        if owned:
            shutil.rmtree(metrics_dir, ignore_errors=True)
    return status


def _stop_all(children: dict[int, subprocess.Popen[bytes]], metrics_dir: str, grace: float = 10.0) -> None:
    for child in children.values():
        if child.poll() is None:
            child.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + grace
    for child in children.values():
        try:
            child.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
        _mark_dead(child.pid, metrics_dir)
    children.clear()


def _mark_dead(pid: int, metrics_dir: str) -> None:
    process.remove(metrics_dir, pid)
    try:
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(pid, metrics_dir)  # type: ignore[no-untyped-call]
    except Exception:  # noqa: BLE001 - metrics clean-up must never stop supervision
        log.debug("could not mark worker %d dead in the metrics directory", pid)
