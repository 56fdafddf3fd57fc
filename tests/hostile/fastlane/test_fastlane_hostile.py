"""The harness listener's fast lane (gateway/server/fastlane.py) under hostile framing: request
smuggling, desync, authentication bypass and resource-exhaustion attempts, each sent byte for
byte to a gateway with the fast lane and to one without it (AHP-HTTP-001; protocol §12 for the
authentication cases). Both must give the same answers (status, media type, body), as many of
them, and leave the connection in the same state: kept alive (a probe request sent afterwards
is answered) or closed.

Two differences are deliberate, and their cases say what they are compared with instead:

- aiohttp parses a TCP segment as a whole, so a malformed request after a good one *in the same
  segment* loses the good one (one 400), while the same bytes in two writes get both answers.
  The fast lane answers every complete request before it looks at the next, whatever the
  segmentation, so such a case is compared with aiohttp given the same requests in separate
  writes (``reference``).
- aiohttp's 400 text quotes the segment it was parsing; a handed-off connection gives it the
  buffered request in one piece, so the excerpt differs: those cases compare statuses, media
  types and the connection's fate, not the 400 text (``texts=False``)."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
from dataclasses import dataclass
from typing import Any

import pytest
import yaml

from gateway.server.fastlane import MAX_HEAD
from tests.support.config import gateway_config, hook
from tests.support.events import intercept, tool_before
from tests.support.fault_tools import close

TOKEN = "fast-lane-hostile-token-0123456789abcdef"
WRONG = "wrong-token-value-0000000000000000000000"
BODY = json.dumps(intercept(tool_before(command="echo hostile"))).encode()
PROBE_BODY = json.dumps(intercept(tool_before(command="echo probe", id="probe"))).encode()
DEADLINE = 5.0
"""Seconds any one expected answer, or the connection's fate after the probe, may take."""

Answer = tuple[int, str | None, bytes]


# ---------------------------------------------------------------------------- wire helpers
def _raw(*lines: str | bytes, body: bytes = b"") -> bytes:
    """A request from its exact lines (request line first), CRLF-joined, then the body."""
    parts = [line.encode("latin-1") if isinstance(line, str) else line for line in lines]
    return b"\r\n".join(parts) + b"\r\n\r\n" + body


def _post(
    *extra: str | bytes,
    line: str | bytes = "POST / HTTP/1.1",
    body: bytes = BODY,
    host: bool = True,
    content_type: str | None = "application/json",
    length: str | None = None,
) -> bytes:
    """A fast-lane request (``POST /``, JSON, exact length) with ``extra`` header lines added
    after the usual ones, or the usual ones changed."""
    lines: list[str | bytes] = [line]
    if host:
        lines.append("Host: 127.0.0.1")
    if content_type is not None:
        lines.append(f"Content-Type: {content_type}")
    lines.append(f"Content-Length: {len(body) if length is None else length}")
    lines.extend(extra)
    return _raw(*lines, body=body)


def _probe(auth: bool) -> bytes:
    """Sent once the case's answers are in: answered only on a connection still kept alive; its
    ``Connection: close`` then ends the connection, so the fate is known without a timeout."""
    extra = [f"Authorization: Bearer {TOKEN}"] if auth else []
    return _post("Connection: close", *extra, body=PROBE_BODY)


N = len(BODY)


def _bytewise(data: bytes) -> tuple[bytes, ...]:
    return tuple(data[i : i + 1] for i in range(len(data)))


def _head_end(data: bytes) -> int:
    return data.index(b"\r\n\r\n") + 4


def _at_head_end(data: bytes) -> tuple[bytes, bytes]:
    """The request's head (through CRLFCRLF) and its body, as two writes."""
    return data[: _head_end(data)], data[_head_end(data) :]


@dataclass(frozen=True)
class Wait:
    """A step: wait (with a deadline) until this many answers have arrived in all."""

    answers: int


Step = bytes | Wait


def _parse(buf: bytearray) -> list[Answer]:
    """Take every complete response off the front of ``buf``."""
    out: list[Answer] = []
    while True:
        end = buf.find(b"\r\n\r\n")
        if end < 0:
            return out
        lines = bytes(buf[:end]).decode("latin-1").split("\r\n")
        headers: dict[str, str] = {}
        for header in lines[1:]:
            name, _, value = header.partition(":")
            headers[name.strip().lower()] = value.strip()
        length = int(headers.get("content-length", "0"))
        if len(buf) < end + 4 + length:
            return out
        status = int(lines[0].split(" ", 2)[1])
        out.append((status, headers.get("content-type"), bytes(buf[end + 4 : end + 4 + length])))
        del buf[: end + 4 + length]


