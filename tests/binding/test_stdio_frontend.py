"""The stdio front end, ``ahp-gateway stdio`` (AHP-STDIO-001): framing as a pure function, the
serving loop on a real engine, and the real process driven by the golden fixtures and by the
official SDK harness through its stdio transport."""

from __future__ import annotations

import asyncio
import copy
import json
import socket
import sys
from typing import Any

import aiohttp
import pytest

from gateway.server.ndjson import Answer, Forward, Framer, Line, LineSplitter, Skip, scan
from gateway.server.stdio import serve_lines
from tests.support.client import wait_for
from tests.support.config import gateway_config, hook
from tests.support.events import HARNESS, intercept, result, tool_before
from tests.support.paths import ROOT, VECTORS
from tests.support.stdio_run import child_env, run_stdio, write_config

DRAFT_STDIO = VECTORS / "ahp-spec" / "fixtures" / "draft" / "stdio"
LIMIT = 4096


def frames(data: bytes, limit: int = LIMIT, chunk: int | None = None) -> list[Any]:
    splitter, framer = LineSplitter(limit), Framer(limit)
    out: list[Any] = []
    pieces = [data] if chunk is None else [data[i : i + chunk] for i in range(0, len(data), chunk)]
    for piece in pieces:
        for line in splitter.feed(piece):
            out += framer.frame(line)
    rest = splitter.finish()
    if rest is not None:
        out += framer.frame(rest)
    return out + framer.close()


def error_of(frame: Any) -> tuple[Any, int]:
    assert isinstance(frame, Answer), frame
    body = json.loads(frame.body)
    return body["id"], body["error"]["code"]


REQ = b'{"jsonrpc":"2.0","id":"r1","method":"hooks/capabilities","params":{"protocolVersion":"draft"}}'
NOTE = b'{"jsonrpc":"2.0","method":"hooks/observe","params":{"protocolVersion":"draft","event":{"id":"x"}}}'


# ------------------------------------------------------------------------------------------------
# framing (pure)


@pytest.mark.spec("AHP-STDIO-001")
def test_one_object_per_line_is_forwarded_with_its_id():
    assert frames(REQ + b"\n" + NOTE + b"\n") == [Forward(REQ, "r1"), Forward(NOTE, None)]


@pytest.mark.spec("AHP-STDIO-001")
def test_multiline_fixture_is_answered_once_with_its_id():
    """The golden multi-line vector gets one -32600 with the id found in the reassembled object."""
    data = (DRAFT_STDIO / "intercept-request-multiline.invalid.jsonl").read_bytes()
    out = frames(data)
    assert len(out) == 1
    assert error_of(out[0]) == ("evt_stdio_bad_framing", -32600)


def test_multiline_without_id_is_skipped_and_a_following_message_still_served():
    data = b'{\n  "jsonrpc": "2.0",\n  "method": "hooks/observe"\n}\n' + REQ + b"\n"
    assert frames(data) == [Skip("multiline"), Forward(REQ, "r1")]


def test_a_complete_message_ends_an_unclosed_fragment():
    """A truncated line cannot swallow the next request (the fragment closes at a full message)."""
    out = frames(b'{"jsonrpc":"2.0","id":"lost","params":{\n' + REQ + b"\n")
    assert out[-1] == Forward(REQ, "r1")
    assert error_of(out[0]) == ("lost", -32700)


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (b"\n", Skip("blank")),
        (b"   \t\r\n", Skip("blank")),
        (b"not json at all\n", Skip("malformed")),
        (b"\xff\xfe\n", Skip("malformed")),
        (b'{"jsonrpc":"2.0","id":"a1","method":"x",,}\n', ("a1", -32700)),
        (b'{"jsonrpc":"2.0","id":7,"method":\n', (7, -32700)),
        (b'{"jsonrpc":"2.0","method":"x","params":{"id":"nested"},\n', Skip("malformed")),
        (b'{"jsonrpc":"2.0","id":true,"method":"x",}\n', Skip("malformed")),
        (b'{"jsonrpc":"2.0","id":"","method":"x",}\n', Skip("malformed")),
        (b'{"jsonrpc":"2.0","id":1.5,"method":"x",}\n', Skip("malformed")),
        (b'{"jsonrpc":"2.0","id":"q\\"uote","x":}\n', ('q"uote', -32700)),
        (b'{"jsonrpc":"2.0","note":"\\"id\\": 5","x":}\n', Skip("malformed")),
    ],
)
def test_broken_lines(data, expected):
    """Same JSON-RPC errors as over HTTP where a top-level id can be found, else skipped; a
    nested or quoted "id", a bool/empty/fractional id are never taken for the request id."""
    out = frames(data)
    assert len(out) == 1
    if isinstance(expected, Skip):
        assert out[0] == expected
    else:
        assert error_of(out[0]) == expected


