"""Process metrics (CPU, resident memory, file descriptors) of every worker, with a ``pid`` label.

One process: sampled from ``/proc`` at scrape time. With ``--workers N`` a scrape reaches one
worker, which cannot read its siblings' counters, and prometheus-client's multiprocess mode has no
process collector: each worker therefore writes its own sample to ``process_<pid>.json`` in
``PROMETHEUS_MULTIPROC_DIR`` every few seconds (and when it is scraped), and whichever worker is
scraped exports every live worker's file. The supervisor deletes a dead worker's file."""

from __future__ import annotations

import contextlib
import json
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from prometheus_client import ProcessCollector
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

SAMPLE_KEYS = {
    "process_cpu_seconds": "ahp_gateway_process_cpu_seconds_total",
    "process_resident_memory_bytes": "ahp_gateway_process_resident_memory_bytes",
    "process_open_fds": "ahp_gateway_process_open_fds",
    "process_max_fds": "ahp_gateway_process_max_fds",
    "process_start_time_seconds": "ahp_gateway_process_start_time_seconds",
}
"""prometheus-client's process family name -> the exported metric name."""
WRITE_INTERVAL = 5.0
_PREFIX, _SUFFIX = "process_", ".json"


def sample() -> dict[str, float]:
    """This process's values by exported metric name (empty where /proc is unavailable)."""
    out: dict[str, float] = {}
    for family in ProcessCollector(registry=None).collect():
        name = SAMPLE_KEYS.get(family.name)
        if name is not None and family.samples:
            out[name] = float(family.samples[0].value)
    return out


def file_for(directory: str, pid: int) -> Path:
    return Path(directory) / f"{_PREFIX}{pid}{_SUFFIX}"


def write(directory: str) -> None:
    """Publish this process's sample for sibling workers (atomically: readers never see half)."""
    pid = os.getpid()
    target = file_for(directory, pid)
    temporary = target.with_suffix(".tmp")
    with contextlib.suppress(OSError):
        temporary.write_text(json.dumps(sample()))
        os.replace(temporary, target)


def remove(directory: str, pid: int) -> None:
    with contextlib.suppress(OSError):
        file_for(directory, pid).unlink()


def remove_all(directory: str) -> None:
    for path in Path(directory).glob(f"{_PREFIX}*{_SUFFIX}"):
        with contextlib.suppress(OSError):
            path.unlink()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def read_all(directory: str) -> dict[int, dict[str, float]]:
    """Every live worker's last sample, by pid."""
    out: dict[int, dict[str, float]] = {}
    for path in Path(directory).glob(f"{_PREFIX}*{_SUFFIX}"):
        try:
            pid = int(path.name[len(_PREFIX) : -len(_SUFFIX)])
            values = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(values, dict) and _alive(pid):
            out[pid] = {k: float(v) for k, v in values.items() if k in SAMPLE_KEYS.values()}
    return out


class FilesCollector:
    """Exports the samples of :func:`read_all` (multiprocess mode)."""

    def __init__(self, directory: str, helps: dict[str, str]) -> None:
        self._directory = directory
        self._helps = helps

    def collect(self) -> Iterator[Any]:
        samples = read_all(self._directory)
        for name, help_text in self._helps.items():
            family: Any = (
                CounterMetricFamily(name.removesuffix("_total"), help_text, labels=("pid",))
                if name.endswith("_total")
                else GaugeMetricFamily(name, help_text, labels=("pid",))
            )
            for pid, values in sorted(samples.items()):
                if name in values:
                    family.add_metric((str(pid),), values[name])
            yield family


class Publisher:
    """A daemon thread that writes this worker's sample every :data:`WRITE_INTERVAL` seconds."""

    def __init__(self, directory: str, interval: float = WRITE_INTERVAL) -> None:
        self._directory = directory
        self._interval = interval
        self._stop = threading.Event()
        write(directory)
        self._thread = threading.Thread(target=self._run, name="ahp-process-metrics", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            write(self._directory)

    def close(self) -> None:
        self._stop.set()
