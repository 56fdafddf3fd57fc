"""The gateway's own work per intercept, without any HTTP: ``Gateway.handle`` on a 2.2 KB
``tool.before`` against an in-process upstream that answers the stub's bytes at once.

``python -m bench.inprocess [--n N] [--profile] [--local] [--distinct] [--mix]`` prints µs CPU per
intercept (and with ``--profile`` the top functions by cumulative time). ``--local`` uses the
bundled default configuration (local CEL policies) instead of one remote upstream;
``--distinct`` gives every request its own command, so no rule result or shell parse is reused
(the policy memo's and the parse cache's worst case). ``--mix`` (S8) sends the real tool calls of
``bench/realmix.py`` to the bundled default configuration, every path renamed (``--seed``; by
default one pass over the corpus, after a warm-up on calls of another pass). Compare runs within
one invocation (the machine may be shared); this measures the pipeline, not the HTTP layers.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import pstats
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from bench import realmix
from bench.payloads import distinct_template, intercept_body, stub_answer
from gateway.assemble import Assembly, compile_snapshot
from gateway.config.load import load
from gateway.pipeline.gateway import Gateway
from gateway.settle.reply import Reply
from gateway.telemetry import NullTelemetry, Telemetry
from gateway.upstream.base import Call

CONFIG = {
    "id": "org.example.gateway",
    "log": {"decisions": "off"},
    "hooks": [
        {
            "id": "org.example.stub",
            "transport": {"type": "http", "url": "http://127.0.0.1:9/"},
            "subscriptions": [
                {
                    "mode": "intercept",
                    "events": ["tool.before"],
                    "timeoutMs": 500,
                    "failurePolicy": "fail-closed",
                    "content": {"default": "body"},
                }
            ],
        }
    ],
}


class InstantUpstream:
    """Answers every call with the benchmark stub's bytes (no socket)."""

    kind = "http"
    policy = None

    def __init__(self) -> None:
        self._answers: dict[Any, bytes] = {}

    async def intercept(self, call: Call) -> Reply:
        rid = call.request["id"]
        answer = self._answers.get(rid)
        if answer is None:  # encoded once: the stub's encoding is not the gateway's work
            answer = self._answers[rid] = stub_answer(rid)
        return Reply(answer)

    async def observe(self, message: dict[str, Any], timeout: float, headers: Any = None) -> None:
        return None

    async def aclose(self) -> None:
        return None


def gateway(local: bool, telemetry: bool = False) -> Gateway:
    if local:
        loaded = load(None)
    else:
        path = Path(tempfile.mkdtemp()) / "gateway.yaml"
        path.write_text(yaml.safe_dump(CONFIG))
        loaded = load(path)
    snap = compile_snapshot(loaded)
    if not local:
        for routes in snap.intercept_routes.values():
            for route in routes:
                object.__setattr__(route, "upstream", InstantUpstream())
    sink: Telemetry = NullTelemetry()
    if telemetry:
        from gateway.observability.decisions import DecisionLog
        from gateway.observability.metrics import Metrics
        from gateway.observability.sink import Observability

        metrics = Metrics()
        decisions = DecisionLog(
            str(Path(tempfile.mkdtemp()) / "decisions.jsonl"), on_drop=metrics.decision_log_drops.inc
        )
        sink = Observability(metrics, decisions)
    return Assembly(loaded, snapshot=snap, telemetry=sink).gateway


async def measure(gw: Gateway, n: int, distinct: bool = False) -> float:
    body = intercept_body()
    prefix, suffix = distinct_template()  # distinct: a command of its own, as S5u sends it

    def nth(i: int) -> bytes:
        return prefix + b"%d" % (1000000 + i) + suffix if distinct else body

    bodies = [nth(i) for i in range(n)]
    for warm in range(200):
        await gw.handle(nth(-warm - 1), {})
    started = time.process_time()  # CPU time: less sensitive to a shared machine than wall time
    for each in bodies:
        await gw.handle(each, {})
    return (time.process_time() - started) / n * 1e6


def mix_bodies(mix: realmix.Mix, n: int, first_pass: int) -> tuple[list[bytes], list[bytes]]:
    """200 warm-up calls from the end of pass ``first_pass - 1``, then ``n`` calls from pass
    ``first_pass`` on (renamed anew each pass)."""
    size = len(mix.cases)
    warm = list(mix.bodies(first_pass - 1, min(200, size), start=max(0, size - 200)))
    return warm, list(mix.bodies(first_pass, n))


async def measure_mix(gw: Gateway, warm: list[bytes], bodies: list[bytes]) -> float:
    """µs CPU per decision over ``bodies`` after ``warm``; every answer must be a result."""
    for body in warm:
        await gw.handle(body, {})
    started = time.process_time()
    answers = [(await gw.handle(each, {})).answer for each in bodies]
    spent = time.process_time() - started
    for body, answer in zip(bodies, answers, strict=True):
        if answer is None or b'"effects":' not in answer:
            raise SystemExit(f"not a result: {answer!r} for {body[:200]!r}")
    return spent / len(bodies) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, help="requests (default 20,000; --mix: one pass over the corpus)")
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--local", action="store_true")
    parser.add_argument("--distinct", action="store_true", help="a different command in every request")
    parser.add_argument("--telemetry", action="store_true", help="metrics, trace propagation and a decision log file")
    parser.add_argument("--mix", action="store_true", help="S8: the real tool calls, to the bundled default")
    parser.add_argument("--seed", type=int, help="--mix: the seed of the path renaming (default: random, printed)")
    args = parser.parse_args()
    args.n_given = args.n is not None
    args.n = args.n if args.n is not None else 20000
    if args.mix:
        main_mix(args)
        return
    gw = gateway(args.local, args.telemetry)
    if args.profile:
        asyncio.run(measure(gw, 2000))
        profiler = cProfile.Profile()
        profiler.enable()
        asyncio.run(measure(gw, args.n, args.distinct))
        profiler.disable()
        pstats.Stats(profiler).sort_stats("tottime").print_stats(25)
        return
    us = asyncio.run(measure(gw, args.n, args.distinct))
    what = ("local policies" if args.local else "one upstream") + (", telemetry" if args.telemetry else "")
    what += ", a distinct command per request" if args.distinct else ""
    print(f"{what}: {us:.1f} µs CPU per intercept (n={args.n})")


def main_mix(args: argparse.Namespace) -> None:
    try:
        cases = realmix.load_cases()
    except realmix.CorpusMissing as exc:
        raise SystemExit(str(exc)) from None
    seed = args.seed if args.seed is not None else realmix.new_seed()
    mix = realmix.Mix(cases, seed)
    n = args.n if args.n_given else len(cases)
    gw = gateway(True, args.telemetry)
    what = f"the default configuration, {len(cases):,} real tool calls renamed with seed {seed}"
    what += ", telemetry" if args.telemetry else ""
    if args.profile:
        asyncio.run(measure_mix(gw, *mix_bodies(mix, n, 1)))
        warm, bodies = mix_bodies(mix, n, 2 + mix.passes(n))
        profiler = cProfile.Profile()
        profiler.enable()
        asyncio.run(measure_mix(gw, [], bodies))
        profiler.disable()
        print(f"{what}: profile of {n:,} decisions (after {n + 200:,} on other passes)")
        pstats.Stats(profiler).sort_stats("tottime").print_stats(25)
        return
    us = asyncio.run(measure_mix(gw, *mix_bodies(mix, n, 1)))
    print(f"{what}: {us:.1f} µs CPU per decision (n={n})")


if __name__ == "__main__":
    main()
