"""Soak, hostile tenants and a shared stdio pool: seconds to minutes of two tenants' traffic
through a real gateway process whose guard is a pool of wrapped stdio children
(``/bin/sh -c "sleep 0.3; python3 -m bench.stdio_guard"``: slow to start, the backend a
grandchild), shared by both tenants and by one circuit breaker, with a SIGHUP reload every
1-2 s of an unchanged file.

    python -m bench.soak_tenants --minutes 5 [--seed 1]

Tenant ``team-a`` is hostile: its own backend (first in its chain, by principal) hangs, so the
guard gets what is left of the deadline and times out within it; it advertises only ``message``
to a guard that denies (``not_granted``); it abandons requests mid-call. Tenant ``team-b`` sends
force pushes and harmless commands; each must be decided by the guard itself (its explicit deny
with the answering child's pid, or no objection), never a synthetic deny or ``circuit_open``.

Checks: zero wrong answers for team-b; every reload applied; the pool's children never restart
(the ones warmed at start answer everything: kept across reloads, not killed for team-a's
cut-short or abandoned calls); the breaker stays closed; RSS and descriptors flat; after SIGTERM
no backend process (grandchildren included) is left running. A JSON summary on stdout.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
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

from bench.procs import Processes, free_port, proc_memory_kb
from bench.soak import flat, intercept, scrape, series

GATEWAY = "org.example.gateway"
GUARD = "org.example.shared-guard"
OWN = "org.example.team-a-own"
TOKENS = {"team-a": "soak-token-team-a", "team-b": "soak-token-team-b"}
POOL = 3
DEADLINE_MS = 2000
GUARD_TIMEOUT_MS = 1500
OWN_TIMEOUT_MS = 1500
"""team-a's requests leave the guard 0.5 s of its 1.5 s; its slow commands take the guard 0.8 s."""
THRESHOLD = 3
ROOT = Path(__file__).resolve().parent.parent


@dataclass
class Tally:
    b_requests: int = 0
    a_requests: int = 0
    a_abandoned: int = 0
    wrong: int = 0
    examples: list[dict[str, Any]] = field(default_factory=list)
    reloads: int = 0
    errors: list[str] = field(default_factory=list)
    rss_kb: list[int] = field(default_factory=list)
    fds: list[int] = field(default_factory=list)
    children: list[int] = field(default_factory=list)
    leftovers: list[int] = field(default_factory=list)


def config(own_url: str, starts: Path, port: int, admin: int) -> dict[str, Any]:
    def subscription(policy: str, timeout: int) -> list[dict[str, Any]]:
        return [
            {
                "mode": "intercept",
                "events": ["tool.before"],
                "timeoutMs": timeout,
                "failurePolicy": policy,
                "content": {"default": "body"},
            }
        ]

    backend = f"sleep 0.3; {sys.executable} -m bench.stdio_guard; exit $?"
    return {
        "id": GATEWAY,
        "listen": {"host": "127.0.0.1", "port": port, "path": "/"},
        "admin": {"host": "127.0.0.1", "port": admin},
        "limits": {"deadlineMs": DEADLINE_MS, "headerTimeoutMs": 2000},
        "log": {"decisions": "off"},
        "reload": {"watch": False},
        "shutdown": {"drainDelaySeconds": 0, "drainTimeoutSeconds": 2},
        "inbound": {"auth": {"type": "bearer", "tokensFile": "tokens.yaml"}},
        "hooks": [
            {
                "id": OWN,
                "when": 'principal.name == "team-a"',
                "transport": {"type": "http", "url": own_url},
                "subscriptions": subscription("fail-open", OWN_TIMEOUT_MS),
            },
            {
                "id": GUARD,
                "circuitBreaker": {"failureThreshold": THRESHOLD, "openSeconds": 30},
                "transport": {
                    "type": "stdio",
                    "command": "/bin/sh",
                    "args": ["-c", backend],
                    "lifecycle": "persistent",
                    "cwd": str(ROOT),
                    "env": {"STARTS_FILE": str(starts)},
                    "pool": {"size": POOL, "minIdle": POOL, "startTimeoutMs": 10000},
                },
                "subscriptions": subscription("fail-closed", GUARD_TIMEOUT_MS),
            },
        ],
    }


