"""One native invocation end to end, minus the transport: native bytes → AHP message bytes, and
the gateway's answer (or its absence) → the native answer. Shared by the command adapter and the
``/native/<harness>`` endpoint.

Failure honesty (native-hooks §7.3): when the gateway is unreachable, slow or answers badly, the
adapter decides by itself. ``deny`` (the default) emits the harness's own denial for native events
that can deny, and says on stderr that it did; events that cannot be denied proceed, with a note.
``allow`` emits the native no-op. The adapter never salvages part of a bad answer.
"""

from __future__ import annotations

import json

from gateway.native import ahp
from gateway.native.ahp import BadAnswer, Json
from gateway.native.model import Codec, NativeAnswer, NativePayloadError, Translation

MAX_PAYLOAD_BYTES = 8 * 1024 * 1024
ON_ERROR = ("deny", "allow")


def codec_for(harness: str) -> Codec:
    """The codec of one harness (imported on demand: a hook process needs exactly one)."""
    if harness in ("claude-code", "codex", "copilot"):
        from gateway.native.claude import PROFILES, ClaudeFamilyCodec

        return ClaudeFamilyCodec(PROFILES[harness])
    if harness == "gemini":
        from gateway.native.gemini import GeminiCodec

        return GeminiCodec()
    if harness == "cursor":
        from gateway.native.cursor import CursorCodec

        return CursorCodec()
    if harness == "windsurf":
        from gateway.native.windsurf import WindsurfCodec

        return WindsurfCodec()
    raise KeyError(harness)


class Prepared:
    __slots__ = ("answer", "body", "tr")

    def __init__(self, tr: Translation | None, body: bytes | None = None, answer: NativeAnswer | None = None) -> None:
        self.tr = tr
        self.body = body  # the AHP message to send
        self.answer = answer  # set when no gateway call is needed


def parse_payload(raw: bytes) -> Json:
    if len(raw) > MAX_PAYLOAD_BYTES:
        raise NativePayloadError(f"native payload exceeds {MAX_PAYLOAD_BYTES} bytes")
    try:
        payload = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        raise NativePayloadError("native payload is not JSON") from None
    except RecursionError:
        raise NativePayloadError("native payload is nested too deeply") from None
    if not isinstance(payload, dict):
        raise NativePayloadError("native payload is not a JSON object")
    return payload


def without_ask(tr: Translation) -> None:
    """Non-interactive runs (``--non-interactive``): nobody can answer a prompt, and headless
    Gemini (``gemini -p``) waits on a BeforeTool ``ask`` until killed (or, stdin at EOF, exits 0
    with no output). Not advertising ``ask`` makes the
    gateway apply each asking rule's fallback (its deny), as for a harness that cannot ask; an
    ``ask`` answered anyway is an unusable answer, decided by ``--on-error``."""
    caps = tr.caps
    if caps is not None and "ask" in caps["effects"]:
        # a copy: the codecs share one advertisement per event across calls
        tr.message["params"]["capabilities"] = {**caps, "effects": [e for e in caps["effects"] if e != "ask"]}


def prepare(
    codec: Codec, raw: bytes, event: str | None, on_error: str, *, ask: bool = True, version: str | None = None
) -> Prepared:
    """``version``: the agent's version where the payload gives none (:mod:`gateway.native.versions`)."""
    try:
        tr = codec.translate(parse_payload(raw), event)
        if tr is not None and not ask:
            without_ask(tr)
        if tr is not None and version:
            harness = tr.message["params"]["event"]["harness"]
            if harness.get("version") == "unknown":
                harness["version"] = version
        body = json.dumps(tr.message, ensure_ascii=False).encode("utf-8", "surrogatepass") if tr else None
    except RecursionError:
        return Prepared(None, answer=failure(codec, None, on_error, "unusable native payload: nested too deeply"))
    except NativePayloadError as exc:
        return Prepared(None, answer=failure(codec, None, on_error, f"unusable native payload: {exc}"))
    if tr is None:
        return Prepared(None, answer=codec.noop(None))
    return Prepared(tr, body=body)


def conclude(codec: Codec, tr: Translation, status: int, body: bytes | None, on_error: str) -> NativeAnswer:
    """The native answer for the gateway's HTTP answer (AHP-HTTP-001: intercept → 200 + body,
    observe → 202/204 without one; anything else is an operational failure)."""
    if not tr.intercept:
        if status in (202, 204):
            return codec.noop(tr)
        return codec.noop(tr).with_note(f"ahp-gateway hook: the observation was not accepted (HTTP {status})")
    if status != 200 or not body:
        return failure(codec, tr, on_error, f"the gateway answered HTTP {status}" + ("" if body else " without a body"))
    try:
        effects = ahp.effects_of(body, tr.message)
        return codec.answer(tr, ahp.settle(effects, tr.tool_input))
    except BadAnswer as exc:
        return failure(codec, tr, on_error, f"unusable gateway answer: {exc}")


def failure(codec: Codec, tr: Translation | None, on_error: str, why: str) -> NativeAnswer:
    note = f"ahp-gateway hook: {why}; "
    if tr is not None and not tr.intercept:
        return codec.noop(tr).with_note(note + "observation dropped")
    if on_error == "allow":
        return codec.noop(tr).with_note(note + "proceeding (--on-error allow)")
    if tr is None:
        # Event unknown: exit 2 is the blocking answer of every supported harness's command hooks.
        return NativeAnswer(2, "", "").with_note(note + "blocking (--on-error deny)")
    if not tr.can_deny:
        return codec.noop(tr).with_note(note + f"{tr.native_event} cannot be denied natively, so it proceeds")
    return codec.answer(tr, ahp.synthetic_denial(why)).with_note(note + "denied (--on-error deny)")
