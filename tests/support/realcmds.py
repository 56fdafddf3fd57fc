"""The real-traffic data of ``../shared/realcmds`` beside the repository (its ``SOURCES.md`` names
the public trajectories): loading a case file, and each case as the ``tool.before`` event and the
``hooks/intercept`` request Claude Code's adapter sends. Without the data a test is skipped, unless
``CI`` is set: then it fails."""

from __future__ import annotations

import json
import os
from typing import Any

import pytest

from tests.support.paths import ROOT as REPO

DATA = REPO.parent / "shared" / "realcmds"
DEFAULT_ROOT = "/home/dev/proj"
"""Workspace root and cwd of every case without a ``session`` of its own (SOURCES.md)."""
CAPABILITIES = {"effects": ["deny", "ask", "message"]}


def cases(name: str) -> list[dict[str, Any]]:
    path = DATA / name
    if not path.is_file():
        reason = f"real-traffic data not found: {path} (see issue 26; expected beside the repository)"
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)
    data = json.loads(path.read_text(encoding="utf-8"))
    assert isinstance(data, list) and data, f"{path}: expected a non-empty list of cases"
    return data


def event(n: int, case: dict[str, Any]) -> dict[str, Any]:
    """A ``tool.before`` event of one case, as Claude Code's adapter sends it."""
    session = case.get("session") or {}
    cwd = session.get("cwd", DEFAULT_ROOT)
    roots = session.get("workspaceRoots", [DEFAULT_ROOT])
    return {
        "id": f"evt-real-{n}",
        "source": "urn:ahp:harness:claude-code:realcmds",
        "type": "tool.before",
        "time": "2026-01-01T00:00:00Z",
        "harness": {"name": "claude-code", "version": "2.0.0"},
        "session": {"id": "sess-realcmds", "cwd": cwd, "workspaceRoots": roots},
        "call": {"id": f"call-real-{n}"},
        "path": "main/tool",
        "tool": {"name": case["tool"], "origin": "native", "input": case["input"]},
    }


def body(n: int, case: dict[str, Any]) -> bytes:
    request = {
        "jsonrpc": "2.0",
        "id": f"evt-real-{n}",
        "method": "hooks/intercept",
        "params": {"protocolVersion": "draft", "event": event(n, case), "capabilities": CAPABILITIES},
    }
    return json.dumps(request, ensure_ascii=False).encode()
