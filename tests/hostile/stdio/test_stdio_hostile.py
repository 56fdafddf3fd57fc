"""A hostile or broken harness on the stdin of ``ahp-gateway stdio`` (AHP-STDIO-001, AHP-RPC-001).

Every test but two (which run the framer in-process) drives the real process (``python -m gateway
stdio``) through pipes and checks what a harness relies on: every request line gets exactly one
JSON-RPC line, a notification never gets one (AHP-RPC-002); the answer to line N carries line N's
id, whatever the lines around it look like; hostile framing costs bounded memory and time; stdout
carries nothing but response lines; EOF (also in the middle of a line) answers what was read and
exits 0. Where a line is a complete JSON text, its answer is compared with what the HTTP front end
answers for the same body (the same engine: the JSON-RPC answer must be the same).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from dataclasses import dataclass
from typing import Any

import pytest

from tests.hostile.stdio.helpers import (
    BOM,
    LIMIT,
    PROTOCOL,
    STEP,
    Child,
    caps,
    child_env,
    config_for,
    denied,
    dumps,
    loads,
    observe,
    outcome,
    peak_rss_kib,
    reason_of,
    same_id,
    write_config,
)
from tests.support.config import stdio_argv
from tests.support.paths import ROOT

# ------------------------------------------------------------------------------------------------
# one line at a time, each followed by a sentinel request


@dataclass(frozen=True)
class Case:
    name: str
    data: bytes
    """What the harness writes (one or more ``\\n``-terminated lines)."""
    expect: tuple[tuple[Any, str | int], ...] | None
    """The answers, in order, as (id, "result" or error code); empty: no line at all; None: one
    line, the one the HTTP front end answers for the same body (a complete JSON text)."""
    http: bool = True
    """``data`` is one line whose body is compared with the HTTP front end's answer."""


