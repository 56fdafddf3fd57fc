"""The canonical schema set: pinned and hash-checked, and the per-event specialised request
validators agree with the full intercept-request schema on valid and mutated requests."""

from __future__ import annotations

import copy
import json
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.protocol import schemas
from tests.support.events import ALL_TOOL_BEFORE_CAPS, HARNESS, intercept, tool_before
from tests.support.paths import VECTORS

S = schemas.load()
FIXTURES = VECTORS / "ahp-spec" / "fixtures" / "draft" / "http"


def _requests() -> list[dict[str, Any]]:
    out = [intercept(tool_before("ls"), ALL_TOOL_BEFORE_CAPS)]
    for path in sorted(FIXTURES.glob("*.json")):
        doc = json.loads(path.read_text())
        if isinstance(doc, dict) and doc.get("method") == "hooks/intercept":
            doc["params"]["event"].setdefault("harness", dict(HARNESS))
            out.append(doc)
        elif (
            isinstance(doc, dict)
            and doc.get("method") == "hooks/observe"
            and doc["params"]["event"].get("type") in schemas.INTERCEPTABLE
        ):
            event = copy.deepcopy(doc["params"]["event"])
            event.setdefault("harness", dict(HARNESS))
            from gateway.discovery import bound

            out.append(intercept(event, bound(S, event["type"])))
    return out


REQUESTS = _requests()


def _agree(message: Any) -> None:
    etype = (
        message.get("params", {}).get("event", {}).get("type")
        if isinstance(message.get("params"), dict) and isinstance(message["params"].get("event"), dict)
        else None
    )
    if etype not in S.request_for:
        return
    assert S.request_for[etype].ok(message) == S.intercept_request.ok(message), json.dumps(message)[:500]


def test_pinned_bundle_is_the_one_loaded():
    assert schemas.locate_schema_file().name == "schemas.json"
    assert len(S.documents) == 33


def test_specialised_validators_agree_on_real_requests():
    assert len(REQUESTS) > 20
    valid = 0
    for message in REQUESTS:
        _agree(message)
        valid += S.intercept_request.ok(message)
    assert valid > 15


_leaf = st.one_of(
    st.none(), st.booleans(), st.integers(-2, 2), st.text(max_size=3), st.just("tool.after"), st.just([]), st.just({})
)


@st.composite
def mutated(draw: Any) -> dict[str, Any]:
    message = copy.deepcopy(draw(st.sampled_from(REQUESTS)))
    for _ in range(draw(st.integers(1, 3))):
        node: Any = message
        path = []
        while isinstance(node, dict | list) and node and draw(st.integers(0, 3)):
            key = draw(st.sampled_from(sorted(node) if isinstance(node, dict) else list(range(len(node)))))
            path.append((node, key))
            node = node[key]
        if not path:
            continue
        parent, key = path[-1]
        action = draw(st.sampled_from(["replace", "delete", "add"]))
        if action == "delete" and isinstance(parent, dict):
            del parent[key]
        elif action == "add" and isinstance(parent, dict):
            parent[draw(st.sampled_from(["extra", "type", "id", "value"]))] = draw(_leaf)
        else:
            parent[key] = draw(_leaf)
    return message


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated())
def test_specialised_validators_agree_on_mutated_requests(message):
    _agree(message)
