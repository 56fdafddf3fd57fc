"""``POST /native/<harness>``: the native HTTP hook front end (Claude Code ``type: "http"``,
Copilot CLI ``type: "http"``). The harness POSTs its native payload; the gateway translates it
with the same codec the command adapter uses, runs the AHP message through the same pipeline
(``decide``: request bytes → HTTP status and answer, as the pipeline frames them) and answers with the native JSON in a 200
body, since an HTTP hook can only decide through a 2xx JSON body.

Failures inside the gateway already settle as AHP answers (a fail-closed upstream becomes a deny);
a pipeline fault or an unusable answer is decided here as under ``--on-error deny``. Both
harnesses' HTTP hooks treat any non-2xx answer as a non-blocking error (the call proceeds), so a
body the endpoint will not evaluate (too large, a broken coding, unreadable or unknown payload) is
answered with the harness's own denial in a 200 (:func:`refused`), never with 400 or 413, and so is
a caller refused by inbound authentication (:func:`unauthenticated`: 200, the challenge kept). Only a
media type other than JSON is 415 (the binding's rule, before any byte of the body is read): a
web page can post ``text/plain`` without a CORS preflight, and a real hook always sends JSON.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping

from gateway.native import HTTP_HARNESSES, flow
from gateway.native.claude import UNAUTHENTICATED_REASON, ClaudeFamilyCodec
from gateway.native.model import Codec, NativeAnswer

log = logging.getLogger("ahp_gateway")
Decide = Callable[[bytes, Mapping[str, str]], Awaitable[tuple[int, bytes | None]]]
FRONT_END_HEADER = "X-AHP-Front-End"
_CODECS: dict[str, Codec] = {}
_JSON = "application/json"


def _codec(harness: str) -> Codec:
    codec = _CODECS.get(harness)
    if codec is None:
        codec = _CODECS[harness] = flow.codec_for(harness)
    return codec


def _native(answer: NativeAnswer) -> tuple[int, bytes]:
    if answer.stderr:
        log.warning("%s", answer.stderr.strip())
    return 200, (answer.stdout or "{}").encode("utf-8", "surrogatepass")


def refused(harness: str, event: str | None, why: str) -> tuple[int, bytes]:
    """(HTTP status, body) for a native body the endpoint will not evaluate: 200 with the
    harness's own denial (404 for a harness without an HTTP endpoint)."""
    if harness not in HTTP_HARNESSES:
        return 404, f"no native HTTP endpoint for {harness[:40]!r}; use the command adapter\n".encode()
    log.warning("native %s hook body refused (%s): denied", harness, why)
    codec = _codec(harness)
    assert isinstance(codec, ClaudeFamilyCodec), f"{harness} needs a refusal encoder"  # both HTTP harnesses
    return _native(codec.refusal(event))


def unauthenticated(harness: str, event: str | None, status: int) -> tuple[int, bytes] | None:
    """(200, the harness's own denial) for a caller refused by inbound authentication (401 or
    403): its HTTP hook would proceed on the error status. None for a harness without an HTTP
    endpoint (the plain refusal stands). The adapter keeps the ``WWW-Authenticate`` challenge and
    the refusal is counted in ``ahp_gateway_auth_failures_total`` as on every route."""
    if harness not in HTTP_HARNESSES:
        return None
    log.warning("native %s hook refused by authentication (%d): denied", harness, status)
    codec = _codec(harness)
    assert isinstance(codec, ClaudeFamilyCodec), f"{harness} needs a refusal encoder"
    return _native(codec.refusal(event, UNAUTHENTICATED_REASON.format(status=status)))


async def handle_native(
    harness: str, body: bytes, headers: Mapping[str, str], decide: Decide, *, event: str | None = None
) -> tuple[int, bytes]:
    """(HTTP status, body) for one native HTTP hook call: 200 with the native JSON answer (a
    denial for a payload the codec cannot read), or 404 with a plain-text reason."""
    if harness not in HTTP_HARNESSES:
        return 404, f"no native HTTP endpoint for {harness[:40]!r}; use the command adapter\n".encode()
    codec = _codec(harness)
    prepared = flow.prepare(codec, body, event, "deny")
    if prepared.answer is not None:
        if prepared.tr is None and prepared.answer.exit_code != 0:
            return refused(harness, event, prepared.answer.stderr.strip() or "unusable payload")
        return _native(prepared.answer)
    assert prepared.tr is not None and prepared.body is not None
    forwarded = {k: v for k, v in headers.items() if k.lower() != "x-ahp-front-end"}
    forwarded[FRONT_END_HEADER] = f"native-{harness}"  # set here, never taken from the caller
    try:
        status, answer = await decide(prepared.body, forwarded)
    except Exception:
        log.exception("native %s request failed in the pipeline", harness)
        return _native(flow.failure(codec, prepared.tr, "deny", "internal gateway error"))
    return _native(flow.conclude(codec, prepared.tr, status, answer, "deny"))
