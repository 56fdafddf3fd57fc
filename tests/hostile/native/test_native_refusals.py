"""``POST /native/<harness>`` refusals (issue 28 item 4, AHP-HTTP-001, AHP-FAIL-001).

Claude Code and Copilot CLI HTTP hooks treat a non-2xx answer as a non-blocking error: the call
proceeds. So a body the endpoint refuses on size or shape (over ``maxBodyBytes`` declared or
streamed, a broken content coding, unreadable JSON) must be answered with the harness's own
denial in a 2xx body; a padded force push must never pass every policy. A media type other than
``application/json`` is still 415 and never processed: a web page can post ``text/plain``
without a CORS preflight, and a real hook always sends JSON.
"""

from __future__ import annotations

import asyncio
import gzip
import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from tests.support import native_payloads
from tests.support.config import gateway_config, hook
from tests.support.fault_tools import raw_request

LIMIT = 4096
PAD = "x" * (2 * LIMIT)


def _claude(command: str) -> dict[str, Any]:
    payload = json.loads(json.dumps(native_payloads.CLAUDE["PreToolUse/Bash"]))
    payload["tool_input"]["command"] = command
    return payload


def _copilot(command: str) -> dict[str, Any]:
    payload = dict(native_payloads.COPILOT["preToolUse/bash"])
    payload["toolArgs"] = json.dumps({"command": command})
    return payload


TARGETS = {
    "claude-code": ("/native/claude-code", _claude),
    "copilot": ("/native/copilot?event=preToolUse", _copilot),
}


def _denies(harness: str, answer: Any) -> bool:
    """The harness's own denial: what it enforces from a 2xx body."""
    if not isinstance(answer, dict):
        return False
    if harness == "copilot":
        return answer.get("permissionDecision") == "deny"
    specific = answer.get("hookSpecificOutput", {}).get("permissionDecision") == "deny"
    return specific or answer.get("decision") == "block" or answer.get("continue") is False


@pytest.fixture(params=[True, False], ids=["fast-lane", "aiohttp"])
async def gateway(request, gateway_factory, stub_factory):
    upstream = await stub_factory()  # answers no objection to everything it sees
    cfg = gateway_config([hook("org.example.up", upstream.url)])
    cfg["listen"]["fastLane"] = request.param
    cfg["limits"]["maxBodyBytes"] = LIMIT
    cfg["limits"]["bodyTimeoutMs"] = 300
    gw = await gateway_factory(cfg, name=f"gateway-{request.param}.yaml")
    return gw, upstream


async def _send(gw: Any, path: str, data: Any, headers: dict[str, str]) -> tuple[int, str, bytes]:
    async with aiohttp.ClientSession() as http:
        async with http.post(gw.url.rstrip("/") + path, data=data, headers=headers) as response:
            return response.status, response.content_type, await response.read()


@pytest.mark.spec("AHP-FAIL-001")
@pytest.mark.parametrize("harness", sorted(TARGETS))
@pytest.mark.parametrize(
    "shape",
    [
        "declared over maxBodyBytes",
        "streamed over maxBodyBytes",
        "gzip over maxBodyBytes",
        "not JSON",
        "truncated gzip",
    ],
)
async def test_fail_001_a_refused_native_body_gets_the_harness_own_denial(gateway, harness, shape):
    gw, upstream = gateway
    path, payload = TARGETS[harness]
    body = json.dumps(payload(f"git push --force origin main # {PAD}")).encode()
    headers = {"Content-Type": "application/json"}
    data: Any = body
    if shape == "streamed over maxBodyBytes":

        async def chunks() -> AsyncIterator[bytes]:
            for at in range(0, len(body), 1024):
                yield body[at : at + 1024]

        data = chunks()
    elif shape == "gzip over maxBodyBytes":
        data, headers["Content-Encoding"] = gzip.compress(body), "gzip"
    elif shape == "not JSON":
        data = b"{not json"
    elif shape == "truncated gzip":
        data, headers["Content-Encoding"] = gzip.compress(b'{"a": 1}')[:-6], "gzip"
    status, content_type, raw = await _send(gw, path, data, headers)
    assert 200 <= status < 300, (status, raw)
    assert content_type == "application/json"
    assert _denies(harness, json.loads(raw)), raw
    assert upstream.received == []


@pytest.mark.spec("AHP-HTTP-001")
@pytest.mark.parametrize("harness", sorted(TARGETS))
@pytest.mark.parametrize("content_type", ["text/plain", "application/x-www-form-urlencoded", None])
async def test_http_001_native_endpoints_require_application_json(gateway, harness, content_type):
    """A type a page can send without a preflight is refused before the body is processed."""
    gw, upstream = gateway
    path, payload = TARGETS[harness]
    body = json.dumps(payload("git status")).encode()
    headers = {"Content-Type": content_type} if content_type else {}
    status, _, _ = await _send(gw, path, body, headers)
    assert status == 415
    assert upstream.received == []
    status, _, raw = await _send(gw, path, body, {"Content-Type": "application/json; charset=utf-8"})
    assert status == 200 and len(upstream.received) == 1, raw


@pytest.mark.spec("AHP-FAIL-001")
@pytest.mark.parametrize("harness", sorted(TARGETS))
async def test_fail_001_a_native_body_that_never_completes_is_denied_not_408(gateway, harness):
    """The body stalls past ``bodyTimeoutMs``: the harness's denial, and the connection closes."""
    gw, upstream = gateway
    path, payload = TARGETS[harness]
    body = json.dumps(payload("git push --force origin main")).encode()
    reader, writer = await asyncio.open_connection("127.0.0.1", gw.port)
    try:
        writer.write(raw_request(body, path=path)[: -len(body) // 2])
        await writer.drain()
        raw = await asyncio.wait_for(reader.read(), 5)  # read to EOF: the gateway closes
    finally:
        writer.close()
    head, _, answer = raw.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200"), raw
    assert _denies(harness, json.loads(answer)), raw
    assert upstream.received == []
