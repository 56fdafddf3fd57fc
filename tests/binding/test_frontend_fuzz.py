"""Hostile input on the harness-facing listener: hypothesis-driven mutation of the golden
fixtures, random JSON, random HTTP framing over raw sockets, and request bodies with a
``Content-Encoding`` (compression bombs included).

Whatever arrives, the answer is a valid JSON-RPC response (HTTP 200), 202 without a body, or a
4xx (AHP-HTTP-001) — never a 5xx, never a hang, and no descriptor or connection is left behind.
"""

from __future__ import annotations

import asyncio
import copy
import gzip
import json
import socket
import threading
import time
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiohttp import web
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.config.load import load
from gateway.server.app import GatewayServer
from tests.support.client import post, wait_for
from tests.support.config import gateway_config, hook
from tests.support.events import intercept, tool_before
from tests.support.fault_tools import open_fds, status_of
from tests.support.paths import VECTORS

FIXTURES = sorted((VECTORS / "ahp-spec" / "fixtures" / "draft" / "http").glob("*.json"))
GOLDEN = [
    doc
    for doc in (json.loads(p.read_text()) for p in FIXTURES)
    if isinstance(doc, dict) and isinstance(doc.get("method"), str)
]
FUZZ = settings(
    max_examples=120,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture, HealthCheck.data_too_large],
    derandomize=True,
)
READ_TIMEOUT = 5.0
"""No answer (or close) within this is a hang: every limit in the fuzz configuration is below it."""


# ------------------------------------------------------------------------------------------------
# A gateway on its own loop in a thread, so hypothesis drives it from plain synchronous tests.


class ThreadedGateway:
    def __init__(self, directory: Path) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.directory = directory
        self.server: GatewayServer | None = None
        self.runner: web.AppRunner | None = None

    def run(self, coro: Any, timeout: float = 30) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    async def _start(self) -> None:
        async def answer(request: web.Request) -> web.Response:
            body = json.loads(await request.read())
            if "id" not in body:
                return web.Response(status=202)
            reply = {"jsonrpc": "2.0", "id": body["id"], "result": {"protocolVersion": "draft", "effects": []}}
            return web.json_response(reply)

        app = web.Application()
        app.router.add_post("/", answer)
        self.runner = web.AppRunner(app, access_log=None)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        port = self.runner.addresses[0][1]
        entry = hook("org.example.up", f"http://127.0.0.1:{port}/", events=["*"])
        cfg = gateway_config(
            [entry],
            limits={"maxBodyBytes": 65536, "headerTimeoutMs": 300, "bodyTimeoutMs": 300, "idleTimeoutSeconds": 2},
            log={"decisions": "off"},
        )
        path = self.directory / "gateway.yaml"
        path.write_text(yaml.safe_dump(cfg))
        self.server = GatewayServer(load(path))
        await self.server.start()

    async def _stop(self) -> None:
        if self.server is not None:
            await self.server.stop()
        if self.runner is not None:
            await self.runner.cleanup()

    def start(self) -> ThreadedGateway:
        self.run(self._start())
        return self

    def stop(self) -> None:
        self.run(self._stop())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)
        self.loop.close()

    @property
    def port(self) -> int:
        assert self.server is not None
        return self.server.port

    def open_connections(self) -> int:
        assert self.server is not None and self.server.guards is not None
        return self.server.guards.main.open


@pytest.fixture(scope="module")
def gw(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ThreadedGateway]:
    server = ThreadedGateway(tmp_path_factory.mktemp("fuzz")).start()
    yield server
    server.stop()


@pytest.fixture
def no_leaks(gw: ThreadedGateway) -> Iterator[None]:
    """Descriptors and gateway connections return to where they were once the clients close."""
    before = open_fds()
    yield
    deadline = time.monotonic() + 5
    while (gw.open_connections() or open_fds() > before + 2) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert gw.open_connections() == 0, "the gateway kept connections open"
    assert open_fds() <= before + 2, f"descriptors leaked: {before} -> {open_fds()}"


# ------------------------------------------------------------------------------------------------
# Raw HTTP exchange and the answer contract


