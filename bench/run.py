"""Run the AHP Gateway benchmark suite: ``python -m bench.run`` (see bench/README.md).

    python -m bench.run                 # full run: every scenario, 5 repetitions, medians
    python -m bench.run --quick         # smoke run in seconds (CI): checks that it runs and reports
    python -m bench.run --soak          # long-run memory mode (1,000,000 requests against S2)
    python -m bench.run --only S2,S5 --reps 3 --out /tmp/bench

Everything runs on loopback in subprocesses started here on free ports; nothing is left running
when the run ends, fails or is interrupted.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # started as ``python bench/run.py``
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import payloads, realmix, report  # noqa: E402
from bench.procs import (  # noqa: E402
    BenchError,
    Proc,
    Processes,
    children_cpu_seconds,
    free_port,
    http_request,
    redis_server,
    system_busy_seconds,
    wait_idle,
    wait_until,
)
from bench.scenarios import ALL, BY_KEY, REPO, Scenario, gateway_config  # noqa: E402
from bench.wrk import find_wrk, lua_script, run_wrk  # noqa: E402

DEFAULT_OUT = REPO / "bench" / "results"
STARTUP_DEADLINE_S = 90.0
EXPECT_BODY = '"effects":[]'
OVERLOAD = 0.9
"""A fixed rate above this share of the throughput measured at saturation is not run."""


@dataclass
class Settings:
    quick: bool = False
    repetitions: int = 5
    duration_s: int = 8
    rate_duration_s: float = 8.0
    warmup_s: float = 2.0
    rates: tuple[int, ...] = (500, 2000)
    wrk_connections: int = 64
    wrk_threads: int = 1
    loadgen_connections: int = 64
    drain_timeout_s: float = 10.0
    pin: bool = True
    stub_impl: str = "aiohttp"
    only: tuple[str, ...] = ()
    soak: int = 0
    soak_every: int = 50_000
    soak_scenario: str = "S2"
    soak_concurrency: int = 32
    placement: str = ""
    out: str = ""
    seed: int | None = None
    """S8: the seed of the path renaming (None: a random one, printed and kept in the results)."""
    mix_sample: int = realmix.SAMPLE


@dataclass
class Context:
    settings: Settings
    python: str
    wrk: str
    workdir: Path
    procs: Processes
    test_cpus: frozenset[int] | None
    aux_cpus: frozenset[int] | None
    ports: set[int] = field(default_factory=set)
    tags: int = 0
    cores: int = 1
    mix: realmix.Mix | None = None
    mix_skip: str | None = None
    """Why S8 cannot run (no corpus), or None."""
    mix_error: str | None = None
    """The sample check's failure: S8 fails with it."""
    mix_decide: Any = None
    """The default gateway in process (the sample check's; the probe compares with it)."""
    mix_passes: int = 0
    mix_info: dict[str, Any] = field(default_factory=dict)

    def next_passes(self, count: int) -> int:
        """The first of ``count`` passes over the corpus no other load of this run has used."""
        first = self.mix_passes
        self.mix_passes += count
        return first

    def port(self) -> int:
        for _ in range(100):
            port = free_port()
            if port not in self.ports:
                self.ports.add(port)
                return port
        raise BenchError("no free port")

    def tag(self, prefix: str) -> str:
        """A fresh letters-only id prefix, so observe event ids never repeat within a run."""
        self.tags += 1
        n, letters = self.tags, ""
        while n:
            n, r = divmod(n, 26)
            letters = chr(97 + r) + letters
        return prefix + letters


@dataclass
class Instance:
    scenario: Scenario
    repetition: int
    under_test: Proc
    stubs: list[Proc]
    port: int
    body_file: Path | None
    lua: Path | None
    extra_pass: int | None = None
    rps_hint: float = 0.0
    """S8: the throughput the warm-up reached (how many passes a run needs)."""
    mix_runs: list[dict[str, Any]] = field(default_factory=list)

    @property
    def all(self) -> list[Proc]:
        return [self.under_test, *self.stubs]


# ---------------------------------------------------------------------------------------- setup
def cpu_placement(pin: bool, why_not: str) -> tuple[frozenset[int] | None, frozenset[int] | None, str]:
    cpus = sorted(os.sched_getaffinity(0))
    if not pin:
        return None, None, f"not pinned ({why_not}): load generators, stubs and the process under test share all cores"
    if len(cpus) < 2:
        return None, None, "not pinned: only one core available"
    test = frozenset({cpus[1]})
    aux = frozenset(c for c in cpus if c != cpus[1])
    text = (
        f"process under test (stub in S0, forwarder in S1, gateway otherwise) pinned to CPU {cpus[1]}; "
        f"load generators (wrk, latency client), upstream stubs and the runner pinned to CPU {','.join(map(str, sorted(aux)))}"
    )
    return test, aux, text


def code_fingerprint() -> str:
    """A hash of the gateway's sources and bundled policies, to notice changes during a run."""
    digest = hashlib.sha256()
    for base in (REPO / "gateway", REPO / "policies"):
        for path in sorted(p for p in base.rglob("*") if p.suffix in (".py", ".yaml", ".yml", ".json") and p.is_file()):
            digest.update(str(path.relative_to(REPO)).encode())
            try:
                digest.update(path.read_bytes())
            except OSError:
                pass
    return digest.hexdigest()[:16]