DEEP = b"[" * 100_000
AT_LIMIT = caps(b'"at-limit"', b',"pad":"')
AT_LIMIT += b"p" * (LIMIT - len(AT_LIMIT) - 3) + b'"}}'
LONG_ID = "i" * 60_000
BIG_INT = 10**2999 + 7
CASES = [
    # line endings and blank lines
    Case("crlf", caps(b'"crlf"') + b"\r\n", (("crlf", "result"),)),
    Case("crlf-intercept", denied("crlf-intercept", "evt-crlf") + b"\r\n", (("evt-crlf", "result"),)),
    Case("cr-between-tokens", caps(b'\r"cr"').replace(b',"method"', b',\r"method"') + b"\n", (("cr", "result"),)),
    Case("lone-cr-is-not-a-line-end", caps(b'"cr1"') + b"\r" + caps(b'"cr2"') + b"\n", (("cr1", -32700),)),
    Case("blank", b"\n", ()),
    Case("whitespace-only", b" \t \r\n", ()),
    Case("many-blank", b"\n" * 500 + b"\r\n" * 500, (), http=False),
    # bytes that are not UTF-8 JSON (AHP-RPC-001: UTF-8 only)
    Case("utf8-bom", BOM + caps(b'"bom"') + b"\n", (("bom", -32700),)),
    Case("invalid-utf8", caps(b'"u8"', b',"x":"\xff\xfe"') + b"\n", (("u8", -32700),)),
    Case("overlong-utf8", caps(b'"ovl"', b',"x":"\xc0\xaf"') + b"\n", (("ovl", -32700),)),
    Case("utf8-encoded-surrogate", caps(b'"cesu"', b',"x":"\xed\xa0\x80"') + b"\n", (("cesu", -32700),)),
    Case("lone-surrogate-escape", caps(b'"sur"', b',"x":"\\ud800"') + b"\n", (("sur", -32700),)),
    Case("lone-surrogate-escape-as-id", caps(b'"\\udc00"') + b"\n", ()),
    Case("nul-after-object", caps(b'"nul"') + b"\x00\n", (("nul", -32700),)),
    Case("raw-nul-in-string", caps(b'"nul2"', b',"x":"a\x00b"') + b"\n", (("nul2", -32700),)),
    Case("escaped-nul-is-json", caps(b'"nul3"').replace(b'"draft"', b'"draft\\u0000"') + b"\n", (("nul3", -32001),)),
    Case("line-separator-u2028", denied("a\u2028b\u2029c", "evt-u2028") + b"\n", (("evt-u2028", "result"),)),
    Case("not-json", b"print('hello')\n", ()),
    # not one object per line
    Case("two-objects-on-one-line", caps(b'"one"') + caps(b'"two"') + b"\n", (("one", -32700),)),
    Case("two-objects-with-space", caps(b'"one"') + b" " + caps(b'"two"') + b"\n", (("one", -32700),)),
    Case("batch", b"[" + caps(b'"b1"') + b"," + caps(b'"b2"') + b"]\n", ()),
    Case("empty-batch", b"[]\n", ()),
    Case("scalar-number", b"42\n", ()),
    Case("scalar-string", b'"id"\n', ()),
    Case("scalar-null", b"null\n", ()),
    Case(
        "value-split-across-two-lines",
        caps(b'"split"').replace(b',"method"', b',\n"method"') + b"\n",
        (("split", -32600),),
        http=False,
    ),
    Case("pretty-printed", json.dumps(loads(caps(b'"pp"')), indent=2).encode() + b"\n", (("pp", -32600),), http=False),
    Case("pretty-printed-notification", json.dumps(loads(observe()), indent=1).encode() + b"\n", (), http=False),
    Case("truncated-object", b'{"jsonrpc":"2.0","id":"cut","method":\n', (("cut", -32700),)),
    Case("only-nested-id", b'{"jsonrpc":"2.0","params":{"id":"inner"},\n', ()),
    Case("quoted-id-only", b'garbage "id": 5, "id":"x"\n', ()),
    # depth and numbers
    Case("deep-array", DEEP + b"\n", ()),
    Case("deep-array-closed", DEEP[:30_000] + b"]" * 30_000 + b"\n", ()),
    Case("deep-in-a-request", caps(b'"deep"', b',"x":' + DEEP[:30_000] + b"]" * 30_000) + b"\n", (("deep", -32700),)),
    Case("1e400-in-tool-input", denied("n").replace(b'"command":"n"', b'"command":"n","n":1e400') + b"\n", None),
    Case(
        "4200-digits-in-tool-input",
        denied("d").replace(b'"command":"d"', b'"command":"d","n":' + b"9" * 4200) + b"\n",
        None,
    ),
    # ids: each echoed exactly, type included (AHP-RPC-001: a non-empty string or an integer)
    Case("id-1", caps(b"1") + b"\n", ((1, "result"),)),
    Case("id-string-1", caps(b'"1"') + b"\n", (("1", "result"),)),
    Case("id-0", caps(b"0") + b"\n", ((0, "result"),)),
    Case("id-negative", caps(b"-5") + b"\n", ((-5, "result"),)),
    Case("id-above-u64", caps(str(2**64 + 1).encode()) + b"\n", ((2**64 + 1, "result"),)),
    Case("id-below-i64", caps(str(-(2**63) - 1).encode()) + b"\n", ((-(2**63) - 1, "result"),)),
    Case("id-3000-digits", caps(str(BIG_INT).encode()) + b"\n", ((BIG_INT, "result"),)),
    Case("id-60000-chars", caps(b'"' + LONG_ID.encode() + b'"') + b"\n", ((LONG_ID, "result"),)),
    Case("id-escapes", caps(b'"q\\"b\\\\s\\/\\u00e9\\n"') + b"\n", (('q"b\\s/\u00e9\n', "result"),)),
    Case("id-raw-unicode", caps('"\u00e9\U0001f600"'.encode()) + b"\n", (("\u00e9\U0001f600", "result"),)),
    Case("id-null", caps(b"null") + b"\n", ()),
    Case("id-float-1.0", caps(b"1.0") + b"\n", ()),
    Case("id-float-1.5", caps(b"1.5") + b"\n", ()),
    Case("id-exponent", caps(b"1e2") + b"\n", ()),
    Case("id-true", caps(b"true") + b"\n", ()),
    Case("id-empty-string", caps(b'""') + b"\n", ()),
    Case("id-object", caps(b'{"id":"x"}') + b"\n", ()),
    Case("id-array", caps(b"[1]") + b"\n", ()),
    Case("id-duplicate-key", caps(b'"first"').replace(b'"jsonrpc"', b'"id":"zero","jsonrpc"') + b"\n", None),
    # the engine's own errors, as over HTTP
    Case("observe-with-id", dumps({**loads(observe()), "id": "obs"}) + b"\n", (("obs", -32600),)),
    Case(
        "unknown-method",
        dumps({"jsonrpc": "2.0", "id": "um", "method": "hooks/nope", "params": {}}) + b"\n",
        (("um", -32601),),
    ),
    Case("wrong-version", caps(b'"v"').replace(b'"draft"', b'"1999"') + b"\n", (("v", -32001),)),
    Case(
        "no-jsonrpc-member",
        dumps({"id": "nj", "method": "hooks/capabilities", "params": PROTOCOL}) + b"\n",
        (("nj", -32600),),
    ),
    Case("intercept-id-mismatch", denied("mm").replace(b'"id":"evt-', b'"id":"other-', 1) + b"\n", None),
    # notifications never get a line (AHP-RPC-002)
    Case("observe", observe() + b"\n", ()),
    Case(
        "request-method-without-id",
        dumps({"jsonrpc": "2.0", "method": "hooks/capabilities", "params": PROTOCOL}) + b"\n",
        (),
    ),
    Case("unknown-notification", dumps({"jsonrpc": "2.0", "method": "x/y", "params": {}}) + b"\n", ()),
    Case("invalid-notification", b'{"jsonrpc":"2.0"}\n', ()),
    # the line limit is limits.maxBodyBytes, as over HTTP (docs/operations/stdio.md: an id is searched for
    # in the first 64 KiB of a longer line, which is never buffered)
    Case("exactly-the-limit", AT_LIMIT + b"\n", (("at-limit", -32602),)),
    Case("one-byte-over-the-limit", AT_LIMIT + b" \n", (("at-limit", -32600),), http=False),
    Case(
        "oversized-with-id", caps(b'"big"', b',"pad":"' + b"x" * LIMIT + b'"') + b"\n", (("big", -32600),), http=False
    ),
    Case("oversized-without-id", b'{"jsonrpc":"2.0","pad":"' + b"x" * LIMIT + b'"}\n', (), http=False),
    Case("oversized-nested-id", b'{"params":{"id":"inner"},"pad":"' + b"x" * LIMIT + b'"}\n', (), http=False),
]


