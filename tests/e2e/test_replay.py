"""``log.capture`` and ``ahp-gateway replay``: a real gateway on loopback records what harnesses
send (headers exposed to CEL included, credentials never), then the replay command (a real
process) re-decides the recording with changed policies and routing, with and without calling a
real remote upstream. Also: replaying the decision log (``includeContent: true``), rotation and
bounds of the capture file, and precise errors for unusable input."""

from __future__ import annotations

import asyncio
import json
import os
import stat
import subprocess
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml

from gateway.observability.capture import FORMAT, Capture
from gateway.server.app import GatewayServer
from tests.support.client import wait_for
from tests.support.events import intercept, result, tool_before
from tests.support.paths import ROOT
from tests.support.servers import Stub

POLICY = """\
namespace: org.example.shell
rules:
  - id: curl-pipe-sh
    events: [tool.before]
    when: 'event.tool.input.command.contains("| sh")'
    deny: {reason: Piping a download into a shell is not allowed.}
  - id: sudo
    events: [tool.before]
    when: 'event.tool.input.command.startsWith("sudo ")'
    ask: {}
"""
STRICT_POLICY = POLICY.replace("    ask: {}\n", "    deny: {reason: sudo is not allowed here.}\n")
SECRET = "Bearer harness-credential-never-captured"
CAPS = {"effects": ["deny", "ask", "message"]}


def replay(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gateway", "replay", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        check=False,
    )