def facts_build_of(env: dict[str, str], cwd: Path) -> str:
    """The build (``compiled`` or ``interpreted``) the gateway processes of this run import: asked
    with their environment and from their directory, not the runner's."""
    probe = "from gateway.build import facts_build; print(facts_build())"
    proc = subprocess.run(
        [sys.executable, "-c", probe], env=env, cwd=cwd, capture_output=True, text=True, timeout=60, check=False
    )
    return proc.stdout.strip() or "unknown"


def machine_info() -> dict[str, Any]:
    info: dict[str, Any] = {
        "cpu_model": "unknown",
        "cores": os.cpu_count(),
        "cores_available": len(os.sched_getaffinity(0)),
        "python": platform.python_version(),
        "python_implementation": platform.python_implementation(),
        "kernel": platform.release(),
        "system": platform.system(),
        "machine": platform.machine(),
    }
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as handle:
            for line in handle:
                if line.lower().startswith("model name"):
                    info["cpu_model"] = line.split(":", 1)[1].strip()
                    break
        with open("/proc/meminfo", encoding="ascii") as handle:
            info["memory_mb"] = int(handle.readline().split()[1]) // 1024
    except OSError:
        pass
    info["loadavg_start"] = os.getloadavg()[0]
    info["code_fingerprint_start"] = code_fingerprint()
    for module in ("aiohttp", "uvloop", "orjson"):
        try:
            info[module] = __import__(module).__version__
        except (ImportError, AttributeError):
            info[module] = None
    try:
        import gateway

        info["gateway_version"] = getattr(gateway, "__version__", "?")
    except ImportError:
        info["gateway_version"] = None
    try:
        info["git_commit"] = (
            subprocess.run(
                ["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10
            ).stdout.strip()
            or None
        )
        status = subprocess.run(
            ["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout
        info["git_dirty"] = bool(status.strip())
    except (OSError, subprocess.SubprocessError):
        info["git_commit"] = None
    wrk = find_wrk()
    if wrk:
        try:
            out = subprocess.run([wrk, "--version"], capture_output=True, text=True, timeout=10)
            info["wrk"] = (out.stdout or out.stderr).splitlines()[0].split(" Copyright")[0].strip()
        except (OSError, subprocess.SubprocessError, IndexError):
            info["wrk"] = "wrk"
    return info


# ------------------------------------------------------------------------------------ instances
def launch(sc: Scenario, rep: int, ctx: Context) -> Instance:
    py = ctx.python
    impl = ctx.settings.stub_impl
    stubs: list[Proc] = []
    for i in range(sc.stubs):
        port = ctx.port()
        argv = [py, "-m", "bench.stub", "--port", str(port), "--delay-ms", str(sc.delay_ms), "--impl", impl]
        proc = ctx.procs.start(f"{sc.key}-r{rep}-stub{i + 1}", argv, cpus=ctx.aux_cpus)
        proc.port = port
        stubs.append(proc)
    port = ctx.port()
    extra_procs: list[Proc] = []
    name = f"{sc.key}-r{rep}-{sc.under_test}"
    if sc.under_test == "stub":
        argv = [py, "-m", "bench.stub", "--port", str(port), "--impl", "aiohttp" if sc.no_read else impl]
        ut = ctx.procs.start(name, argv + (["--no-read"] if sc.no_read else []), cpus=ctx.test_cpus)
    elif sc.under_test == "forwarder":
        upstream = f"http://127.0.0.1:{stubs[0].port}/"
        argv = [py, "-m", "bench.forwarder", "--port", str(port), "--upstream", upstream]
        ut = ctx.procs.start(name, [*argv, "--server", sc.server, "--client", sc.client], cpus=ctx.test_cpus)
    elif sc.default_config:
        if ctx.mix is None:
            raise Skipped(ctx.mix_skip or "no mix")
        if ctx.mix_error:
            raise BenchError(ctx.mix_error)
        admin = ctx.port()
        argv = [py, "-m", "gateway", "--log-level", "WARNING", "serve", "--port", str(port)]
        ut = ctx.procs.start(name, [*argv, "--admin-port", str(admin)], cpus=ctx.test_cpus, cwd=ctx.workdir)
        ut.extra["admin_port"] = admin
    else:
        admin = ctx.port()
        redis_url = None
        if sc.shared_limit:
            redis, redis_url = redis_server(ctx.procs, ctx.workdir, ctx.aux_cpus)
            extra_procs.append(redis)
        urls = [f"http://127.0.0.1:{s.port}/" for s in stubs]
        config = gateway_config(sc, port, admin, urls, ctx.workdir, redis_url)
        path = ctx.workdir / f"gateway-{sc.key}-r{rep}.yaml"
        path.write_text(json.dumps(config, indent=2), encoding="utf-8")
        argv = [py, "-m", "gateway", "--log-level", "WARNING", "serve", "--config", str(path)]
        ut = ctx.procs.start(name, argv, cpus=ctx.test_cpus, cwd=ctx.workdir)
        ut.extra["admin_port"] = admin
        ut.extra["config"] = str(path)
    ut.port = port
    ut.extra["helpers"] = extra_procs
    body_file = None
    lua = None
    if not sc.unique and sc.body != "realmix":
        body_file = ctx.workdir / f"body-{sc.body}.json"
        if not body_file.exists():
            body_file.write_bytes(payloads.intercept_body(parallel=sc.body == "parallel"))
        lua = ctx.workdir / f"post-{sc.body}.lua"
        if not lua.exists():
            lua.write_text(
                lua_script(body_file.read_bytes(), expect_status=200, expect_body=EXPECT_BODY, observe_tag=None)
            )
    return Instance(sc, rep, ut, stubs, port, body_file, lua)


class Skipped(BenchError):
    """The scenario cannot run here (S8 without its corpus): reported, not a failure."""


PROBE_CALLS = 20


def _probe_mix(inst: Instance, ctx: Context) -> bool:
    """S8: the first sampled calls (a pass of their own) must get valid answers with the effect
    types the default gateway gives them in process."""
    mix = ctx.mix
    assert mix is not None
    pass_no = inst.extra_pass if inst.extra_pass is not None else ctx.next_passes(1)
    inst.extra_pass = pass_no
    for i in realmix.sample_indices(mix.cases, mix.seed, ctx.settings.mix_sample)[:PROBE_CALLS]:
        body = mix.body(pass_no, i)
        status, answer = http_request(inst.port, "POST", "/", body)
        if status != 200:
            raise BenchError(f"S8: probe answered HTTP {status}: {answer[:300]!r}")
        try:
            got = realmix.effect_types(answer, mix.event_id(pass_no, i))
        except ValueError as exc:
            raise BenchError(f"S8: probe got an invalid answer: {exc}") from None
        want = realmix.effect_types(ctx.mix_decide(body), mix.event_id(pass_no, i))
        if got != want:
            raise BenchError(f"S8: case {i} got {list(got)} from the gateway, {list(want)} in process")
    return True


def _probe_ok(inst: Instance, ctx: Context) -> bool:
    sc = inst.scenario
    if sc.body == "realmix":
        return _probe_mix(inst, ctx)
    if sc.unique:
        prefix, suffix = payloads.templates(sc.body)
        status, _ = http_request(inst.port, "POST", "/", prefix + payloads.observe_id("probe", 1).encode() + suffix)
        if status != sc.expect_status:
            raise BenchError(f"{sc.key}: {sc.body} probe answered HTTP {status}, expected {sc.expect_status}")
        return True
    assert inst.body_file is not None
    status, answer = http_request(inst.port, "POST", "/", inst.body_file.read_bytes())
    if status != 200:
        raise BenchError(f"{sc.key}: probe answered HTTP {status}: {answer[:300]!r}")
    message = json.loads(answer)
    result = message.get("result") if isinstance(message, dict) else None
    if message.get("id") != payloads.EVENT_ID or not isinstance(result, dict) or result.get("effects") != []:
        raise BenchError(f"{sc.key}: probe did not get a no-effect result: {answer[:500]!r}")
    return True


def ready(inst: Instance, ctx: Context) -> None:
    for stub in inst.stubs:
        port = stub.port
        assert port is not None

        def listening(p: int = port) -> bool:
            return http_request(p, "GET", "/stats")[0] == 200

        wait_until(
            listening,
            deadline_s=STARTUP_DEADLINE_S,
            procs=[stub],
            what=f"{stub.name} to listen",
        )
    ut = inst.under_test
    if "admin_port" in ut.extra:
        admin = int(ut.extra["admin_port"])  # type: ignore[call-overload]
        wait_until(
            lambda: http_request(admin, "GET", "/readyz")[0] == 200,
            deadline_s=STARTUP_DEADLINE_S,
            procs=inst.all,
            what=f"{ut.name} /readyz",
        )

    def probe() -> bool:
        try:
            return _probe_ok(inst, ctx)
        except ConnectionError:
            return False

    wait_until(probe, deadline_s=STARTUP_DEADLINE_S, procs=inst.all, what=f"{ut.name} to answer the probe")


def teardown(inst: Instance, ctx: Context, keep_logs: bool) -> None:
    helpers = list(inst.under_test.extra.get("helpers", ()))  # type: ignore[call-overload]  # S2L: its redis-server
    for proc in [*reversed(inst.all), *helpers]:
        ctx.procs.stop(proc)
        if not keep_logs:
            try:
                proc.log_path.unlink()
            except OSError:
                pass


# --------------------------------------------------------------------------------- measurements
EXPECT_MIX = '"effects":'
"""S8: an answer is a result (``effects`` may hold a deny or an ask: real calls get them)."""


def _mix_file(ctx: Context, inst: Instance, requests: float) -> Path:
    """Bodies for about ``requests`` requests of S8 in passes no other load of the run has sent."""
    mix = ctx.mix
    assert mix is not None
    passes = mix.passes(requests)
    first = ctx.next_passes(passes)
    path = ctx.workdir / f"mix-{inst.scenario.key}-r{inst.repetition}-p{first}.jsonl"
    count = mix.write(path, first, passes)
    inst.mix_runs.append({"first_pass": first, "passes": passes, "bodies": count})
    return path


def _mix_done(inst: Instance, path: Path | None, result: dict[str, Any]) -> None:
    if path is None:
        return
    inst.mix_runs[-1].update({k: result.get(k) for k in ("effectful", "wraps", "ok")})
    try:
        path.unlink()
    except OSError:
        pass


def _loadgen(ctx: Context, inst: Instance, extra: list[str], requests: float = 0.0) -> dict[str, Any]:
    """``requests``: about how many requests the run sends (S8 writes that many bodies)."""
    argv = [
        ctx.python,
        "-m",
        "bench.loadgen",
        "--port",
        str(inst.port),
        "--expect-status",
        str(inst.scenario.expect_status),
    ]
    mixed = None
    if inst.scenario.body == "realmix":
        mixed = _mix_file(ctx, inst, requests)
        argv += ["--bodies-file", str(mixed), "--expect-body", EXPECT_MIX]
    elif inst.body_file is not None:
        argv += ["--body-file", str(inst.body_file)]
    else:
        argv += ["--observe-tag", ctx.tag("lg"), "--template", inst.scenario.body]
    argv += extra

    def pin() -> None:
        if ctx.aux_cpus:
            os.sched_setaffinity(0, set(ctx.aux_cpus))

    done = subprocess.run(argv, capture_output=True, text=True, timeout=600, env=ctx.procs.env, preexec_fn=pin)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        raise BenchError(
            f"load generator failed (exit {done.returncode}):\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
        )
    summary: dict[str, Any] = json.loads(lines[-1])
    _mix_done(inst, mixed, summary)
    return summary


def _wrk(ctx: Context, inst: Instance, seconds: int) -> dict[str, Any]:
    script = inst.lua
    if inst.scenario.body == "realmix":
        # every answer a result; enough passes for the run at 1.5 × the warm-up's pace
        mixed = _mix_file(ctx, inst, seconds * max(2000.0, 1.5 * inst.rps_hint))
        script = mixed.with_suffix(".lua")
        script.write_text(
            lua_script(None, expect_status=200, expect_body=EXPECT_MIX, observe_tag=None, bodies_file=mixed)
        )
        result = run_wrk(
            ctx.wrk,
            inst.port,
            script,
            duration_s=seconds,
            connections=ctx.settings.wrk_connections,
            threads=ctx.settings.wrk_threads,
            cpus=ctx.aux_cpus,
        )
        _mix_done(inst, mixed, result)
        return result
    if script is None:  # unique bodies: a fresh id prefix per wrk invocation
        sc = inst.scenario
        tag = ctx.tag("w")
        script = ctx.workdir / f"{sc.body}-{tag}.lua"
        expect_body = EXPECT_BODY if sc.body == "distinct" else None
        script.write_text(
            lua_script(None, expect_status=sc.expect_status, expect_body=expect_body, observe_tag=tag, template=sc.body)
        )
    return run_wrk(
        ctx.wrk,
        inst.port,
        script,
        duration_s=seconds,
        connections=ctx.settings.wrk_connections,
        threads=ctx.settings.wrk_threads,
        cpus=ctx.aux_cpus,
    )


def _observed(inst: Instance) -> int:
    total = 0
    for stub in inst.stubs:
        assert stub.port is not None
        status, body = http_request(stub.port, "GET", "/stats")
        if status == 200:
            total += int(json.loads(body)["observe"])
    return total


def _wait_deliveries(inst: Instance, expected: int, before: int, deadline_s: float) -> int:
    """Observed deliveries since ``before``, once they reach ``expected`` or stop increasing."""
    end = time.monotonic() + deadline_s
    last = -1
    while True:
        now = _observed(inst) - before
        if now >= expected or (now == last) or time.monotonic() > end:
            return now
        last = now
        time.sleep(0.25)


def measured(ctx: Context, inst: Instance, action: Any, ok_key: str = "ok") -> dict[str, Any]:
    """Run ``action`` and attach CPU use of the process under test (per 1,000 successful
    requests, background work finished afterwards included), its utilisation during the run,
    and the share of machine CPU used by processes outside the benchmark."""
    ut = inst.under_test
    observe = inst.scenario.body == "observe"
    seen0 = _observed(inst) if observe else 0
    cpu0, stubs0 = ut.cpu_seconds(), sum(s.cpu_seconds() for s in inst.stubs)
    busy0, own0, t0 = system_busy_seconds(), children_cpu_seconds(), time.monotonic()
    result = action()
    cpu1, t1 = ut.cpu_seconds(), time.monotonic()
    delivered = None
    if observe:
        delivered = _wait_deliveries(inst, result[ok_key] * len(inst.stubs), seen0, 1.0 if ctx.settings.quick else 20.0)
    if not ctx.settings.quick:
        wait_idle(inst.all)
    cpu2, stubs2 = ut.cpu_seconds(), sum(s.cpu_seconds() for s in inst.stubs)
    busy2, own2, t2 = system_busy_seconds(), children_cpu_seconds(), time.monotonic()
    ok = result[ok_key]
    ours = (cpu2 - cpu0) + (stubs2 - stubs0) + (own2 - own0)
    cores = ctx.cores
    out = {
        "result": result,
        "cpu_s": round(cpu2 - cpu0, 3),
        "cpu_s_per_1k": round((cpu2 - cpu0) / ok * 1000, 4) if ok else None,
        "utilization": round((cpu1 - cpu0) / (t1 - t0), 3) if t1 > t0 else None,
        "other_cpu_share": round(max(0.0, (busy2 - busy0) - ours) / ((t2 - t0) * cores), 3) if t2 > t0 else None,
    }
    if observe and ok:
        out["delivered"] = delivered
        # wrk does not count requests still in flight when it stops, so deliveries can slightly
        # exceed the successful requests it reports: the ratio is capped at 1.
        out["delivery_ratio"] = round(min(1.0, (delivered or 0) / (ok * len(inst.stubs))), 4)
    return out


def warm_up(ctx: Context, inst: Instance) -> None:
    s = ctx.settings
    if s.quick:
        _loadgen(ctx, inst, ["--requests", "200", "--concurrency", "8"], 200)
    else:
        inst.rps_hint = _wrk(ctx, inst, max(1, round(s.warmup_s)))["rps"]
        wait_idle(inst.all)


def measure(ctx: Context, inst: Instance) -> dict[str, Any]:
    s = ctx.settings
    sc = inst.scenario
    out: dict[str, Any] = {"scenario": sc.key, "repetition": inst.repetition, "rates": {}}
    warm_up(ctx, inst)
    capacity = None
    if sc.throughput:
        out["saturation"] = measured(ctx, inst, lambda: _wrk(ctx, inst, s.duration_s))
        capacity = out["saturation"]["result"]["rps"]
    out["skipped_rates"] = {}
    for rate in sc.rates or s.rates:
        if capacity is not None and rate > OVERLOAD * capacity:
            # At or above saturation an open-loop queue only grows: the latency would measure
            # the length of the run, not the server.
            out["skipped_rates"][str(rate)] = f"{rate} req/s > {OVERLOAD:.0%} of the {capacity:.0f} req/s capacity"
            continue
        args = [
            "--rate",
            str(rate),
            "--duration",
            str(s.rate_duration_s),
            "--connections",
            str(s.loadgen_connections),
            "--drain-timeout",
            str(s.drain_timeout_s),
        ]
        m = measured(ctx, inst, lambda a=args, n=rate * s.rate_duration_s: _loadgen(ctx, inst, a, n))
        m["achieved_rps"] = m["result"]["achieved_rps"]
        m["lag_p50_ms"] = m["result"]["lag_ms"]["p50"]
        out["rates"][str(rate)] = m
    memory = inst.under_test.memory_kb()
    out["memory"] = {
        "hwm_mb": round(memory.get("VmHWM", 0) / 1024, 1),
        "rss_mb": round(memory.get("VmRSS", 0) / 1024, 1),
    }
    shares = [
        m["other_cpu_share"]
        for m in [*out["rates"].values(), out.get("saturation")]
        if m and m.get("other_cpu_share") is not None
    ]
    out["other_cpu_share"] = max(shares) if shares else None
    if inst.mix_runs:
        out["mix"] = inst.mix_runs
    if sc.default_config:
        out["decisions"] = decision_tally(inst.under_test.log_path)
    ratios = [
        m["delivery_ratio"] for m in [*out["rates"].values(), out.get("saturation")] if m and "delivery_ratio" in m
    ]
    if ratios:
        out["delivery_ratio"] = min(ratios)
        out["delivery"] = {k: m.get("delivery_ratio") for k, m in out["rates"].items()}
        if out.get("saturation"):
            out["delivery"]["saturation"] = out["saturation"].get("delivery_ratio")
    return out


def decision_tally(log_path: Path) -> dict[str, Any]:
    """Outcomes in a gateway's decision log (its stdout), and how many decisions had a failed
    backend call (a timeout under load, say): every request of the run, warm-up included."""
    outcomes: dict[str, int] = {}
    failures: dict[str, int] = {}
    try:
        text = log_path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return {}
    for line in text.splitlines():
        if not line.startswith("{") or '"outcome"' not in line:
            continue
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        outcome = str(entry.get("outcome"))
        outcomes[outcome] = outcomes.get(outcome, 0) + 1
        for call in entry.get("upstreams") or ():
            if isinstance(call, dict) and call.get("failure"):
                failures[str(call["failure"])] = failures.get(str(call["failure"]), 0) + 1
    return {"outcomes": outcomes, "failures": failures}


# ------------------------------------------------------------------------------------------ runs
def selected(settings: Settings) -> list[Scenario]:
    if not settings.only:
        return list(ALL)
    unknown = [k for k in settings.only if k not in BY_KEY]
    if unknown:
        raise SystemExit(f"unknown scenario(s): {', '.join(unknown)} (known: {', '.join(BY_KEY)})")
    return [s for s in ALL if s.key in settings.only]


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def prepare_mix(ctx: Context) -> None:
    """S8: load the corpus, pick the run's seed, and check on a sample, in process, that the
    renaming keeps every effect type (a failed check fails S8, loudly)."""
    s = ctx.settings
    if "S8" not in {sc.key for sc in selected(s)}:
        return
    path = realmix.corpus_path()
    try:
        cases = realmix.load_cases(path)
    except realmix.CorpusMissing as exc:
        ctx.mix_skip = str(exc)
        log(f"S8 skipped: {exc}")
        return
    seed = s.seed if s.seed is not None else realmix.new_seed()
    s.seed = seed
    ctx.mix = realmix.Mix(cases, seed)
    log(f"S8: {len(cases):,} real tool calls from {path}; renaming seed {seed} (--seed {seed} repeats it)")
    ctx.mix_decide = realmix.in_process()
    try:
        sample = realmix.check_sample(ctx.mix, ctx.mix_decide, size=s.mix_sample, pass_no=ctx.next_passes(1))
    except realmix.MixMismatch as exc:
        ctx.mix_error = str(exc)
        log(f"error: {exc}")
        return
    ctx.mix_info = {
        "corpus": str(path),
        "cases": len(cases),
        "seed": seed,
        "sample": sample.checked,
        "sample_effects": dict(sample.effects),
        "sample_inputs_renamed": sample.changed,
    }
    log(
        f"S8: sample check passed: {sample.checked} calls, the same effect types renamed and as recorded "
        f"({', '.join(f'{k} {v}' for k, v in sorted(sample.effects.items()))}; "
        f"{sample.changed} of them with a path in the tool input)"
    )


def run_suite(ctx: Context) -> list[dict[str, Any]]:
    s = ctx.settings
    scenarios = selected(s)
    results: list[dict[str, Any]] = []
    for rep in range(s.repetitions):
        shift = rep % len(scenarios)
        order = scenarios[shift:] + scenarios[:shift]
        log(f"repetition {rep + 1}/{s.repetitions}: {' '.join(sc.key for sc in order)}")
        if s.quick:
            results += _run_prestarted(ctx, order, rep)
            continue
        for sc in order:
            results.append(_run_one(ctx, sc, rep))
    return results


def _summary_line(r: dict[str, Any]) -> str:
    if r.get("skipped"):
        return f"  {r['scenario']}: skipped: {r['skipped']}"
    if r.get("error"):
        return f"  {r['scenario']}: FAILED: {r['error'].splitlines()[0]}"
    parts = [f"  {r['scenario']}:"]
    if r.get("saturation"):
        parts.append(f"{r['saturation']['result']['rps']:,.0f} req/s")
    for rate, m in r["rates"].items():
        lat = m["result"]["latency_ms"]
        parts.append(f"@{rate} p50 {lat['p50']} ms p99 {lat['p99']} ms")
    parts.append(f"HWM {r['memory']['hwm_mb']} MB")
    return " ".join(parts)


def _run_one(ctx: Context, sc: Scenario, rep: int) -> dict[str, Any]:
    try:
        inst = launch(sc, rep, ctx)
    except Skipped as exc:
        result = _skipped(sc, rep, str(exc))
    except BenchError as exc:
        result = _failed(sc, rep, str(exc))
    else:
        result = _measure_started(ctx, sc, inst, rep)
    log(_summary_line(result))
    return result


def _failed(sc: Scenario, rep: int, error: str) -> dict[str, Any]:
    return {"scenario": sc.key, "repetition": rep, "error": error}


def _skipped(sc: Scenario, rep: int, why: str) -> dict[str, Any]:
    return {"scenario": sc.key, "repetition": rep, "skipped": why}


def _measure_started(ctx: Context, sc: Scenario, inst: Instance, rep: int) -> dict[str, Any]:
    """Wait for a launched scenario, measure it, and stop it (keeping its logs if it failed)."""
    ok = False
    try:
        ready(inst, ctx)
        result = measure(ctx, inst)
        ok = True
    except BenchError as exc:
        result = _failed(sc, rep, str(exc))
    finally:
        teardown(inst, ctx, keep_logs=not ok)
    return result


def _run_prestarted(ctx: Context, order: list[Scenario], rep: int) -> list[dict[str, Any]]:
    """Quick mode: start every scenario's processes at once (startup dominates a smoke run),
    then measure them one after the other."""
    instances: list[tuple[Scenario, Instance | None, str | None]] = []
    skipped: dict[str, str] = {}
    for sc in order:
        try:
            instances.append((sc, launch(sc, rep, ctx), None))
        except Skipped as exc:
            skipped[sc.key] = str(exc)
            instances.append((sc, None, str(exc)))
        except BenchError as exc:
            instances.append((sc, None, str(exc)))
    results = []
    for sc, inst, error in instances:
        if sc.key in skipped:
            result = _skipped(sc, rep, skipped[sc.key])
        elif inst is None:
            result = _failed(sc, rep, error or "")
        else:
            result = _measure_started(ctx, sc, inst, rep)
        log(_summary_line(result))
        results.append(result)
    return results


SOAK_MIX_BODIES = 50_000
"""S8's soak sends at most this many distinct renamed calls (7 passes over the corpus), then the
same ones again: far more than the parse cache (256) and the rule-result memo (1,024) hold, so a
repeated call is as new to the gateway as the first time, and the bodies file stays ~60 MB."""


def run_soak(ctx: Context) -> dict[str, Any]:
    s = ctx.settings
    sc = BY_KEY[s.soak_scenario]
    inst = launch(sc, 0, ctx)
    try:
        ready(inst, ctx)
        warm_up(ctx, inst)
        ut = inst.under_test
        argv = [ctx.python, "-m", "bench.loadgen", "--port", str(inst.port), "--expect-status", str(sc.expect_status)]
        mixed = None
        if sc.body == "realmix":  # S8: up to SOAK_MIX_BODIES renamed calls, sent over again in order
            mixed = _mix_file(ctx, inst, min(s.soak, SOAK_MIX_BODIES))
            argv += ["--bodies-file", str(mixed), "--expect-body", EXPECT_MIX]
        elif inst.body_file:
            argv += ["--body-file", str(inst.body_file)]
        else:
            argv += ["--observe-tag", ctx.tag("soak"), "--template", sc.body]
        argv += [
            "--requests",
            str(s.soak),
            "--concurrency",
            str(s.soak_concurrency),
            "--progress-every",
            str(s.soak_every),
        ]

        def pin() -> None:
            if ctx.aux_cpus:
                os.sched_setaffinity(0, set(ctx.aux_cpus))

        samples: list[dict[str, Any]] = []
        mem = ut.memory_kb()
        cpu_last, count_last, t_last = ut.cpu_seconds(), 0, 0.0
        samples.append({"requests": 0, "elapsed_s": 0.0, "rss_mb": mem["VmRSS"] / 1024, "hwm_mb": mem["VmHWM"] / 1024})
        summary: dict[str, Any] = {}
        with subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, env=ctx.procs.env, preexec_fn=pin) as proc:
            try:
                assert proc.stdout is not None
                for line in proc.stdout:
                    data = json.loads(line)
                    if "progress" not in data:
                        summary = data
                        continue
                    mem, cpu = ut.memory_kb(), ut.cpu_seconds()
                    n, t = data["progress"], data["elapsed"]
                    sample = {
                        "requests": n,
                        "elapsed_s": t,
                        "rss_mb": round(mem["VmRSS"] / 1024, 1),
                        "hwm_mb": round(mem["VmHWM"] / 1024, 1),
                        "segment_rps": round((n - count_last) / (t - t_last), 1) if t > t_last else None,
                        "cpu_s_per_1k": round((cpu - cpu_last) / (n - count_last) * 1000, 4),
                    }
                    samples.append(sample)
                    log(
                        f"  soak {n:,} requests: RSS {sample['rss_mb']} MB, peak {sample['hwm_mb']} MB, {sample['segment_rps']} req/s"
                    )
                    cpu_last, count_last, t_last = cpu, n, t
            except BaseException:
                proc.kill()
                raise
        if proc.returncode != 0:
            raise BenchError(f"soak load generator failed with exit {proc.returncode}")
        _mix_done(inst, mixed, summary)
        warm = samples[1] if len(samples) > 2 else samples[-1]
        final = samples[-1]
        growth = final["rss_mb"] - warm["rss_mb"]
        allowed = max(5.0, 0.05 * warm["rss_mb"])
        return {
            "scenario": sc.key,
            "requests": s.soak,
            "concurrency": s.soak_concurrency,
            "every": s.soak_every,
            "samples": samples,
            "summary": summary,
            "errors": sum(summary.get("errors", {}).values()),
            "verdict": {
                "baseline_mb": warm["rss_mb"],
                "final_mb": final["rss_mb"],
                "growth_mb": round(growth, 1),
                "growth_pct": round(growth / warm["rss_mb"] * 100, 2) if warm["rss_mb"] else None,
                "allowed_mb": allowed,
                "stable": growth <= allowed,
                "peak_mb": max(x["hwm_mb"] for x in samples),
            },
        }
    finally:
        teardown(inst, ctx, keep_logs=False)


# -------------------------------------------------------------------------------------------- CLI
def parse(argv: list[str] | None) -> Settings:
    parser = argparse.ArgumentParser(
        prog="python -m bench.run", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="smoke run: 1 repetition, ~1 s per measurement (CI)")
    parser.add_argument("--out", help=f"output directory (default: {DEFAULT_OUT.relative_to(REPO)})")
    parser.add_argument("--reps", type=int, help="repetitions (default 5; quick: 1)")
    parser.add_argument("--duration", type=int, help="seconds per throughput and per fixed-rate run (default 8)")
    parser.add_argument("--warmup", type=float, help="warm-up seconds per scenario start (default 2)")
    parser.add_argument("--rates", help="fixed request rates for latency, comma-separated (default 500,2000)")
    parser.add_argument("--connections", type=int, default=64, help="wrk connections (default 64)")
    parser.add_argument("--only", help="comma-separated scenario keys, e.g. S1,S2,S2d")
    parser.add_argument("--no-pin", action="store_true", help="do not pin processes to CPUs")
    parser.add_argument(
        "--stub-impl", choices=("aiohttp", "raw"), default="aiohttp", help="upstream stub server (default aiohttp)"
    )
    parser.add_argument(
        "--soak",
        type=int,
        nargs="?",
        const=1_000_000,
        default=0,
        metavar="N",
        help="long-run memory mode: N requests (default 1,000,000)",
    )
    parser.add_argument("--soak-every", type=int, default=50_000, help="sample RSS every N requests (default 50,000)")
    parser.add_argument("--soak-scenario", default="S2", help="scenario for --soak (default S2)")
    parser.add_argument("--seed", type=int, help="S8: the seed of the path renaming (default: a random one, printed)")
    parser.add_argument(
        "--mix-sample",
        type=int,
        default=realmix.SAMPLE,
        help=f"S8: calls whose effect types are checked, renamed against as recorded (default {realmix.SAMPLE})",
    )
    args = parser.parse_args(argv)
    s = Settings(quick=args.quick)
    if args.quick:
        s.repetitions, s.duration_s, s.rate_duration_s, s.warmup_s, s.drain_timeout_s = 1, 1, 0.25, 0.0, 1.0
        s.pin = False  # every process starts at once in quick mode; pinning would serialise startup
    if args.reps is not None:
        s.repetitions = max(1, args.reps)
    if args.duration is not None:
        s.duration_s = max(1, args.duration)
        s.rate_duration_s = float(s.duration_s)
    if args.warmup is not None:
        s.warmup_s = args.warmup
    if args.rates:
        s.rates = tuple(int(r) for r in args.rates.split(","))
    s.wrk_connections = args.connections
    s.only = tuple(k.strip() for k in args.only.split(",")) if args.only else ()
    s.pin = s.pin and not args.no_pin
    s.stub_impl = args.stub_impl
    s.soak, s.soak_every, s.soak_scenario = args.soak, args.soak_every, args.soak_scenario
    if s.soak and s.soak_scenario not in BY_KEY:
        parser.error(f"unknown --soak-scenario {s.soak_scenario}")
    s.out = str(Path(args.out).resolve()) if args.out else str(DEFAULT_OUT)
    s.seed, s.mix_sample = args.seed, max(1, args.mix_sample)
    return s


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    settings = parse(argv)
    wrk = find_wrk()
    if wrk is None:
        print("error: wrk not found on PATH (Debian/Ubuntu: apt-get install -y wrk)", file=sys.stderr)
        return 2
    try:
        import gateway  # noqa: F401
    except ImportError:
        print(
            f"error: the gateway package is not importable by {sys.executable}; run from the project's virtualenv",
            file=sys.stderr,
        )
        return 2
    out = Path(settings.out)
    out.mkdir(parents=True, exist_ok=True)
    cores = len(os.sched_getaffinity(0))
    test_cpus, aux_cpus, placement = cpu_placement(settings.pin, "quick mode" if settings.quick else "--no-pin")
    settings.placement = placement
    if aux_cpus:
        os.sched_setaffinity(0, set(aux_cpus))
    env = dict(os.environ)
    # the caller's path first (bench.compiled puts the compiled build there), then the checkout for bench
    env["PYTHONPATH"] = os.pathsep.join([*filter(None, [env.get("PYTHONPATH")]), str(REPO)])
    workdir = Path(tempfile.mkdtemp(prefix="ahp-bench-"))
    procs = Processes(workdir, env)
    ctx = Context(settings, sys.executable, wrk, workdir, procs, test_cpus, aux_cpus, cores=cores)
    previous = {sig: signal.signal(sig, _interrupt) for sig in (signal.SIGTERM, signal.SIGHUP)}
    started = datetime.now(UTC).replace(microsecond=0).isoformat()
    machine = machine_info()
    machine["facts"] = facts_build_of(env, workdir)
    failed = False
    t0 = time.monotonic()
    try:
        if settings.soak:
            log(
                f"soak: {settings.soak:,} requests against {settings.soak_scenario}, RSS sampled every {settings.soak_every:,}"
            )
            if settings.soak_scenario == "S8":  # the corpus, the seed and the sample check, as in a run
                settings.only = ("S8",)
                prepare_mix(ctx)
                if ctx.mix is None:
                    raise BenchError(f"S8 cannot soak: {ctx.mix_skip}")
            soak = run_soak(ctx)
            soak.update({"started": started, "machine": machine, "settings": asdict(settings)})
            (out / "soak.json").write_text(json.dumps(soak, indent=2) + "\n", encoding="utf-8")
            text = report.soak_markdown(soak)
            (out / "soak.md").write_text(text, encoding="utf-8")
            print(text)
            log(f"wrote {out / 'soak.md'} and {out / 'soak.json'}")
            return 0 if soak["verdict"]["stable"] and not soak["errors"] else 1
        prepare_mix(ctx)
        instances = run_suite(ctx)
        machine["loadavg_end"] = os.getloadavg()[0]
        machine["code_fingerprint_end"] = code_fingerprint()
        failed = any(i.get("error") for i in instances)
        agg = report.aggregate(instances, settings.rates)
        result = {
            "started": started,
            "elapsed_s": round(time.monotonic() - t0, 1),
            "settings": asdict(settings),
            "machine": machine,
            "scenarios": agg,
            "overhead": report.overhead(agg, settings.rates),
            "targets": report.targets(agg, instances),
            "runs": instances,
            "scenario_titles": {s.key: s.title for s in ALL},
        }
        if ctx.mix_info or ctx.mix_skip or ctx.mix_error:
            result["realmix"] = {**ctx.mix_info, "skipped": ctx.mix_skip, "error": ctx.mix_error}
        (out / "results.json").write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
        text = report.markdown(result)
        (out / "results.md").write_text(text, encoding="utf-8")
        print(text)
        log(f"wrote {out / 'results.md'} and {out / 'results.json'} in {time.monotonic() - t0:.0f} s")
    except KeyboardInterrupt:
        log("interrupted; stopping every started process")
        return 130
    finally:
        procs.stop_all()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if failed:
            log(f"some scenarios failed; their process logs are kept in {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