@pytest.mark.spec("AHP-STDIO-001")
@pytest.mark.spec("AHP-RPC-001")
async def test_each_hostile_line_gets_its_own_answer_or_none(stdio, over_http):
    """Each case, then a sentinel request: the lines before the sentinel's answer are exactly the
    case's answers (so no case leaks into the next), each for the case's own id with its type;
    complete JSON texts get the HTTP front end's answer; broken ones the same error code."""
    problems: list[str] = []
    first = caps(b'"sync-0"')
    _, expected_manifest = await over_http(first)
    await stdio.send(first + b"\n")
    _, sentinel = await stdio.answers_until("sync-0")
    assert sentinel == expected_manifest, "the stdio and HTTP front ends differ on hooks/capabilities"
    for n, case in enumerate(CASES, start=1):
        sync = f"sync-{n}"
        started = time.monotonic()
        await stdio.send(case.data + caps(json.dumps(sync).encode()) + b"\n")
        got, sentinel = await stdio.answers_until(sync)
        elapsed = time.monotonic() - started
        assert "result" in sentinel
        answers = [(m["id"], outcome(m)) for m in got]
        http_status, http_answer = await over_http(case.data[:-1]) if case.http else (None, None)
        expect = case.expect
        if expect is None:  # the oracle is the HTTP front end
            assert http_status == 200 and http_answer is not None, (case.name, http_status)
            expect = ((http_answer["id"], outcome(http_answer)),)
        if len(answers) != len(expect) or not all(
            same_id(a[0], e[0]) and a[1] == e[1] for a, e in zip(answers, expect, strict=False)
        ):
            problems.append(f"{case.name}: answered {answers!r:.300}, expected {expect!r:.300}")
            continue
        if elapsed > 5:
            problems.append(f"{case.name}: took {elapsed:.1f}s")
        if not case.http:
            continue
        if http_answer is not None and http_answer["id"] is not None:
            if got != [http_answer]:  # the same engine: the same JSON-RPC answer
                problems.append(f"{case.name}: stdio {got!r:.300} != HTTP {http_answer!r:.300}")
        elif http_answer is not None and outcome(http_answer) == -32700:
            if got and outcome(got[0]) != -32700:  # stdio may find the id HTTP reports as null
                problems.append(f"{case.name}: stdio {got!r:.300}, HTTP -32700")
        elif got:  # HTTP 202 or an answer with id null: never a line on stdio
            problems.append(f"{case.name}: stdio answered {got!r:.300}, HTTP {http_status} {http_answer!r:.200}")
    assert not problems, "\n".join(problems)
    await stdio.close_stdin()
    assert await stdio.rest() == []
    assert await stdio.exit_code() == 0
    log = stdio.stderr
    for reason in ("blank", "malformed", "multiline", "oversized", "no_id"):
        assert f"stdin line skipped without an answer ({reason})" in log, reason  # logs go to stderr


