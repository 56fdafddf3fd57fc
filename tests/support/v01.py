"""Protocol 0.1 requests built from the spec's golden fixtures."""

from __future__ import annotations

import copy
import json
from typing import Any

from tests.support.paths import VECTORS

FIXTURES = VECTORS / "ahp-spec" / "fixtures" / "0.1.0-draft.1"
MANIFEST = json.loads((FIXTURES / "manifest.json").read_text())["cases"]
CASES = {c["id"]: c for c in MANIFEST}


def fixture(case_id: str) -> Any:
    """A golden fixture of the spec by its id (JSON, or the text of a stdio-jsonl one)."""
    text = (VECTORS / "ahp-spec" / CASES[case_id]["path"]).read_text()
    return text if CASES[case_id]["binding"] == "stdio-jsonl" else json.loads(text)


def v01_request(command: str = "git status", caps: list[str] | None = None, **event: Any) -> dict[str, Any]:
    message = copy.deepcopy(fixture("http.intercept-request.valid"))
    n = abs(hash((command, json.dumps(event, sort_keys=True)))) % 10**8
    message["id"] = message["params"]["event"]["id"] = f"evt_v01_{n}"
    message["params"]["event"]["tool"] = {
        "callId": f"call_{n}",
        "name": "Bash",
        "kind": "shell",
        "input": {"command": command},
    }
    message["params"]["event"].update(event)
    if caps is not None:
        message["params"]["capabilities"] = {"effects": caps}
    return message
