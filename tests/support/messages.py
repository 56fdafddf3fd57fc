"""A small gateway.yaml for the message tests (tests/unit/*/test_*_messages.py): one HTTP hook
whose ``timeoutMs`` and leading lines each test chooses."""

from __future__ import annotations

from pathlib import Path

HOOK = """\
hooks:
  - id: org.example.a
    transport: {type: http, url: "http://127.0.0.1:9/ahp"}
    subscriptions:
      - mode: intercept
        events: [tool.before]
        timeoutMs: TIMEOUT
        failurePolicy: fail-closed
        content: {default: body}
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "gateway.yaml"
    path.write_text(text)
    return path


def config(tmp_path: Path, *, head: str = "id: org.example.gateway\n", timeout: str = "100") -> Path:
    return write(tmp_path, head + HOOK.replace("TIMEOUT", timeout))