# ------------------------------------------------------------------------------------------------
# pipelining, EOF, backpressure


BROKEN = "broken"


def pipelined() -> tuple[bytes, list[tuple[Any, str | int, str | None]], list[str]]:
    """Hundreds of lines written at once: intercepts (some sharing one id), capabilities requests
    with ids 1 and "1" alike, notifications, blank lines and broken lines with and without an id.
    Returns the bytes, the answers expected in order as (id, outcome, deny reason), and the
    commands the upstream must see (each exactly once)."""
    data: list[bytes] = []
    expected: list[tuple[Any, str | int, str | None]] = []
    commands: list[str] = []
    for i in range(360):
        kind = i % 9
        if kind in (0, 4):
            command = f"cmd-{i}"
            data.append(denied(command, f"evt-p{i}"))
            expected.append((f"evt-p{i}", "result", command))
            commands.append(command)
        elif kind == 1:
            data.append(caps(str(i).encode()))
            expected.append((i, "result", None))
        elif kind == 2:
            data.append(caps(json.dumps(str(i - 1)).encode()))
            expected.append((str(i - 1), "result", None))
        elif kind == 3:
            data.append(observe())
        elif kind == 5:
            command = f"dup-{i}"  # the same id in flight several times: answered once per line
            data.append(denied(command, "evt-dup"))
            expected.append(("evt-dup", "result", command))
            commands.append(command)
        elif kind == 6:
            data.append(b"" if i % 2 else b"  \r")
        elif kind == 7:
            data.append(b'{"jsonrpc":"2.0","id":"broken-%d","method":"hooks/capabilities",' % i)
            expected.append((f"broken-{i}", BROKEN, None))  # -32700, or -32600 joined with the next line
        else:
            data.append(b"[" + caps(b'"in-a-batch"') + b"]" if i % 2 else b"not json %d" % i)
    last = caps(b'"unterminated"')  # EOF in the middle of the last line
    expected.append(("unterminated", -32600, None))
    return b"\n".join(data) + b"\n" + last, expected, commands