def exchange(port: int, data: bytes, *, shut: bool = False) -> bytes:
    """Send ``data``; return the first response (headers and its Content-Length body), or what
    arrived before the gateway closed. Fails on a hang."""
    with socket.create_connection(("127.0.0.1", port), timeout=READ_TIMEOUT) as sock:
        try:
            sock.sendall(data)
            if shut:
                sock.shutdown(socket.SHUT_WR)
        except OSError:
            pass  # the gateway may close early (413, 400): what it answered still counts
        received = b""
        deadline = time.monotonic() + READ_TIMEOUT
        while True:
            complete = _complete(received)
            if complete is not None:
                return complete
            remaining = deadline - time.monotonic()
            assert remaining > 0, f"no complete answer within {READ_TIMEOUT}s to {data[:120]!r}"
            sock.settimeout(remaining)
            try:
                chunk = sock.recv(65536)
            except TimeoutError:
                raise AssertionError(f"hang: no answer to {data[:120]!r}") from None
            except OSError:
                return received
            if not chunk:
                return received
            received += chunk


def _complete(data: bytes) -> bytes | None:
    head, sep, rest = data.partition(b"\r\n\r\n")
    if not sep:
        return None
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value.strip())
    if len(rest) < length:
        return None
    return head + sep + rest[:length]


def check_answer(response: bytes, *, sent: bytes = b"") -> None:
    status = status_of(response)
    assert status is not None, f"no HTTP answer to {sent[:200]!r}: {response[:200]!r}"
    assert status < 500, f"{status} for {sent[:200]!r}: {response[:300]!r}"
    body = response.partition(b"\r\n\r\n")[2]
    if status == 202:
        assert body == b""
    elif status == 200:
        check_jsonrpc(json.loads(body))
    else:
        assert 400 <= status < 500, status


def check_jsonrpc(message: Any) -> None:
    assert isinstance(message, dict) and message.get("jsonrpc") == "2.0", message
    assert "id" in message
    assert ("result" in message) != ("error" in message), message
    if "error" in message:
        error = message["error"]
        assert isinstance(error["code"], int) and isinstance(error["message"], str)


def request_bytes(body: bytes, headers: dict[str, str] | None = None) -> bytes:
    lines = ["POST / HTTP/1.1", "Host: 127.0.0.1", "Content-Type: application/json", f"Content-Length: {len(body)}"]
    lines.extend(f"{k}: {v}" for k, v in (headers or {}).items())
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


# ------------------------------------------------------------------------------------------------
# Strategies

JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4),
    max_leaves=12,
)


@st.composite
def mutated_fixture(draw: st.DrawFn) -> bytes:
    """A golden request or notification with one to three single-point mutations."""
    doc = copy.deepcopy(draw(st.sampled_from(GOLDEN)))
    for _ in range(draw(st.integers(1, 3))):
        doc = _mutate(draw, doc)
    return json.dumps(doc).encode()


def _mutate(draw: st.DrawFn, node: Any) -> Any:
    if isinstance(node, dict) and node and draw(st.booleans()):
        key = draw(st.sampled_from(sorted(node)))
        op = draw(st.sampled_from(["descend", "descend", "delete", "replace", "rename"]))
        if op == "descend":
            node[key] = _mutate(draw, node[key])
        elif op == "delete":
            del node[key]
        elif op == "replace":
            node[key] = draw(JSON)
        else:
            node[key.upper() if key != key.upper() else key + "_"] = node.pop(key)
        return node
    if isinstance(node, list) and node and draw(st.booleans()):
        index = draw(st.integers(0, len(node) - 1))
        node[index] = _mutate(draw, node[index])
        return node
    return draw(
        st.one_of(
            JSON,
            st.just(node if not isinstance(node, str) else node * 2),
            st.just([node]),
            st.just(str(node)),
            st.just(1.0) if isinstance(node, int) and not isinstance(node, bool) else st.just(None),
        )
    )


FRAMING_PIECES = st.sampled_from(
    [
        b"Content-Length: 5",
        b"Content-Length: -1",
        b"Content-Length: 99999999999999999999",
        b"Content-Length: 1, 2",
        b"Content-Length: 0x10",
        b"Transfer-Encoding: chunked",
        b"Transfer-Encoding: gzip, chunked",
        b"Transfer-Encoding: chunked, identity",
        b"Transfer-Encoding: xchunked",
        b"Content-Encoding: gzip",
        b"Content-Encoding: br",
        b"Content-Type: application/json",
        b"Content-Type: application/json; charset=utf-8",
        b"Content-Type: text/plain",
        b"Expect: 100-continue",
        b"Connection: close",
        b"Connection: upgrade\r\nUpgrade: websocket",
        b"X-Bad\x00Header: 1",
        b"X-Fold: a\r\n continued",
        b" leading-space: 1",
        b"Host: a\r\nHost: b",
        b"X-Long: " + b"a" * 9000,
    ]
)


