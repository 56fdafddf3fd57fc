"""Request bodies and generated policy rules used by every scenario.

All intercept bodies are a realistic ``tool.before`` (about 2 KB of JSON) with a fixed event id;
the JSON-RPC ``id`` equals ``params.event.id`` as AHP requires. Observe bodies carry a unique event
id per notification (the gateway delivers each (event, subscription) once), so they are built
from a prefix and a suffix around the id.
"""

from __future__ import annotations

import json
from typing import Any

EVENT_ID = "evt-bench-0001"
SOURCE = "urn:ahp:harness:bench-harness:host-01"
ID_WIDTH = 18
"""Observe ids have a fixed width so every body of a run has the same Content-Length."""

CAPS_FULL: dict[str, Any] = {
    "effects": ["deny", "modify", "message"],
    "modify": {"input": {"replace": True, "merge": True}},
}
"""deny + modify (tool input, replace and merge) + message: what a typical coding harness offers."""

CAPS_PARALLEL: dict[str, Any] = {"effects": ["deny", "message"]}
"""Only deny + message: the advertisement for which ``fanout: parallel`` may run calls at once."""


def tool_before_event(event_id: str = EVENT_ID) -> dict[str, Any]:
    command = (
        "cd /home/dev/src/acme-billing-service && git status --porcelain && "
        "python -m pytest -q tests/unit/test_invoices.py tests/unit/test_ledger.py "
        "-k 'invoice and not slow' --maxfail=1 -p no:cacheprovider --durations=10"
    )
    return {
        "id": event_id,
        "source": SOURCE,
        "type": "tool.before",
        "time": "2025-05-14T09:21:07.412Z",
        "harness": {"name": "bench-harness", "version": "1.42.0"},
        "session": {
            "id": "sess-7f3c2a9e-51b4-4d8e-9a61-0c2f6b1d8e47",
            "cwd": "/home/dev/src/acme-billing-service",
            "workspaceRoots": ["/home/dev/src/acme-billing-service", "/home/dev/src/acme-shared-libs"],
            "model": "example-model-large",
        },
        "turn": {"id": "turn-000042"},
        "call": {"id": "call-01HY8Z4N6Q2R7T9V3W5X8Y1Z2A"},
        "path": "main/tool/shell",
        "tool": {
            "name": "shell",
            "kind": "execute",
            "origin": "native",
            "input": {
                "command": command,
                "description": "Run the invoice and ledger unit tests after checking the working tree is clean.",
                "timeoutMs": 120000,
                "runInBackground": False,
                "workingDirectory": "/home/dev/src/acme-billing-service",
                "env": {
                    "PYTHONDONTWRITEBYTECODE": "1",
                    "PYTEST_ADDOPTS": "--color=no",
                    "DATABASE_URL": "postgresql://localhost:5432/billing_test",
                    "FEATURE_FLAGS": "invoices_v2,ledger_snapshots,async_exports",
                },
                "context": {
                    "openFiles": [
                        "src/billing/invoices/service.py",
                        "src/billing/invoices/models.py",
                        "src/billing/ledger/journal.py",
                        "src/billing/ledger/snapshots.py",
                        "tests/unit/test_invoices.py",
                        "tests/unit/test_ledger.py",
                        "tests/conftest.py",
                        "pyproject.toml",
                    ],
                    "recentEdits": [
                        {
                            "file": "src/billing/invoices/service.py",
                            "lines": [112, 148],
                            "summary": "round totals per line item before tax",
                        },
                        {
                            "file": "src/billing/ledger/journal.py",
                            "lines": [61, 74],
                            "summary": "post reversal entries atomically",
                        },
                        {
                            "file": "tests/unit/test_invoices.py",
                            "lines": [201, 260],
                            "summary": "cover multi-currency rounding",
                        },
                    ],
                    "reason": (
                        "The previous run failed in test_invoice_totals_round_per_line because the "
                        "service rounded after summing; the fix moves rounding into the line-item "
                        "loop and the new tests pin the behaviour for EUR, JPY and KWD amounts."
                    ),
                },
            },
        },
    }