@pytest.mark.spec("AHP-STDIO-001")
async def test_hundreds_of_pipelined_lines_each_request_answered_once_in_arrival_order(stdio, stub):
    """Everything written at once, then EOF while intercepts are still in flight (the upstream
    answers out of order): one line per request, in arrival order, each with its own line's id and
    content (duplicate ids included), notifications and id-less lines never answered; exit 0."""
    data, expected, commands = pipelined()
    reading = asyncio.ensure_future(stdio.rest(timeout=60))
    await stdio.send(data)
    await stdio.close_stdin()
    got = await reading
    answers = [(m["id"], outcome(m), reason_of(m) if "effects" in m.get("result", {}) else None) for m in got]
    assert len(answers) == len(expected)
    for n, (a, e) in enumerate(zip(answers, expected, strict=True)):
        assert same_id(a[0], e[0]) and a[2] == e[2], (n, a, e)
        assert a[1] in (-32700, -32600) if e[1] == BROKEN else a[1] == e[1], (n, a, e)
    assert await stdio.exit_code() == 0
    assert sorted(r["params"]["event"]["tool"]["input"]["command"] for r in stub.received) == sorted(commands)


EOF_TAILS = {
    "partial-line-with-id": (b'{"jsonrpc":"2.0","id":"tail","method":"hooks/capa', [("tail", -32600)]),
    "partial-line-without-id": (b'{"jsonrpc":"2.0","method":"hooks/observe","params":{"prot', []),
    "inside-a-multibyte-character": (b'{"jsonrpc":"2.0","id":"\xc3', []),
    "complete-object-without-newline": (caps(b'"no-newline"'), [("no-newline", -32600)]),
    "inside-a-pretty-printed-object": (b'{\n  "jsonrpc": "2.0",\n  "id": "frag-eof",\n  "met', [("frag-eof", -32600)]),
    "after-a-lone-cr": (caps(b'"cr-eof"') + b"\r", [("cr-eof", -32600)]),
}


@pytest.mark.spec("AHP-STDIO-001")
@pytest.mark.parametrize("tail", list(EOF_TAILS))
async def test_eof_mid_line_answers_what_was_read_then_exits_0(tmp_path, stub, children, tail):
    """stdin closes in the middle of a line, right after an intercept and a notification: the
    intercept is answered, the partial line as the README's table says, then exit 0."""
    child = await Child.start(write_config(tmp_path / "stdio", config_for(stub.url)))
    children.append(child)
    data, tail_answers = EOF_TAILS[tail]
    await child.send(denied("before-eof", "evt-before-eof") + b"\n" + observe() + b"\n" + data)
    await child.close_stdin()
    got = await child.rest()
    assert [(m["id"], outcome(m)) for m in got] == [("evt-before-eof", "result"), *tail_answers]
    assert reason_of(got[0]) == "before-eof"
    assert await child.exit_code() == 0


@pytest.mark.skipif(peak_rss_kib(os.getpid()) is None, reason="needs /proc/<pid>/status")
async def test_oversized_lines_are_never_buffered_and_the_next_line_is_served(tmp_path, stub, children):
    """Lines of 64 MiB (with an id, without one, and one that never ends before EOF): each costs
    no more memory than the line limit, the line after each is answered normally."""
    child = await Child.start(write_config(tmp_path / "stdio", config_for(stub.url)))
    children.append(child)
    await child.send(caps(b'"warm"') + b"\n")
    await child.answers_until("warm")
    baseline = peak_rss_kib(child.proc.pid)
    assert baseline is not None
    chunk = b"x" * (1 << 20)

    async def stream(head: bytes, tail: bytes) -> None:
        await child.send(head)
        for _ in range(64):
            await child.send(chunk)
        await child.send(tail)

    await stream(b'{"jsonrpc":"2.0","id":"huge-1","params":{"pad":"', b'"}}\n' + caps(b'"after-1"') + b"\n")
    got, after = await child.answers_until("after-1")
    assert [(m["id"], outcome(m)) for m in got] == [("huge-1", -32600)]
    assert got[0]["error"]["data"] == {"reason": f"line exceeds {LIMIT} bytes"}
    await stream(b'{"jsonrpc":"2.0","params":{"pad":"', b'"}}\n' + caps(b'"after-2"') + b"\n")
    got, _ = await child.answers_until("after-2")
    assert got == []
    await stream(b'{"jsonrpc":"2.0","id":"huge-3","params":{"pad":"', b"")
    peak = peak_rss_kib(child.proc.pid)
    await child.close_stdin()
    got = await child.rest()
    assert [(m["id"], outcome(m)) for m in got] == [("huge-3", -32600)]
    assert await child.exit_code() == 0
    assert peak is not None and peak - baseline < 32 * 1024, f"peak RSS grew by {(peak - baseline) // 1024} MiB"


