"""``gateway.assemble``: the one module that puts the engine together (pool, snapshot holder,
telemetry, uploads, capture, gateway) and closes it in order. Real configurations, real files:
what one intercept leaves in the decision log and the capture once the assembly is closed, which
parts exist for which runner, a refused start that leaves nothing open, and the stdio binding
built without any HTTP module."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import yaml

from gateway.assemble import Assembly
from gateway.config.issues import ConfigError
from gateway.config.load import load
from gateway.server.app import GatewayServer
from gateway.telemetry import NullTelemetry
from tests.support.events import intercept, tool_before
from tests.support.local_policy import write_config
from tests.support.paths import ROOT


def with_uploads(tmp_path: Path) -> Path:
    path = write_config(tmp_path)
    cfg = yaml.safe_load(path.read_text())
    (tmp_path / "tokens.yaml").write_text(yaml.safe_dump({"tokens": [{"name": "a", "sha256": "0" * 64}]}))
    os.chmod(tmp_path / "tokens.yaml", 0o600)
    cfg["inbound"] = {"auth": {"type": "bearer", "tokensFile": "tokens.yaml"}}
    cfg["uploads"] = {"path": "/uploads", "maxBytes": 8192, "storage": {"memoryBytes": 4096, "totalBytes": 20000}}
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return path


async def test_one_intercept_is_in_the_decision_log_and_the_capture_after_close(tmp_path: Path) -> None:
    log = {"decisions": "decisions.jsonl", "capture": "capture.jsonl"}
    assembly = Assembly(load(write_config(tmp_path, log=log)), capture=True)
    assembly.start()
    request = intercept(tool_before("sudo ls"))
    exchange = await assembly.gateway.handle(json.dumps(request).encode(), {})
    await assembly.aclose(1.0)
    (decision,) = [json.loads(line) for line in (tmp_path / "decisions.jsonl").read_text().splitlines()]
    assert decision["event"]["id"] == request["params"]["event"]["id"] and decision["outcome"] == "deny"
    (captured,) = [json.loads(line) for line in (tmp_path / "capture.jsonl").read_text().splitlines()]
    assert captured["request"] == request
    assert exchange.answer is not None and captured["response"] == json.loads(exchange.answer)


async def test_one_shot_runners_get_no_capture_and_no_uploads(tmp_path: Path) -> None:
    loaded = load(with_uploads(tmp_path))
    assembly = Assembly(loaded, telemetry=NullTelemetry())
    assert (assembly.store, assembly.forwarder, assembly.capture, assembly.observability) == (None, None, None, None)
    assert assembly.gateway.intercepts.uploads is None
    await assembly.aclose(0.0)

    served = Assembly(loaded, telemetry=NullTelemetry(), uploads=True)
    assert served.store is not None and served.forwarder is not None
    assert served.gateway.intercepts.uploads is served.forwarder  # the pipeline re-uploads from the receiver's store
    # private: the observer keeps its forwarder to itself; the test checks the assembly handed it the one it built
    assert served.gateway.observer._uploads is served.forwarder
    await served.aclose(0.0)


async def test_an_explain_style_assembly_closes_the_snapshot_it_was_given(tmp_path: Path) -> None:
    from gateway.assemble import compile_snapshot

    snapshot = compile_snapshot(load(write_config(tmp_path)))
    assembly = Assembly(snapshot.loaded, snapshot=snapshot, telemetry=NullTelemetry())
    assert assembly.holder.current is snapshot and assembly.pool is snapshot.pool
    await assembly.aclose(0.0)


async def test_a_reload_snapshot_keeps_the_live_breakers(tmp_path: Path) -> None:
    loaded = load(write_config(tmp_path))
    assembly = Assembly(loaded, telemetry=NullTelemetry())
    breakers = assembly.holder.breakers
    old = assembly.holder.swap(assembly.compile(loaded))
    assert assembly.holder.current is not old and assembly.holder.breakers is breakers
    assert assembly.holder.current.pool is assembly.pool
    await old.aclose()
    await assembly.aclose(0.0)


def capture_threads() -> int:
    return sum(1 for thread in threading.enumerate() if thread.name == "capture" and thread.is_alive())


async def test_a_refused_start_leaves_nothing_running(tmp_path: Path) -> None:
    path = write_config(tmp_path, log={"decisions": "off", "capture": "capture.jsonl"})
    before = capture_threads()
    server = GatewayServer(load(path), host="0.0.0.0", port=0, admin_port=0)  # unauthenticated off loopback
    with pytest.raises(ConfigError):
        await server.start()
    assert server.assembly is None and server.gateway is None
    assert capture_threads() == before  # the capture opened for the start is closed again


def test_the_stdio_binding_imports_no_http_module() -> None:
    code = (
        "import sys, gateway.server.stdio; "
        "print(sorted(m for m in sys.modules if m.startswith(('gateway.server.', 'gateway.native'))))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        check=True,
    )
    loaded = set(json.loads(done.stdout.replace("'", '"')))
    assert "gateway.server.stdio" in loaded
    assert not loaded & {"gateway.server.app", "gateway.server.http", "gateway.server.fastlane", "gateway.server.guard"}
