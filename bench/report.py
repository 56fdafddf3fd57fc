"""Medians over repetitions, the issue's targets, and the Markdown report."""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence
from typing import Any

from bench.scenarios import ALL, BY_KEY, DELAY_MS, DELAY_RATE, DELAY_SCENARIOS, REFERENCE_SCENARIOS, SCENARIOS

RSS_LIMIT_MB = 120.0


def median(values: Iterable[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def _rate_metric(instance: dict[str, Any], rate: int, metric: str) -> float | None:
    found = instance["rates"].get(str(rate))
    if not found:
        return None
    value = (
        found["result"]["latency_ms"].get(metric)
        if metric in ("p50", "p90", "p99", "p999", "max")
        else found.get(metric)
    )
    return float(value) if isinstance(value, (int, float)) else None


def aggregate(instances: Sequence[dict[str, Any]], rates: Sequence[int]) -> dict[str, dict[str, Any]]:
    """Per scenario: medians across repetitions (peak RSS: the maximum)."""
    out: dict[str, dict[str, Any]] = {}
    for scenario in ALL:
        runs = [i for i in instances if i["scenario"] == scenario.key and not i.get("error") and not i.get("skipped")]
        if not runs:
            why = [i["skipped"] for i in instances if i["scenario"] == scenario.key and i.get("skipped")]
            if why and not any(i["scenario"] == scenario.key and i.get("error") for i in instances):
                out[scenario.key] = {"repetitions": 0, "skipped": why[0]}
            elif any(i["scenario"] == scenario.key for i in instances):
                out[scenario.key] = {
                    "repetitions": 0,
                    "error": next(i["error"] for i in instances if i["scenario"] == scenario.key and i.get("error")),
                }
            continue
        agg: dict[str, Any] = {"repetitions": len(runs)}
        sat = [r["saturation"] for r in runs if r.get("saturation")]
        if sat:
            agg["throughput_rps"] = median(s["result"]["rps"] for s in sat)
            agg["throughput_all"] = [s["result"]["rps"] for s in sat]
            agg["cpu_s_per_1k_sat"] = median(s["cpu_s_per_1k"] for s in sat)
            agg["util_sat"] = median(s["utilization"] for s in sat)
            agg["wrk_p50_ms"] = median(s["result"]["latency_ms"]["p50"] for s in sat)
            agg["wrk_p99_ms"] = median(s["result"]["latency_ms"]["p99"] for s in sat)
            agg["errors_sat"] = sum(s["result"]["failed"] for s in sat)
        used_rates = scenario.rates or tuple(rates)
        agg["rates"] = {}
        for rate in used_rates:
            agg["rates"][str(rate)] = {
                metric: median(_rate_metric(r, rate, metric) for r in runs)
                for metric in ("p50", "p90", "p99", "p999", "max", "achieved_rps", "cpu_s_per_1k", "lag_p50_ms")
            }
            agg["rates"][str(rate)]["errors"] = sum(
                sum(r["rates"][str(rate)]["result"]["errors"].values()) for r in runs if str(rate) in r["rates"]
            )
        agg["rss_peak_mb"] = max((r["memory"]["hwm_mb"] for r in runs), default=None)
        agg["rss_end_mb"] = median(r["memory"]["rss_mb"] for r in runs)
        agg["other_cpu_share"] = median(r.get("other_cpu_share") for r in runs)
        tallies = [r["decisions"] for r in runs if r.get("decisions")]
        if tallies:
            merged: dict[str, dict[str, int]] = {"outcomes": {}, "failures": {}}
            for tally in tallies:
                for part in ("outcomes", "failures"):
                    for k, v in (tally.get(part) or {}).items():
                        merged[part][k] = merged[part].get(k, 0) + v
            agg["decisions"] = merged
        mixes = [m for r in runs for m in r.get("mix") or ()]
        if mixes:
            answered = sum(m.get("ok") or 0 for m in mixes)
            agg["mix"] = {
                "requests": answered,
                "effectful": sum(m.get("effectful") or 0 for m in mixes),
                "wraps": sum(m.get("wraps") or 0 for m in mixes),
                "passes": sum(m["passes"] for m in mixes),
            }
        skipped: dict[str, str] = {}
        for rate in sorted({k for r in runs for k in (r.get("skipped_rates") or {})}, key=int):
            count = sum(rate in (r.get("skipped_rates") or {}) for r in runs)
            skipped[rate] = f"in {count} of {len(runs)} repetitions"
        if skipped:
            agg["skipped_rates"] = skipped
        labels = sorted({label for r in runs for label in (r.get("delivery") or {})})
        if labels:
            agg["delivery"] = {
                label: min(
                    (r["delivery"][label] for r in runs if (r.get("delivery") or {}).get(label) is not None),
                    default=None,
                )
                for label in labels
            }
        out[scenario.key] = agg
    return out


def _get(agg: dict[str, Any], key: str, *path: str) -> float | None:
    node: Any = agg.get(key)
    for part in path:
        if not isinstance(node, dict):
            return None
        node = node.get(part)
    return node if isinstance(node, (int, float)) else None


def _throughputs(instances: Sequence[dict[str, Any]], key: str) -> dict[int, float]:
    """Saturation throughput of ``key`` by repetition."""
    out: dict[int, float] = {}
    for i in instances:
        rps = (i.get("saturation") or {}).get("result", {}).get("rps") if not i.get("error") else None
        if i["scenario"] == key and isinstance(rps, (int, float)) and rps > 0:
            out[int(i["repetition"])] = float(rps)
    return out


def per_repetition(instances: Sequence[dict[str, Any]], num: str, den: str) -> list[float]:
    """``num``/``den`` throughput within each repetition both ran in: on a shared machine the load
    moves between repetitions, so a ratio of medians can hide a repetition that missed."""
    a, b = _throughputs(instances, num), _throughputs(instances, den)
    return [a[rep] / b[rep] for rep in sorted(a.keys() & b.keys())]


def targets(agg: dict[str, dict[str, Any]], instances: Sequence[dict[str, Any]] = ()) -> list[dict[str, Any]]:
    """The issue's performance targets, each as value vs. threshold with a ratio and a verdict
    (None when a scenario needed for it did not run). Throughput ratios also carry the ratio in
    each repetition (``per_repetition``) and whether every one of them met it (``robust``)."""
    rows: list[dict[str, Any]] = []

    def add(
        name: str,
        value: float | None,
        threshold: float | None,
        ratio: float | None,
        met: bool | None,
        unit: str,
        rule: str,
    ) -> None:
        rows.append(
            {
                "target": name,
                "value": value,
                "threshold": threshold,
                "ratio": ratio,
                "met": met,
                "unit": unit,
                "rule": rule,
            }
        )

    def ratio_target(name: str, num: str, den: str, share: float) -> None:
        a, b = _get(agg, den, "throughput_rps"), _get(agg, num, "throughput_rps")
        r = b / a if a and b else None
        add(
            name,
            b,
            a * share if a else None,
            r,
            None if r is None else r >= share,
            "req/s",
            f"{num}/{den} ≥ {share:.2f}",
        )
        each = per_repetition(instances, num, den)
        rows[-1]["per_repetition"] = each
        rows[-1]["robust"] = all(x >= share for x in each) if len(each) > 1 else None

    ratio_target("S2 throughput ≥ 1.0 × the bare aiohttp forwarder (S1)", "S2", "S1", 1.0)
    ratio_target("S5 throughput ≥ 0.5 × a bare aiohttp stub that does not read the request (S0n)", "S5", "S0n", 0.5)

    ratio_target("S2 throughput ≥ 0.75 × a bare forwarder on the gateway's own HTTP stack (F7)", "S2", "F7", 0.75)

    for metric, slack in (("p50", 0.25), ("p99", 1.0)):
        a, b = _get(agg, "S1", "rates", "500", metric), _get(agg, "S2", "rates", "500", metric)
        limit = a + slack if a is not None else None
        add(
            f"S2 {metric} at 500 req/s ≤ S1 {metric} + {slack:g} ms",
            b,
            limit,
            b / limit if b is not None and limit else None,
            None if b is None or limit is None else b <= limit,
            "ms",
            f"S2−S1 = {b - a:+.3f} ms" if a is not None and b is not None else "",
        )

    ratio_target("S5 throughput ≥ 50 % of S0", "S5", "S0", 0.5)

    one, par = _get(agg, "S2d", "rates", str(DELAY_RATE), "p50"), _get(agg, "S4d", "rates", str(DELAY_RATE), "p50")
    ratio = par / one if one and par else None
    add(
        f"S4 p50, three {DELAY_MS:.0f} ms upstreams in parallel ≤ 1.2 × one upstream's",
        par,
        one * 1.2 if one else None,
        ratio,
        None if ratio is None else ratio <= 1.2,
        "ms",
        "S4d/S2d ≤ 1.2",
    )

    # Serial: the sum of three one-upstream latencies through the gateway (3 × S2d), which counts
    # the gateway's own fixed cost three times instead of once: well inside the tolerance.
    serial = _get(agg, "S3d", "rates", str(DELAY_RATE), "p50")
    predicted = 3 * one if one is not None else None
    ratio = serial / predicted if serial and predicted else None
    add(
        f"S3 p50, three {DELAY_MS:.0f} ms upstreams in series ≈ sum + overhead",
        serial,
        predicted,
        ratio,
        None if ratio is None else 0.9 <= ratio <= 1.1,
        "ms",
        "S3d / (3 × S2d) within 0.9–1.1",
    )

    ratio_target("S7 (production profile) throughput ≥ 90 % of S2", "S7", "S2", 0.9)
    ratio_target("S2L (one shared rate limit, Redis on loopback) throughput ≥ 0.8 × S2", "S2L", "S2", 0.8)

    # S8, real tool calls: the target, and the first milestone on the way to it
    for share in (0.25, 0.1):
        ratio_target(
            f"S8 (real tool calls) throughput ≥ {share:g} × S0n" + (" (first milestone)" if share < 0.25 else ""),
            "S8",
            "S0n",
            share,
        )
        cpu8, cpu0 = _get(agg, "S8", "cpu_s_per_1k_sat"), _get(agg, "S0n", "cpu_s_per_1k_sat")
        if cpu8 and cpu0:
            rows[-1]["rule"] += f"; by CPU per request {cpu0 / cpu8:.2f}"

    gateways = [(k, _get(agg, k, "rss_peak_mb")) for k in BY_KEY if BY_KEY[k].under_test == "gateway"]
    peaks = [(k, v) for k, v in gateways if v is not None]
    if peaks:
        worst_key, worst = max(peaks, key=lambda kv: kv[1])
        add(
            f"peak RSS ≤ {RSS_LIMIT_MB:.0f} MB per worker",
            worst,
            RSS_LIMIT_MB,
            worst / RSS_LIMIT_MB,
            worst <= RSS_LIMIT_MB,
            "MB",
            f"largest VmHWM of any gateway process ({worst_key})",
        )
    else:
        add(f"peak RSS ≤ {RSS_LIMIT_MB:.0f} MB per worker", None, RSS_LIMIT_MB, None, None, "MB", "")
    return rows


def overhead(agg: dict[str, dict[str, Any]], rates: Sequence[int]) -> list[dict[str, Any]]:
    rows = []
    for rate in rates:
        for metric in ("p50", "p99"):
            rows.append(_s1_s2_row(agg, f"{metric} at {rate} req/s", "ms", "rates", str(rate), metric))
    rows.append(_s1_s2_row(agg, "CPU s per 1,000 requests (saturation)", "s", "cpu_s_per_1k_sat"))
    rows.append(_s1_s2_row(agg, "throughput", "req/s", "throughput_rps"))
    return rows


def _s1_s2_row(agg: dict[str, dict[str, Any]], what: str, unit: str, *path: str) -> dict[str, Any]:
    """One overhead row: the forwarder's and the gateway's value at ``path`` and their difference."""
    a, b = _get(agg, "S1", *path), _get(agg, "S2", *path)
    return {"what": what, "S1": a, "S2": b, "delta": b - a if a is not None and b is not None else None, "unit": unit}


def fmt(value: float | None, digits: int = 2) -> str:
    if value is None:
        return "–"
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    return f"{value:.{digits}f}"


def markdown(result: dict[str, Any]) -> str:
    agg = result["scenarios"]
    rates = result["settings"]["rates"]
    m = result["machine"]
    lines = [
        "# AHP Gateway benchmark",
        "",
        f"{result['started']} · {'quick (smoke) run, numbers not meaningful' if result['settings']['quick'] else 'full run'} · "
        f"{result['settings']['repetitions']} repetition(s), medians · gateway {m.get('gateway_version', '?')}"
        f"{' @ ' + m['git_commit'][:12] if m.get('git_commit') else ''}{' (dirty tree)' if m.get('git_dirty') else ''}"
        f"{' · **the gateway sources changed during the run**' if m.get('code_fingerprint_end') not in (None, m.get('code_fingerprint_start')) else ''}",
        "",
        f"Machine: {m['cpu_model']}, {m['cores']} cores · Python {m['python']} · facts {m.get('facts', 'interpreted')} · kernel {m['kernel']} · "
        f"aiohttp {m.get('aiohttp', '?')} · uvloop {m.get('uvloop', '–')} · {m.get('wrk', 'wrk ?')}",
        "",
        f"CPU placement: {result['settings']['placement']}",
        "",
        "## Results",
        "",
    ]
    head = ["Scenario", "Throughput (req/s)"]
    for rate in rates:
        head += [f"p50 @{rate} (ms)", f"p99 @{rate} (ms)"]
    head += ["CPU s/1k req (sat.)", f"CPU s/1k @{rates[0]}", "CPU util (sat.)", "Peak RSS (MB)", "Errors"]
    lines.append("| " + " | ".join(head) + " |")
    lines.append("|" + "|".join(["---"] + ["---:"] * (len(head) - 1)) + "|")
    for scenario in SCENARIOS + REFERENCE_SCENARIOS:
        a = agg.get(scenario.key)
        if a is None:
            continue
        if a.get("error"):
            lines.append(f"| {scenario.key} {scenario.title} | failed: {a['error'][:80]} |" + " |" * (len(head) - 2))
            continue
        if a.get("skipped"):
            lines.append(f"| {scenario.key} {scenario.title} | skipped: {a['skipped']} |" + " |" * (len(head) - 2))
            continue
        row = [f"{scenario.key} {scenario.title}", fmt(a.get("throughput_rps"), 0)]
        for rate in rates:
            r = a["rates"].get(str(rate), {})
            if r.get("p50") is None and str(rate) in a.get("skipped_rates", {}):
                row += ["overload", "overload"]
            else:
                row += [fmt(r.get("p50")), fmt(r.get("p99"))]
        first = a["rates"].get(str(rates[0]), {})
        errors = (a.get("errors_sat") or 0) + sum(r.get("errors") or 0 for r in a["rates"].values())
        util = a.get("util_sat")
        row += [
            fmt(a.get("cpu_s_per_1k_sat"), 3),
            fmt(first.get("cpu_s_per_1k"), 3),
            f"{util * 100:.0f} %" if util is not None else "–",
            fmt(a.get("rss_peak_mb"), 1),
            str(errors),
        ]
        lines.append("| " + " | ".join(row) + " |")
    s6 = agg.get("S6", {})
    if s6.get("delivery"):
        parts = [
            f"{'saturation' if label == 'saturation' else label + ' req/s'}: {fmt(v * 100 if v is not None else None, 1)} %"
            for label, v in sorted(s6["delivery"].items(), key=lambda kv: (kv[0] == "saturation", kv[0].zfill(9)))
        ]
        lines += [
            "",
            "S6 observe fan-out, share of accepted notifications that reached both observe stubs (lowest repetition; "
            "the rest was dropped on a full observe queue): " + "; ".join(parts) + ".",
        ]
    overloaded = [
        f"{k} @{rate} ({why})"
        for k, a in agg.items()
        if isinstance(a, dict)
        for rate, why in (a.get("skipped_rates") or {}).items()
    ]
    if overloaded:
        lines += [
            "",
            "overload: fixed-rate run skipped because the rate was above 90 % of the throughput just measured at saturation "
            "(when only some repetitions were skipped, the cell is the median of the others): "
            + ", ".join(overloaded)
            + ".",
        ]

    lines += mix_lines(result)
    lines += [
        "",
        f"### Upstream latency ({DELAY_MS:.0f} ms per upstream stub, {DELAY_RATE} req/s)",
        "",
    ]
    lines.append("| Variant | p50 (ms) | p90 (ms) | p99 (ms) | Errors |")
    lines.append("|---|---:|---:|---:|---:|")
    for scenario in DELAY_SCENARIOS:
        a = agg.get(scenario.key)
        if a is None:
            continue
        if a.get("error"):
            lines.append(f"| {scenario.key} {scenario.title} | failed | | | |")
            continue
        r = a["rates"].get(str(DELAY_RATE), {})
        lines.append(
            f"| {scenario.key} {scenario.title} | {fmt(r.get('p50'))} | {fmt(r.get('p90'))} | {fmt(r.get('p99'))} | {r.get('errors', 0)} |"
        )

    lines += [
        "",
        "### Gateway overhead (S2 − S1)",
        "",
        "| | S1 forwarder | S2 gateway | S2 − S1 |",
        "|---|---:|---:|---:|",
    ]
    for row in result["overhead"]:
        digits = 3 if row["unit"] == "s" else (0 if row["unit"] == "req/s" else 2)
        lines.append(
            f"| {row['what']} ({row['unit']}) | {fmt(row['S1'], digits)} | {fmt(row['S2'], digits)} | {fmt(row['delta'], digits) if row['delta'] is None or row['delta'] < 0 else '+' + fmt(row['delta'], digits)} |"
        )

    lines += ab_lines(agg)
    lines += ["", "## Targets", "", "| Target | Measured | Threshold | Ratio | Met |", "|---|---:|---:|---:|:---:|"]
    for row in result["targets"]:
        digits = 0 if row["unit"] == "req/s" else (1 if row["unit"] == "MB" else 2)
        rule = row["rule"]
        if len(row.get("per_repetition") or ()) > 1:
            rule += "; per repetition " + ", ".join(f"{x:.2f}" for x in row["per_repetition"])
        lines.append(
            f"| {row['target']} | {fmt(row['value'], digits)} {row['unit']} | {fmt(row['threshold'], digits)} {row['unit']} | "
            f"{fmt(row['ratio'], 2)} ({rule}) | {verdict(row)} |"
        )
    other = [
        float(a["other_cpu_share"])
        for a in agg.values()
        if isinstance(a, dict) and a.get("other_cpu_share") is not None
    ]
    noise = max(other) if other else None
    lines += [
        "",
        "## Notes",
        "",
        "- Throughput: wrk, closed loop, "
        f"{result['settings']['wrk_connections']} connections, {result['settings']['duration_s']} s per run. "
        "Latency: open-loop fixed-rate client, latency counted from each request's scheduled send time "
        "(no coordinated omission). CPU s/1k req: utime+stime of the process under test "
        "(stub for S0, forwarder for S1, gateway otherwise) per 1,000 successful requests. "
        "Peak RSS: VmHWM of that process, largest over repetitions.",
        f"- Medians over {result['settings']['repetitions']} repetition(s); scenario order rotated each repetition; "
        f"warm-up {result['settings']['warmup_s']} s per scenario start.",
    ]
    if noise is not None:
        lines.append(
            f"- CPU used by programs outside the benchmark while it measured: {noise * 100:.0f} % of the machine "
            "(busy CPU in /proc/stat minus the benchmark's processes; worst scenario, median over repetitions)"
            f"{' — the results are disturbed, rerun on an idle machine' if noise > 0.10 else ''}."
        )
    return "\n".join(lines) + "\n"


def mix_lines(result: dict[str, Any]) -> list[str]:
    """S8: the corpus, the seed, the sample check, and how the answers came out."""
    info = result.get("realmix")
    if not info:
        return []
    if info.get("skipped"):
        return ["", f"S8 skipped: {info['skipped']}."]
    if info.get("error"):
        return ["", f"S8 **failed its sample check**: {info['error'].splitlines()[0]}"]
    a = result["scenarios"].get("S8") or {}
    mix = a.get("mix") or {}
    text = (
        f"S8: {info['cases']:,} real tool calls ({'/'.join(info['corpus'].split('/')[-2:])}), "
        f"paths renamed with seed {info['seed']} (a new name set for each of {mix.get('passes', 0)} passes); sample check: "
        f"{info['sample']} calls with the same effect types renamed and as recorded "
        f"({', '.join(f'{k} {v}' for k, v in sorted(info['sample_effects'].items()))})."
    )
    cpu, s0n = _get(result["scenarios"], "S8", "cpu_s_per_1k_sat"), _get(result["scenarios"], "S0n", "cpu_s_per_1k_sat")
    if cpu:
        text += f" CPU per decision at saturation: {cpu * 1000:.0f} µs" + (
            f" ({cpu / s0n:.1f} × S0n's {s0n * 1000:.0f} µs per answer)." if s0n else "."
        )
    if mix.get("requests"):
        text += (
            f" Answers with an effect: {mix['effectful']:,} of {mix['requests']:,} "
            f"({mix['effectful'] / mix['requests'] * 100:.2f} %)."
        )
    decisions = a.get("decisions") or {}
    if decisions.get("outcomes"):
        text += " Decision log (every request, warm-up included): " + ", ".join(
            f"{k} {v:,}" for k, v in sorted(decisions["outcomes"].items())
        )
        failed = decisions.get("failures") or {}
        text += (
            "; backend failures: " + ", ".join(f"{k} {v:,}" for k, v in sorted(failed.items())) + "."
            if failed
            else "; no backend call failed."
        )
    if mix.get("wraps"):
        text += f" **A load ran out of fresh bodies and started its file again {mix['wraps']} time(s).**"
    return ["", text]


def verdict(row: dict[str, Any]) -> str:
    """met | met on the median, not in every repetition | **not met** | – (not measured)."""
    if row["met"] is None:
        return "–"
    if not row["met"]:
        return "**not met**"
    return "met on the median, not in every repetition" if row.get("robust") is False else "met"


AB_KEYS = ("S1", "F1", "F2", "F3", "F4", "F5", "F6", "F7", "S2", "S2a", "S0", "S0n", "S5n", "S5", "S8")


def ab_lines(agg: dict[str, dict[str, Any]]) -> list[str]:
    """The HTTP-layer A/B: every forwarder (and the gateway) against S1 within this one run."""
    base_rps, base_cpu = _get(agg, "S1", "throughput_rps"), _get(agg, "S1", "cpu_s_per_1k_sat")
    present = [k for k in AB_KEYS if _get(agg, k, "throughput_rps") is not None]
    if not present or base_rps is None:
        return []
    lines = [
        "",
        "### HTTP layer A/B (ratios to S1 within this run)",
        "",
        "| Scenario | Throughput (req/s) | × S1 | CPU ms/req (sat.) | × S1 | CPU util (sat.) |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for key in present:
        rps, cpu, util = (_get(agg, key, f) for f in ("throughput_rps", "cpu_s_per_1k_sat", "util_sat"))
        lines.append(
            f"| {key} {BY_KEY[key].title} | {fmt(rps, 0)} | {fmt(rps / base_rps if rps else None)} | "
            f"{fmt(cpu, 3)} | {fmt(cpu / base_cpu if cpu and base_cpu else None)} | "
            f"{f'{util * 100:.0f} %' if util is not None else '–'} |"
        )
    return lines


def soak_markdown(result: dict[str, Any]) -> str:
    m = result["machine"]
    lines = [
        "# AHP Gateway soak (memory over a long run)",
        "",
        f"{result['started']} · scenario {result['scenario']} · {result['requests']:,} requests · concurrency {result['concurrency']}",
        "",
        f"Machine: {m['cpu_model']}, {m['cores']} cores · Python {m['python']} · facts {m.get('facts', 'interpreted')} · kernel {m['kernel']}",
        "",
        "| Requests | Elapsed (s) | req/s (segment) | RSS (MB) | Peak RSS (MB) | CPU s/1k req (segment) |",
        "|---:|---:|---:|---:|---:|---:|",
    ]
    for s in result["samples"]:
        lines.append(
            f"| {s['requests']:,} | {s['elapsed_s']:.1f} | {fmt(s.get('segment_rps'), 0)} | {s['rss_mb']:.1f} | {s['hwm_mb']:.1f} | {fmt(s.get('cpu_s_per_1k'), 3)} |"
        )
    v = result["verdict"]
    lines += [
        "",
        f"RSS after warm-up {fmt(v['baseline_mb'], 1)} MB → at the end {fmt(v['final_mb'], 1)} MB: "
        f"growth {fmt(v['growth_mb'], 1)} MB ({fmt(v['growth_pct'], 1)} %); "
        f"{'no growth' if v['stable'] else '**growing**'} (allowed: {v['allowed_mb']:.1f} MB). "
        f"Errors: {result['errors']}.",
    ]
    return "\n".join(lines) + "\n"
