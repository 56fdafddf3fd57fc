"""No credential ever appears in what the gateway writes (protocol §12: "Secret values MUST NOT
occur in ... logs, denial reasons, or JSON-RPC error data"): a real ``ahp-gateway serve``
process at DEBUG with inbound bearer tokens, an upstream event token, an upload token and a
client secret in play, good and bad credentials sent, uploads forwarded; then every byte of its
stdout, stderr, decision log, metrics and answers is searched for every secret."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import aiohttp
import yaml

from tests.support.config import gateway_config
from tests.support.events import intercept, tool_before
from tests.support.paths import ROOT
from tests.support.tokens import TOKEN_A, tokens_file
from tests.support.uploads import PNG, model_request, upload_hook

EVENT_SECRET = "sekrit-event-token-9f1e2d3c"
UPLOAD_SECRET = "sekrit-upload-token-4a5b6c7d"
CLIENT_SECRET = "sekrit-client-secret-0e9d8c"
WRONG = "sekrit-wrong-inbound-token-77aa"


async def test_no_secret_appears_in_any_output(stub_factory, receiver_factory, tmp_path: Path) -> None:  # noqa: F811
    upstream = await stub_factory()
    receiver = await receiver_factory(token=UPLOAD_SECRET)
    tokens_file(tmp_path / "tokens.yaml", (TOKEN_A, "team-a", {"tenant": "a"}))
    (tmp_path / "client-secret").write_text(CLIENT_SECRET)
    hooks = [
        upload_hook(
            "org.example.upstream",
            upstream.url,
            {
                "endpoint": receiver.url,
                "timeoutMs": 1000,
                "maxBytes": 65536,
                "auth": {"type": "bearer", "tokenEnv": "HYGIENE_UPLOAD"},
            },
            authentication={"type": "bearer", "tokenEnv": "HYGIENE_EVENT"},
        ),
        {
            # an OAuth upstream whose authorization server is unreachable: the failure is logged
            "id": "org.example.oauth",
            "transport": {"type": "http", "url": "http://127.0.0.1:9/"},
            "authentication": {
                "type": "oauth",
                "resource": "https://oauth.example/",
                "issuer": "https://127.0.0.1:9",
                "clientId": "gw",
                "clientSecretRef": "file:client-secret",
                "flow": "client_credentials",
            },
            "subscriptions": [
                {
                    "mode": "intercept",
                    "events": ["tool.before"],
                    "timeoutMs": 500,
                    "failurePolicy": "fail-open",
                    "content": {"default": "body"},
                }
            ],
        },
    ]
    cfg = gateway_config(
        hooks,
        inbound={"auth": {"type": "bearer", "tokensFile": "tokens.yaml"}},
        uploads={"maxBytes": 65536},
        log={"decisions": "decisions.jsonl", "includeContent": True},
        limits={"deadlineMs": 2000, "maxBodyBytes": 1048576},
        frontend={"timeoutMs": 3000},
    )
    (tmp_path / "gateway.yaml").write_text(yaml.safe_dump(cfg))
    env = {**os.environ, "HYGIENE_EVENT": EVENT_SECRET, "HYGIENE_UPLOAD": UPLOAD_SECRET, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "gateway", "--log-level", "DEBUG", "serve", "--config", str(tmp_path / "gateway.yaml")],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=tmp_path,
    )
    seen: list[bytes] = []
    try:
        assert proc.stderr is not None
        line = b""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 20
        while b"listening on" not in line:
            assert loop.time() < deadline and proc.poll() is None, b"".join(seen).decode(errors="replace")
            line = await asyncio.to_thread(proc.stderr.readline)
            seen.append(line)
        found = re.search(rb"listening on (\S+) \(admin on ([^)]+)\)", line)
        assert found is not None
        url, admin = found.group(1).decode(), found.group(2).decode()
        async with aiohttp.ClientSession() as http:
            for token in (TOKEN_A, WRONG, EVENT_SECRET, UPLOAD_SECRET, CLIENT_SECRET):
                headers = {"Content-Type": "application/json", "Authorization": f"Bearer {token}"}
                async with http.post(url, data=json.dumps(intercept(tool_before("ls"))), headers=headers) as r:
                    seen.append(await r.read() + str(dict(r.headers)).encode())
            upload_headers = {
                "Authorization": f"Bearer {TOKEN_A}",
                "Content-Type": "application/octet-stream",
                "AHP-Content-SHA256": hashlib.sha256(PNG).hexdigest(),
            }
            async with http.post(url.rstrip("/") + "/uploads", data=PNG, headers=upload_headers) as r:
                receipt = await r.json()
            headers = {"Content-Type": "application/json", "Authorization": f"Bearer {TOKEN_A}"}
            async with http.post(url, data=json.dumps(intercept(model_request(receipt["ref"]))), headers=headers) as r:
                seen.append(await r.read())
            async with http.get(f"http://{admin}/metrics") as r:
                seen.append(await r.read())
        assert receiver.requests, "the upload was forwarded with its token"
        assert upstream.headers and upstream.headers[-1]["Authorization"] == f"Bearer {EVENT_SECRET}"
    finally:
        proc.send_signal(signal.SIGINT)
        out, err = await asyncio.to_thread(proc.communicate, timeout=20)
        seen += [out, err]
    decisions = tmp_path / "decisions.jsonl"
    if decisions.exists():
        seen.append(decisions.read_bytes())
    text = b"".join(seen).decode(errors="replace")
    assert "auth" in text  # the output is not empty: failures were logged
    for secret in (TOKEN_A, WRONG, EVENT_SECRET, UPLOAD_SECRET, CLIENT_SECRET):
        assert secret not in text, f"a secret leaked: {secret[:8]}..."
        assert hashlib.sha256(secret.encode()).hexdigest() not in text