def message(command: str, effects: list[str]) -> dict[str, Any]:
    return intercept(command, {"effects": effects}, random.getrandbits(48))


def _pids(path: Path) -> list[int]:
    return [int(p) for p in path.read_text().split()] if path.exists() else []


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


class Soak:
    def __init__(self, seconds: float, seed: int, workdir: Path) -> None:
        self.seconds = seconds
        self.random = random.Random(seed)
        self.workdir = workdir
        self.tally = Tally()
        self.port, self.admin = free_port(), free_port()
        self.starts = workdir / "starts"

    async def _own_backend(self) -> web.AppRunner:
        """team-a's own backend: hangs on its slow commands."""

        async def answer(request: web.Request) -> web.Response:
            body = await request.json()
            if "slow" in body["params"]["event"]["tool"]["input"]["command"]:
                await asyncio.sleep(OWN_TIMEOUT_MS / 1000 + 1)
            result = {"protocolVersion": "draft", "effects": []}
            return web.json_response({"jsonrpc": "2.0", "id": body["id"], "result": result})

        app = web.Application()
        app.router.add_post("/", answer)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        self.own_url = f"http://127.0.0.1:{runner.addresses[0][1]}/"
        return runner

    async def run(self) -> Tally:
        own = await self._own_backend()
        entries = [
            {"sha256": hashlib.sha256(t.encode()).hexdigest(), "principal": {"name": n}} for n, t in TOKENS.items()
        ]
        (self.workdir / "tokens.yaml").write_text(yaml.safe_dump(entries))
        path = self.workdir / "gateway.yaml"
        path.write_text(yaml.safe_dump(config(self.own_url, self.starts, self.port, self.admin), sort_keys=False))
        procs = Processes(self.workdir, {**os.environ, "PYTHONPATH": str(ROOT)})
        proc = procs.start("gateway", [sys.executable, "-m", "gateway", "serve", "--config", str(path)], cpus=None)
        self.pid = proc.pid
        try:
            async with aiohttp.ClientSession() as session:
                self.session = session
                await self._ready(proc)
                self.tally.children = sorted(_pids(self.starts))
                stop = time.monotonic() + self.seconds
                await asyncio.gather(
                    self._team_b(stop),
                    self._team_b(stop),
                    self._team_a(stop),
                    self._reloads(stop),
                    self._sample(stop),
                )
                samples = await scrape(session, self.admin)
                if samples.get(("ahp_gateway_upstream_circuit_open", (("upstream", GUARD),)), 0) != 0:
                    self.tally.errors.append("the shared guard's circuit is open")
                if sorted(_pids(self.starts)) != self.tally.children:
                    self.tally.errors.append(f"children restarted: {self.tally.children} -> {_pids(self.starts)}")
        finally:
            procs.stop_all()  # SIGTERM: the gateway ends every child's process group
            await own.cleanup()
        deadline = time.monotonic() + 10
        while any(_alive(p) for p in _pids(self.starts)) and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        self.tally.leftovers = [p for p in _pids(self.starts) if _alive(p)]
        for pid in self.tally.leftovers:  # never leave them running, even when reporting them
            os.kill(pid, signal.SIGKILL)
        return self.tally

    async def _ready(self, proc: Any) -> None:
        deadline = time.monotonic() + 30
        while True:
            if not proc.alive():
                raise RuntimeError(f"gateway exited:\n{proc.log_tail()}")
            try:
                async with self.session.get(f"http://127.0.0.1:{self.admin}/readyz") as response:
                    if response.status == 200 and len(_pids(self.starts)) == POOL:
                        return
            except aiohttp.ClientError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("gateway or its warm pool not ready")
            await asyncio.sleep(0.1)

    async def _post(self, tenant: str, body: dict[str, Any]) -> tuple[int, Any]:
        headers = {"Content-Type": "application/json", "Authorization": f"Bearer {TOKENS[tenant]}"}
        async with self.session.post(f"http://127.0.0.1:{self.port}/", data=json.dumps(body), headers=headers) as r:
            return r.status, await r.json(content_type=None)

    async def _team_b(self, stop: float) -> None:
        while time.monotonic() < stop:
            force = self.random.random() < 0.5
            status, body = await self._post("team-b", message("git push --force" if force else "ls", ["deny"]))
            self.tally.b_requests += 1
            effects = body.get("result", {}).get("effects") if isinstance(body, dict) else None
            right = status == 200 and effects is not None
            if right and force:
                right = len(effects) == 1 and str(effects[0].get("reason", "")).startswith("pid ")
                right = right and effects[0]["extensions"][GATEWAY]["kind"] == "explicit"
            elif right:
                right = effects == []
            if not right:
                self.tally.wrong += 1
                if len(self.tally.examples) < 5:
                    self.tally.examples.append({"force": force, "status": status, "body": body})

    async def _team_a(self, stop: float) -> None:
        while time.monotonic() < stop:
            self.tally.a_requests += 1
            roll = self.random.random()
            if roll < 0.4:  # cut short by its own hanging backend
                await self._post("team-a", message("slow git status", ["deny"]))
            elif roll < 0.7:  # an answer invalid only for this request
                await self._post("team-a", message("git push --force", ["message"]))
            else:  # its harness gives up mid-call
                try:
                    async with asyncio.timeout(self.random.uniform(0.05, 1.8)):
                        await self._post("team-a", message("slow git status", ["deny"]))
                except TimeoutError:
                    self.tally.a_abandoned += 1

    async def _reloads(self, stop: float) -> None:
        key = ("ahp_gateway_config_reloads_total", (("result", "success"),))
        while True:
            await asyncio.sleep(self.random.uniform(1.0, 2.0))
            if time.monotonic() >= stop - 0.5:
                return
            before = (await scrape(self.session, self.admin)).get(key, 0)
            os.kill(self.pid, signal.SIGHUP)
            deadline = time.monotonic() + 10
            while (await scrape(self.session, self.admin)).get(key, 0) <= before:
                if time.monotonic() > deadline:
                    self.tally.errors.append("a reload was not applied")
                    break
                await asyncio.sleep(0.02)
            else:
                self.tally.reloads += 1

    async def _sample(self, stop: float) -> None:
        while time.monotonic() < stop:
            self.tally.rss_kb.append(proc_memory_kb(self.pid).get("VmRSS", 0))
            self.tally.fds.append(len(os.listdir(f"/proc/{self.pid}/fd")))
            await asyncio.sleep(0.5)


