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
from tests.support.tokens import TOKEN_A, tokens_file

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


@pytest.fixture(params=[True, False], ids=["fast-lane", "aiohttp"])
async def guarded(request, gateway_factory, stub_factory, tmp_path):
    """The same gateway behind bearer authentication (``team-a`` holds TOKEN_A)."""
    upstream = await stub_factory()
    tokens_file(tmp_path / "tokens.yaml", (TOKEN_A, "team-a", {}))
    cfg = gateway_config(
        [hook("org.example.up", upstream.url)], inbound={"auth": {"type": "bearer", "tokensFile": "tokens.yaml"}}
    )
    cfg["listen"]["fastLane"] = request.param
    gw = await gateway_factory(cfg, name=f"guarded-{request.param}.yaml")
    return gw, upstream


def _auth_failures(gw: Any, reason: str) -> float:
    for line in gw.observability.metrics.render()[0].decode().splitlines():
        if line.startswith(f'ahp_gateway_auth_failures_total{{reason="{reason}"}}'):
            return float(line.split()[-1])
    return 0.0


@pytest.mark.spec("AHP-FAIL-001")
@pytest.mark.parametrize("harness", sorted(TARGETS))
@pytest.mark.parametrize(("credential", "reason"), [(None, "missing"), ("Bearer not-a-known-token", "unknown_token")])
async def test_fail_001_an_unauthenticated_native_hook_gets_the_harness_own_denial(
    guarded, harness, credential, reason
):
    """Issue 28: a 401 on ``/native/<harness>`` let the call proceed (both harnesses' HTTP hooks
    treat any non-2xx as a non-blocking error). The refusal is the harness's own denial in a 200,
    the ``WWW-Authenticate`` challenge is kept, the failure is counted, the pipeline never runs."""
    gw, upstream = guarded
    path, payload = TARGETS[harness]
    body = json.dumps(payload("git push --force origin main")).encode()
    headers = {"Content-Type": "application/json"}
    if credential:
        headers["Authorization"] = credential
    before = _auth_failures(gw, reason)
    async with aiohttp.ClientSession() as http:
        async with http.post(gw.url.rstrip("/") + path, data=body, headers=headers) as response:
            status, raw = response.status, await response.read()
            challenge = response.headers.get("WWW-Authenticate", "")
            content_type = response.content_type
    assert status == 200, (status, raw)
    assert content_type == "application/json"
    assert _denies(harness, json.loads(raw)), raw
    assert challenge.startswith("Bearer"), challenge
    assert upstream.received == []
    assert _auth_failures(gw, reason) == before + 1
    # the AHP route keeps its 401: an AHP client reads the status
    async with aiohttp.ClientSession() as http:
        async with http.post(gw.url, data=b"{}", headers={"Content-Type": "application/json"}) as response:
            assert response.status == 401
    # and the right token is served
    headers["Authorization"] = f"Bearer {TOKEN_A}"
    status, _, raw = await _send(gw, path, body, headers)
    assert status == 200 and len(upstream.received) == 1, raw


@pytest.mark.spec("AHP-FAIL-001")
@pytest.mark.parametrize("harness", sorted(TARGETS))
async def test_fail_001_a_native_hook_refused_from_its_head_is_denied_before_its_body(guarded, harness):
    """Refused from the head while the body is still on its way (the fast lane answers at once,
    aiohttp once it reads the request): still the harness's denial in a 200, never a 401."""
    gw, upstream = guarded
    path, payload = TARGETS[harness]
    body = json.dumps(payload("git push --force origin main")).encode()
    reader, writer = await asyncio.open_connection("127.0.0.1", gw.port)
    try:
        writer.write(raw_request(body, path=path)[: -len(body) // 2])
        await writer.drain()
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
        length = int(
            next(line for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")).split(b":")[1]
        )
        answer = await asyncio.wait_for(reader.readexactly(length), 5)
    finally:
        writer.close()
    assert head.startswith(b"HTTP/1.1 200"), head
    assert b"www-authenticate: bearer" in head.lower(), head
    assert _denies(harness, json.loads(answer)), answer
    assert upstream.received == []


@pytest.mark.spec("AHP-FAIL-001")
@pytest.mark.parametrize("harness", sorted(TARGETS))
async def test_fail_001_an_unauthenticated_native_hook_expecting_100_continue_is_denied(guarded, harness):
    """``Expect: 100-continue``: refused before the body is sent, with the harness's denial."""
    gw, upstream = guarded
    path, payload = TARGETS[harness]
    body = json.dumps(payload("git push --force origin main")).encode()
    head = raw_request(body, path=path, headers={"Expect": "100-continue"})[: -len(body)]
    reader, writer = await asyncio.open_connection("127.0.0.1", gw.port)
    try:
        writer.write(head)
        await writer.drain()
        answer_head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
        length = int(
            next(x for x in answer_head.split(b"\r\n") if x.lower().startswith(b"content-length")).split(b":")[1]
        )
        answer = await asyncio.wait_for(reader.readexactly(length), 5)
    finally:
        writer.close()
    assert answer_head.startswith(b"HTTP/1.1 200"), answer_head
    assert b"www-authenticate: bearer" in answer_head.lower(), answer_head
    assert _denies(harness, json.loads(answer)), answer
    assert upstream.received == []
