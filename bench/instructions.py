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

``--stages`` (with S8 in ``--only``) splits an S8 decision into its stages, counted in process
(:mod:`bench.stages`: each stage run twice under callgrind, with 0 and with ``--n`` calls, the
difference divided by ``--n``): deriving the facts, the rest of the decision (front end, routing,
the local backend's index and CEL, settlement), the telemetry, and the HTTP server (the live count
less the in-process one); with ``--by-object``, each stage's shares too.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
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
    # nothing of the caller's environment but its PYTHONPATH (bench.compiled: the compiled build)
    procs = Processes(workdir, {k: v for k, v in os.environ.items() if k == "PYTHONPATH"})
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


STAGE_ROWS = (
    ("facts", "facts: the shell walk (tree-sitter), the program table, the effects"),
    ("decision", "the rest of the decision: front end, routing, memo, rule index, CEL, settlement"),
    ("logged", "telemetry: the decision log and metrics"),
)


def _stage_count(stage: str, n: int, seed: int, workdir: Path) -> tuple[int, dict[str, int]]:
    """Instructions (and their split by object) of one ``bench.stages`` run."""
    out = workdir / f"cg.stage.{stage}.{n}"
    subprocess.run(
        ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", sys.executable, "-m", "bench.stages"]
        + [stage, str(n), str(seed)],
        check=True,
        capture_output=True,
    )
    return _total(out), by_object(out)


def stages(n: int, seed: int, workdir: Path) -> dict[str, tuple[float, dict[str, float]]]:
    """Per stage of :data:`STAGE_ROWS`: its own instructions per call (each stage less the one
    before it) and their split by shared object."""
    from bench.stages import PREPARED

    n = min(n, PREPARED)
    cumulative: dict[str, tuple[float, dict[str, float]]] = {}
    for stage, _ in STAGE_ROWS:
        (empty, empty_objects), (full, full_objects) = (_stage_count(stage, k, seed, workdir) for k in (0, n))
        objects = {k: (full_objects.get(k, 0) - empty_objects.get(k, 0)) / n for k in full_objects}
        cumulative[stage] = ((full - empty) / n, objects)
    own: dict[str, tuple[float, dict[str, float]]] = {}
    before: tuple[float, dict[str, float]] = (0.0, {})
    for stage, _ in STAGE_ROWS:
        total, objects = cumulative[stage]
        own[stage] = (total - before[0], {k: v - before[1].get(k, 0.0) for k, v in objects.items()})
        before = cumulative[stage]
    return own


def _print_stages(own: dict[str, tuple[float, dict[str, float]]], live: float | None, by_objects: bool) -> None:
    rows = [(label, own[stage][0]) for stage, label in STAGE_ROWS]
    inside = sum(value for _, value in rows)
    if live is not None:
        rows.append(
            ("HTTP server: the listener, the request's bytes and the answer's (live S8 less the above)", live - inside)
        )
    total = live if live is not None else inside
    print("\nS8 by stage (instructions per call)\n| Stage | Instructions | Share |\n|---|---:|---:|")
    for label, value in rows:
        print(f"| {label} | {value:,.0f} | {100 * value / total:.1f} % |")
    if by_objects:
        for stage, _label in STAGE_ROWS:
            objects = own[stage][1]
            whole = sum(v for v in objects.values() if v > 0) or 1
            parts = ", ".join(
                f"{Path(k).name} {100 * v / whole:.0f} %"
                for k, v in sorted(objects.items(), key=lambda x: -x[1])
                if v / whole >= 0.01
            )
            print(f"- {stage}: {parts}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="S2,S7", help="comma-separated gateway scenarios (default S2,S7)")
    parser.add_argument("--n", type=int, default=2000, help="requests counted per scenario")
    parser.add_argument("--by-object", action="store_true", help="the share of each shared object, per scenario")
    parser.add_argument("--seed", type=int, help="S8: the seed of the path renaming (default: random, printed)")
    parser.add_argument("--warm", type=int, default=WARM, help=f"warm-up requests before counting (default {WARM})")
    parser.add_argument("--stages", action="store_true", help="S8: the split of a decision by stage, in process")
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
    if args.stages and (mix is None or "S8" not in keys):
        raise SystemExit("--stages needs S8 in --only")
    with tempfile.TemporaryDirectory() as tmp:
        measured = {key: measure(key, args.n, Path(tmp), mix, max(args.warm, CONNECTIONS)) for key in keys}
        shares = {key: by_object(dump) for key, (_, dump) in measured.items()} if args.by_object else {}
        split = stages(args.n, mix.seed, Path(tmp)) if args.stages and mix is not None else None
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
    if split is not None:
        _print_stages(split, measured["S8"][0], args.by_object)


if __name__ == "__main__":
    main()