@pytest.mark.spec("AHP-STDIO-001")
@pytest.mark.parametrize("when", ["after-an-answer", "while-blocked-on-a-full-pipe"])
async def test_a_reader_that_closes_stdout_makes_the_gateway_exit(tmp_path, stub, children, when):
    """The harness closes the gateway's stdout (broken pipe) and leaves stdin open: the gateway
    stops at its next write and exits 0 instead of spinning or hanging."""
    import fcntl
    import termios

    read_end, write_end = os.pipe()
    try:
        child = await Child.start(write_config(tmp_path / "stdio", config_for(stub.url)), stdout=write_end)
    finally:
        os.close(write_end)
    children.append(child)
    loop = asyncio.get_running_loop()
    if when == "after-an-answer":
        transport, _ = await loop.connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(child.stdout), os.fdopen(read_end, "rb", buffering=0)
        )
        await child.send(caps(b'"first"') + b"\n")
        assert (await child.answer())["id"] == "first"
        transport.close()  # closes the read end
        await child.send(caps(b'"second"') + b"\n")
    else:
        await child.send(b"".join(caps(str(i).encode()) + b"\n" for i in range(200)))  # ~800 KiB of answers
        deadline = time.monotonic() + STEP
        available = bytearray(4)
        while True:  # the answers fill the pipe: the gateway is now blocked writing
            fcntl.ioctl(read_end, termios.FIONREAD, available)
            if int.from_bytes(available, sys.byteorder) >= 32 * 1024:
                break
            assert time.monotonic() < deadline, "the gateway wrote nothing"
            await asyncio.sleep(0.01)
        os.close(read_end)
    assert await child.exit_code() == 0
    assert "closed the gateway's stdout" in child.stderr


async def test_regular_files_as_stdin_and_stdout(tmp_path, stub):
    """A harness (or a replay) may hand the gateway files instead of pipes: the same answers, in
    order, including the unterminated last line, and exit 0."""
    config = write_config(tmp_path / "stdio", config_for(stub.url))
    source, sink = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    source.write_bytes(
        denied("from-a-file", "evt-file") + b"\n\n" + BOM + caps(b'"bom"') + b"\n" + caps(b"2") + b"\n" + caps(b'"u"')
    )
    with source.open("rb") as stdin, sink.open("wb") as stdout:
        proc = await asyncio.create_subprocess_exec(
            *stdio_argv(config),
            stdin=stdin,
            stdout=stdout,
            stderr=asyncio.subprocess.DEVNULL,
            cwd=ROOT,
            env=child_env(),
        )
        try:
            assert await asyncio.wait_for(proc.wait(), STEP) == 0
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
    lines = sink.read_bytes().splitlines(keepends=True)
    answers = [loads(line) for line in lines]
    assert all(line.endswith(b"\n") for line in lines)
    assert [(m["id"], outcome(m)) for m in answers] == [
        ("evt-file", "result"),
        ("bom", -32700),
        (2, "result"),
        ("u", -32600),
    ]
    assert reason_of(answers[0]) == "from-a-file"
