"""AHP side of the adapters: event envelopes, stable identities, per-request capabilities, and
the untrusted check + settlement of the gateway's answer. Pure functions, stdlib only.

Identities (protocol §4, AHP-CORE-004: a retry preserves event, session and call identity):

- ``event.id`` = ``evt-`` + the first 32 hex digits of SHA-256 over the canonical JSON of
  ``["event", harness, native event name, native payload]``. A harness that re-runs a hook with
  the same payload therefore sends the same event id; the JSON-RPC id equals it.
- ``call.id``: the native id where the harness gives one (``tool_use_id``). Otherwise ``syn-`` +
  32 hex digits of SHA-256 over ``["call", harness, session id, turn id or "", tool name,
  tool input]`` with ``call.synthesized: true``. No per-invocation value (timestamp, execution
  id) enters the hash, so the pre- and post-event of one call correlate and a retry gets the same
  id. The adapter keeps no state between runs; two byte-identical calls in one turn share an id.

Canonical JSON: keys sorted, no insignificant whitespace, UTF-8 (``ensure_ascii=False``).
"""

from __future__ import annotations

import json
import re
import time
from typing import Any

from gateway.protocol import jsonrpc
from gateway.protocol.events import EFFECT_TYPES
from gateway.protocol.grants import grant_problem
from gateway.protocol.methods import INTERCEPT, OBSERVE

PROTOCOL_VERSION = "draft"
_RFC3339 = re.compile(r"^\d{4}-\d{2}-\d{2}[Tt]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$")

Json = dict[str, Any]

try:  # the builtin module: hashlib's OpenSSL binding costs several ms of start-up per tool call
    from _sha256 import sha256  # type: ignore[import-not-found,unused-ignore]
except ImportError:  # pragma: no cover - other interpreters / versions
    try:
        from _sha2 import sha256  # type: ignore[import-not-found,unused-ignore,no-redef]
    except ImportError:
        from hashlib import sha256  # type: ignore[assignment,unused-ignore]


def canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def digest(*parts: Any) -> str:
    return str(sha256(canonical(list(parts)).encode("utf-8", "surrogatepass")).hexdigest()[:32])


def event_id(harness: str, native_event: str, payload: Any) -> str:
    return "evt-" + digest("event", harness, native_event, payload)


def call_identity(
    harness: str, native_id: Any, session_id: str, turn_id: str | None, tool_name: str, tool_input: Any
) -> Json:
    if isinstance(native_id, str) and native_id:
        return {"id": native_id}
    return {
        "id": "syn-" + digest("call", harness, session_id, turn_id or "", tool_name, tool_input),
        "synthesized": True,
    }


def event_time(value: Any = None) -> str:
    """RFC 3339 UTC: the native timestamp when it is one (ISO string or epoch milliseconds)."""
    if isinstance(value, str) and _RFC3339.match(value):
        return value
    if isinstance(value, int | float) and not isinstance(value, bool) and 0 < value < 1e14:
        seconds, millis = divmod(int(value), 1000)
        return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{millis:03d}Z"
    now = time.time()
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now)) + f".{int(now % 1 * 1000):03d}Z"


def text_message(item_id: str, role: str, text: str) -> Json:
    return {
        "id": item_id,
        "role": role,
        "parts": [
            {"id": item_id + "-p0", "kind": "text", "mediaType": "text/plain", "selection": "body", "text": text}
        ],
    }


def as_text(value: Any) -> str:
    return value if isinstance(value, str) else canonical(value)


def capabilities(
    effects: tuple[str, ...],
    *,
    modify: dict[str, tuple[bool, bool]] | None = None,
    flow: tuple[str, ...] = (),
    continuations: tuple[int, int] | None = None,
    inject: tuple[str, ...] = (),
) -> Json:
    """A per-request advertisement (AHP-CAP-001): exactly ``effects``, with the coupled blocks.
    ``continuations`` = (continuationCount, remainingContinuations) when ``continue`` is listed."""
    listed = set(effects)
    if modify:
        listed.add("modify")
    if flow:
        listed.add("flow")
    if inject:
        listed.add("inject")
    caps: Json = {"effects": [e for e in EFFECT_TYPES if e in listed]}
    if modify:
        caps["modify"] = {t: {"replace": r, "merge": m} for t, (r, m) in modify.items()}
    if flow:
        block: Json = {"operations": list(flow)}
        if "continue" in flow:
            count, remaining = continuations or (0, 0)
            block["continuationCount"] = count
            block["remainingContinuations"] = remaining
        caps["flow"] = block
    if inject:
        caps["inject"] = {"context": {"append": True, "deliverAt": list(inject)}}
    return caps


def envelope(
    event_type: str,
    eid: str,
    harness: str,
    version: str,
    when: Any = None,
    session: Json | None = None,
) -> Json:
    event: Json = {
        "id": eid,
        "source": f"urn:ahp-adapter:{harness}",
        "type": event_type,
        "time": event_time(when),
        "harness": {"name": harness, "version": version or "unknown"},
    }
    if session is not None:
        event["session"] = session
    return event


