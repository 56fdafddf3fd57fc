"""Soak: minutes of mixed intercept traffic through a real gateway process, with random upstream
faults and configuration reloads, every decision checked against a model of the expected answer.

    python -m bench.soak --minutes 10 [--concurrency 16] [--disconnects 0.05] [--seed 1]

The chain is [adversary (bench/adversary.py), after]. Each request names the adversary's
behaviour in ``tool.input.command`` (``fault:<name>``: a fault, or ``ok`` / ``deny`` /
``message``); ``after`` always answers a message. Every few seconds traffic pauses, the
configuration is rewritten (the adversary's failure policy and the fan-out flip; now and then an
invalid file that must be rejected, keeping the last good one) and the gateway gets SIGHUP; the
reload is confirmed from /metrics before traffic resumes, so the model knows the policy of every
request. A fraction of requests (``--disconnects``) is abandoned mid-flight by the harness.

Checks: zero wrong decisions; every reload accepted or rejected as intended; the gateway's RSS and
descriptor count flat after warm-up; at the end the adversary's circuit closes again once it is
healthy. Exit status 1 on any failure; a JSON summary on stdout.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import random
import signal
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import yaml
from aiohttp import web
from prometheus_client.parser import text_string_to_metric_families

from bench.adversary import FAILURE_CLASS, Adversary
from bench.procs import Processes, free_port, proc_memory_kb

GATEWAY = "org.example.gateway"
ADV = "org.example.adversary"
AFTER = "org.example.after"
CAPS = {"effects": ["deny", "message"]}
AFTER_MESSAGE = {"type": "message", "text": "after ran"}
ADV_TIMEOUT_MS = 150
AFTER_TIMEOUT_MS = 300
DEADLINE_MS = 600
OPEN_SECONDS = 0.3
FAULTS = [f for f in FAILURE_CLASS if f != "tls"]  # TLS failure is a server property: the fault matrix covers it
HEALTHY = ["ok", "ok", "ok", "deny", "message"]
FAULT_SHARES = (0.1, 0.25, 0.7)
"""Share of requests with a fault, chosen anew after every reload: at 0.7 the breaker opens."""
_ids = itertools.count(1)


@dataclass
class Generation:
    number: int
    policy: str
    fanout: str


@dataclass
class Tally:
    requests: int = 0
    checked: int = 0
    abandoned: int = 0
    wrong: int = 0
    circuit_open: int = 0
    slow: int = 0
    """Timeouts of a peer too slow on a loaded machine (excused only as described in :func:`judge`)."""
    by_behaviour: dict[str, int] = field(default_factory=dict)
    examples: list[dict[str, Any]] = field(default_factory=list)
    reloads_ok: int = 0
    reloads_rejected: int = 0
    reload_errors: list[str] = field(default_factory=list)
    rss_kb: list[int] = field(default_factory=list)
    fds: list[int] = field(default_factory=list)


def config(adv_url: str, after_url: str, gen: Generation, port: int, admin: int) -> dict[str, Any]:
    def entry(hook_id: str, url: str, policy: str, timeout: int, **extra: Any) -> dict[str, Any]:
        return {
            "id": hook_id,
            "transport": {"type": "http", "url": url},
            "subscriptions": [
                {
                    "mode": "intercept",
                    "events": ["tool.before"],
                    "timeoutMs": timeout,
                    "failurePolicy": policy,
                    "content": {"default": "body"},
                }
            ],
            **extra,
        }

    breaker = {"failureThreshold": 5, "openSeconds": OPEN_SECONDS}
    return {
        "id": GATEWAY,
        "listen": {"host": "127.0.0.1", "port": port, "path": "/"},
        "admin": {"host": "127.0.0.1", "port": admin},
        "limits": {"deadlineMs": DEADLINE_MS, "maxResponseBytes": 65536, "headerTimeoutMs": 2000},
        "fanout": gen.fanout,
        "log": {"decisions": "decisions.jsonl"},
        "reload": {"watch": False},
        "shutdown": {"drainDelaySeconds": 0, "drainTimeoutSeconds": 2},
        "hooks": [
            entry(ADV, adv_url, gen.policy, ADV_TIMEOUT_MS, circuitBreaker=breaker),
            entry(AFTER, after_url, "fail-open", AFTER_TIMEOUT_MS),
        ],
    }


def expected(policy: str, behaviour: str, after: bool) -> list[dict[str, Any]]:
    """The one right answer for a request whose adversary call behaved as ``behaviour`` (a fault
    name, ``circuit_open``, ``ok``, ``deny`` or ``message``); ``after``: the ``after`` upstream
    was called (it is not when the adversary decided first, or its own breaker is open)."""
    tail = [AFTER_MESSAGE] if after else []
    if behaviour == "ok":
        return tail
    if behaviour == "message":
        return [{"type": "message", "text": "adversary"}, *tail]
    if behaviour == "deny":
        return [{"type": "deny", "reason": "adversary", "extensions": {GATEWAY: {"upstream": ADV, "kind": "explicit"}}}]
    failure = "circuit_open" if behaviour == "circuit_open" else FAILURE_CLASS[behaviour]
    if policy == "fail-open":
        return tail
    return [
        {
            "type": "deny",
            "reason": "Required policy backend unavailable",
            "code": f"{GATEWAY}.upstream_unavailable",
            "extensions": {GATEWAY: {"upstream": ADV, "kind": "synthetic", "failure": failure}},
        }
    ]


@dataclass(slots=True)
class Answer:
    """One judged request: what was asked, what the upstreams saw, what the harness got."""

    id: str
    policy: str
    behaviour: str
    called: bool
    """The adversary received the request."""
    after_called: bool
    status: int
    effects: Any


def judge(answer: Answer, logged: dict[str, str | None] | None) -> str:
    """``right``, ``slow`` or ``wrong``.

    Exact when the adversary received the request: its behaviour decides. Not received: the call
    failed fast (open circuit). ``logged`` is the decision log's failure class per upstream for
    this event; it may excuse exactly one thing: a timeout on a peer that was too slow on this
    loaded machine (the gateway says ``timeout``, and the answer is the one for a timeout) —
    never a different effect list, never a salvaged answer.
    """
    after = answer.after_called and (logged is None or logged.get(AFTER) is None)
    behaviour = answer.behaviour if answer.called else "circuit_open"
    if answer.effects == expected(answer.policy, behaviour, after):
        return "right"
    if logged is not None and logged.get(ADV) == "timeout" and answer.effects == expected(answer.policy, "hang", after):
        return "slow"
    return "wrong"


def decision_log(path: Path) -> dict[str, dict[str, str | None]]:
    """Event id -> {upstream id: failure class or None} from the gateway's decision log."""
    out: dict[str, dict[str, str | None]] = {}
    if not path.exists():
        return out
    with path.open(encoding="utf-8") as handle:
        for line in handle:
            try:
                record = json.loads(line)
            except ValueError:
                continue
            out[record["event"]["id"]] = {u["id"]: u.get("failure") for u in record.get("upstreams", [])}
    return out