@st.composite
def http_request(draw: st.DrawFn) -> bytes:
    method = draw(st.sampled_from([b"POST", b"GET", b"PUT", b"OPTIONS", b"POST ", b"P\x00ST", b"post", b"CONNECT"]))
    target = draw(st.sampled_from([b"/", b"/x", b"*", b"//", b"/?a=b", b"http://127.0.0.1/", b"/%00", b""]))
    version = draw(st.sampled_from([b"HTTP/1.1", b"HTTP/1.0", b"HTTP/2.0", b"HTTP/1.1x", b"HTTP/9", b""]))
    pieces = draw(st.lists(FRAMING_PIECES, max_size=5))
    body = draw(
        st.sampled_from(
            [
                b"",
                json.dumps(intercept(tool_before())).encode(),
                b"5\r\n{}{}{\r\n0\r\n\r\n",
                b"zz\r\nnot hex\r\n",
                b"0\r\n\r\n",
                gzip.compress(b"{}"),
                b"\x00\xff" * 8,
            ]
        )
    )
    if draw(st.booleans()):
        pieces.append(b"Content-Length: %d" % len(body))
    sep = draw(st.sampled_from([b"\r\n", b"\r\n", b"\n"]))
    head = method + b" " + target + b" " + version + sep + b"Host: 127.0.0.1" + sep
    head += b"".join(p + sep for p in pieces)
    return head + sep + body


# ------------------------------------------------------------------------------------------------
# Fuzz tests


@FUZZ
@given(body=mutated_fixture())
def test_mutated_golden_fixtures_get_a_valid_answer(gw, no_leaks, body):
    check_answer(exchange(gw.port, request_bytes(body)), sent=body)


@FUZZ
@given(value=JSON | st.binary(max_size=200).map(lambda b: {"raw": b.decode("latin-1")}))
def test_random_json_gets_a_valid_answer(gw, no_leaks, value):
    body = json.dumps(value).encode()
    check_answer(exchange(gw.port, request_bytes(body)), sent=body)


@FUZZ
@given(body=st.binary(max_size=300))
def test_random_bytes_get_a_valid_answer(gw, no_leaks, body):
    check_answer(exchange(gw.port, request_bytes(body)), sent=body)


@settings(FUZZ, max_examples=80)
@given(data=http_request(), shut=st.booleans())
def test_random_http_framing_is_answered_or_closed_never_500_or_hang(gw, no_leaks, data, shut):
    response = exchange(gw.port, data, shut=shut)
    if response:
        status = status_of(response)
        assert status is not None and status < 500, f"{response[:200]!r} for {data[:200]!r}"
        if status == 200:
            check_jsonrpc(json.loads(response.partition(b"\r\n\r\n")[2]))


# ------------------------------------------------------------------------------------------------
# Content-Encoding: decoded with the limit on the decoded size, or refused


def _ok_body() -> bytes:
    return json.dumps(intercept(tool_before())).encode()


def _rss_kib() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


@pytest.fixture(scope="module")
def bomb() -> bytes:
    """~61 KB of gzip that inflates to 63 MiB."""
    compressor = zlib.compressobj(9, zlib.DEFLATED, 31)
    block = b" " * (1 << 20)
    data = b"".join(compressor.compress(block) for _ in range(63)) + compressor.flush()
    assert len(data) < 70_000
    return data


@pytest.mark.spec("AHP-HTTP-001")
@pytest.mark.parametrize(
    ("encoding", "encode"),
    [
        ("gzip", gzip.compress),
        ("x-gzip", gzip.compress),
        ("GZIP", gzip.compress),
        ("deflate", zlib.compress),
        ("identity", lambda b: b),
        ("gzip, identity", gzip.compress),
    ],
)
def test_encoded_bodies_are_decoded(gw, no_leaks, encoding, encode):
    response = exchange(gw.port, request_bytes(encode(_ok_body()), {"Content-Encoding": encoding}))
    assert status_of(response) == 200
    assert "result" in json.loads(response.partition(b"\r\n\r\n")[2])


def test_several_gzip_members_are_one_body(gw, no_leaks):
    body = _ok_body()
    data = gzip.compress(body[:20]) + gzip.compress(body[20:])
    response = exchange(gw.port, request_bytes(data, {"Content-Encoding": "gzip"}))
    assert status_of(response) == 200 and "result" in json.loads(response.partition(b"\r\n\r\n")[2])