def test_oversized_lines():
    big = b"x" * (LIMIT * 2)
    with_id = b'{"jsonrpc":"2.0","id":"big","method":"hooks/intercept","params":{"pad":"' + big + b'"}}\n'
    nested = b'{"jsonrpc":"2.0","params":{"id":"inner","pad":"' + big + b'"}}\n'
    out = frames(with_id + nested + REQ + b"\n")
    assert error_of(out[0]) == ("big", -32600)
    assert json.loads(out[0].body)["error"]["data"]["reason"] == f"line exceeds {LIMIT} bytes"
    assert out[1:] == [Skip("oversized"), Forward(REQ, "r1")]


def test_unterminated_last_line():
    assert error_of(frames(REQ)[0]) == ("r1", -32600)
    assert frames(b'{"jsonrpc":"2.0"') == [Skip("unterminated")]
    assert frames(b"garbage") == [Skip("unterminated")]


def test_crlf_line_is_one_message():
    assert frames(REQ + b"\r\n") == [Forward(REQ + b"\r", "r1")]


@pytest.mark.parametrize("chunk", [1, 7, 64])
def test_chunk_boundaries_do_not_change_framing(chunk):
    data = REQ + b"\n\n" + (DRAFT_STDIO / "intercept-request-multiline.invalid.jsonl").read_bytes() + NOTE + b"\n"
    assert frames(data, chunk=chunk) == frames(data)


def test_scan_depth_and_id():
    assert scan(b'{"a":[{"id":1}],"id":2}') == (0, 2)
    assert scan(b'[{"id":1}]') == (0, None)
    assert scan(b'{"id":') == (1, None)


def test_splitter_keeps_only_a_bounded_prefix():
    splitter = LineSplitter(10)
    lines = splitter.feed(b"0123456789ABCDEF" * 1000)
    assert lines == []
    assert splitter.feed(b"\nok\n") == [Line(b"0123456789", oversized=True), Line(b"ok")]


# ------------------------------------------------------------------------------------------------
# the serving loop on a real engine (in process)


def reader(chunks: list[bytes]):
    async def read(n: int) -> bytes:
        await asyncio.sleep(0)
        return chunks.pop(0) if chunks else b""

    return read


async def test_answers_come_in_arrival_order_even_when_later_requests_finish_first(gateway_factory, stub_factory):
    """AHP-STDIO-001 / §11.2: one line per request, in order; notifications get none."""
    release = asyncio.Event()

    async def answer(request):
        if request["params"]["event"]["tool"]["input"]["command"] == "slow":
            await release.wait()
        return result(request, [])

    stub = await stub_factory(answer)
    gw = await gateway_factory(gateway_config([hook("org.example.up", stub.url, timeout=5000)]))
    slow, fast = intercept(tool_before("slow")), intercept(tool_before("fast"))
    note = {"jsonrpc": "2.0", "method": "hooks/observe", "params": {"protocolVersion": "draft", "event": tool_before()}}
    data = b"".join(json.dumps(m).encode() + b"\n" for m in (slow, note, fast))
    written: list[bytes] = []
    skipped: list[str] = []

    async def write(line: bytes) -> None:
        written.append(line)

    task = asyncio.ensure_future(
        serve_lines(gw.gateway, reader([data]), write, limit=LIMIT * 256, skipped=skipped.append)
    )
    await wait_for(lambda: len(stub.received) == 2)  # both intercepts are running concurrently
    assert written == []  # the fast answer waits for the slow one
    release.set()
    await asyncio.wait_for(task, 10)
    assert [json.loads(line)["id"] for line in written] == [slow["id"], fast["id"]]
    assert all(line.endswith(b"\n") and line.count(b"\n") == 1 for line in written)
    assert skipped == []


