"""Native hook adapter latency.

1. ``ahp-gateway hook claude-code`` as a real process, process start → answer, N runs against a
   local gateway serving the bundled default configuration (target: p50 <= 120 ms on 2 cores).
   A bare ``python -c pass`` is measured the same way for scale.
2. In process: ``POST /native/claude-code``'s translation overhead, i.e. ``handle_native`` with
   ``Gateway.handle`` as ``decide`` versus ``Gateway.handle`` on the equivalent AHP request
   (target: <= 1 ms added).

    python -m bench.hook_latency [--runs 50] [--calls 2000]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.procs import Processes, free_port, http_request, wait_until

ROOT = Path(__file__).resolve().parent.parent
PAYLOAD = {
    "session_id": "5b1e0c7a-93d2-4f0e-8a61-2c4d9e7f1a03",
    "prompt_id": "d2a4f8e1-6c3b-4b71-9e0a-71f5c2b8e946",
    "cwd": "/home/ana/payments",
    "permission_mode": "default",
    "hook_event_name": "PreToolUse",
    "tool_name": "Bash",
    "tool_input": {"command": "ls -la", "description": "List files"},
    "tool_use_id": "toolu_01HqV3m8YpK2cT7rWnD4xZbL",
}


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def _row(name: str, ms: list[float]) -> str:
    return (
        f"| {name} | {len(ms)} | {_pct(ms, 0.5):.1f} | {_pct(ms, 0.9):.1f} | {_pct(ms, 0.99):.1f} | "
        f"{min(ms):.1f} | {max(ms):.1f} |"
    )


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _time_process(
    argv: list[str], stdin: bytes, env: dict[str, str], cpu: list[float] | None = None
) -> tuple[float, subprocess.CompletedProcess[bytes]]:
    """Wall time from spawn to exit (ms); the child's CPU time goes to ``cpu``: on a shared,
    loaded machine wall time mostly measures the run queue, CPU time what the adapter costs."""
    before = _cpu()
    started = time.perf_counter()
    done = subprocess.run(argv, input=stdin, capture_output=True, env=env, check=False)
    wall = (time.perf_counter() - started) * 1000
    if cpu is not None:
        cpu.append((_cpu() - before) * 1000)
    return wall, done


def process_latency(runs: int) -> list[str]:
    # Byte-code caching on, as in an installed package (pip compiles on install); the caches go to
    # a temporary prefix, not into the source tree. Without them every run recompiles the
    # adapter's modules, which alone costs more than everything else it does.
    log_dir = Path(tempfile.mkdtemp(prefix="hook-latency-"))
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env.update(PYTHONPATH=str(ROOT), PYTHONPYCACHEPREFIX=str(log_dir / "pycache"))
    script = Path(sys.executable).with_name("ahp-gateway")
    hook_cmd = [str(script)] if script.exists() else [sys.executable, "-m", "gateway"]
    procs = Processes(log_dir, env)
    port, admin = free_port(), free_port()
    try:
        gw = procs.start(
            "gateway",
            [sys.executable, "-m", "gateway", "serve", "--port", str(port), "--admin-port", str(admin)],
            cpus=None,
        )
        wait_until(lambda: http_request(admin, "GET", "/readyz")[0] == 200, deadline_s=30, procs=[gw], what="readiness")
        url = f"http://127.0.0.1:{port}/"
        argv = [*hook_cmd, "hook", "claude-code", "--url", url]
        allowed, denied = (
            json.dumps(PAYLOAD).encode(),
            json.dumps({**PAYLOAD, "tool_input": {"command": "git push --force origin main"}}).encode(),
        )
        for _ in range(3):  # warm the page cache and the .pyc files
            _time_process(argv, allowed, env)
        names = ("python -c pass", "hook: ls -la (no effect)", "hook: force push (deny)")
        results: dict[str, list[float]] = {name: [] for name in names}
        cpu: dict[str, list[float]] = {name: [] for name in names}
        load_before = os.getloadavg()[0]
        for _ in range(runs):
            ms, _done = _time_process([sys.executable, "-c", "pass"], b"", env, cpu[names[0]])
            results[names[0]].append(ms)
            ms, done = _time_process(argv, allowed, env, cpu[names[1]])
            if done.returncode != 0 or done.stdout:
                raise SystemExit(f"unexpected answer: {done.returncode} {done.stdout!r} {done.stderr!r}")
            results[names[1]].append(ms)
            ms, done = _time_process(argv, denied, env, cpu[names[2]])
            if b'"deny"' not in done.stdout:
                raise SystemExit(f"unexpected answer: {done.returncode} {done.stdout!r} {done.stderr!r}")
            results[names[2]].append(ms)
        load_after = os.getloadavg()[0]
    finally:
        procs.stop_all()
        shutil.rmtree(log_dir, ignore_errors=True)
    lines = [
        "| process start → answer | runs | p50 ms | p90 ms | p99 ms | min ms | max ms |",
        "|---|---|---|---|---|---|---|",
    ]
    lines += [_row(name, ms) for name, ms in results.items()]
    lines += [
        "",
        "| CPU time of the process (user+sys) | runs | p50 ms | p90 ms | p99 ms | min ms | max ms |",
        "|---|---|---|---|---|---|---|",
    ]
    lines += [_row(name, ms) for name, ms in cpu.items()]
    lines.append(f"\n1-minute load average: {load_before:.1f} before, {load_after:.1f} after ({os.cpu_count()} CPUs)")
    lines.append(f"command: `{' '.join(Path(a).name if i == 0 else a for i, a in enumerate(argv))}`")
    return lines


async def _endpoint_overhead(calls: int) -> list[str]:
    from gateway.assemble import Assembly
    from gateway.config.load import load
    from gateway.native import flow
    from gateway.native.endpoint import handle_native
    from gateway.telemetry import NullTelemetry

    assembly = Assembly(load(None), telemetry=NullTelemetry())
    gateway = assembly.gateway
    assembly.start()
    raw = json.dumps(PAYLOAD).encode()
    prepared = flow.prepare(flow.codec_for("claude-code"), raw, None, "deny")
    assert prepared.body is not None
    ahp_body = prepared.body
    headers = {"Content-Type": "application/json"}

    async def decide(body: bytes, hdrs: dict[str, str]) -> tuple[int, bytes | None]:
        answer = (await gateway.handle(body, hdrs)).answer
        return (202, None) if answer is None else (200, answer)

    async def ahp() -> None:
        await gateway.handle(ahp_body, headers)

    async def native() -> None:
        await handle_native("claude-code", raw, headers, decide)

    samples: dict[str, list[float]] = {
        "AHP request (Gateway.handle)": [],
        "native /native/claude-code (handle_native)": [],
    }
    for _ in range(200):
        await ahp()
        await native()
    for _ in range(calls):  # interleaved so drift affects both alike
        for name, call in (
            ("AHP request (Gateway.handle)", ahp),
            ("native /native/claude-code (handle_native)", native),
        ):
            started = time.perf_counter()
            await call()
            samples[name].append((time.perf_counter() - started) * 1000)
    await assembly.aclose(0.0)
    a, n = samples.values()
    added = statistics.median(n) - statistics.median(a)
    lines = ["| in process | calls | p50 ms | p90 ms | p99 ms | min ms | max ms |", "|---|---|---|---|---|---|---|"]
    lines += [_row(name, ms) for name, ms in samples.items()]
    lines.append(f"\nadded by the native endpoint (median difference): {added * 1000:.0f} µs")
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--calls", type=int, default=2000)
    args = parser.parse_args()
    print("\n".join(process_latency(args.runs)))
    print()
    print("\n".join(asyncio.run(_endpoint_overhead(args.calls))))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
