"""Instructions per request of the live gateway, counted by valgrind's callgrind: a measure the
load of a shared machine cannot move (runs agree within about 0.3 %), for A/B comparisons of
the gateway's own work where wall-clock ratios drown in noise. It counts user-space instructions
of every thread, so it misses system calls, cache misses and context switches: read it beside
the CPU time of ``bench.run``, not instead of it.

For each scenario: the raw upstream stub, the gateway under callgrind on that scenario's
configuration, a warm-up, counters zeroed, ``--n`` requests (the benchmark's 2.2 KB
``tool.before``) over 16 connections, counters dumped. S8 runs the gateway on its embedded
default configuration (no stub) and sends the real tool calls of ``bench/realmix.py`` instead:
800 warm-up calls from the end of one renamed pass, then the first ``--n`` calls of the replay
order, renamed anew (``--seed``; the order is fixed, so runs count the same calls).

    python -m bench.instructions [--only S2,S7,S8] [--n 2000] [--by-object] [--seed N]

``--by-object`` also prints, per scenario, the share of the instructions spent in each shared
object (the CPython interpreter, orjson, jsonschema-rs, llhttp, uvloop, libc): whether the cost
is the gateway's own Python or the libraries it calls.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench import realmix
from bench.payloads import intercept_body
from bench.procs import BenchError, Processes, free_port, http_request, redis_server, wait_until
from bench.scenarios import ALL, BY_KEY, gateway_config, production_profile

CONNECTIONS = 16
WARM = 800


def _request(body: bytes) -> bytes:
    head = b"POST / HTTP/1.1\r\nHost: bench\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"
    return head % len(body) + body


async def _load(port: int, count: int, bodies: list[bytes] | None = None) -> None:
    """``count`` requests spread over 16 keep-alive connections, in order on each, answers read
    whole: the benchmark's request every time, or ``bodies`` (one each, dealt round the
    connections; S8)."""
    same = _request(intercept_body())
    share = count // CONNECTIONS
    requests = [_request(b) for b in bodies[: share * CONNECTIONS]] if bodies is not None else None

    async def one(index: int) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        for k in range(share):
            writer.write(same if requests is None else requests[k * CONNECTIONS + index])
            head = await reader.readuntil(b"\r\n\r\n")
            if not head.startswith(b"HTTP/1.1 200"):
                raise BenchError(f"unexpected answer: {head[:60]!r}")
            length = next(
                int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")
            )
            await reader.readexactly(length)
        writer.close()

    await asyncio.gather(*(one(i) for i in range(CONNECTIONS)))


def _total(dump: Path) -> int:
    """The instruction total of a dump."""
    for line in dump.read_text().splitlines():
        if line.startswith(("totals:", "summary:")):
            return int(line.split()[1])
    raise BenchError(f"no totals in {dump}")


def by_object(dump: Path) -> dict[str, int]:
    """Instructions spent in each shared object (``ob=``) of a callgrind dump, by its own code:
    every cost line counts except the one after ``calls=``, which repeats the callee's inclusive
    cost. The shares add up to the dump's ``totals:`` line. Names may be compressed (``(3) path``
    defines 3, ``(3)`` refers to it; ``cob=`` shares the table)."""
    names: dict[str, str] = {}
    spent: dict[str, int] = {}
    current = "?"
    after_call = False
    with dump.open(encoding="utf-8", errors="replace") as lines:
        for line in lines:
            if line.startswith(("ob=", "cob=")):
                value = line.split("=", 1)[1].strip()
                ref, _, name = value.partition(" ")
                if ref.startswith("(") and ref.endswith(")"):
                    name = names.setdefault(ref, name) if name else names.get(ref, ref)
                else:
                    name = value
                if line.startswith("ob="):
                    current = name
            elif line.startswith("calls="):
                after_call = True
            elif line[:1].isdigit() or line[:1] in "+-*":
                if after_call:
                    after_call = False
                    continue
                fields = line.split()
                if len(fields) >= 2:
                    spent[current] = spent.get(current, 0) + int(fields[1])
    return spent


def _dump(dump_dir: Path, pid: int) -> Path:
    return sorted(dump_dir.glob(f"cg.{pid}*"), key=lambda p: p.stat().st_mtime)[-1]


def measure(key: str, n: int, workdir: Path, mix: realmix.Mix | None = None, warm_up: int = WARM) -> tuple[float, Path]:
    """Instructions per request of ``key``, and the callgrind dump they were read from. S8 (the
    default gateway, no upstream) sends the calls of ``mix``: a warm-up from the end of one pass,
    then ``n`` calls of the next, so no counted call was seen before."""
    scenario = next(s for s in ALL if s.key == key)
    if scenario.under_test != "gateway" or scenario.stubs > 1:
        raise BenchError(f"{key}: only gateway scenarios with at most one upstream are counted")
    procs = Processes(workdir, {})
    try:
        stub_port, port, admin = free_port(), free_port(), free_port()
        waited = []
        if scenario.default_config:
            if mix is None:
                raise BenchError(f"{key} needs the real-call mix")
            serve = ["serve", "--port", str(port), "--admin-port", str(admin)]
        else:
            stub = procs.start(
                "stub", [sys.executable, "-m", "bench.stub", "--port", str(stub_port), "--impl", "raw"], cpus=None
            )
            waited.append(stub)
            urls = [f"http://127.0.0.1:{stub_port}/"] * scenario.stubs
            redis_url = redis_server(procs, workdir)[1] if scenario.shared_limit else None
            config = gateway_config(scenario, port, admin, urls, workdir, redis_url)
            if scenario.production:
                config = production_profile(config)
            path = workdir / f"{key}.json"
            path.write_text(json.dumps(config), encoding="utf-8")
            serve = ["serve", "--config", str(path)]
        dumps = workdir / f"cg-{key}"
        dumps.mkdir()
        gateway = procs.start(
            key,
            [
                "valgrind",
                "--tool=callgrind",
                f"--callgrind-out-file={dumps}/cg.%p",
                sys.executable,
                "-m",
                "gateway",
                *serve,
            ],
            cpus=None,
        )
        body = intercept_body() if mix is None else next(mix.bodies(0, 1))
        wait_until(
            lambda: http_request(port, "POST", "/", body, timeout=30)[0] == 200,
            deadline_s=180,
            procs=[*waited, gateway],
            what=f"{key} under callgrind",
            interval=0.5,
        )
        warm = counted = None
        if scenario.default_config and mix is not None:
            size = len(mix.cases)
            warm = list(mix.bodies(1, min(warm_up, size), start=max(0, size - warm_up)))
            counted = list(mix.bodies(2, n))
        asyncio.run(_load(port, warm_up, warm))
        subprocess.run(["callgrind_control", "-z", str(gateway.pid)], check=True, capture_output=True)
        asyncio.run(_load(port, n, counted))
        subprocess.run(["callgrind_control", "-d", str(gateway.pid)], check=True, capture_output=True)
        time.sleep(0.5)
        dump = _dump(dumps, gateway.pid)
        return _total(dump) / (n // CONNECTIONS * CONNECTIONS), dump
    finally:
        procs.stop_all()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="S2,S7", help="comma-separated gateway scenarios (default S2,S7)")
    parser.add_argument("--n", type=int, default=2000, help="requests counted per scenario")
    parser.add_argument("--by-object", action="store_true", help="the share of each shared object, per scenario")
    parser.add_argument("--seed", type=int, help="S8: the seed of the path renaming (default: random, printed)")
    parser.add_argument("--warm", type=int, default=WARM, help=f"warm-up requests before counting (default {WARM})")
    args = parser.parse_args()
    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        raise SystemExit("valgrind (with callgrind_control) is needed")
    keys = [k.strip() for k in args.only.split(",") if k.strip()]
    mix = None
    if any(k in BY_KEY and BY_KEY[k].default_config for k in keys):
        try:
            cases = realmix.load_cases()
        except realmix.CorpusMissing as exc:
            raise SystemExit(str(exc)) from None
        mix = realmix.Mix(cases, args.seed if args.seed is not None else realmix.new_seed())
        print(f"S8: {len(cases):,} real tool calls, the first {args.n:,} of the replay order counted, seed {mix.seed}")
    with tempfile.TemporaryDirectory() as tmp:
        measured = {key: measure(key, args.n, Path(tmp), mix, max(args.warm, CONNECTIONS)) for key in keys}
        shares = {key: by_object(dump) for key, (_, dump) in measured.items()} if args.by_object else {}
    base = measured[keys[0]][0]
    print("| Scenario | Instructions per request | × " + keys[0] + " |\n|---|---:|---:|")
    for key, (value, _) in measured.items():
        print(f"| {key} | {value:,.0f} | {value / base:.3f} |")
    for key, spent in shares.items():
        total = sum(spent.values()) or 1
        print(f"\n{key}: share of instructions by shared object\n| Object | Share |\n|---|---:|")
        for name, count in sorted(spent.items(), key=lambda item: -item[1]):
            if count / total >= 0.002:
                print(f"| {Path(name).name} | {100 * count / total:.1f} % |")


if __name__ == "__main__":
    main()