def request(behaviour: str) -> dict[str, Any]:
    return intercept(f"fault:{behaviour}", CAPS, next(_ids))


def intercept(command: str, caps: dict[str, Any], n: int) -> dict[str, Any]:
    """A ``tool.before`` intercept of the shell ``command`` (event and request id ``soak-<n>``)."""
    event = {
        "id": f"soak-{n}",
        "source": "urn:example:soak",
        "type": "tool.before",
        "time": "2026-11-30T10:00:00Z",
        "harness": {"name": "soak", "version": "1.0"},
        "session": {"id": "s", "cwd": "/w", "workspaceRoots": ["/w"]},
        "call": {"id": f"call-{n}"},
        "path": "native",
        "tool": {"name": "shell", "origin": "native", "input": {"command": command}},
    }
    params = {"protocolVersion": "draft", "event": event, "capabilities": caps}
    return {"jsonrpc": "2.0", "id": event["id"], "method": "hooks/intercept", "params": params}


async def scrape(session: aiohttp.ClientSession, admin: int) -> dict[tuple[str, tuple[Any, ...]], float]:
    async with session.get(f"http://127.0.0.1:{admin}/metrics") as response:
        text = await response.text()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


class Soak:
    def __init__(self, seconds: float, concurrency: int, disconnects: float, seed: int, workdir: Path) -> None:
        self.seconds = seconds
        self.concurrency = concurrency
        self.disconnects = disconnects
        self.random = random.Random(seed)
        self.plan = random.Random(seed + 1)
        """Reload decisions: their sequence does not depend on how the traffic interleaves."""
        self.workdir = workdir
        self.tally = Tally()
        self.gen = Generation(0, "fail-closed", "serial")
        self.flowing = asyncio.Event()
        self.fault_share = FAULT_SHARES[1]
        self.inflight = 0
        self.port, self.admin = free_port(), free_port()

    async def _after(self) -> web.AppRunner:
        async def answer(request: web.Request) -> web.Response:
            body = await request.json()
            self.after_seen.add(body["id"])
            reply = {
                "jsonrpc": "2.0",
                "id": body["id"],
                "result": {"protocolVersion": "draft", "effects": [AFTER_MESSAGE]},
            }
            return web.json_response(reply)

        app = web.Application()
        app.router.add_post("/", answer)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        self.after_url = f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}/"  # type: ignore[union-attr]
        return runner

    def _write(self, gen: Generation, *, valid: bool = True) -> None:
        cfg = config(self.adv.url, self.after_url, gen, self.port, self.admin)
        if not valid:
            cfg["hooks"][0]["subscriptions"][0]["failurePolicy"] = "fail-sometimes"
        self.path.write_text(yaml.safe_dump(cfg, sort_keys=False))

    async def run(self) -> Tally:
        self.adv = await Adversary(late_after=ADV_TIMEOUT_MS / 1000 + 0.1).start()
        self.seen: set[Any] = set()
        self.after_seen: set[Any] = set()
        self.answers: list[Answer] = []
        self.adv.seen = self.seen
        after = await self._after()
        self.path = self.workdir / "gateway.yaml"
        self._write(self.gen)
        procs = Processes(self.workdir, {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)})
        proc = procs.start("gateway", [sys.executable, "-m", "gateway", "serve", "--config", str(self.path)], cpus=None)
        self.pid = proc.pid
        try:
            async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=self.concurrency)) as session:
                self.session = session
                await self._ready(proc)
                self.flowing.set()
                stop = time.monotonic() + self.seconds
                workers = [asyncio.ensure_future(self._worker(stop)) for _ in range(self.concurrency)]
                sampler = asyncio.ensure_future(self._sample(stop))
                await self._reloads(stop)
                await asyncio.gather(*workers, sampler)
                await self._recovery()
        finally:
            procs.stop_all()  # SIGTERM: the decision log is flushed and closed
            await self.adv.aclose()
            await after.cleanup()
        self._judge(decision_log(self.workdir / "decisions.jsonl"))
        return self.tally

    def _judge(self, logged: dict[str, dict[str, str | None]]) -> None:
        for answer in self.answers:
            self.tally.requests += 1
            self.tally.checked += 1
            self.tally.by_behaviour[answer.behaviour] = self.tally.by_behaviour.get(answer.behaviour, 0) + 1
            if not answer.called:
                self.tally.circuit_open += 1
            verdict = judge(answer, logged.get(answer.id))
            if verdict == "slow":
                self.tally.slow += 1
            elif verdict == "wrong":
                self.tally.wrong += 1
                if len(self.tally.examples) < 5:
                    self.tally.examples.append(
                        {
                            "policy": answer.policy,
                            "behaviour": answer.behaviour,
                            "called": answer.called,
                            "after_called": answer.after_called,
                            "logged": logged.get(answer.id),
                            "status": answer.status,
                            "effects": answer.effects,
                        }
                    )

    async def _ready(self, proc: Any) -> None:
        deadline = time.monotonic() + 30
        while True:
            if not proc.alive():
                raise RuntimeError(f"gateway exited:\n{proc.log_tail()}")
            try:
                async with self.session.get(f"http://127.0.0.1:{self.admin}/readyz") as response:
                    if response.status == 200:
                        return
            except aiohttp.ClientError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("gateway not ready")
            await asyncio.sleep(0.1)

    async def _worker(self, stop: float) -> None:
        url = f"http://127.0.0.1:{self.port}/"
        while time.monotonic() < stop:
            await self.flowing.wait()
            pool = FAULTS if self.random.random() < self.fault_share else HEALTHY
            behaviour = self.random.choice(pool)
            abandon = self.random.random() < self.disconnects
            policy = self.gen.policy
            message = request(behaviour)
            self.inflight += 1
            try:
                call = self.session.post(url, data=json.dumps(message), headers={"Content-Type": "application/json"})
                if abandon:
                    try:
                        async with asyncio.timeout(self.random.uniform(0.0, ADV_TIMEOUT_MS / 1000)):
                            async with call as response:
                                await response.read()
                    except TimeoutError:
                        self.tally.abandoned += 1
                    self.seen.discard(message["id"])
                    self.after_seen.discard(message["id"])
                    continue
                async with call as response:
                    status, body = response.status, await response.read()
            finally:
                self.inflight -= 1
            called = message["id"] in self.seen
            after_called = message["id"] in self.after_seen
            self.seen.discard(message["id"])
            self.after_seen.discard(message["id"])
            effects: Any = None
            if status == 200:
                answer = json.loads(body)
                if answer.get("id") == message["id"] and "result" in answer:
                    effects = answer["result"]["effects"]
            self.answers.append(Answer(message["id"], policy, behaviour, called, after_called, status, effects))

    async def _reloads(self, stop: float) -> None:
        while True:
            await asyncio.sleep(self.plan.uniform(1.0, 3.0))
            if time.monotonic() >= stop - 0.5:
                return
            self.flowing.clear()  # quiesce: the model must know which policy each request ran under
            while self.inflight:
                await asyncio.sleep(0.005)
            before = await scrape(self.session, self.admin)
            valid = self.plan.random() > 0.2
            candidate = Generation(
                self.gen.number + 1,
                self.plan.choice(["fail-open", "fail-closed"]),
                self.plan.choice(["serial", "parallel"]),
            )
            self._write(candidate, valid=valid)
            os.kill(self.pid, signal.SIGHUP)
            result = "success" if valid else "failure"
            key = ("ahp_gateway_config_reloads_total", (("result", result),))
            deadline = time.monotonic() + 10
            while (await scrape(self.session, self.admin)).get(key, 0) <= before.get(key, 0):
                if time.monotonic() > deadline:
                    self.tally.reload_errors.append(f"reload {candidate} ({result}) not observed")
                    break
                await asyncio.sleep(0.02)
            if valid:
                self.gen = candidate
                self.tally.reloads_ok += 1
            else:
                self.tally.reloads_rejected += 1
                self._write(self.gen)  # the file again matches what is serving
            self.fault_share = self.plan.choice(FAULT_SHARES)
            self.flowing.set()

    async def _sample(self, stop: float) -> None:
        while time.monotonic() < stop:
            self.tally.rss_kb.append(proc_memory_kb(self.pid).get("VmRSS", 0))
            self.tally.fds.append(len(os.listdir(f"/proc/{self.pid}/fd")))
            await asyncio.sleep(0.5)

    async def _recovery(self) -> None:
        """Healthy again: the adversary's circuit closes within openSeconds (plus slack)."""
        await asyncio.sleep(OPEN_SECONDS)
        url = f"http://127.0.0.1:{self.port}/"
        served = self.adv.count("ok")
        deadline = time.monotonic() + OPEN_SECONDS + 5
        while self.adv.count("ok") == served:
            if time.monotonic() > deadline:
                self.tally.reload_errors.append("the adversary's circuit did not close once it was healthy")
                return
            async with self.session.post(
                url, data=json.dumps(request("ok")), headers={"Content-Type": "application/json"}
            ) as response:
                await response.read()
            await asyncio.sleep(0.05)


