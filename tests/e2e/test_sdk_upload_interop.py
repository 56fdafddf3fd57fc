"""The official SDK's interop server as a real upstream: bearer-protected event endpoint plus
its own upload receiver whose scope is bound to a separate upload token. The SDK server refuses
an intercept whose attachment ref it did not allocate for that scope, so a passing intercept
proves the gateway re-uploaded with the upload credential and rewrote the ref (protocol §13.2)."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.support.client import wait_for
from tests.support.config import gateway_config
from tests.support.events import intercept
from tests.support.tokens import TOKEN_A, tokens_file
from tests.support.uploads import PNG, model_request, upload_hook

EVENT_TOKEN = "interop-event-token-3b7e"
UPLOAD_TOKEN = "interop-upload-token-c41f"


@pytest.fixture
async def interop_server(tmp_path: Path) -> Any:
    event = model_request("pending")
    del event["items"][0]["parts"][0]  # the SDK server expects every content part to be a body reference
    scenario = {
        "id": event["id"],
        "request": intercept(event),
        "response": {
            "jsonrpc": "2.0",
            "id": event["id"],
            "result": {
                "protocolVersion": "draft",
                "effects": [{"type": "message", "text": "image seen"}],
            },
        },
        "expected": {},
    }
    (tmp_path / "scenarios.json").write_text(json.dumps({"scenarios": [scenario]}))
    config = {
        "transport": "http",
        "scenarioFile": str(tmp_path / "scenarios.json"),
        "readinessFile": str(tmp_path / "ready.json"),
        "auth": {"mode": "bearer", "token": EVENT_TOKEN, "scope": "tenant-a"},
        "uploadSubscriptions": {"tenant-a": "INTEROP_UPLOAD_TOKEN"},
    }
    (tmp_path / "server.json").write_text(json.dumps(config))
    env = {**os.environ, "INTEROP_UPLOAD_TOKEN": UPLOAD_TOKEN}
    proc = subprocess.Popen(
        [sys.executable, "-m", "agenthooksprotocol.interop", "server", "--config", str(tmp_path / "server.json")],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        await wait_for(lambda: (tmp_path / "ready.json").exists() or proc.poll() is not None, timeout=20)
        assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else ""
        await asyncio.sleep(0)  # the readiness file is written atomically
        ready = json.loads((tmp_path / "ready.json").read_text())
        yield ready, event
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        if proc.stderr:
            proc.stderr.close()


@pytest.mark.spec("AHP-CONTENT-002")
async def test_sdk_interop_server_accepts_the_reuploaded_ref(
    interop_server, gateway_factory, tmp_path, monkeypatch, http
):
    ready, event = interop_server
    monkeypatch.setenv("INTEROP_EVENT_TOKEN", EVENT_TOKEN)
    monkeypatch.setenv("INTEROP_UPLOAD_TOKEN", UPLOAD_TOKEN)
    tokens_file(tmp_path / "tokens.yaml", (TOKEN_A, "team-a", {"tenant": "a"}))
    upstream = upload_hook(
        "org.example.sdk-interop",
        ready["endpoint"],
        {
            "endpoint": ready["uploadEndpoint"],
            "timeoutMs": 3000,
            "maxBytes": 1 << 20,
            "auth": {"type": "bearer", "tokenEnv": "INTEROP_UPLOAD_TOKEN"},
        },
        authentication={"type": "bearer", "tokenEnv": "INTEROP_EVENT_TOKEN"},
    )
    upstream["subscriptions"][0]["timeoutMs"] = 3000
    gw = await gateway_factory(
        gateway_config(
            [upstream],
            inbound={"auth": {"type": "bearer", "tokensFile": "tokens.yaml"}},
            uploads={"maxBytes": 65536},
            limits={"deadlineMs": 4000, "maxBodyBytes": 1048576},
            frontend={"timeoutMs": 5000},
        )
    )
    auth = {"Authorization": f"Bearer {TOKEN_A}"}
    headers = {
        **auth,
        "Content-Type": "application/octet-stream",
        "AHP-Content-SHA256": hashlib.sha256(PNG).hexdigest(),
    }
    async with http.post(gw.url.rstrip("/") + "/uploads", data=PNG, headers=headers) as response:
        assert response.status == 201
        receipt = await response.json()
    attachment(event)["body"]["ref"] = receipt["ref"]
    request = intercept(event, {"effects": ["deny", "message"]})
    async with http.post(gw.url, data=json.dumps(request), headers={**auth, "Content-Type": "application/json"}) as r:
        body = await r.json()
    assert body["result"]["effects"] == [{"type": "message", "text": "image seen"}], body
    async with aiohttp.ClientSession() as control:
        async with control.get(ready["controlEndpoint"] + "/receipts") as r:
            receipts = (await r.json())["requests"]
    sent = attachment(receipts[0]["message"]["params"]["event"])
    assert sent["body"]["ref"].startswith("urn:uuid:") and sent["body"]["ref"] != receipt["ref"]


def attachment(event: dict[str, Any]) -> dict[str, Any]:
    part: dict[str, Any] = event["items"][0]["parts"][0]
    return part