def summary(tally: Tally) -> dict[str, Any]:
    rss_ok = flat(tally.rss_kb, max(16 * 1024, 0.1 * (max(tally.rss_kb) if tally.rss_kb else 0)))
    fds_ok = flat(tally.fds, 16)
    return {
        "team_b_requests": tally.b_requests,
        "team_a_requests": tally.a_requests,
        "team_a_abandoned": tally.a_abandoned,
        "wrong": tally.wrong,
        "reloads": tally.reloads,
        "children": tally.children,
        "leftovers": tally.leftovers,
        "errors": tally.errors,
        "rss_kb": series(tally.rss_kb),
        "fds": series(tally.fds),
        "rss_flat": rss_ok,
        "fds_flat": fds_ok,
        "examples": tally.examples,
        "ok": tally.wrong == 0
        and not tally.errors
        and not tally.leftovers
        and rss_ok
        and fds_ok
        and tally.b_requests > 0
        and tally.reloads > 0,
    }


def run(seconds: float, *, seed: int = 1) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="ahp-soak-tenants-") as workdir:
        tally = asyncio.run(Soak(seconds, seed, Path(workdir)).run())
    return summary(tally)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.soak_tenants", description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=5.0)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    result = run(args.minutes * 60, seed=args.seed)
    print(json.dumps(result, indent=2))
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