def series(values: list[int]) -> dict[str, Any]:
    """A sampled series as the summaries report it: the first sample, the largest, the last."""
    return {"first": values[:1], "max": max(values, default=0), "last": values[-1:]}


def flat(series: list[int], slack: float) -> bool:
    """After warm-up (the first third), the last third's median stays within ``slack`` of the
    middle third's median: no growth that continues with traffic."""
    if len(series) < 6:
        return True
    third = len(series) // 3
    middle = sorted(series[third : 2 * third])[third // 2]
    last = sorted(series[2 * third :])[len(series[2 * third :]) // 2]
    return last <= middle + slack


def summary(tally: Tally) -> dict[str, Any]:
    rss_ok = flat(tally.rss_kb, max(16 * 1024, 0.1 * (max(tally.rss_kb) if tally.rss_kb else 0)))
    fds_ok = flat(tally.fds, 16)
    return {
        "requests": tally.requests,
        "checked": tally.checked,
        "abandoned": tally.abandoned,
        "wrong": tally.wrong,
        "circuit_open": tally.circuit_open,
        "slow_timeouts": tally.slow,
        "by_behaviour": tally.by_behaviour,
        "reloads_ok": tally.reloads_ok,
        "reloads_rejected": tally.reloads_rejected,
        "errors": tally.reload_errors,
        "rss_kb": series(tally.rss_kb),
        "fds": series(tally.fds),
        "rss_flat": rss_ok,
        "fds_flat": fds_ok,
        "examples": tally.examples,
        "ok": tally.wrong == 0 and not tally.reload_errors and rss_ok and fds_ok and tally.checked > 0,
    }


def run(seconds: float, *, concurrency: int = 8, disconnects: float = 0.0, seed: int = 1) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="ahp-soak-") as workdir:
        tally = asyncio.run(Soak(seconds, concurrency, disconnects, seed, Path(workdir)).run())
    return summary(tally)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.soak", description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=5.0)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--disconnects", type=float, default=0.05, help="fraction of requests the harness abandons")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    result = run(args.minutes * 60, concurrency=args.concurrency, disconnects=args.disconnects, seed=args.seed)
    print(json.dumps(result, indent=2))
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