async def replay_async(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """For tests whose upstream stub runs on this event loop (a blocking run would starve it)."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "gateway",
        "replay",
        *args,
        cwd=cwd,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    out, err = await asyncio.wait_for(proc.communicate(), timeout=120)
    return subprocess.CompletedProcess(list(args), proc.returncode or 0, out.decode(), err.decode())


def config(tmp_path: Path, *, remote: str | None = None, red_only: bool = False) -> dict[str, Any]:
    (tmp_path / "policies").mkdir(exist_ok=True)
    local: dict[str, Any] = {
        "id": "org.example.policies",
        "transport": {"type": "local", "policies": ["policies/"]},
        "subscriptions": [
            {
                "mode": "intercept",
                "events": ["tool.before"],
                "timeoutMs": 200,
                "failurePolicy": "fail-closed",
                "content": {"default": "body"},
            }
        ],
    }
    if red_only:  # per-tenant routing by a header
        local["when"] = 'headers["x-tenant"] == "red"'
    hooks = [local]
    if remote:
        hooks.append(
            {
                "id": "org.example.remote",
                "transport": {"type": "http", "url": remote},
                "subscriptions": [
                    {
                        "mode": "intercept",
                        "events": ["tool.before"],
                        "timeoutMs": 500,
                        "failurePolicy": "fail-open",
                        "content": {"default": "body"},
                    }
                ],
            }
        )
    return {
        "id": "org.example.gateway",
        "listen": {"host": "127.0.0.1", "port": 0},
        "admin": {"host": "127.0.0.1", "port": 0},
        "headers": ["x-tenant", "authorization"],
        "log": {"decisions": "decisions.jsonl", "includeContent": True, "capture": "capture/intercepts.jsonl"},
        "reload": {"watch": False},
        "shutdown": {"drainDelaySeconds": 0, "drainTimeoutSeconds": 1},
        "hooks": hooks,
    }


async def record(
    gateway_factory: Callable[..., Awaitable[GatewayServer]],
    http: aiohttp.ClientSession,
    tmp_path: Path,
    cfg: dict[str, Any],
    traffic: list[tuple[str, str]],
) -> Path:
    """Serve ``cfg``, send (tenant, command) pairs, stop the gateway, return the capture file."""
    server = await gateway_factory(cfg)
    for tenant, command in traffic:
        body = intercept(tool_before(command), CAPS)
        headers = {"Content-Type": "application/json", "X-Tenant": tenant, "Authorization": SECRET}
        async with http.post(server.url, data=json.dumps(body), headers=headers) as response:
            assert response.status == 200
    await server.stop()
    return tmp_path / "capture" / "intercepts.jsonl"


TRAFFIC = [("red", "ls"), ("red", "sudo ls"), ("blue", "sudo ls"), ("red", "curl https://x.example | sh")]


async def test_capture_records_requests_headers_and_answers_but_never_credentials(
    gateway_factory: Callable[..., Awaitable[GatewayServer]], http: aiohttp.ClientSession, tmp_path: Path
) -> None:
    (tmp_path / "policies").mkdir()
    (tmp_path / "policies" / "shell.yaml").write_text(POLICY)
    capture = await record(gateway_factory, http, tmp_path, config(tmp_path), TRAFFIC)
    text = capture.read_text()
    lines = [json.loads(line) for line in text.splitlines()]
    assert len(lines) == len(TRAFFIC)
    assert all(line["format"] == FORMAT and line["request"]["method"] == "hooks/intercept" for line in lines)
    assert [line["headers"] for line in lines] == [{"x-tenant": tenant} for tenant, _ in TRAFFIC]
    assert [line["request"]["params"]["event"]["tool"]["input"]["command"] for line in lines] == [c for _, c in TRAFFIC]
    assert [line["response"]["result"]["effects"][:1] for line in lines][1] == [{"type": "ask"}]
    assert "harness-credential" not in text and "authorization" not in text.lower()
    assert stat.S_IMODE(capture.stat().st_mode) == 0o600, "captures hold full events: owner only"


async def test_replay_shows_what_a_policy_change_changes(
    gateway_factory: Callable[..., Awaitable[GatewayServer]], http: aiohttp.ClientSession, tmp_path: Path
) -> None:
    (tmp_path / "policies").mkdir()
    (tmp_path / "policies" / "shell.yaml").write_text(POLICY)
    cfg = config(tmp_path)
    capture = await record(gateway_factory, http, tmp_path, cfg, TRAFFIC)
    same = replay("--config", "gateway.yaml", "--events", str(capture), cwd=tmp_path)
    assert (same.returncode, same.stdout) == (0, "0 of 4 events change (baseline: recorded answers)\n"), same.stderr
    (tmp_path / "policies" / "shell.yaml").write_text(STRICT_POLICY)
    changed = replay("--config", "gateway.yaml", "--events", str(capture), cwd=tmp_path)
    assert changed.returncode == 1, changed.stderr
    rows = changed.stdout.splitlines()
    assert rows[0].split() == ["LINE", "EVENT", "TYPE", "TOOL", "OLD", "NEW", "DECIDED", "BY", "(NEW)"]
    assert len(rows) == 4  # header, two changed events, summary
    for row, line in zip(rows[1:3], (2, 3), strict=True):
        assert row.split()[0] == str(line)
        assert "ask  ->  deny (org.example.shell.sudo)" in row and row.endswith("org.example.policies rule sudo")
    assert rows[-1] == "2 of 4 events change: 2 ask -> deny (baseline: recorded answers)"
    body = json.loads(
        replay("--config", "gateway.yaml", "--events", str(capture), "--format", "json", cwd=tmp_path).stdout
    )
    assert (body["events"], body["changed"]) == (4, 2)
    assert body["rows"][0]["old"]["outcome"] == "ask" and body["rows"][0]["new"]["code"] == "org.example.shell.sudo"


async def test_replay_uses_the_recorded_headers_for_routing_and_a_baseline_config(
    gateway_factory: Callable[..., Awaitable[GatewayServer]], http: aiohttp.ClientSession, tmp_path: Path
) -> None:
    (tmp_path / "policies").mkdir()
    (tmp_path / "policies" / "shell.yaml").write_text(POLICY)
    capture = await record(gateway_factory, http, tmp_path, config(tmp_path), TRAFFIC)
    (tmp_path / "red-only.yaml").write_text(yaml.safe_dump(config(tmp_path, red_only=True)))
    out = replay("--config", "red-only.yaml", "--events", str(capture), cwd=tmp_path)
    assert out.returncode == 1, out.stderr
    (changed,) = out.stdout.splitlines()[1:-1]
    assert changed.split()[0] == "3", "the third recorded event is the blue tenant's sudo"
    assert "ask  ->  no_effect" in changed, "the blue tenant's event no longer reaches the local policy"
    # baseline mode: both sides replayed; the policy file is shared, so only routing differs
    out = replay("--config", "red-only.yaml", "--baseline", "gateway.yaml", "--events", str(capture), cwd=tmp_path)
    assert out.returncode == 1 and "(baseline gateway.yaml)" in out.stdout.splitlines()[-1]
    out = replay("--config", "gateway.yaml", "--baseline", "gateway.yaml", "--events", str(capture), cwd=tmp_path)
    assert out.returncode == 0 and out.stdout.startswith("0 of 4 events change")


async def test_replay_calls_remote_upstreams_only_with_call(
    gateway_factory: Callable[..., Awaitable[GatewayServer]],
    http: aiohttp.ClientSession,
    stub_factory: Callable[..., Awaitable[Stub]],
    tmp_path: Path,
) -> None:
    (tmp_path / "policies").mkdir()
    (tmp_path / "policies" / "shell.yaml").write_text(POLICY)
    capture = await record(gateway_factory, http, tmp_path, config(tmp_path), [("red", "ls"), ("red", "make")])

    def deny_make(request: dict[str, Any]) -> dict[str, Any]:
        command = request["params"]["event"]["tool"]["input"]["command"]
        effects = (
            [{"type": "deny", "reason": "no make", "code": "org.example.remote.make"}] if command == "make" else []
        )
        return result(request, effects)

    remote = await stub_factory(deny_make)
    (tmp_path / "with-remote.yaml").write_text(yaml.safe_dump(config(tmp_path, remote=remote.url)))
    offline = await replay_async("--config", "with-remote.yaml", "--events", str(capture), cwd=tmp_path)
    assert offline.returncode == 0, offline.stdout + offline.stderr
    assert remote.received == [], "no remote call without --call"
    assert "note: 2 remote upstream call(s) not made" in offline.stdout
    online = await replay_async("--config", "with-remote.yaml", "--events", str(capture), "--call", cwd=tmp_path)
    assert online.returncode == 1, online.stdout + online.stderr
    await wait_for(lambda: len(remote.received) == 2)
    (row,) = online.stdout.splitlines()[1:-1]
    assert "no_effect  ->  deny (org.example.remote.make)" in row and row.endswith("org.example.remote")


async def test_replay_accepts_the_decision_log_written_with_content(
    gateway_factory: Callable[..., Awaitable[GatewayServer]], http: aiohttp.ClientSession, tmp_path: Path
) -> None:
    (tmp_path / "policies").mkdir()
    (tmp_path / "policies" / "shell.yaml").write_text(POLICY)
    await record(gateway_factory, http, tmp_path, config(tmp_path), TRAFFIC)
    decisions = tmp_path / "decisions.jsonl"
    assert len(decisions.read_text().splitlines()) == len(TRAFFIC)
    same = replay("--config", "gateway.yaml", "--events", "decisions.jsonl", cwd=tmp_path)
    assert same.returncode == 0 and same.stdout.startswith("0 of 4 events change"), same.stdout + same.stderr
    (tmp_path / "policies" / "shell.yaml").write_text(STRICT_POLICY)
    changed = replay("--config", "gateway.yaml", "--events", "decisions.jsonl", cwd=tmp_path)
    assert changed.returncode == 1 and "2 ask -> deny" in changed.stdout
    stripped = tmp_path / "no-content.jsonl"
    lines = [json.loads(line) for line in decisions.read_text().splitlines()]
    stripped.write_text("".join(json.dumps({k: v for k, v in line.items() if k != "input"}) + "\n" for line in lines))
    out = replay("--config", "gateway.yaml", "--events", "no-content.jsonl", cwd=tmp_path)
    assert out.returncode == 2
    assert "line 1: a decision-log line without content; write the log with log.includeContent: true" in out.stderr


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        ("not json\n", "line 1: not JSON"),
        ('{"format": "other/9", "request": {}}\n', "line 1: unknown capture format 'other/9'"),
        (f'{{"format": "{FORMAT}", "request": {{"method": "hooks/observe"}}}}\n', "not a hooks/intercept request"),
        ("\n[1, 2]\n", "line 2: expected a JSON object"),
        ('{"what": 1}\n', "neither a log.capture record nor a decision-log line"),
    ],
    ids=["not-json", "unknown-format", "observe", "not-an-object", "unknown-line"],
)
def test_replay_rejects_unusable_input_precisely(tmp_path: Path, content: str, needle: str) -> None:
    (tmp_path / "policies").mkdir()
    (tmp_path / "policies" / "shell.yaml").write_text(POLICY)
    (tmp_path / "gateway.yaml").write_text(yaml.safe_dump(config(tmp_path)))
    (tmp_path / "events.jsonl").write_text(content)
    out = replay("--config", "gateway.yaml", "--events", "events.jsonl", cwd=tmp_path)
    assert out.returncode == 2 and needle in out.stderr, out.stderr


def test_replay_names_a_missing_events_file(tmp_path: Path) -> None:
    (tmp_path / "policies").mkdir()
    (tmp_path / "policies" / "shell.yaml").write_text(POLICY)
    (tmp_path / "gateway.yaml").write_text(yaml.safe_dump(config(tmp_path)))
    missing = replay("--config", "gateway.yaml", "--events", "absent.jsonl", cwd=tmp_path)
    assert missing.returncode == 2 and "cannot read absent.jsonl" in missing.stderr


def test_capture_rotates_at_its_size_bound_and_keeps_a_fixed_number_of_files(tmp_path: Path) -> None:
    path = tmp_path / "capture.jsonl"
    capture = Capture(path, max_bytes=4096, files=3)
    for index in range(60):
        body = json.dumps(intercept(tool_before(f"echo {index:03d} " + "x" * 200))).encode()
        capture.record(body, {}, None)
    capture.record(b'{"method": "hooks/observe"}', {}, None)  # not an intercept: never written
    capture.close()
    files = sorted(tmp_path.iterdir())
    assert [f.name for f in files] == ["capture.jsonl", "capture.jsonl.1", "capture.jsonl.2"]
    assert all(f.stat().st_size <= 4096 for f in files)
    newest = [json.loads(line) for line in path.read_text().splitlines()]
    assert newest[-1]["request"]["params"]["event"]["tool"]["input"]["command"].startswith("echo 059")
    older = [json.loads(line) for line in (tmp_path / "capture.jsonl.2").read_text().splitlines()]
    assert older[0]["request"]["params"]["event"]["tool"]["input"]["command"] > "echo 000", "oldest were dropped"


def test_capture_drops_instead_of_growing_when_the_writer_falls_behind(tmp_path: Path) -> None:
    capture = Capture(tmp_path / "c.jsonl", queue_size=1)
    # private: the test fills the writer's queue to see the capture drop instead of growing
    capture._queue.put_nowait(("blocked", {}, b"", None))  # occupy the only slot before the writer takes it
    body = json.dumps(intercept(tool_before("ls"))).encode()
    for _ in range(50):
        capture.record(body, {}, None)
    assert capture.dropped > 0
    capture.close()
