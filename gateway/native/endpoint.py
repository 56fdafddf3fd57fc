"""``POST /native/<harness>``: the native HTTP hook front end (Claude Code ``type: "http"``,
Copilot CLI ``type: "http"``). The harness POSTs its native payload; the gateway translates it
with the same codec the command adapter uses, runs the AHP message through the same pipeline
(``decide``: request bytes → HTTP status and answer, as the pipeline frames them) and answers with the native JSON in a 200
body, since an HTTP hook can only decide through a 2xx JSON body.

Failures inside the gateway already settle as AHP answers (a fail-closed upstream becomes a deny);
a pipeline fault or an unusable answer is decided here as under ``--on-error deny``. A payload
the codec cannot read gets 400, which the harness treats as a non-blocking error (fail-open
unless the hook entry sets ``onFailure: "block"``).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping

from gateway.native import HTTP_HARNESSES, flow
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


async def handle_native(
    harness: str, body: bytes, headers: Mapping[str, str], decide: Decide, *, event: str | None = None
) -> tuple[int, bytes]:
    """(HTTP status, body) for one native HTTP hook call: 200 with the native JSON answer, or
    404/400 with a plain-text reason."""
    if harness not in HTTP_HARNESSES:
        return 404, f"no native HTTP endpoint for {harness[:40]!r}; use the command adapter\n".encode()
    codec = _codec(harness)
    prepared = flow.prepare(codec, body, event, "deny")
    if prepared.answer is not None:
        if prepared.tr is None and prepared.answer.exit_code != 0:
            return 400, prepared.answer.stderr.encode()
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