@dataclass
class Transcript:
    """Everything one connection was told, and how it ended."""

    answers: list[Answer]
    fate: str
    """``kept alive`` (the probe was answered), ``closed`` (before the probe was answered) or
    ``hung`` (neither within the deadline)."""
    leftover: bytes
    """Bytes received that do not make a whole response."""
    upstream_calls: int = 0
    """Requests the upstream received meanwhile (did the gateway act on what it was sent)."""


class _Conversation:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.buf = bytearray()
        self.answers: list[Answer] = []
        self.closed = False

    def ended(self) -> bool:
        return self.closed

    async def send(self, data: bytes) -> None:
        if self.closed:
            return
        self.writer.write(data)
        with contextlib.suppress(ConnectionError):
            await self.writer.drain()
        for _ in range(3):  # let the server's read callback see this write as its own segment
            await asyncio.sleep(0)

    async def collect(self, count: int) -> bool:
        """Read until ``count`` answers in all; False if the connection closed or the deadline
        passed first."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + DEADLINE
        while len(self.answers) < count and not self.closed:
            left = deadline - loop.time()
            if left <= 0:
                return False
            try:
                chunk = await asyncio.wait_for(self.reader.read(65536), left)
            except TimeoutError:
                return False
            except ConnectionError:
                chunk = b""
            if not chunk:
                self.closed = True
            self.buf += chunk
            self.answers += _parse(self.buf)
        return len(self.answers) >= count


async def _converse(port: int, steps: tuple[Step, ...], answers: int, probe: bytes) -> Transcript:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    talk = _Conversation(reader, writer)
    try:
        for step in steps:
            if isinstance(step, Wait):
                await talk.collect(step.answers)
            else:
                await talk.send(step)
        await talk.collect(answers)
        if talk.closed:
            fate = "closed"
        else:
            before = len(talk.answers)
            await talk.send(probe)
            await talk.collect(before + 10**6)  # until the connection ends or the deadline
            probed = any(body.startswith(b'{"jsonrpc":"2.0","id":"probe"') for _, _, body in talk.answers[before:])
            fate = "kept alive" if probed else "closed" if talk.ended() else "hung"
    finally:
        await close(writer)
    return Transcript(talk.answers, fate, bytes(talk.buf))


# ---------------------------------------------------------------------------- the two gateways
async def _pair(
    gateway_factory: Any, stub_factory: Any, tmp_path: Any, *, auth: bool, path: str = "/"
) -> tuple[Any, Any, Any]:
    """A gateway with the fast lane and one without it, same upstream and configuration."""
    stub = await stub_factory()
    extra: dict[str, Any] = {}
    if auth:
        tokens = tmp_path / "tokens.yaml"
        tokens.write_text(
            yaml.safe_dump([{"sha256": hashlib.sha256(TOKEN.encode()).hexdigest(), "principal": {"name": "ci"}}])
        )
        extra["inbound"] = {"auth": {"type": "bearer", "tokensFile": str(tokens)}}
    servers = []
    for fast in (True, False):
        cfg = gateway_config([hook("org.example.up", stub.url)], **extra)
        cfg["listen"]["fastLane"] = fast
        cfg["listen"]["path"] = path
        cfg["limits"]["maxBodyBytes"] = 65536
        cfg["limits"]["bodyTimeoutMs"] = 2000  # bounds aiohttp's lingering read, and the wait for a body
        servers.append(await gateway_factory(cfg, name=f"hostile-{fast}.yaml"))
    return stub, servers[0], servers[1]


@dataclass(frozen=True)
class Case:
    steps: tuple[Step, ...]
    answers: int = 1
    """Answers expected before the probe (what aiohttp gives); more or fewer still compare."""
    auth: bool = False
    path: str = "/"
    reference: tuple[Step, ...] | None = None
    """What aiohttp is sent instead of ``steps``: the same requests one write each."""
    texts: bool = True
    """Compare answer bodies (False: aiohttp's 400 text quotes its own segment)."""


def _one(data: bytes, **kwargs: Any) -> Case:
    return Case((data,), **kwargs)


def _params(cases: dict[str, Case]) -> list[Any]:
    return [pytest.param(case, id=name) for name, case in cases.items()]


async def _both(gateway_factory: Any, stub_factory: Any, tmp_path: Any, case: Case) -> tuple[Transcript, Transcript]:
    """The case on the fast lane and on aiohttp; each transcript counts the upstream calls made."""
    stub, fast, plain = await _pair(gateway_factory, stub_factory, tmp_path, auth=case.auth, path=case.path)
    assert fast.lane is not None and plain.lane is None
    probe = _probe(case.auth)
    out = []
    for server, steps in ((fast, case.steps), (plain, case.reference or case.steps)):
        before = len(stub.received)
        transcript = await _converse(server.port, steps, case.answers, probe)
        transcript.upstream_calls = len(stub.received) - before
        out.append(transcript)
    return out[0], out[1]


def _same(got: Transcript, want: Transcript, texts: bool = True) -> None:
    def seen(t: Transcript) -> tuple[Any, ...]:
        answers = t.answers if texts else [(status, media, b"") for status, media, _ in t.answers]
        return answers, t.fate, t.leftover, t.upstream_calls

    assert seen(got) == seen(want)


async def _compare(gateway_factory: Any, stub_factory: Any, tmp_path: Any, case: Case) -> None:
    got, want = await _both(gateway_factory, stub_factory, tmp_path, case)
    _same(got, want, case.texts)


# ---------------------------------------------------------------------------- header lines
HEADER_LINES: dict[str, Case] = {
    "obs-fold with space": _one(_post("X-A: a", " b")),
    "obs-fold with tab": _one(_post("X-A: a", "\tb")),
    "obs-fold continuing Content-Type": _one(_post("X-A: a", content_type="application/\r\n json")),
    "obs-fold as the first header line": _one(_raw("POST / HTTP/1.1", " Host: 127.0.0.1", body=BODY)),
    "space before colon": _one(_post("X-A : a")),
    "space before the colon of Content-Length": _one(
        _raw("POST / HTTP/1.1", "Host: 127.0.0.1", "Content-Type: application/json", f"Content-Length : {N}", body=BODY)
    ),
    "tab before colon": _one(_post("X-A\t: a")),
    "NUL in a value": _one(_post(b"X-A: a\x00b")),
    "NUL in a name": _one(_post(b"X-\x00A: a")),
    "CR alone in a value": _one(_post(b"X-A: a\rb")),
    "CR alone ending a header": _one(_post(b"X-A: a\rX-B: b")),
    "DEL in a value": _one(_post(b"X-A: a\x7fb")),
    "DEL in a name": _one(_post(b"X-A\x7f: a")),
    "control byte in a value": _one(_post(b"X-A: a\x01b")),
    "tab inside a value": _one(_post(b"X-A: a\tb")),
    "UTF-8 in a value": _one(_post("X-A: caf\u00e9".encode())),
    "latin-1 byte in a value": _one(_post(b"X-A: caf\xe9")),
    "non-ASCII in a name": _one(_post("X-Caf\u00e9: a".encode())),
    "empty header name": _one(_post(": a")),
    "header line without colon": _one(_post("X-A")),
    "trailing whitespace in a value": _one(_post("X-A: a \t")),
    "CR CR LF": _one(_post(b"X-A: a\r\r\nX-B: b")),
    "LF CR LF ending the head": _one(_post("X-A: a").replace(b"\r\n\r\n", b"\n\r\n", 1)),
    "CR LF LF ending the head": _one(_post("X-A: a").replace(b"\r\n\r\n", b"\r\n\n", 1)),
    "duplicate Host": _one(_post("Host: evil.example")),
    "empty Host": _one(_post("Host:", host=False)),
    "no Host on HTTP/1.1": _one(_post(host=False)),
    "no Host on HTTP/1.0": _one(_post(host=False, line="POST / HTTP/1.0")),
    "Sec-WebSocket-Key1": _one(_post("Sec-WebSocket-Key1: 4 @1  46546xW%0l 1 5")),
    "128 header lines": _one(_post(*(f"X-H{i}: v" for i in range(125)))),
    "129 header lines": _one(_post(*(f"X-H{i}: v" for i in range(126)))),
    "header value of 8190 bytes": _one(_post("X-Filler: " + "a" * 8190)),
    "header value of 8191 bytes": _one(_post("X-Filler: " + "a" * 8191)),
    "header name of 4000 bytes": _one(_post("X" * 4000 + ": a")),
    "header name of 8191 bytes": _one(_post("X" * 8191 + ": a")),
    "head just under MAX_HEAD": _one(
        _post(*(f"X-F{i}: " + "b" * 4000 for i in range(3)), "X-G: " + "c" * (MAX_HEAD - 12000 - 300)),
    ),
}
for _name in ("User-Agent", "Server", "ETag", "Max-Forwards", "Content-Location", "Content-Range"):
    HEADER_LINES[f"duplicate {_name}"] = _one(_post(f"{_name}: 1", f"{_name}: 2"))


@pytest.mark.parametrize("case", _params(HEADER_LINES))
async def test_hostile_header_lines_are_answered_as_aiohttp_does_AHP_HTTP_001(
    gateway_factory, stub_factory, tmp_path, case
):
    """Folding, stray CR/NUL/DEL, non-ASCII, empty names, singleton duplicates, size limits."""
    await _compare(gateway_factory, stub_factory, tmp_path, case)


# ---------------------------------------------------------------------------- Content-Length
CONTENT_LENGTHS: dict[str, Case] = {
    "leading zeros": _one(_post(length="000000" + str(N))),
    "many leading zeros": _one(_post(length="0" * 200 + str(N))),
    "two spaces before, one after": _one(_post(length=f" {N} ")),
    "tab after": _one(_post(length=f"{N}\t")),
    "tab before": _one(_post(length=f"\t{N}")),
    "2**63": _one(_post(length=str(2**63))),
    "2**64 - 1 (llhttp's no-length marker)": _one(_post(length=str(2**64 - 1))),
    "2**64": _one(_post(length=str(2**64))),
    "twenty nines": _one(_post(length="9" * 20)),
    "negative": _one(_post(length="-5")),
    "hex": _one(_post(length=hex(N))),
    "a list of two equal values": _one(_post(length=f"{N}, {N}")),
    "two numbers": _one(_post(length=f"{N} {N}")),
    "empty": _one(_post(length="")),
    "fullwidth digits": _one(_post(length="".join(chr(0xFF10 + int(d)) for d in str(N)).encode().decode("latin-1"))),
    "exactly maxBodyBytes": _one(_post(body=b"{" + b" " * 65534 + b"}")),
    "exactly maxBodyBytes, body not sent (body timeout)": _one(_post(length="65536", body=b"")),
    "one past maxBodyBytes": _one(_post(body=b"{" + b" " * 65535 + b"}")),
    "missing": _one(_raw("POST / HTTP/1.1", "Host: 127.0.0.1", "Content-Type: application/json", body=BODY)),
    "Content-Length 0 with a body after it, one segment": Case(
        (_post(length="0", body=BODY),), answers=2, reference=(_post(length="0", body=b""), Wait(1), BODY)
    ),
    "Content-Length 0, answered, then what the body would have been": Case(
        (_post(length="0", body=b""), Wait(1), BODY), answers=2
    ),
}


@pytest.mark.parametrize("case", _params(CONTENT_LENGTHS))
async def test_hostile_content_lengths_are_answered_as_aiohttp_does_AHP_HTTP_001(
    gateway_factory, stub_factory, tmp_path, case
):
    """Leading zeros, whitespace, overflow past 2**63 and 2**64, signs, hex, lists, and the
    maxBodyBytes boundary: no value makes the two frame the body differently."""
    await _compare(gateway_factory, stub_factory, tmp_path, case)


# ---------------------------------------------------------------------------- Content-Type
CONTENT_TYPES: dict[str, Case] = {
    name: _one(_post(content_type=value))
    for name, value in {
        "upper case": "APPLICATION/JSON",
        "mixed case with a parameter": "Application/Json; Charset=UTF-8",
        "quoted parameter": 'application/json; charset="utf-8"',
        "space before the semicolon": "application/json ; charset=utf-8",
        "empty parameter list": "application/json;",
        "leading and trailing whitespace": "  application/json\t",
        "json-patch+json": "application/json-patch+json",
        "jsonx": "application/jsonx",
        "a list of media types": "application/json, text/plain",
        "wildcard subtype": "application/*",
        "any": "*/*",
        "empty": "",
        "no slash": "json",
        "json with a trailing slash": "application/json/",
    }.items()
}
CONTENT_TYPES["text/plain then application/json"] = _one(
    _post("Content-Type: application/json", content_type="text/plain")
)
CONTENT_TYPES["application/json twice"] = _one(_post("Content-Type: application/json"))
CONTENT_TYPES["application/json then empty"] = _one(_post("Content-Type:"))
CONTENT_TYPES["empty then application/json"] = _one(_post("Content-Type: application/json", content_type=""))


@pytest.mark.parametrize("case", _params(CONTENT_TYPES))
async def test_content_type_spellings_are_answered_as_aiohttp_does_AHP_HTTP_001(
    gateway_factory, stub_factory, tmp_path, case
):
    """Case, parameters, look-alike media types, and two Content-Type headers in either order."""
    await _compare(gateway_factory, stub_factory, tmp_path, case)


# ---------------------------------------------------------------------------- request line
REQUEST_LINES: dict[str, Case] = {
    name: _one(_post(line=line))
    for name, line in {
        "absolute-form": "POST http://127.0.0.1/ HTTP/1.1",
        "absolute-form https": "POST https://127.0.0.1:1/ HTTP/1.1",
        "double slash": "POST // HTTP/1.1",
        "encoded dot": "POST /%2e HTTP/1.1",
        "encoded slash": "POST /%2F HTTP/1.1",
        "dot segment": "POST /. HTTP/1.1",
        "empty query": "POST /? HTTP/1.1",
        "empty fragment": "POST /# HTTP/1.1",
        "fragment": "POST /#x HTTP/1.1",
        "asterisk": "POST * HTTP/1.1",
        "lower-case method": "post / HTTP/1.1",
        "mixed-case method": "Post / HTTP/1.1",
        "PUT": "PUT / HTTP/1.1",
        "POSTX": "POSTX / HTTP/1.1",
        "two spaces after the method": "POST  / HTTP/1.1",
        "two spaces before the version": "POST /  HTTP/1.1",
        "tab after the method": "POST\t/ HTTP/1.1",
        "space after the version": "POST / HTTP/1.1 ",
        "HTTP/1.2": "POST / HTTP/1.2",
        "HTTP/2.0": "POST / HTTP/2.0",
        "HTTP/1.10": "POST / HTTP/1.10",
        "lower-case http": "POST / http/1.1",
        "HTTP/0.9 style": "POST /",
        "leading CRLF": "\r\nPOST / HTTP/1.1",
    }.items()
}
for _target, _name in (("/ahp/", "trailing slash"), ("/AHP", "upper case"), ("/ahp%2F", "encoded slash")):
    REQUEST_LINES[f"listen path /ahp, target {_name}"] = _one(_post(line=f"POST {_target} HTTP/1.1"), path="/ahp")
REQUEST_LINES["listen path /ahp, exact"] = _one(_post(line="POST /ahp HTTP/1.1"), path="/ahp")


@pytest.mark.parametrize("case", _params(REQUEST_LINES))
async def test_request_target_and_version_variants_are_answered_as_aiohttp_does_AHP_HTTP_001(
    gateway_factory, stub_factory, tmp_path, case
):
    """Absolute-form, dot and encoded segments, query and fragment, method case and spacing,
    HTTP/0.9, 1.2, 2.0, trailing slash on a non-root path."""
    await _compare(gateway_factory, stub_factory, tmp_path, case)


# ---------------------------------------------------------------------------- connection fate
CONNECTION: dict[str, Case] = {
    "close on 1.1": _one(_post("Connection: close")),
    "Close on 1.1": _one(_post("Connection: Close")),
    "keep-alive, close on 1.1": _one(_post("Connection: keep-alive, close")),
    "keep-alive then close headers on 1.1": _one(_post("Connection: keep-alive", "Connection: close")),
    "keep-alive on 1.1": _one(_post("Connection: keep-alive")),
    "keep-alive on 1.0": _one(_post("Connection: keep-alive", line="POST / HTTP/1.0")),
    "nothing on 1.0": _one(_post(line="POST / HTTP/1.0")),
    "close on 1.0": _one(_post("Connection: close", line="POST / HTTP/1.0")),
    "unknown token": _one(_post("Connection: x-whatever")),
    "TE: trailers": _one(_post("Connection: TE", "TE: trailers")),
    "Upgrade: h2c alone": _one(_post("Upgrade: h2c")),
    "Upgrade: h2c with Connection: close": _one(_post("Upgrade: h2c", "Connection: close")),
    "Upgrade: h2c with Connection: Upgrade": _one(
        _post("Connection: Upgrade, HTTP2-Settings", "Upgrade: h2c", "HTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA")
    ),
    "Upgrade: websocket with Connection: upgrade": _one(
        _post("Connection: upgrade", "Upgrade: websocket", "Sec-WebSocket-Version: 13")
    ),
    "Connection: upgrade without Upgrade": _one(_post("Connection: upgrade")),
    "Expect: 100-continue with the body": _one(_post("Expect: 100-continue"), answers=1),
    "Transfer-Encoding: identity": _one(_post("Transfer-Encoding: identity")),
    "Content-Encoding: identity": _one(_post("Content-Encoding: identity")),
    "close with Content-Length 0": _one(_post("Connection: close", body=b"")),
    "close with Content-Length 0, then a request": _one(
        _post("Connection: close", body=b"") + _post(),
        reference=(_post("Connection: close", body=b""), Wait(1), _post()),
    ),
    "close, then a request in the same segment": _one(
        _post("Connection: close") + _post(), reference=(_post("Connection: close"), Wait(1), _post())
    ),
    "close, then a request in the next segment": Case((_post("Connection: close"), _post())),
    "close, answered, then a request": Case((_post("Connection: close"), Wait(1), _post())),
}


@pytest.mark.parametrize("case", _params(CONNECTION))
async def test_connection_is_kept_or_closed_as_aiohttp_does_AHP_HTTP_001(gateway_factory, stub_factory, tmp_path, case):
    """``Connection: close`` / ``keep-alive`` on HTTP/1.1 and 1.0, and the headers that send a
    request to aiohttp: the connection ends, or stays, exactly as without the fast lane."""
    await _compare(gateway_factory, stub_factory, tmp_path, case)


# ---------------------------------------------------------------------------- authentication
VALID = f"Authorization: Bearer {TOKEN}"
INVALID = f"Authorization: Bearer {WRONG}"
BYPASS: dict[str, Case] = {
    "AUTH BYPASS CHECK: valid then wrong": _one(_post(VALID, INVALID), auth=True),
    "AUTH BYPASS CHECK: wrong then valid": _one(_post(INVALID, VALID), auth=True),
    "AUTH BYPASS CHECK: valid twice": _one(_post(VALID, VALID), auth=True),
    "AUTH BYPASS CHECK: valid then empty lower-case": _one(_post(VALID, "authorization:"), auth=True),
    "AUTH BYPASS CHECK: empty then valid": _one(_post("Authorization:", VALID), auth=True),
    "AUTH BYPASS CHECK: valid then upper-case wrong": _one(_post(VALID, f"AUTHORIZATION: Bearer {WRONG}"), auth=True),
    "AUTH BYPASS CHECK: valid, then wrong, pipelined": _one(_post(VALID) + _post(INVALID), answers=2, auth=True),
    "AUTH BYPASS CHECK: valid, then no Authorization, pipelined": _one(_post(VALID) + _post(), answers=2, auth=True),
    "AUTH BYPASS CHECK: valid and wrong, one folded into the other": _one(_post(INVALID, " " + TOKEN), auth=True),
    "AUTH BYPASS CHECK: valid token in a look-alike header": _one(
        _post(f"Authorisation: Bearer {TOKEN}", f"X-Authorization: Bearer {TOKEN}"), auth=True
    ),
    "AUTH BYPASS CHECK: NUL after the token": _one(_post(VALID.encode() + b"\x00"), auth=True),
    "AUTH BYPASS CHECK: valid, then wrong with its body in the next segment": Case(
        (_post(VALID) + _at_head_end(_post(INVALID))[0], Wait(2), _at_head_end(_post(INVALID))[1]), answers=2, auth=True
    ),
}
AUTH: dict[str, Case] = {
    "missing": _one(_post(), auth=True),
    "lower-case header name": _one(_post(f"authorization: Bearer {TOKEN}"), auth=True),
    "lower-case scheme": _one(_post(f"Authorization: bearer {TOKEN}"), auth=True),
    "upper-case scheme": _one(_post(f"Authorization: BEARER {TOKEN}"), auth=True),
    "two spaces after the scheme": _one(_post(f"Authorization: Bearer  {TOKEN}"), auth=True),
    "tab after the scheme": _one(_post(f"Authorization: Bearer\t{TOKEN}"), auth=True),
    "tab before the scheme": _one(_post(f"Authorization:\tBearer {TOKEN}"), auth=True),
    "trailing space": _one(_post(f"Authorization: Bearer {TOKEN} "), auth=True),
    "trailing spaces": _one(_post(f"Authorization: Bearer {TOKEN}   "), auth=True),
    "trailing tab": _one(_post(f"Authorization: Bearer {TOKEN}\t"), auth=True),
    "scheme only": _one(_post("Authorization: Bearer"), auth=True),
    "other scheme": _one(_post(f"Authorization: Basic {TOKEN}"), auth=True),
    "valid token, no Host (accepted where aiohttp refuses, not a bypass)": _one(_post(VALID, host=False), auth=True),
    "no token, no Host": _one(_post(host=False), auth=True),
    "head split from its body at CRLFCRLF, valid token": Case(_at_head_end(_post(VALID)), auth=True),
    "no token, body sent after the refusal arrived": Case(
        (_at_head_end(_post())[0], Wait(1), _at_head_end(_post())[1]), auth=True
    ),
}


@pytest.mark.parametrize("case", _params(BYPASS))
async def test_AUTH_BYPASS_CHECK_the_fast_lane_never_accepts_a_caller_aiohttp_refuses_AHP_HTTP_001_section_12(
    gateway_factory, stub_factory, tmp_path, case
):
    """AUTH BYPASS CHECK (protocol §12): a valid token beside a wrong, empty, repeated, folded or
    look-alike ``Authorization`` header, or on a neighbouring pipelined request. aiohttp refuses
    (the test checks that it does); the fast lane must refuse too — never a 200 or an upstream
    call where aiohttp gave none — and then answer exactly as aiohttp does."""
    got, want = await _both(gateway_factory, stub_factory, tmp_path, case)
    assert any(status >= 400 for status, _, _ in want.answers), "aiohttp was expected to refuse"
    accepted = [status == 200 for status, _, _ in got.answers]
    allowed = [status == 200 for status, _, _ in want.answers]
    assert not any(mine and not theirs for mine, theirs in zip(accepted, allowed)), (
        "AUTH BYPASS: the fast lane accepted a request aiohttp refused"
    )
    assert sum(accepted) <= sum(allowed) and got.upstream_calls <= want.upstream_calls, (
        "AUTH BYPASS: the fast lane acted on more requests than aiohttp"
    )
    _same(got, want)


@pytest.mark.parametrize("case", _params(AUTH))
async def test_bearer_authentication_under_hostile_headers_matches_aiohttp_AHP_HTTP_001_section_12(
    gateway_factory, stub_factory, tmp_path, case
):
    """Protocol §12 with bearer auth configured: header-name and scheme case, spacing and tabs,
    trailing whitespace after the token, other schemes, a refusal from the head before the body."""
    await _compare(gateway_factory, stub_factory, tmp_path, case)


# ---------------------------------------------------------------------------- pipelining and desync
GET = _raw("GET / HTTP/1.1", "Host: 127.0.0.1")
MALFORMED = _raw("POST / HTTP/1.1", "Host: 127.0.0.1", "X-A : a")
GARBAGE = b"\x00\x01\x02\r\n\r\n"
SMUGGLE = _post("Transfer-Encoding: chunked", length="4", body=b"%x\r\n" % len(_post(body=b"{}")) + _post(body=b"{}"))
SMUGGLE += b"\r\n0\r\n\r\n"
PIPELINES: dict[str, Case] = {
    "fast, then GET, one segment": _one(_post() + GET, answers=2),
    "fast, then text/plain, then fast, one segment": _one(
        _post() + _post(content_type="text/plain") + _post(), answers=3
    ),
    "fast, then malformed, one segment": _one(_post() + MALFORMED, answers=2, reference=(_post(), Wait(1), MALFORMED)),
    "fast, then malformed, next segment": Case((_post(), MALFORMED), answers=2),
    "fast, answered, then malformed": Case((_post(), Wait(1), MALFORMED), answers=2),
    "fast, then garbage, one segment": _one(_post() + GARBAGE, answers=2, reference=(_post(), Wait(1), GARBAGE)),
    "fast, then garbage, next segment": Case((_post(), GARBAGE), answers=2),
    "fast, then a half request, pause, rest": Case(
        (_post() + _post()[:30], Wait(1), _post()[30:]),
        answers=2,
    ),
    "fast, then a head, pause, its body": Case(
        (_post() + _at_head_end(_post())[0], Wait(1), _at_head_end(_post())[1]),
        answers=2,
    ),
    "body one byte short, then the next request, one segment": _one(
        _post(length=str(N + 1)) + _post(),
        answers=2,
        reference=(_post(length=str(N + 1)) + _post()[:1], Wait(1), _post()[1:]),
        texts=False,
    ),
    "body one byte short, then the next request, next segment": Case(
        (_post(length=str(N + 1)), _post()), answers=2, texts=False
    ),
    "body one byte short, then a space and the next request, next segment": Case(
        (_post(length=str(N + 1)), b" " + _post()), answers=2
    ),
    "body one byte long, then the next request, one segment": _one(
        _post(length=str(N - 1)) + _post(),
        answers=2,
        reference=(_post(length=str(N - 1))[:-1], Wait(1), BODY[-1:] + _post()),
    ),
    "body one byte long, answered, then the extra byte and the next request": Case(
        (_post(length=str(N - 1))[:-1], Wait(1), BODY[-1:] + _post()), answers=2
    ),
    "body hiding a request (Content-Length covers it)": _one(_post(body=BODY + _post()), answers=1),
    "fast, CRLF, fast": _one(_post() + b"\r\n" + _post(), answers=2),
    "fast, then HTTP/1.0": _one(_post() + _post(line="POST / HTTP/1.0"), answers=2),
    "fast, then over maxBodyBytes": _one(_post() + _post(length="70000", body=b""), answers=2),
    "fast, then CL+TE smuggling attempt, one segment": _one(
        _post() + SMUGGLE, answers=2, reference=(_post(), Wait(1), SMUGGLE)
    ),
    "fast, then CL+TE smuggling attempt, next segment": Case((_post(), SMUGGLE), answers=2),
    "twenty fast requests, one segment": _one(_post() * 20, answers=20),
    "fast, GET, fast, one byte per write": Case(_bytewise(_post() + GET + _post()), answers=3),
}


@pytest.mark.parametrize("case", _params(PIPELINES))
async def test_pipelined_and_desync_attempts_are_answered_as_aiohttp_does_AHP_HTTP_001(
    gateway_factory, stub_factory, tmp_path, case
):
    """A fast-lane request followed in the same segment by one for aiohttp, a malformed one, a
    half one; bodies shorter or longer than their Content-Length (desync attempts): the same
    answers in the same order, and the same connection fate."""
    await _compare(gateway_factory, stub_factory, tmp_path, case)


# ---------------------------------------------------------------------------- segmentation
_END_AT = _head_end(_post()) - 4
SEGMENTS: dict[str, Case] = {
    "one byte per write": Case(_bytewise(_post())),
    "one byte per write, two requests": Case(_bytewise(_post() + _post()), answers=2),
    "one byte per write, hostile (no Host)": Case(_bytewise(_post(host=False))),
    "split inside 'POST '": Case((_post()[:3], _post()[3:])),
    "split after 'POST '": Case((_post()[:5], _post()[5:])),
    "split before CRLFCRLF": Case((_post()[:_END_AT], _post()[_END_AT:])),
    "split inside CRLFCRLF (after CR)": Case((_post()[: _END_AT + 1], _post()[_END_AT + 1 :])),
    "split inside CRLFCRLF (after CRLF)": Case((_post()[: _END_AT + 2], _post()[_END_AT + 2 :])),
    "split inside CRLFCRLF (after CRLFCR)": Case((_post()[: _END_AT + 3], _post()[_END_AT + 3 :])),
    "split exactly after CRLFCRLF": Case((_post()[: _END_AT + 4], _post()[_END_AT + 4 :])),
    "head in three pieces, bare LF in the second": Case((_post()[:20], b"X-A: a\n", _post()[20:]), texts=False),
    "head in one piece, bare LF": _one(_post()[:20] + b"X-A: a\n" + _post()[20:]),
}


@pytest.mark.parametrize("case", _params(SEGMENTS))
async def test_slow_and_split_writes_are_answered_as_aiohttp_does_AHP_HTTP_001(
    gateway_factory, stub_factory, tmp_path, case
):
    """One byte per write, and splits at every byte of the CRLFCRLF that ends the head."""
    await _compare(gateway_factory, stub_factory, tmp_path, case)


# ---------------------------------------------------------------------------- header values as the pipeline sees them
TRACE_ID = "0af7651916cd43dd8448eb211c80319c"
TRACEPARENT = f"00-{TRACE_ID}-b7ad6b7169203331-01"


@pytest.mark.parametrize(
    "tail",
    [
        pytest.param("", id="exact"),
        pytest.param(" ", id="trailing space"),
        pytest.param("\t", id="trailing tab"),
        pytest.param(" \t ", id="trailing mixed whitespace"),
    ],
)
async def test_header_values_reach_the_pipeline_as_aiohttp_gives_them_AHP_HTTP_001(
    gateway_factory, stub_factory, tmp_path, tail
):
    """The headers the fast lane hands the pipeline (trace context, headers exposed to policies)
    are the values aiohttp would have given: seen here through the ``traceparent`` that reaches
    the upstream, which continues the caller's trace only when the header was read as sent."""
    stub, fast, plain = await _pair(gateway_factory, stub_factory, tmp_path, auth=False)
    data = _post(f"traceparent: {TRACEPARENT}{tail}")
    seen = []
    for server in (fast, plain):
        transcript = await _converse(server.port, (data,), 1, _probe(False))
        assert transcript.answers[0][0] == 200
        first = next(h for h in stub.headers[-2:] if h.get("traceparent") is not None)
        seen.append(TRACE_ID in str(first.get("traceparent")))
    assert seen[0] == seen[1]
