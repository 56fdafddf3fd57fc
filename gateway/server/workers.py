"""``serve --workers N``: N independent worker processes sharing the listen and admin ports with
SO_REUSEPORT, supervised by this parent. Metrics use prometheus-client's multiprocess mode
(``PROMETHEUS_MULTIPROC_DIR``, a private temporary directory unless set), so /metrics on any
worker reports the whole pod. Signals are forwarded: SIGHUP reloads every worker, SIGTERM drains
them all; a worker that dies unexpectedly is restarted."""

from __future__ import annotations

import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence

log = logging.getLogger("ahp_gateway")


def supervise(worker_argv: Sequence[str], workers: int) -> int:
    metrics_dir = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    owned = metrics_dir is None
    if metrics_dir is None:
        metrics_dir = tempfile.mkdtemp(prefix="ahp-gateway-metrics-")
    else:
        for stale in os.listdir(metrics_dir):  # files of a previous run would be summed in
            if stale.endswith(".db"):
                os.unlink(os.path.join(metrics_dir, stale))
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": metrics_dir}
    argv = [sys.executable, "-m", "gateway", *worker_argv]
    children: dict[int, subprocess.Popen[bytes]] = {}
    stopping = False
    status = 0

    def start(slot: int) -> None:
        children[slot] = subprocess.Popen(argv, env=env)

    def forward(signum: int, _frame: object) -> None:
        nonlocal stopping
        if signum in (signal.SIGTERM, signal.SIGINT):
            stopping = True
        for child in children.values():
            if child.poll() is None:
                child.send_signal(signum)

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, forward)
    for slot in range(workers):
        start(slot)
    log.info("supervising %d workers (metrics dir %s)", workers, metrics_dir)
    try:
        while children:
            time.sleep(0.2)
            for slot, child in list(children.items()):
                code = child.poll()
                if code is None:
                    continue
                _mark_dead(child.pid)
                if stopping:
                    status = status or code
                    del children[slot]
                else:
                    log.error("worker %d (pid %d) exited with %s; restarting", slot, child.pid, code)
                    time.sleep(0.5)
                    start(slot)
    finally:
        if owned:
            shutil.rmtree(metrics_dir, ignore_errors=True)
    return status


def _mark_dead(pid: int) -> None:
    try:
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(pid)  # type: ignore[no-untyped-call]
    except Exception:  # noqa: BLE001 - metrics clean-up must never stop supervision
        log.debug("could not mark worker %d dead in the metrics directory", pid)
