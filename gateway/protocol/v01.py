"""AHP ``0.1`` (the frozen ``0.1.0-draft.1`` revision) <-> ``draft``: schemas and pure translation.

0.1 knows one interceptable event (``tool.before``, with ``tool{callId, name, kind, input}``), one
effect (``deny``), and answers with ``effects: []`` or exactly one deny (AHP-DEC-001). The
gateway runs one pipeline, the draft one, and translates at its two edges:

- a 0.1 harness request becomes a draft request (:func:`request_to_draft`), advertising only
  ``deny``; the draft answer goes back as a 0.1 answer (:func:`answer_to_v01`);
- toward an upstream configured with ``protocolVersion: "0.1"``, a draft request becomes a 0.1
  request (:func:`request_to_v01`) and its validated 0.1 answer a draft answer
  (:func:`answer_to_draft`) that settles in the same chain as every other answer.

What a 0.1 peer does not send is filled with documented values: :data:`FILLED_HARNESS`,
``path`` :data:`FILLED_PATH`, ``tool.origin`` ``native``; toward a 0.1 backend a missing
``tool.kind`` is :data:`FILLED_KIND` and a missing session :data:`FILLED_SESSION`. Fields 0.1 does
not define are not carried across (draft ``state``, ``turn``, ``items``, ``call.synthesized``...).

Schemas: ``gateway/data/ahp-0.1``, hash-checked against ``lock.json`` on load. Five documents are
byte-identical upstream copies; the other five were not available upstream and are the gateway's
reconstructions (``lock.json`` says which).
"""

from __future__ import annotations

import functools
import hashlib
from pathlib import Path
from typing import Any

import jsonschema_rs
import orjson

from gateway.protocol.schemas import Check, SchemaSourceError

VERSION = "0.1"
DRAFT = "draft"
BASE = "https://agenthooksprotocol.org/schemas/0.1.0-draft.1/"
DATA = Path(__file__).resolve().parent.parent / "data" / "ahp-0.1"
FILLED_HARNESS = {"name": "ahp-0.1-harness", "version": "unknown"}
"""``event.harness`` for events from a 0.1 harness (0.1 events carry no harness block)."""
FILLED_PATH = "native"
"""``event.path`` for events from a 0.1 harness (0.1 knows only the harness's native tools)."""
FILLED_KIND = "other"
"""``tool.kind`` toward a 0.1 backend when the draft event has none (0.1 requires it)."""
FILLED_SESSION = {"id": "ahp-gateway.unknown-session"}
"""``session`` toward a 0.1 backend when the draft event has none (0.1 requires it)."""
SESSION_KEYS = ("id", "cwd", "workspaceRoots", "model", "agent")
DENY_KEYS = ("type", "reason", "code", "extensions")


class Unbridgeable(Exception):
    """A draft request that cannot be put to a 0.1 backend (the message says why)."""


class V01Schemas:
    """The 0.1 validators, compiled once."""

    def __init__(self, documents: list[dict[str, Any]]) -> None:
        self._registry = jsonschema_rs.Registry([(d["$id"], d) for d in documents])
        self.intercept_request = self._compile("intercept-request.schema.json")
        self.deny_response = self._compile("intercept-deny-response.schema.json")
        self.no_effect_response = self._compile("intercept-no-effect-response.schema.json")
        self.json_rpc_message = self._compile("json-rpc-message.schema.json")
        self.registration = self._compile("registration.schema.json")

    def _compile(self, name: str) -> Check:
        return Check(jsonschema_rs.validator_for({"$ref": BASE + name}, registry=self._registry, validate_formats=True))

    def answer_ok(self, message: Any) -> bool:
        """A 0.1 intercept success: ``effects: []`` or exactly one deny."""
        return self.no_effect_response.ok(message) or self.deny_response.ok(message)

    def explain_answer(self, message: Any) -> tuple[str, str] | None:
        effects = message.get("result", {}).get("effects") if isinstance(message, dict) else None
        check = self.deny_response if isinstance(effects, list) and effects else self.no_effect_response
        return check.explain(message)


def lock() -> dict[str, Any]:
    data: dict[str, Any] = orjson.loads((DATA / "lock.json").read_bytes())
    return data