@pytest.mark.parametrize(
    ("data", "encoding", "status"),
    [
        (_ok_body(), "gzip", 400),  # a gzip header on a plain body
        (_ok_body(), "deflate", 400),
        (gzip.compress(_ok_body())[:-9], "gzip", 400),  # truncated
        (gzip.compress(_ok_body()) + b"garbage", "gzip", 400),  # trailing data
        (zlib.compress(_ok_body()) + b"x", "deflate", 400),
        (b"", "gzip", 400),
        (gzip.compress(gzip.compress(_ok_body())), "gzip, gzip", 415),  # nested layers multiply a bomb
        (_ok_body(), "br", 415),
        (_ok_body(), "zstd", 415),
        (_ok_body(), "compress", 415),
    ],
    ids=[
        "plain-as-gzip",
        "plain-as-deflate",
        "truncated",
        "trailing",
        "deflate-trailing",
        "empty",
        "nested",
        "br",
        "zstd",
        "compress",
    ],
)
def test_bad_or_unsupported_encodings_are_4xx(gw, no_leaks, data, encoding, status):
    assert status_of(exchange(gw.port, request_bytes(data, {"Content-Encoding": encoding}))) == status


def test_decoded_size_limit_is_exact(gw, no_leaks):
    limit = 65536
    base = _ok_body()
    padded = base[:-1] + b" " * (limit - len(base)) + b"}"
    assert len(padded) == limit
    assert status_of(exchange(gw.port, request_bytes(gzip.compress(padded), {"Content-Encoding": "gzip"}))) == 200
    over = base[:-1] + b" " * (limit + 1 - len(base)) + b"}"
    assert status_of(exchange(gw.port, request_bytes(gzip.compress(over), {"Content-Encoding": "gzip"}))) == 413


def test_compression_bomb_is_refused_without_inflating(gw, no_leaks, bomb):
    """Eight 61 KB bombs at once (63 MiB each when inflated): all 413, quickly, and the process
    grows by far less than one inflated body."""
    before = _rss_kib()
    results: list[int | None] = []

    def one() -> None:
        results.append(status_of(exchange(gw.port, request_bytes(bomb, {"Content-Encoding": "gzip"}))))

    threads = [threading.Thread(target=one) for _ in range(8)]
    started = time.monotonic()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(READ_TIMEOUT * 2)
    assert results == [413] * 8
    assert time.monotonic() - started < READ_TIMEOUT
    assert _rss_kib() - before < 32 * 1024, "inflating the bomb would add 63 MiB per request"


async def test_gzip_body_through_an_http_client(gateway_factory, stub_factory, http):
    """A client library's own gzip request encoding (aiohttp ``compress``) is decoded."""
    stub = await stub_factory()
    server = await gateway_factory(gateway_config([hook("org.example.up", stub.url)]))
    request = intercept(tool_before())
    async with http.post(
        server.url, data=json.dumps(request), headers={"Content-Type": "application/json"}, compress="gzip"
    ) as response:
        assert response.status == 200
        assert (await response.json())["id"] == request["id"]
    assert len(stub.received) == 1
    status, body = await post(http, server.url, request)
    assert status == 200 and body["id"] == request["id"]
    await wait_for(lambda: True)


async def test_malformed_requests_are_not_logged_with_their_bytes(gateway_factory, stub_factory, caplog):
    """A malformed request carrying a credential: 400, and neither the credential nor a
    traceback reaches the log (a client could otherwise flood it or make it keep a secret)."""
    stub = await stub_factory()
    server = await gateway_factory(gateway_config([hook("org.example.up", stub.url)]))
    secret = "s3cr3t-token-value"
    data = (
        f"POST / HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {secret}\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n"
    ).encode()
    caplog.set_level("DEBUG")
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    writer.write(data)
    await writer.drain()
    answer = await asyncio.wait_for(reader.read(65536), READ_TIMEOUT)
    writer.close()
    assert status_of(answer) == 400
    await wait_for(lambda: any("malformed HTTP request" in r.getMessage() for r in caplog.records))
    assert all(secret not in r.getMessage() and not r.exc_info for r in caplog.records)
    assert secret not in caplog.text
    assert not [
        r
        for r in caplog.records
        if r.levelname in ("ERROR", "WARNING") and r.name.startswith(("aiohttp", "ahp_gateway.http"))
    ]