async def test_id_null_answers_are_never_written(gateway_factory, stub_factory):
    stub = await stub_factory()
    gw = await gateway_factory(gateway_config([hook("org.example.up", stub.url)]))
    batch = b"[" + REQ + b"]\n"
    written: list[bytes] = []
    skipped: list[str] = []

    async def write(line: bytes) -> None:
        written.append(line)

    await serve_lines(gw.gateway, reader([batch, b"42\n", REQ + b"\n"]), write, limit=LIMIT, skipped=skipped.append)
    assert [json.loads(line)["id"] for line in written] == ["r1"]
    assert skipped == ["no_id", "no_id"]


# ------------------------------------------------------------------------------------------------
# the real process


def scripted(hook_id: str, mode: str, arg: str = "", *, lifecycle: str = "persistent", **extra: Any) -> dict[str, Any]:
    return {
        "id": hook_id,
        "transport": {
            "type": "stdio",
            "command": sys.executable,
            "args": ["-m", "tests.support.stdio_scripted", mode, *([arg] if arg else [])],
            "lifecycle": lifecycle,
            "cwd": str(ROOT),
            **extra,
        },
        "subscriptions": [
            {
                "mode": "intercept",
                "events": ["tool.before"],
                "timeoutMs": 5000,
                "failurePolicy": "fail-closed",
                "content": {"default": "body"},
            }
        ],
    }


def harnessed(line: bytes, command: str | None = None) -> bytes:
    message = json.loads(line)
    message["params"]["event"].setdefault("harness", dict(HARNESS))
    if command is not None:
        message["params"]["event"]["tool"]["input"]["command"] = command
    return json.dumps(message).encode() + b"\n"


@pytest.mark.spec("AHP-STDIO-001")
async def test_golden_stdio_fixtures_through_the_live_front_end(tmp_path):
    """Every draft stdio fixture over the real process: the request and the multi-line framing
    vector from the harness side; the three response vectors played by a real stdio child."""
    request = (DRAFT_STDIO / "intercept-request.valid.jsonl").read_bytes()
    multiline = (DRAFT_STDIO / "intercept-request-multiline.invalid.jsonl").read_bytes()
    config = write_config(
        tmp_path, [scripted("org.example.fixtures", "fixture", str(DRAFT_STDIO))], limits={"deadlineMs": 8000}
    )
    stdin = (
        harnessed(request, "no-effect-response.valid.jsonl")
        + harnessed(request, "deny-response.valid.jsonl")
        + multiline
        + harnessed(request, "deny-response-multiple.invalid.jsonl")
    )
    code, lines, err = await run_stdio(config, stdin)
    assert code == 0, err
    answers = [json.loads(line) for line in lines]
    assert [a["id"] for a in answers] == ["evt_stdio_001", "evt_stdio_001", "evt_stdio_bad_framing", "evt_stdio_001"]
    assert answers[0]["result"] == {"protocolVersion": "draft", "effects": []}
    deny = answers[1]["result"]["effects"]
    assert [(e["type"], e["code"]) for e in deny] == [("deny", "com.example.policy.force_push")]
    assert answers[2]["error"]["code"] == -32600
    # several denies are valid in the draft (settled as one deny, the first reason kept)
    assert [e["reason"] for e in answers[3]["result"]["effects"]] == ["First policy denial."]


