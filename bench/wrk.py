"""Saturation throughput with ``wrk`` (closed loop, fixed connection count).

The Lua script POSTs the body with ``Content-Type: application/json``, checks every answer
(status, and for intercepts that the body holds the expected no-effect result) and prints one
JSON line from ``done()``. For observe notifications it builds a unique event id per request.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.payloads import ID_WIDTH, templates

MARK = "WRKJSON "


def find_wrk() -> str | None:
    return shutil.which("wrk")


def _lua_string(data: bytes) -> str:
    text = data.decode()
    level = 1
    while f"]{'=' * level}]" in text:
        level += 1
    eq = "=" * level
    return f"[{eq}[{text}]{eq}]"


_COMMON = """
local threads = {}
local count = 0
function setup(thread)
  count = count + 1
  thread:set("tidx", count)
  table.insert(threads, thread)
end
bad = 0
effectful = 0
wraps = 0
function response(status, headers, body)
  if status ~= EXPECT_STATUS or (EXPECT_BODY ~= nil and string.find(body, EXPECT_BODY, 1, true) == nil) then
    bad = bad + 1
  elseif COUNT_EFFECTS and string.find(body, '"effects":[]', 1, true) == nil then
    effectful = effectful + 1
  end
end
function done(summary, latency, requests)
  local b, f, w = 0, 0, 0
  for _, t in ipairs(threads) do
    b = b + (t:get("bad") or 0)
    f = f + (t:get("effectful") or 0)
    w = w + (t:get("wraps") or 0)
  end
  local e = summary.errors
  io.write(string.format(
    'MARK{"requests":%d,"duration_us":%d,"bytes":%d,"connect":%d,"read":%d,"write":%d,' ..
    '"status":%d,"timeout":%d,"bad":%d,"effectful":%d,"wraps":%d,' ..
    '"p50_us":%d,"p99_us":%d,"mean_us":%.1f,"max_us":%d}\\n',
    summary.requests, summary.duration, summary.bytes, e.connect, e.read, e.write, e.status, e.timeout,
    b, f, w, latency:percentile(50), latency:percentile(99), latency.mean, latency.max))
end
""".replace("MARK", MARK)


def lua_script(
    body: bytes | None,
    *,
    expect_status: int,
    expect_body: str | None,
    observe_tag: str | None,
    template: str = "observe",
    bodies_file: Path | None = None,
) -> str:
    """``observe_tag``: every request gets a unique id ``tag…`` in the ``template`` body
    (observe | distinct, :func:`bench.payloads.templates`). ``bodies_file``: one body per line,
    sent in order (from the start again after the last, counted as a wrap); answers whose
    ``effects`` are not empty are counted."""
    lines = [
        'wrk.method = "POST"',
        'wrk.headers["Content-Type"] = "application/json"',
        f"EXPECT_STATUS = {expect_status}",
        f"EXPECT_BODY = {_lua_string(expect_body.encode()) if expect_body else 'nil'}",
        f"COUNT_EFFECTS = {'true' if bodies_file is not None else 'false'}",
    ]
    if bodies_file is not None:
        lines += [
            "local BODIES = {}",
            f"for line in io.lines({_lua_string(str(bodies_file).encode())}) do BODIES[#BODIES + 1] = line end",
            "local n = 0",
            "function request()",
            "  n = n + 1",
            "  if n > #BODIES then",
            "    n = 1",
            "    wraps = wraps + 1",
            "  end",
            "  return wrk.format(nil, nil, nil, BODIES[n])",
            "end",
        ]
    elif observe_tag is not None:
        prefix, suffix = templates(template)
        digits = ID_WIDTH - len(observe_tag) - 1
        lines += [
            f"local PREFIX = {_lua_string(prefix)}",
            f"local SUFFIX = {_lua_string(suffix)}",
            f'local FMT = "{observe_tag}%d%0{digits}d"',
            "local n = 0",
            "function request()",
            "  n = n + 1",
            "  return wrk.format(nil, nil, nil, PREFIX .. string.format(FMT, tidx, n) .. SUFFIX)",
            "end",
        ]
    else:
        assert body is not None
        lines.append(f"wrk.body = {_lua_string(body)}")
    return "\n".join(lines) + "\n" + _COMMON


def run_wrk(
    wrk: str,
    port: int,
    script: Path,
    *,
    duration_s: int,
    connections: int,
    threads: int = 1,
    cpus: frozenset[int] | None = None,
    on_start: Callable[[], None] | None = None,
) -> dict[str, Any]:
    argv = [
        wrk,
        f"-t{threads}",
        f"-c{connections}",
        f"-d{duration_s}s",
        "--timeout",
        "10s",
        "-s",
        str(script),
        f"http://127.0.0.1:{port}/",
    ]

    def pin() -> None:
        if cpus:
            os.sched_setaffinity(0, set(cpus))

    with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, preexec_fn=pin) as proc:
        try:
            if on_start is not None:
                on_start()
            out, err = proc.communicate(timeout=duration_s + 60)
        except BaseException:
            proc.kill()
            raise
    text = out.decode(errors="replace")
    for line in text.splitlines():
        if line.startswith(MARK):
            raw = json.loads(line[len(MARK) :])
            break
    else:
        raise RuntimeError(f"wrk produced no summary (exit {proc.returncode}):\n{text}\n{err.decode(errors='replace')}")
    seconds = raw["duration_us"] / 1e6
    failed = raw["connect"] + raw["read"] + raw["write"] + raw["timeout"] + raw["bad"]
    ok = max(0, raw["requests"] - raw["bad"])
    return {
        "requests": raw["requests"],
        "ok": ok,
        "errors": {k: raw[k] for k in ("connect", "read", "write", "timeout", "bad") if raw[k]},
        "failed": failed,
        "duration_s": round(seconds, 3),
        "rps": round(ok / seconds, 1) if seconds else 0.0,
        "latency_ms": {
            "p50": raw["p50_us"] / 1000,
            "p99": raw["p99_us"] / 1000,
            "mean": round(raw["mean_us"] / 1000, 3),
            "max": raw["max_us"] / 1000,
        },
        "connections": connections,
        "threads": threads,
        "effectful": raw["effectful"],
        "wraps": raw["wraps"],
    }
