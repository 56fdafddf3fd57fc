"""Bytecodes per request of the live gateway, by function: where an instruction count moved.

``bench.instructions`` says how many instructions a request costs; on CPython 3.11 callgrind
cannot name the Python functions that ran them (the interpreter loop is one C function). This
tool runs the same scenario (raw upstream stub, the gateway on the scenario's configuration, a
warm-up, then ``--n`` requests over 16 connections) with the interpreter's own opcode tracing
switched on for the counted requests only (``sys.settrace`` with ``f_trace_opcodes``, every thread
started after it is switched on too), and prints the bytecodes each function executed per
request. On the request path one bytecode costs about 120 instructions with the C work it calls,
so a function that runs 100 more bytecodes per request costs roughly 12,000 more instructions.
Counts are exact and the load cannot move them; tracing makes the gateway some 20 times slower,
so timings mean nothing here.

    python -m bench.bytecodes [--only S2] [--n 500] [--out counts.json] [--compare before.json]

``--out`` keeps the counts (JSON, per request); ``--compare`` prints the difference from counts
kept earlier (another revision's), largest first. Only the gateway scenarios
``bench.instructions`` supports without the real-call mix (S2, S2a, S5, S5n, S7).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import runpy
import signal
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from types import CodeType, FrameType
from typing import Any

from bench.instructions import _load
from bench.payloads import intercept_body
from bench.procs import BenchError, Processes, free_port, http_request, wait_until
from bench.scenarios import ALL, REPO, gateway_config, production_profile

WARM = 800
TOP = 40


def _key(code: CodeType, frame: FrameType) -> str:
    """``path:qualname`` (the path relative to the repository or site-packages); a generated
    dataclass ``__init__`` is named after its class."""
    name = code.co_filename
    for root in (str(REPO) + "/", "site-packages/", "/lib/"):
        if root in name:
            name = name.split(root, 1)[1]
            break
    key = f"{name}:{code.co_qualname}"
    if code.co_filename == "<string>":  # a dataclass __init__ or a NamedTuple __new__
        if "self" in frame.f_locals:
            key += f" ({type(frame.f_locals['self']).__qualname__})"
        elif "_cls" in frame.f_locals:
            key += f" ({frame.f_locals['_cls'].__qualname__})"
    return key


def serve(out: Path, argv: list[str]) -> None:
    """The gateway (``python -m gateway *argv``) with opcode counting: SIGUSR1 starts it, SIGUSR2
    stops it and writes the counts to ``out``."""
    counts: Counter[str] = Counter()

    def tracer(frame: FrameType, event: str, arg: Any) -> Any:
        if event != "call":
            return None
        frame.f_trace_opcodes = True
        key = _key(frame.f_code, frame)

        def local(frame: FrameType, event: str, arg: Any) -> Any:
            if event == "opcode":
                counts[key] += 1
            return local

        return local

    def start(*_: Any) -> None:
        counts.clear()
        threading.settrace(tracer)
        sys.settrace(tracer)

    def stop(*_: Any) -> None:
        sys.settrace(None)
        threading.settrace(None)
        out.write_text(json.dumps(counts), encoding="utf-8")

    signal.signal(signal.SIGUSR1, start)
    signal.signal(signal.SIGUSR2, stop)
    sys.argv = ["gateway", *argv]
    runpy.run_module("gateway", run_name="__main__", alter_sys=True)


def measure(key: str, n: int, workdir: Path) -> dict[str, float]:
    """Bytecodes per request of ``key``, by function."""
    scenario = next((s for s in ALL if s.key == key), None)
    if scenario is None or scenario.under_test != "gateway" or scenario.stubs != 1 or scenario.default_config:
        raise BenchError(f"{key}: only gateway scenarios with one upstream stub are counted")
    procs = Processes(workdir, {})
    try:
        stub_port, port, admin = free_port(), free_port(), free_port()
        stub = procs.start(
            "stub", [sys.executable, "-m", "bench.stub", "--port", str(stub_port), "--impl", "raw"], cpus=None
        )
        config = gateway_config(scenario, port, admin, [f"http://127.0.0.1:{stub_port}/"], workdir)
        if scenario.production:
            config = production_profile(config)
        path = workdir / f"{key}.json"
        path.write_text(json.dumps(config), encoding="utf-8")
        counts = workdir / f"{key}-bytecodes.json"
        argv = [sys.executable, "-m", "bench.bytecodes", "--serve", str(counts), "serve", "--config", str(path)]
        gateway = procs.start(key, argv, cpus=None, cwd=REPO)
        wait_until(
            lambda: http_request(port, "POST", "/", intercept_body(), timeout=30)[0] == 200,
            deadline_s=120,
            procs=[stub, gateway],
            what=f"{key} with opcode counting",
            interval=0.3,
        )
        asyncio.run(_load(port, WARM))
        gateway.popen.send_signal(signal.SIGUSR1)
        time.sleep(0.5)  # the handler runs between two bytecodes of the loop
        counted = n // 16 * 16
        asyncio.run(_load(port, n))
        gateway.popen.send_signal(signal.SIGUSR2)
        wait_until(lambda: counts.exists(), deadline_s=30, procs=[gateway], what="the counts", interval=0.2)
        time.sleep(0.3)
        raw: dict[str, int] = json.loads(counts.read_text(encoding="utf-8"))
        return {name: value / counted for name, value in raw.items()}
    finally:
        procs.stop_all()


def _table(rows: list[tuple[str, float]], header: str) -> str:
    lines = [f"| {header} | Function |", "|---:|---|"]
    lines += [f"| {value:,.1f} | `{name}` |" for name, value in rows]
    return "\n".join(lines)


def main() -> None:
    if len(sys.argv) > 2 and sys.argv[1] == "--serve":
        serve(Path(sys.argv[2]), sys.argv[3:])
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="S2", help="one gateway scenario (default S2)")
    parser.add_argument("--n", type=int, default=500, help="requests counted")
    parser.add_argument("--out", type=Path, help="keep the counts per request (JSON)")
    parser.add_argument("--compare", type=Path, help="counts kept earlier: print the difference")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        per_request = measure(args.only.strip(), args.n, Path(tmp))
    if args.out is not None:
        args.out.write_text(json.dumps(per_request, indent=1, sort_keys=True), encoding="utf-8")
    print(f"{args.only}: {sum(per_request.values()):,.0f} bytecodes per request\n")
    if args.compare is None:
        print(_table(sorted(per_request.items(), key=lambda item: -item[1])[:TOP], "Bytecodes per request"))
        return
    before: dict[str, float] = json.loads(args.compare.read_text(encoding="utf-8"))
    print(f"{args.compare}: {sum(before.values()):,.0f} bytecodes per request\n")
    diff = {k: per_request.get(k, 0.0) - before.get(k, 0.0) for k in set(per_request) | set(before)}
    rows = [(k, v) for k, v in sorted(diff.items(), key=lambda item: -abs(item[1])) if abs(v) >= 0.5][:TOP]
    print(_table(rows, "Change per request"))


if __name__ == "__main__":
    main()