@pytest.mark.spec("AHP-STDIO-001")
async def test_stdout_carries_only_answers(tmp_path):
    """Debug logging, ``log.decisions: stdout``, a chatty stdio child and every kind of bad line:
    stdout still holds exactly one JSON-RPC response line per request, nothing else."""
    config = write_config(
        tmp_path, [scripted("org.example.chatty", "stderr", "3")], log={"decisions": "stdout", "includeContent": True}
    )
    good = intercept(tool_before("git status"))
    note = {"jsonrpc": "2.0", "method": "hooks/observe", "params": {"protocolVersion": "draft", "event": tool_before()}}
    caps = {"jsonrpc": "2.0", "id": 9, "method": "hooks/capabilities", "params": {"protocolVersion": "draft"}}
    huge = b'{"jsonrpc":"2.0","id":"huge","params":{"x":"' + b"y" * 2_000_000 + b'"}}'
    stdin = (
        b"\n".join(
            [
                json.dumps(good).encode(),
                b"",
                json.dumps(note).encode(),
                b"print('hello')",
                huge,
                json.dumps(caps, indent=2).encode(),
                json.dumps(caps).encode(),
            ]
        )
        + b"\n"
    )
    code, lines, err = await run_stdio(config, stdin, args=("--log-level", "DEBUG"))
    assert code == 0, err
    answers = [json.loads(line) for line in lines]
    assert [a["id"] for a in answers] == [good["id"], "huge", 9, 9]
    assert answers[0]["result"]["effects"] == []
    assert answers[1]["error"]["code"] == -32600 and answers[2]["error"]["code"] == -32600
    assert answers[3]["result"]["manifest"]["events"]
    assert '"outcome":"no_effect"' in err  # the decision log went to stderr
    assert "diagnostic 0" in err  # the child's stderr reached the gateway log


async def test_per_event_lifecycle_one_message_eof_one_answer_exit_0(tmp_path, stub_factory):
    stub = await stub_factory(lambda r: result(r, [{"type": "deny", "reason": "no"}]))
    entry = hook("org.example.up", stub.url)
    entry["subscriptions"].append({"mode": "observe", "events": ["*"], "content": {"default": "body"}})
    config = write_config(tmp_path, [entry])
    request = intercept(tool_before("rm -rf /"))
    code, lines, err = await run_stdio(config, json.dumps(request).encode() + b"\n")
    assert code == 0, err
    assert len(lines) == 1 and json.loads(lines[0])["result"]["effects"][0]["reason"] == "no"
    # an observation alone: no line, exit 0, and it was delivered before the process exited
    event = tool_before("ls")
    note = {"jsonrpc": "2.0", "method": "hooks/observe", "params": {"protocolVersion": "draft", "event": event}}
    code, lines, err = await run_stdio(config, json.dumps(note).encode() + b"\n")
    assert (code, lines) == (0, []), err
    assert any(o["params"]["event"]["id"] == event["id"] for o in stub.observed)


