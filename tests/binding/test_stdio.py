"""stdio upstreams (AHP-STDIO-001): the official SDK served over stdio as a real child process."""

from __future__ import annotations

import sys

import pytest

from tests.support.client import post
from tests.support.config import gateway_config
from tests.support.events import intercept, tool_before
from tests.support.paths import ROOT


def stdio_hook(mode: str, lifecycle: str, policy: str = "fail-closed", timeout: int = 5000) -> dict:
    return {
        "id": f"org.example.stdio-{mode}",
        "transport": {
            "type": "stdio",
            "command": sys.executable,
            "args": ["-m", "tests.support.stdio_backend", mode],
            "lifecycle": lifecycle,
            "cwd": str(ROOT),
        },
        "subscriptions": [
            {
                "mode": "intercept",
                "events": ["tool.before"],
                "timeoutMs": timeout,
                "failurePolicy": policy,
                "content": {"default": "body"},
            }
        ],
    }


@pytest.mark.spec("AHP-STDIO-001")
@pytest.mark.parametrize("lifecycle", ["persistent", "per_event"])
async def test_sdk_stdio_backend_decides(gateway_factory, http, lifecycle):
    gw = await gateway_factory(
        gateway_config([stdio_hook("sdk", lifecycle)], limits={"deadlineMs": 8000}, frontend={"timeoutMs": 9000})
    )
    for _ in range(2 if lifecycle == "persistent" else 1):  # one child serves several requests
        _, body = await post(http, gw.url, intercept(tool_before("git push --force")))
        assert body["result"]["effects"][0]["reason"] == "stdio says no", body
        _, body = await post(http, gw.url, intercept(tool_before("git status")))
        assert body["result"]["effects"] == []


@pytest.mark.parametrize(
    ("mode", "lifecycle"),
    [("garbage", "persistent"), ("garbage", "per_event"), ("hang", "persistent"), ("exit3", "per_event")],
)
async def test_stdio_failures_apply_the_failure_policy(gateway_factory, http, mode, lifecycle):
    timeout = 1500 if mode == "hang" else 5000
    gw = await gateway_factory(
        gateway_config(
            [stdio_hook(mode, lifecycle, timeout=timeout)], limits={"deadlineMs": 8000}, frontend={"timeoutMs": 9000}
        )
    )
    _, body = await post(http, gw.url, intercept(tool_before("git status")))
    effect = body["result"]["effects"][0]
    assert effect["code"] == "org.example.gateway.upstream_unavailable", body


async def test_missing_command_is_an_operational_failure(gateway_factory, http):
    entry = stdio_hook("sdk", "per_event", policy="fail-open")
    entry["transport"]["command"] = "/nonexistent/backend"
    gw = await gateway_factory(gateway_config([entry]))
    _, body = await post(http, gw.url, intercept(tool_before("git push --force")))
    assert body["result"]["effects"] == []


async def test_stdio_env_is_passed_on_a_minimal_environment(gateway_factory, http, tmp_path, monkeypatch):
    """Registration `transport.env` (SDK 0.10.1 schema) is added to a minimal base environment."""
    monkeypatch.setenv("GATEWAY_PRIVATE_SECRET", "must-not-leak")
    out = tmp_path / "env.json"
    script = tmp_path / "envdump.py"
    script.write_text(
        "import json, os, sys\n"
        "line = sys.stdin.readline()\n"
        f"json.dump(dict(os.environ), open({str(out)!r}, 'w'))\n"
        "req = json.loads(line)\n"
        "print(json.dumps({'jsonrpc': '2.0', 'id': req['id'], 'result': {'protocolVersion': 'draft', 'effects': []}}), flush=True)\n"
    )
    entry = stdio_hook("env", "per_event")
    entry["transport"].update(args=[str(script)], env={"REVIEW_MODE": "strict"})
    gw = await gateway_factory(gateway_config([entry]))
    _, body = await post(http, gw.url, intercept(tool_before()))
    assert body["result"]["effects"] == []
    import json as _json

    env = _json.loads(out.read_text())
    assert env["REVIEW_MODE"] == "strict"
    assert "GATEWAY_PRIVATE_SECRET" not in env
