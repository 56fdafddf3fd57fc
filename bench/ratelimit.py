"""What one shared rate limit costs an intercept (S2 against S2 with a limit, "S2L"): the pipeline
in process (``Gateway.handle``, no HTTP, an upstream that answers at once, as bench.inprocess),
with Redis on loopback (a ``redis-server`` started here, in its own process group).

Three variants run interleaved in one invocation, rounds alternating so a shared machine's load
falls on all of them alike: ``S2`` (no ``rateLimits``: Redis is never asked), ``S2L-local`` (one
``scope: local`` limit keyed on the principal) and ``S2L`` (one ``scope: shared`` limit, one Lua
script on Redis per intercept). For each: the median wall-clock latency of one intercept at
concurrency 1 (the added p50), the throughput of 16 concurrent intercepts, and the CPU per
intercept of this process (Redis' own CPU is not counted: it runs on the other core).

    python -m bench.ratelimit [--n 5000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import signal
import socket
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from bench.inprocess import CONFIG, InstantUpstream
from bench.payloads import intercept_body
from gateway.assemble import Assembly, compile_snapshot
from gateway.config.load import load
from gateway.pipeline.gateway import Gateway
from gateway.telemetry import NullTelemetry

PRINCIPAL = {"name": "agent-7", "attributes": {}}
LIMIT = {"id": "per-principal", "key": "principal.name", "requestsPerSecond": 1e6, "burst": 1_000_000}
CONCURRENCY = 16


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_redis(directory: Path) -> tuple[subprocess.Popen[bytes], str]:
    binary = shutil.which("redis-server")
    if binary is None:
        raise SystemExit("redis-server is not installed (Debian package redis-server)")
    port = free_port()
    proc = subprocess.Popen(
        [
            binary,
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(directory),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    deadline = time.monotonic() + 10
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5) as sock:
                sock.sendall(b"PING\r\n")
                if sock.recv(16).startswith(b"+PONG"):
                    return proc, f"redis://127.0.0.1:{port}/0"
        except OSError:
            pass
        if time.monotonic() > deadline or proc.poll() is not None:
            stop(proc)
            raise SystemExit("redis-server did not start")
        time.sleep(0.02)


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        import os

        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)


def assembly(variant: str, redis_url: str) -> Assembly:
    config: dict[str, Any] = dict(CONFIG)
    if variant == "S2L":
        config["state"] = {"redis": {"url": redis_url, "timeoutMs": 50}}
        config["rateLimits"] = [{**LIMIT, "scope": "shared"}]
    elif variant == "S2L-local":
        config["rateLimits"] = [{**LIMIT, "scope": "local"}]
    path = Path(tempfile.mkdtemp()) / "gateway.yaml"
    path.write_text(yaml.safe_dump(config))
    loaded = load(path)
    snap = compile_snapshot(loaded)
    for routes in snap.intercept_routes.values():
        for route in routes:
            object.__setattr__(route, "upstream", InstantUpstream())
    return Assembly(loaded, snapshot=snap, telemetry=NullTelemetry(), limits=True)


async def sequential(gw: Gateway, body: bytes, n: int) -> tuple[float, float]:
    """(median µs wall per intercept at concurrency 1, µs CPU per intercept)."""
    samples = []
    cpu = time.process_time()
    for _ in range(n):
        started = time.perf_counter()
        exchange = await gw.handle(body, {}, PRINCIPAL)
        samples.append(time.perf_counter() - started)
        assert exchange.answer is not None and b'"result"' in exchange.answer, exchange.answer
    return statistics.median(samples) * 1e6, (time.process_time() - cpu) / n * 1e6


async def concurrent(gw: Gateway, body: bytes, n: int) -> float:
    """Intercepts per second with 16 in flight."""
    share = n // CONCURRENCY

    async def worker() -> None:
        for _ in range(share):
            await gw.handle(body, {}, PRINCIPAL)

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(CONCURRENCY)))
    return share * CONCURRENCY / (time.perf_counter() - started)


async def run(n: int, rounds: int, redis_url: str) -> dict[str, dict[str, list[float]]]:
    variants = ("S2", "S2L-local", "S2L")
    gateways = {v: assembly(v, redis_url) for v in variants}
    body = intercept_body()
    results: dict[str, dict[str, list[float]]] = {v: {"p50": [], "cpu": [], "rps": []} for v in variants}
    try:
        for each in gateways.values():
            each.start()
            await sequential(each.gateway, body, 500)  # warm-up (connections, caches)
        for _ in range(rounds):
            for variant in variants:
                gw = gateways[variant].gateway
                p50, cpu = await sequential(gw, body, n)
                results[variant]["p50"].append(p50)
                results[variant]["cpu"].append(cpu)
                results[variant]["rps"].append(await concurrent(gw, body, n))
    finally:
        for each in gateways.values():
            await each.aclose(0.0)
    return results


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=5000, help="intercepts per measurement")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as directory:
        proc, url = start_redis(Path(directory))
        try:
            results = asyncio.run(run(args.n, args.rounds, url))
        finally:
            stop(proc)
    base = {k: statistics.median(v) for k, v in results["S2"].items()}
    print(f"{'variant':<10} {'p50 µs':>8} {'added':>8} {'CPU µs':>8} {'req/s (16)':>11} {'× S2':>6}")
    for variant, values in results.items():
        med = {k: statistics.median(v) for k, v in values.items()}
        print(
            f"{variant:<10} {med['p50']:8.1f} {med['p50'] - base['p50']:+8.1f} {med['cpu']:8.1f} "
            f"{med['rps']:11.0f} {med['rps'] / base['rps']:6.2f}"
        )
    print(f"(medians of {args.rounds} rounds of {args.n} intercepts; targets: S2L ≥ 0.8 × S2, added p50 ≤ 200 µs)")


if __name__ == "__main__":
    main()