@pytest.mark.spec("AHP-SEC-001")
async def test_minimal_environment_secrets_come_from_files(tmp_path, stub_factory):
    """Harnesses start stdio backends with a minimal environment: with the environment cleared,
    a ``tokenRef: file:`` secret still reaches the http upstream, a ``tokenEnv`` one cannot (its
    upstream fails under its policy, never unauthenticated), and no token reaches the logs."""
    token = "s3cr3t-token-from-file"
    (tmp_path / "token").write_text(token + "\n")
    from_file = await stub_factory()
    from_env = await stub_factory()
    hooks = [
        hook(
            "org.example.envtoken",
            from_env.url,
            policy="fail-open",
            authentication={"type": "bearer", "tokenEnv": "UP_TOKEN"},
        ),
        hook("org.example.filetoken", from_file.url, authentication={"type": "bearer", "tokenRef": "file:token"}),
    ]
    config = write_config(tmp_path, hooks)
    request = intercept(tool_before())
    code, lines, err = await run_stdio(config, json.dumps(request).encode() + b"\n", env={"UP_TOKEN": token} | {})
    assert code == 0, err
    # the same run with the environment cleared completely
    code, lines, err = await run_stdio(config, json.dumps(intercept(tool_before())).encode() + b"\n", env={})
    assert code == 0, err
    assert json.loads(lines[0])["result"]["effects"] == []
    assert from_file.headers[-1]["Authorization"] == f"Bearer {token}"
    assert len(from_env.received) == 1  # only the first run, which had UP_TOKEN
    assert token not in err


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_admin_port_serves_metrics_with_skipped_lines(tmp_path, stub_factory):
    stub = await stub_factory()
    config = write_config(tmp_path, [hook("org.example.up", stub.url)])
    port = free_port()
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "gateway",
        "stdio",
        "--config",
        str(config),
        "--admin-port",
        str(port),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        cwd=ROOT,
        env=child_env(),
    )
    assert proc.stdin is not None and proc.stdout is not None
    request = intercept(tool_before())
    proc.stdin.write(b"\n\n" + json.dumps(request).encode() + b"\n")
    await proc.stdin.drain()
    line = await asyncio.wait_for(proc.stdout.readline(), 30)
    assert json.loads(line)["id"] == request["id"]
    async with aiohttp.ClientSession() as session:
        async with session.get(f"http://127.0.0.1:{port}/metrics") as response:
            text = await response.text()
    assert 'ahp_gateway_stdio_skipped_lines_total{reason="blank"} 2.0' in text
    assert (
        'ahp_gateway_requests_total{event_type="tool.before",method="hooks/intercept",outcome="no_effect"} 1.0' in text
    )
    proc.stdin.close()
    assert await asyncio.wait_for(proc.wait(), 30) == 0


# ------------------------------------------------------------------------------------------------
# the official SDK harness driving the gateway through its stdio transport


def sdk_backend(lifecycle: str) -> dict[str, Any]:
    return {
        "id": f"org.example.sdk-{lifecycle.replace('_', '-')}",
        "transport": {
            "type": "stdio",
            "command": sys.executable,
            "args": ["-m", "tests.support.stdio_backend", "sdk"],
            "lifecycle": lifecycle,
            "cwd": str(ROOT),
        },
        "subscriptions": [
            {
                "mode": "intercept",
                "events": ["tool.before"],
                "timeoutMs": 8000,
                "failurePolicy": "fail-closed",
                "content": {"default": "body"},
            }
        ],
    }


