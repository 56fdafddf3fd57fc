"""The gateway's own work per intercept, without any HTTP: ``Gateway.handle`` on a 2.2 KB
``tool.before`` against an in-process upstream that answers the stub's bytes at once.

``python -m bench.inprocess [--n N] [--profile] [--local] [--distinct]`` prints µs CPU per
intercept (and with ``--profile`` the top functions by cumulative time). ``--local`` uses the
bundled default configuration (local CEL policies) instead of one remote upstream;
``--distinct`` gives every request its own command, so no rule result or shell parse is reused
(the policy memo's and the parse cache's worst case). Compare runs within one
invocation (the machine may be shared); this measures the pipeline, not the HTTP layers.
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

from bench.payloads import distinct_template, intercept_body, stub_answer
from gateway.config.load import load
from gateway.pipeline.gateway import Gateway
from gateway.runtime import RuntimeHolder, build
from gateway.settle.outcome import Reply
from gateway.upstream.base import Call
from gateway.upstream.http import ClientPool

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
    snap = build(loaded, ClientPool())
    if not local:
        for routes in snap.intercept_routes.values():
            for route in routes:
                object.__setattr__(route, "upstream", InstantUpstream())
    sink = None
    if telemetry:
        from gateway.observability.decisions import DecisionLog
        from gateway.observability.metrics import Metrics
        from gateway.observability.sink import Observability

        metrics = Metrics()
        decisions = DecisionLog(
            str(Path(tempfile.mkdtemp()) / "decisions.jsonl"), on_drop=metrics.decision_log_drops.inc
        )
        sink = Observability(metrics, decisions)
    return Gateway(RuntimeHolder(snap), sink)


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


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=20000)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--local", action="store_true")
    parser.add_argument("--distinct", action="store_true", help="a different command in every request")
    parser.add_argument("--telemetry", action="store_true", help="metrics, trace propagation and a decision log file")
    args = parser.parse_args()
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


if __name__ == "__main__":
    main()
