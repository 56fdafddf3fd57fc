"""Issue 28 ("a new user"): with a credential that cannot be resolved the gateway said ready and
the first request failed. ``/readyz`` is false (503) while any configured upstream credential
cannot be resolved — a token variable unset, a token or secret file deleted or emptied after start
(the credential code re-reads both) — with a reason naming the upstream and the variable or file,
never the secret, and ``ahp_gateway_upstream_credential_unresolved`` says which. It turns ready
again as soon as the credential is back. README "Observability" and "Failure behaviour".
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import aiohttp
import pytest

from tests.support.config import gateway_config, hook

SECRET = "upstream-secret-9f2b7c"
READY_DEADLINE = 10.0
"""Token files are re-checked at most once a second; a loaded machine gets the rest."""


async def _ready(http: aiohttp.ClientSession, port: int) -> tuple[int, dict[str, Any], str]:
    async with http.get(f"http://127.0.0.1:{port}/readyz") as answer:
        text = await answer.text()
        return answer.status, await answer.json(), text


async def _until(probe: Callable[[], Any], deadline: float = READY_DEADLINE) -> Any:
    end = time.monotonic() + deadline
    while True:
        value = await probe()
        if value is not None or time.monotonic() > end:
            return value
        await asyncio.sleep(0.05)


def _gauge(gw: Any, hook_id: str) -> float | None:
    for line in gw.observability.metrics.render()[0].decode().splitlines():
        if line.startswith(f'ahp_gateway_upstream_credential_unresolved{{upstream="{hook_id}"}}'):
            return float(line.split()[-1])
    return None


async def test_a_token_file_deleted_after_start_makes_the_gateway_unready_until_it_returns(
    gateway_factory, http, tmp_path
):
    token = tmp_path / "token"
    token.write_text(SECRET + "\n")
    cfg = gateway_config(
        [hook("org.example.guard", "http://127.0.0.1:9/", authentication={"type": "bearer", "tokenRef": "file:token"})]
    )
    gw = await gateway_factory(cfg)
    status, body, _ = await _ready(http, gw.admin_port)
    assert status == 200 and body["ready"] and body["unresolvedCredentials"] == {}, body
    token.unlink()

    async def unready() -> Any:
        found = await _ready(http, gw.admin_port)
        return found if found[0] == 503 else None

    found = await _until(unready)
    assert found is not None, "still ready with the token file gone"
    status, body, text = found
    assert body["ready"] is False and body["configLoaded"] and body["listening"], body
    reason = body["unresolvedCredentials"]["org.example.guard"]
    assert str(token) in reason, reason
    assert SECRET not in text
    # the metric says which upstream, as fresh as the scrape
    async with http.get(f"http://127.0.0.1:{gw.admin_port}/metrics") as answer:
        scraped = await answer.text()
    assert 'ahp_gateway_upstream_credential_unresolved{upstream="org.example.guard"} 1.0' in scraped
    assert SECRET not in scraped
    # an emptied file is no better than a deleted one; the rotated token makes it ready again
    token.write_text("\n")
    await asyncio.sleep(1.1)  # the next re-read of the file
    assert (await _ready(http, gw.admin_port))[0] == 503
    token.write_text("rotated-" + SECRET + "\n")

    async def ready() -> Any:
        found = await _ready(http, gw.admin_port)
        return found if found[0] == 200 else None

    assert await _until(ready) is not None, "not ready again with the token back"
    assert _gauge(gw, "org.example.guard") == 0.0


@pytest.mark.parametrize("ref", ["tokenEnv", "tokenRef", "clientSecretRef"])
async def test_a_variable_unset_at_run_time_makes_the_gateway_unready(
    gateway_factory, http, tmp_path, monkeypatch, ref
):
    """``tokenEnv`` / ``tokenRef: env:`` / an OAuth ``clientSecretRef: env:`` are read on every
    use: a variable removed from the process environment (``os.environ``, as an embedding program
    or a test can) is reported the same way."""
    monkeypatch.setenv("AHP_READY_TOKEN", SECRET)
    if ref == "tokenEnv":
        auth: dict[str, Any] = {"type": "bearer", "tokenEnv": "AHP_READY_TOKEN"}
    elif ref == "tokenRef":
        auth = {"type": "bearer", "tokenRef": "env:AHP_READY_TOKEN"}
    else:
        auth = {
            "type": "oauth",
            "resource": "https://127.0.0.1:9/",
            "issuer": "https://127.0.0.1:9",
            "clientId": "gateway",
            "clientSecretRef": "env:AHP_READY_TOKEN",
            "flow": "client_credentials",
        }
    cfg = gateway_config([hook("org.example.guard", "https://127.0.0.1:9/", authentication=auth)])
    gw = await gateway_factory(cfg)
    assert (await _ready(http, gw.admin_port))[0] == 200
    monkeypatch.delenv("AHP_READY_TOKEN")
    status, body, text = await _ready(http, gw.admin_port)
    assert status == 503 and not body["ready"], body
    assert "AHP_READY_TOKEN is not set" in body["unresolvedCredentials"]["org.example.guard"]
    assert SECRET not in text
    monkeypatch.setenv("AHP_READY_TOKEN", SECRET)
    assert (await _ready(http, gw.admin_port))[0] == 200


async def test_an_upload_binding_credential_counts_too(gateway_factory, http, tmp_path):
    """A subscription's ``upload.auth`` is its own credential (protocol §13.2): reported as
    ``<hook>/upload``."""
    token = tmp_path / "upload-token"
    token.write_text(SECRET + "\n")
    entry = hook("org.example.guard", "http://127.0.0.1:9/")
    entry["subscriptions"][0]["upload"] = {
        "endpoint": "http://127.0.0.1:9/upload",
        "timeoutMs": 500,
        "maxBytes": 1024,
        "auth": {"type": "bearer", "tokenRef": "file:upload-token"},
    }
    gw = await gateway_factory(gateway_config([entry], uploads={"path": "/uploads"}))
    assert (await _ready(http, gw.admin_port))[0] == 200
    token.unlink()

    async def unready() -> Any:
        found = await _ready(http, gw.admin_port)
        return found if found[0] == 503 else None

    found = await _until(unready)
    assert found is not None, "still ready with the upload token file gone"
    assert str(token) in found[1]["unresolvedCredentials"]["org.example.guard/upload"]
    assert SECRET not in found[2]