def intercept_request(caps: dict[str, Any] = CAPS_FULL, event_id: str = EVENT_ID) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": event_id,
        "method": "hooks/intercept",
        "params": {"protocolVersion": "draft", "event": tool_before_event(event_id), "capabilities": caps},
    }


def encode(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()


def intercept_body(parallel: bool = False) -> bytes:
    return encode(intercept_request(CAPS_PARALLEL if parallel else CAPS_FULL))


_MARK = "@@ID@@"


def observe_template() -> tuple[bytes, bytes]:
    """(prefix, suffix) of a ``hooks/observe`` notification; the event id goes in between."""
    note = {
        "jsonrpc": "2.0",
        "method": "hooks/observe",
        "params": {"protocolVersion": "draft", "event": tool_before_event(_MARK)},
    }
    prefix, suffix = encode(note).split(_MARK.encode())
    return prefix, suffix


_DISTINCT = b"--durations="


def distinct_template() -> tuple[bytes, bytes]:
    """(prefix, suffix) of the intercept body whose command differs in every request (S5u): an
    :func:`observe_id` goes in between, as the value of ``--durations`` in the command, so no
    rule result and no shell parse can be reused and every body has the same length."""
    body = intercept_body()
    at = body.index(_DISTINCT) + len(_DISTINCT)
    end = at
    while body[end : end + 1].isdigit():
        end += 1
    return body[:at], body[end:]


def templates(kind: str) -> tuple[bytes, bytes]:
    """The (prefix, suffix) around a unique id for a body ``kind`` (observe | distinct)."""
    return observe_template() if kind == "observe" else distinct_template()


def observe_id(tag: str, n: int) -> str:
    """A unique, fixed-width event id: ``tag`` (letters) then a zero-padded counter."""
    text = f"{tag}{n:0{ID_WIDTH - len(tag)}d}"
    if len(text) != ID_WIDTH:
        raise ValueError("observe id counter overflow")
    return text


def stub_answer(request_id: Any) -> bytes:
    return encode({"jsonrpc": "2.0", "id": request_id, "result": {"protocolVersion": "draft", "effects": []}})


def extra_rules(count: int = 50, namespace: str = "org.ahp-gateway.bench.extra") -> str:
    """A policy file (JSON, which the YAML loader reads) of ``count`` rules shaped like real ones
    (command regexes, tool names, paths, env keys) that never match the benchmark request, so
    every rule is evaluated on every event."""
    shapes = (
        "has(event.tool.input.command) && type(event.tool.input.command) == string && "
        "event.tool.input.command.matches('(^|[;&|]\\\\s*)benchcmd{i}\\\\s+--danger\\\\b')",
        "event.tool.name == 'bench_tool_{i}'",
        "has(event.tool.input.workingDirectory) && type(event.tool.input.workingDirectory) == string && "
        "event.tool.input.workingDirectory.startsWith('/srv/bench-{i}/')",
        "has(event.tool.input.env) && 'BENCH_SECRET_{i}' in event.tool.input.env",
        "has(event.session.cwd) && event.session.cwd.endsWith('/bench-forbidden-{i}')",
    )
    rules = []
    for i in range(count):
        rule: dict[str, Any] = {
            "id": f"generated-{i:02d}",
            "events": ["tool.before"],
            "when": shapes[i % len(shapes)].format(i=i),
        }
        if i % 2 == 0:
            rule["deny"] = {"reason": f"Generated rule {i} matched."}
        else:
            rule["message"] = {"text": f"Generated rule {i} matched."}
        rules.append(rule)
    doc = {
        "namespace": namespace,
        "description": "Generated benchmark rules (none matches the request).",
        "rules": rules,
    }
    return json.dumps(doc, indent=1) + "\n"