@pytest.mark.spec("AHP-STDIO-001")
@pytest.mark.parametrize("front", ["persistent", "per_event"])
async def test_sdk_harness_drives_ahp_gateway_stdio(tmp_path, stub_factory, front):
    """The SDK's ``Hooks`` starts ``ahp-gateway stdio`` with its StdioTransport (minimal env) as
    one backend in both modes; behind it the SDK's own stdio backend runs as a persistent and a
    per_event upstream. A deny from it reaches the harness; a harmless call is not denied; the
    settled observations reach an upstream observer. The SDK's per_event transport keeps stdin
    open after a notification, so the per_event registration passes ``--per-event``."""
    from tests.support.sdk_peers import harness
    from tests.support.sdk_peers import tool_before as sdk_tool_before

    watcher = await stub_factory()
    observer = hook("org.example.watch", watcher.url)
    observer["subscriptions"] = [{"mode": "observe", "events": ["*"], "content": {"default": "body"}}]
    config = write_config(
        tmp_path,
        [sdk_backend("persistent"), sdk_backend("per_event"), observer],
        limits={"deadlineMs": 15000},
    )
    registration = {
        "protocolVersion": "draft",
        "hooks": [
            {
                "id": "org.example.gateway",
                "transport": {
                    "type": "stdio",
                    "command": sys.executable,
                    "args": ["-m", "gateway", "stdio", "--config", str(config)]
                    + (["--per-event"] if front == "per_event" else []),
                    "lifecycle": front,
                    "cwd": str(ROOT),
                },
                "subscriptions": [
                    {
                        "events": ["tool.before"],
                        "mode": "intercept",
                        "timeoutMs": 18000,
                        "failurePolicy": "fail-closed",
                        "content": {"default": "body"},
                    },
                    {"events": ["tool.before"], "mode": "observe", "content": {"default": "body"}},
                ],
            }
        ],
    }

    def observed() -> bool:
        return {"call-1", "call-2"} <= {o["params"]["event"]["call"]["id"] for o in watcher.observed}

    async with harness(copy.deepcopy(registration), full=False) as hooks:
        denied = await sdk_tool_before(hooks, "git push --force", call_id="call-1")
        allowed = await sdk_tool_before(hooks, "git status", call_id="call-2")
        if front == "persistent":  # the SDK kills a persistent backend on close: observe while it runs
            await wait_for(observed, 20)
    assert str(getattr(denied.permission, "value", denied.permission)) == "deny", denied.diagnostics
    assert list(denied.accepted_responses)
    assert str(getattr(allowed.permission, "value", allowed.permission)) != "deny", allowed.diagnostics
    assert not allowed.diagnostics
    await wait_for(observed, 20)


async def test_a_harness_that_closes_stdout_stops_the_front_end(gateway_factory, stub_factory):
    stub = await stub_factory()
    gw = await gateway_factory(gateway_config([hook("org.example.up", stub.url)]))
    written: list[bytes] = []

    async def write(line: bytes) -> None:
        if written:
            raise BrokenPipeError
        written.append(line)

    data = b"".join(json.dumps(intercept(tool_before())).encode() + b"\n" for _ in range(600))
    await asyncio.wait_for(
        serve_lines(gw.gateway, reader([data]), write, limit=LIMIT, skipped=lambda r: None, max_inflight=4),
        30,
    )
    assert len(written) == 1


async def test_per_event_flag_serves_exactly_one_message(tmp_path, stub_factory):
    stub = await stub_factory()
    config = write_config(tmp_path, [hook("org.example.up", stub.url)])
    first, second = intercept(tool_before()), intercept(tool_before())
    stdin = b"\n" + json.dumps(first).encode() + b"\n" + json.dumps(second).encode() + b"\n"
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "gateway",
        "stdio",
        "--per-event",
        "--config",
        str(config),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        cwd=ROOT,
        env=child_env(),
    )
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(stdin)  # stdin stays open: the gateway must not wait for EOF
    await proc.stdin.drain()
    out = await asyncio.wait_for(proc.stdout.read(), 30)
    assert await asyncio.wait_for(proc.wait(), 30) == 0
    assert [json.loads(line)["id"] for line in out.splitlines()] == [first["id"]]
    assert [r["id"] for r in stub.received] == [first["id"]]
    proc.stdin.close()


async def test_sigterm_finishes_and_exits_0_without_answering_a_partial_line(tmp_path, stub_factory):
    import signal

    stub = await stub_factory()
    config = write_config(tmp_path, [hook("org.example.up", stub.url)])
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "gateway",
        "stdio",
        "--config",
        str(config),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        cwd=ROOT,
        env=child_env(),
    )
    assert proc.stdin is not None and proc.stdout is not None
    request = intercept(tool_before())
    proc.stdin.write(json.dumps(request).encode() + b"\n" + b'{"jsonrpc":"2.0","id":"partial"')
    await proc.stdin.drain()
    line = await asyncio.wait_for(proc.stdout.readline(), 30)
    assert json.loads(line)["id"] == request["id"]
    proc.send_signal(signal.SIGTERM)
    assert await asyncio.wait_for(proc.wait(), 30) == 0
    assert await proc.stdout.read() == b""
    proc.stdin.close()
