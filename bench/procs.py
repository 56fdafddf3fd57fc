"""Subprocesses under test: start (optionally pinned to CPUs), poll readiness with a deadline,
read CPU time and memory from /proc, stop by PID (SIGTERM, then SIGKILL)."""

from __future__ import annotations

import http.client
import os
import resource
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

CLK_TCK = os.sysconf("SC_CLK_TCK")


class BenchError(RuntimeError):
    pass


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def proc_cpu_seconds(pid: int) -> float:
    """utime + stime of ``pid`` (all its threads), in seconds."""
    with open(f"/proc/{pid}/stat", "rb") as handle:
        data = handle.read()
    fields = data[data.rindex(b")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def descendants(pid: int) -> list[int]:
    """``pid`` and every live process below it (granian's worker processes, for instance)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as handle:
                data = handle.read()
        except OSError:
            continue
        ppid = int(data[data.rindex(b")") + 2 :].split()[1])
        children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        current = todo.pop()
        out.append(current)
        todo.extend(children.get(current, ()))
    return out


def tree_cpu_seconds(pid: int) -> float:
    total = 0.0
    for member in descendants(pid):
        try:
            total += proc_cpu_seconds(member)
        except OSError:  # exited meanwhile
            pass
    return total


def proc_memory_kb(pid: int) -> dict[str, int]:
    """VmRSS and VmHWM (peak resident set) of ``pid``, in kB."""
    out: dict[str, int] = {}
    with open(f"/proc/{pid}/status", encoding="ascii", errors="replace") as handle:
        for line in handle:
            if line.startswith(("VmRSS:", "VmHWM:")):
                out[line[:5]] = int(line.split()[1])
    return out


def system_busy_seconds() -> float:
    """Busy CPU time of the whole machine (all cores), from /proc/stat."""
    with open("/proc/stat", encoding="ascii") as handle:
        parts = handle.readline().split()
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(x) for x in parts[1:9])
    return (user + nice + system + irq + softirq + steal) / CLK_TCK


def children_cpu_seconds() -> float:
    """CPU time of reaped children (load generators) plus this process."""
    child = resource.getrusage(resource.RUSAGE_CHILDREN)
    own = resource.getrusage(resource.RUSAGE_SELF)
    return child.ru_utime + child.ru_stime + own.ru_utime + own.ru_stime


@dataclass
class Proc:
    name: str
    argv: list[str]
    popen: subprocess.Popen[bytes]
    log_path: Path
    cpus: frozenset[int] | None
    port: int | None = None
    extra: dict[str, object] = field(default_factory=dict)

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def cpu_seconds(self) -> float:
        """CPU time of the process and its live descendants (a server's worker processes)."""
        return tree_cpu_seconds(self.pid)

    def memory_kb(self) -> dict[str, int]:
        """VmRSS/VmHWM of the largest process in the tree (one worker, not their sum)."""
        best: dict[str, int] = {}
        for member in descendants(self.pid):
            try:
                memory = proc_memory_kb(member)
            except OSError:
                continue
            if memory.get("VmHWM", 0) > best.get("VmHWM", -1):
                best = memory
        return best

    def log_tail(self, lines: int = 25) -> str:
        try:
            text = self.log_path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])


class Processes:
    """Every process the runner started; :meth:`stop_all` is safe to call more than once."""

    def __init__(self, log_dir: Path, env: dict[str, str]) -> None:
        self.log_dir = log_dir
        self.env = env
        self.procs: list[Proc] = []
        self._counter = 0

    def start(self, name: str, argv: Sequence[str], *, cpus: frozenset[int] | None, cwd: Path | None = None) -> Proc:
        self._counter += 1
        log_path = self.log_dir / f"{self._counter:03d}-{name}.log"
        log = open(log_path, "wb")  # noqa: SIM115 - owned by the child from here on
        preexec: Callable[[], None] | None = None
        if cpus:
            chosen = set(cpus)

            def preexec() -> None:
                os.sched_setaffinity(0, chosen)

        try:
            popen = subprocess.Popen(
                list(argv),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self.env,
                cwd=str(cwd) if cwd else None,
                preexec_fn=preexec,
                start_new_session=True,  # Ctrl-C in the terminal reaches the runner only
            )
        finally:
            log.close()
        proc = Proc(name, list(argv), popen, log_path, cpus)
        self.procs.append(proc)
        return proc

    def stop(self, proc: Proc, grace: float = 5.0) -> None:
        if proc.popen.poll() is None:
            try:
                os.kill(proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                proc.popen.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                try:
                    os.kill(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                proc.popen.wait(timeout=5)
        if proc in self.procs:
            self.procs.remove(proc)

    def stop_all(self) -> None:
        for proc in reversed(list(self.procs)):
            try:
                self.stop(proc)
            except Exception:  # keep stopping the others
                pass


def wait_until(
    check: Callable[[], bool], *, deadline_s: float, procs: Sequence[Proc], what: str, interval: float = 0.05
) -> None:
    """Poll ``check`` until it holds; fail early if one of ``procs`` died, or at the deadline."""
    end = time.monotonic() + deadline_s
    last_error: Exception | None = None
    while True:
        for proc in procs:
            if not proc.alive():
                raise BenchError(
                    f"{proc.name} exited with {proc.popen.returncode} while waiting for {what}:\n{proc.log_tail()}"
                )
        try:
            if check():
                return
        except (OSError, http.client.HTTPException, ValueError) as exc:
            last_error = exc
        if time.monotonic() > end:
            tails = "\n".join(f"--- {p.name}:\n{p.log_tail()}" for p in procs)
            raise BenchError(
                f"timed out after {deadline_s:.0f} s waiting for {what} (last error: {last_error!r})\n{tails}"
            )
        time.sleep(interval)


def redis_server(procs: Processes, workdir: Path, cpus: frozenset[int] | None = None) -> tuple[Proc, str]:
    """A ``redis-server`` (Debian's package) on a free loopback port, no persistence, for the
    scenarios with a shared rate limit; its URL."""
    import shutil
    import socket

    binary = shutil.which("redis-server")
    if binary is None:
        raise BenchError("redis-server is not installed (Debian package redis-server)")
    port = free_port()
    argv = [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
    proc = procs.start("redis", [*argv, "--dir", str(workdir)], cpus=cpus)

    def answers() -> bool:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5) as sock:
            sock.sendall(b"PING\r\n")
            return sock.recv(16).startswith(b"+PONG")

    wait_until(answers, deadline_s=10, procs=[proc], what="redis-server")
    return proc, f"redis://127.0.0.1:{port}/0"


def http_request(
    port: int, method: str, path: str, body: bytes | None = None, timeout: float = 5.0
) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        headers = {"Content-Type": "application/json"} if body is not None else {}
        conn.request(method, path, body=body, headers=headers)
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def wait_idle(procs: Sequence[Proc], *, threshold: float = 0.1, window: float = 0.2, deadline_s: float = 15.0) -> float:
    """Wait until ``procs`` together use less than ``threshold`` of a core over ``window`` seconds
    (queued background work such as observe deliveries has finished). Returns the seconds waited."""
    start = time.monotonic()
    while True:
        before = sum(p.cpu_seconds() for p in procs if p.alive())
        time.sleep(window)
        used = sum(p.cpu_seconds() for p in procs if p.alive()) - before
        if used < threshold * window or time.monotonic() - start > deadline_s:
            return time.monotonic() - start
