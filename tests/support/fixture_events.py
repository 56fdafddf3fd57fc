"""An event of a given type for a spec fixture case (tool events built, the others from the catalogue fixtures)."""

from __future__ import annotations

import copy
import json
from typing import Any

from gateway.protocol.schemas import load
from tests.support.events import HARNESS, tool_before
from tests.support.paths import VECTORS

FIXTURES = VECTORS / "ahp-spec" / "fixtures" / "draft"


def fixture_event(etype: str, event_id: str, case: dict[str, Any]) -> dict[str, Any]:
    if etype in ("tool.before", "tool.after"):
        event = tool_before()
        if etype == "tool.after":
            event.update(type="tool.after", outcome="ok", execution={"status": "executed"}, items=[])
    else:
        note = json.loads((FIXTURES / "http" / f"catalogue-{etype}.valid.json").read_text())
        event = copy.deepcopy(note["params"]["event"])
        event["harness"] = dict(HARNESS)
    event["id"] = event_id
    current = (case.get("editContext") or {}).get("current", {})
    if "output" in current:
        event["items"] = current["output"]
    if etype == "user.message.outbound" and "content" in current:
        event["message"]["messages"] = current["content"]
    if etype == "context.compact.before":
        event["instructions"] = [
            {"id": "i1", "kind": "text", "mediaType": "text/plain", "selection": "body", "text": "Keep decisions."}
        ]
    assert load().event_for[etype].ok(event), (etype, load().event_for[etype].explain(event))
    return event