def session_block(session_id: Any, cwd: Any = None, model: Any = None, roots: Any = None) -> Json:
    if isinstance(session_id, str) and session_id:
        block: Json = {"id": session_id}
    else:
        block = {"id": "unknown", "synthesized": True}
    if isinstance(cwd, str):
        block["cwd"] = cwd
    if isinstance(roots, list) and all(isinstance(r, str) for r in roots):
        block["workspaceRoots"] = roots
    if isinstance(model, str) and model:
        block["model"] = model
    return block


def tool_block(name: str, tool_input: Json, mcp: Json | None = None) -> Json:
    tool: Json = {"name": name, "input": tool_input, "origin": "mcp" if mcp else "native"}
    if mcp:
        tool["mcp"] = mcp
    return tool


def mcp_block(
    server: str, tool_name: str, url: Any = None, command: Any = None, args: Any = None, cwd: Any = None
) -> Json:
    """``tool.mcp`` with the connection the native payload reveals; unknown parts become gaps."""
    connection: Json
    if isinstance(url, str) and re.match(r"^https?://", url):
        connection = {"transport": "http", "url": url}
    elif isinstance(command, str) and command:
        connection = {"transport": "stdio", "command": command}
        gaps = []
        if isinstance(args, list) and all(isinstance(a, str) for a in args):
            connection["args"] = args
        else:
            gaps.append({"path": "args", "reason": "not exposed by the native hook"})
        if isinstance(cwd, str) and cwd:
            connection["cwd"] = cwd
        else:
            gaps.append({"path": "cwd", "reason": "not exposed by the native hook"})
        if gaps:
            connection["gaps"] = gaps
    else:
        reason = "the native hook does not expose the MCP server connection"
        connection = {
            "transport": "_native",
            "gaps": [{"path": "addressForm", "reason": reason}, {"path": "address", "reason": reason}],
        }
    return {
        "server": {"id": server or "unknown"},
        "toolName": tool_name or "unknown",
        "provenance": "inferred",
        "connection": connection,
    }


def parse_input(value: Any) -> Json:
    """Tool input as a JSON object: objects as they are, JSON-encoded strings parsed, anything
    else wrapped (AHP forbids JSON encoded into a string where it wants an object)."""
    if isinstance(value, dict):
        return value
    if isinstance(value, str):
        try:
            parsed = json.loads(value)
        except ValueError:
            return {"value": value}
        return parsed if isinstance(parsed, dict) else {"value": parsed}
    if value is None:
        return {}
    return {"value": value}


def intercept_request(event: Json, caps: Json) -> Json:
    params = {"protocolVersion": PROTOCOL_VERSION, "event": event, "capabilities": caps}
    return jsonrpc.request(event["id"], INTERCEPT, params)


def observe_notification(event: Json) -> Json:
    return jsonrpc.notification(OBSERVE, {"protocolVersion": PROTOCOL_VERSION, "event": event})


# ---------------------------------------------------------------------------------------- answer
class BadAnswer(Exception):
    """The gateway's answer is not an acceptable intercept result (an operational failure)."""


_KEYS = {
    "deny": ({"type", "reason"}, {"code", "extensions"}),
    "allow": ({"type"}, set()),
    "ask": ({"type"}, set()),
    "modify": ({"type", "target", "operation", "value"}, set()),
    "message": ({"type", "text"}, set()),
    "flow": ({"type", "operation"}, {"reason", "instruction"}),
    "inject": ({"type", "target", "operation", "deliverAt", "value"}, set()),
}


def effects_of(body: bytes, request: Json) -> list[Json]:
    """The effect list of a gateway answer, checked as a whole against what this request
    advertised (protocol §6.3/§6.4: the gateway is untrusted input; nothing is salvaged)."""
    try:
        msg = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        raise BadAnswer("the answer is not JSON") from None
    if not jsonrpc.is_version(msg):
        raise BadAnswer("the answer is not a JSON-RPC 2.0 object")
    if msg.get("id") != request["id"]:
        raise BadAnswer("the answer id does not match the request id")
    if "error" in msg:
        error = msg["error"]
        code = error.get("code") if isinstance(error, dict) else None
        raise BadAnswer(f"the gateway answered JSON-RPC error {code}")
    result = msg.get("result")
    if not isinstance(result, dict) or result.get("protocolVersion") != PROTOCOL_VERSION:
        raise BadAnswer("the answer has no result for protocol version draft")
    effects = result.get("effects")
    if not isinstance(effects, list):
        raise BadAnswer("the answer has no effect list")
    caps = request["params"]["capabilities"]
    for effect in effects:
        _check_effect(effect, caps)
    return effects