@functools.cache
def load() -> V01Schemas:
    """The vendored 0.1 schemas; refuses any document whose hash differs from ``lock.json``."""
    documents = []
    for entry in lock()["documents"]:
        raw = (DATA / entry["name"]).read_bytes()
        digest = hashlib.sha256(raw).hexdigest()
        if digest != entry["sha256"]:
            raise SchemaSourceError(f"0.1 schema {entry['name']}: sha256 {digest} differs from lock.json")
        documents.append(orjson.loads(raw))
    return V01Schemas(documents)


# ------------------------------------------------------------------ harness edge (0.1 harness)
def request_to_draft(message: dict[str, Any]) -> dict[str, Any]:
    """A schema-valid 0.1 intercept request as the draft request the pipeline runs."""
    params = message["params"]
    old = params["event"]
    tool = old["tool"]
    event: dict[str, Any] = {
        "id": old["id"],
        "source": old["source"],
        "type": "tool.before",
        "time": old["time"],
        "harness": dict(FILLED_HARNESS),
        "session": old["session"],
        "call": {"id": tool["callId"]},
        "path": FILLED_PATH,
        "tool": {"name": tool["name"], "kind": tool["kind"], "origin": "native", "input": tool["input"]},
    }
    for key in ("native", "extensions"):
        if key in old:
            event[key] = old[key]
    effects = ["deny"] if "deny" in params["capabilities"]["effects"] else []
    draft: dict[str, Any] = {"protocolVersion": DRAFT, "event": event, "capabilities": {"effects": effects}}
    if "extensions" in params:
        draft["extensions"] = params["extensions"]
    return {"jsonrpc": "2.0", "id": message["id"], "method": "hooks/intercept", "params": draft}


def answer_to_v01(response: dict[str, Any]) -> dict[str, Any]:
    """The draft answer as a 0.1 answer. Errors carry no version and pass unchanged; a result
    with anything but denies cannot be expressed in 0.1 (ValueError: the pipeline only ever
    advertises deny for a 0.1 harness, so this is a bug, never silently dropped)."""
    result = response.get("result")
    if not isinstance(result, dict):
        return response
    effects = result.get("effects", [])
    if any(e.get("type") != "deny" for e in effects):
        raise ValueError("a 0.1 answer can only hold a deny")
    out = [{k: effects[0][k] for k in DENY_KEYS if k in effects[0]}] if effects else []
    return {"jsonrpc": "2.0", "id": response["id"], "result": {"protocolVersion": VERSION, "effects": out}}


# ------------------------------------------------------------------ upstream edge (0.1 backend)
def request_to_v01(request: dict[str, Any]) -> dict[str, Any]:
    """A draft request (as built for one upstream) as a 0.1 request, advertising deny only."""
    params = request["params"]
    event = params["event"]
    if event.get("type") != "tool.before":
        raise Unbridgeable("a 0.1 backend can only intercept tool.before")
    if "deny" not in params["capabilities"]["effects"]:
        raise Unbridgeable("the harness did not advertise deny, the only effect a 0.1 backend has")
    tool = event["tool"]
    session = event.get("session") or FILLED_SESSION
    v01: dict[str, Any] = {
        "id": event["id"],
        "source": event["source"],
        "type": "tool.before",
        "time": event["time"],
        "session": {k: session[k] for k in SESSION_KEYS if k in session},
        "tool": {
            "callId": event["call"]["id"],
            "name": tool["name"],
            "kind": tool.get("kind") or FILLED_KIND,
            "input": tool["input"],
        },
    }
    if "extensions" in event:
        v01["extensions"] = event["extensions"]
    native = event.get("native")
    if isinstance(native, dict) and {"provider", "eventName", "payload"} <= native.keys():
        v01["native"] = native
    return {
        "jsonrpc": "2.0",
        "id": request["id"],
        "method": "hooks/intercept",
        "params": {"protocolVersion": VERSION, "event": v01, "capabilities": {"effects": ["deny"]}},
    }


def answer_to_draft(message: dict[str, Any]) -> dict[str, Any]:
    """A schema-valid 0.1 answer as the draft answer settlement expects (same id, same deny)."""
    effects = [dict(e) for e in message["result"]["effects"]]
    return {"jsonrpc": "2.0", "id": message["id"], "result": {"protocolVersion": DRAFT, "effects": effects}}
