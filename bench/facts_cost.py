"""Per-event cost of policy facts, in-process: computing the facts of an event (a command seen for
the first time, and a repeated one answered from the parse cache), and evaluating the shipped
library with them (what the local backend does per call for a first-time command: no parse cache
and no rule-result memo).

    python -m bench.facts_cost [--baseline DIR] [--rounds N]

``--baseline DIR`` also times another policy directory (for example the library before facts)
on the same events. Prints microseconds per event (the fastest round: the least disturbed by other load).
"""

from __future__ import annotations

import argparse
import dataclasses
import time
from pathlib import Path
from typing import Any

from gateway.policy.cases import complete_event, default_capabilities
from gateway.policy.facts import for_event, shell, with_facts
from gateway.policy.library import Library, load_policies
from gateway.routing.cel import Engine

REPO = Path(__file__).resolve().parent.parent
SESSION = {"id": "s1", "cwd": "/home/ana/payments", "workspaceRoots": ["/home/ana/payments"]}
EVENTS: dict[str, dict[str, Any]] = {
    "ls": {"name": "Bash", "input": {"command": "ls -la"}},
    "git push": {"name": "Bash", "input": {"command": "git push --force origin main"}},
    "build line": {
        "name": "Bash",
        "input": {"command": "cd /home/ana/payments && npm ci && npm run build 2>&1 | tail -20"},
    },
    "long script": {
        "name": "Bash",
        "input": {"command": "; ".join(f"echo step {i} && test -f out/{i}.txt || make out/{i}.txt" for i in range(40))},
    },
    "Read": {"name": "Read", "input": {"file_path": "/home/ana/payments/src/app.py"}},
    "WebFetch": {"name": "WebFetch", "input": {"url": "https://docs.example.com/x", "prompt": "read"}},
}


def _event(tool: dict[str, Any]) -> dict[str, Any]:
    return complete_event({"type": "tool.before", "session": SESSION, "tool": tool}, 0)


def _time(fn: Any, rounds: int, inner: int = 200) -> float:
    samples = []
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(inner):
            fn()
        samples.append((time.perf_counter() - start) / inner * 1e6)
    return min(samples)


def evaluate_cost(engine: Engine, library: Library, event: dict[str, Any], rounds: int) -> float:
    caps = default_capabilities("tool.before")
    values = {"event": event, "method": "hooks/intercept", "protocolVersion": "draft", "capabilities": caps,
              "principal": {}, "headers": {}}  # fmt: skip

    def once() -> None:
        activation = with_facts(engine, engine.activation(values, maybe_nul=False), library.uses_facts)
        library.evaluate("tool.before", activation, caps)

    return _time(once, rounds)


def _uncached(event: dict[str, Any]) -> dict[str, Any]:
    shell._cache.clear()  # a command never seen before
    return for_event(event)


def _uncached_cost(engine: Engine, library: Library, event: dict[str, Any], rounds: int) -> float:
    """The library on a command seen for the first time: no parse cache, no rule-result memo."""
    shell._cache.clear()
    saved, shell.CACHE_ENTRIES = shell.CACHE_ENTRIES, 0  # every parse misses
    try:
        return evaluate_cost(engine, dataclasses.replace(library, memo=None), event, rounds)
    finally:
        shell.CACHE_ENTRIES = saved


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--baseline", type=Path)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    engine = Engine()
    library = load_policies([REPO / "policies"], engine)
    baseline = load_policies([args.baseline], engine) if args.baseline else None
    header = f"{'event':<12} {'facts µs':>9} {'repeated µs':>12} {'library µs':>11}"
    header += f" {'baseline µs':>12}" if baseline else ""
    print(header)
    for label, tool in EVENTS.items():
        event = _event(tool)
        repeated = _time(lambda event=event: for_event(event), args.rounds)
        facts = _time(lambda event=event: _uncached(event), args.rounds)
        total = _uncached_cost(engine, library, event, args.rounds)
        row = f"{label:<12} {facts:>9.1f} {repeated:>12.1f} {total:>11.1f}"
        if baseline is not None:
            row += f" {evaluate_cost(engine, baseline, event, args.rounds):>12.1f}"
        print(row)


if __name__ == "__main__":
    main()