def _check_effect(effect: Any, caps: Json) -> None:
    if not isinstance(effect, dict) or not isinstance(effect.get("type"), str):
        raise BadAnswer("an effect is not an object with a type")
    kind = effect["type"]
    if kind not in caps["effects"] or kind not in _KEYS:
        raise BadAnswer(f"unadvertised effect {kind!r} for this native event")
    required, optional = _KEYS[kind]
    keys = set(effect)
    if not required <= keys or keys - required - optional:
        raise BadAnswer(f"malformed {kind} effect")
    problem = grant_problem(effect, caps, caps.get("flow", {}).get("remainingContinuations"))
    if problem:  # AHP-CAP-001, the one rule settle.accept applies to upstream answers too
        raise BadAnswer(f"{problem} for this native event")
    if kind == "deny" and not _nonempty(effect["reason"]):
        raise BadAnswer("deny without a reason")
    if kind == "message" and not isinstance(effect["text"], str):
        raise BadAnswer("message without text")
    if kind == "modify":
        value = effect["value"]
        if effect["target"] == "input" and not isinstance(value, dict):
            raise BadAnswer("modify input needs an object")
        if effect["target"] != "input" and not _messages(value):
            raise BadAnswer(f"modify {effect['target']} needs a message list")
    if kind == "flow":
        if effect["operation"] == "stop" and not _nonempty(effect.get("reason")):
            raise BadAnswer("flow stop without a reason")
        if "instruction" in effect and not isinstance(effect["instruction"], str):
            raise BadAnswer("flow instruction is not text")
    if kind == "inject":
        if effect["target"] != "context" or effect["operation"] != "append":
            raise BadAnswer("inject was not advertised in this form")
        if not _messages(effect["value"]):
            raise BadAnswer("inject needs a message list")


def _nonempty(value: Any) -> bool:
    return isinstance(value, str) and bool(value.strip())


def _messages(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(m, dict) and isinstance(m.get("parts"), list) for m in value)


def message_text(messages: list[Json]) -> str:
    """The inline text of a message list (metadata-only and attachment parts carry none)."""
    return "\n".join(
        part["text"]
        for message in messages
        for part in message.get("parts", ())
        if isinstance(part, dict) and part.get("kind") == "text" and isinstance(part.get("text"), str)
    )


class Settled:
    """The gateway's (already collapsed) effect list, read as one native decision. (Plain
    classes rather than dataclasses here: ``dataclasses`` imports ``inspect``, a visible share
    of the adapter's start-up time.)"""

    __slots__ = ("context", "messages", "modified", "permission", "reason", "resume", "stop", "synthetic")

    def __init__(self, permission: str | None = None, reason: str | None = None, synthetic: bool = False) -> None:
        self.permission = permission  # deny | ask | allow | None
        self.reason = reason  # first deny reason
        self.synthetic = synthetic  # an adapter-made denial (gateway failure), not a policy's
        self.modified: dict[str, Any] = {}  # target -> effective value
        self.messages: list[str] = []
        self.context: list[str] = []
        self.stop: str | None = None
        self.resume: list[str] | None = None  # flow continue: the instructions (possibly empty)

    @property
    def empty(self) -> bool:
        return (
            self.permission is None
            and not self.modified
            and not self.messages
            and not self.context
            and self.stop is None
            and self.resume is None
        )


def settle(effects: list[Json], current_input: Json | None) -> Settled:
    out = Settled()
    current = dict(current_input or {})
    for effect in effects:
        kind = effect["type"]
        if kind == "deny":
            if out.permission != "deny":
                out.permission, out.reason = "deny", effect["reason"]
        elif kind == "ask" and out.permission != "deny":
            out.permission = "ask"
        elif kind == "allow" and out.permission is None:
            out.permission = "allow"
        elif kind == "modify":
            target, value = effect["target"], effect["value"]
            if target == "input":
                current = dict(value) if effect["operation"] == "replace" else {**current, **value}
                out.modified["input"] = current
            elif effect["operation"] == "replace":
                out.modified[target] = list(value)
            else:
                out.modified[target] = [*out.modified.get(target, []), *value]
        elif kind == "message":
            out.messages.append(effect["text"])
        elif kind == "inject":
            out.context.append(message_text(effect["value"]))
        elif kind == "flow":
            if effect["operation"] == "stop":
                out.stop = out.stop or effect["reason"]
            else:
                out.resume = [*(out.resume or []), *([effect["instruction"]] if effect.get("instruction") else [])]
    if out.stop is not None:
        out.resume = None  # stop wins over continue
    return out


ASK_REASON = "The policy gateway asks for confirmation of this call."
"""The reason sent with a native ``ask`` where the harness shows one and the answer has no
``message`` to give instead: the AHP ``ask`` effect carries no text of its own."""


def synthetic_denial(why: str) -> Settled:
    """What the adapter decides by itself under ``--on-error deny`` (failure.md: generic reason,
    no network details; distinguishable from a policy denial by its wording)."""
    del why  # the detail goes to stderr only
    return Settled(
        permission="deny",
        reason="Blocked by the AHP gateway adapter: the policy gateway could not be reached or answered badly "
        "(fail-closed).",
        synthetic=True,
    )
