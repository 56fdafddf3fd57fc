"""The upstream HTTP/1.1 client (gateway.upstream.h1) against real loopback servers that answer
byte for byte as scripted: keep-alive reuse, framing (Content-Length, chunked, close-delimited,
1xx), bounded answers (AHP-HTTP-001), no redirects, cancellation that aborts the connection,
the per-origin connection cap and idle expiry, and header injection refused."""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import time
from collections.abc import AsyncIterator, Callable

import pytest

from gateway.upstream.h1 import AnswerTooLarge, H1Client, ProtocolError, Target, header_block
from tests.support.scripted_h1 import BODY, Script, Scripted, ok, read_request


def keep_answering(answer: bytes) -> Script:
    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            await read_request(reader)
            writer.write(answer)
            await writer.drain()

    return script


def answer_once(answer: bytes) -> Script:
    """Answer one request, then close the connection."""

    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(answer)
        await writer.drain()

    return script


async def until(predicate: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached in time"
        await asyncio.sleep(0.01)


async def post_twice(c: H1Client, server: Scripted) -> None:
    target = Target(server.url, {}, None)
    for _ in range(2):
        assert (await c.post(target, b"", b"{}", limit=1 << 20)).body == BODY


@contextlib.asynccontextmanager
async def client(**kwargs: float) -> AsyncIterator[H1Client]:
    c = H1Client(**kwargs)  # type: ignore[arg-type]
    try:
        yield c
    finally:
        c.close()


async def test_keep_alive_reuses_one_connection_and_sends_the_head() -> None:
    seen: list[bytes] = []

    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            head, body = await read_request(reader)
            seen.append(head + body)
            writer.write(ok())

    async with Scripted(script) as server, client() as c:
        target = Target(server.url + "?a=1", {"Content-Type": "application/json", "X-Static": "s"}, None)
        for _ in range(5):
            response = await c.post(target, header_block({"traceparent": "t"}), b"{}", limit=1 << 20)
            assert (response.status, response.body) == (200, BODY)
        assert server.connections == 1
        first = seen[0]
        assert first.startswith(b"POST /hook?a=1 HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n" % server.port)
        assert b"X-Static: s\r\n" in first and b"traceparent: t\r\n" in first and b"Content-Length: 2\r\n" in first
        assert first.endswith(b"\r\n\r\n{}")


async def test_chunked_answer_is_assembled() -> None:
    answer = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n" + BODY[:5] + b"\r\n"
    answer += b"%x\r\n" % (len(BODY) - 5) + BODY[5:] + b"\r\n0\r\n\r\n"
    async with Scripted(keep_answering(answer)) as server, client() as c:
        await post_twice(c, server)
        assert server.connections == 1


async def test_announced_length_over_the_limit_fails_before_the_body_arrives() -> None:
    """AHP-HTTP-001 bounded answers: the server announces 10 MB and sends nothing more."""

    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 10000000\r\n\r\n")
        await reader.read()  # returns when the client drops the connection

    async with Scripted(script) as server, client() as c:
        with pytest.raises(AnswerTooLarge, match="10000000"):
            await asyncio.wait_for(c.post(Target(server.url, {}, None), b"", b"{}", limit=4096), 5)
        await until(lambda: server.ended == 1)  # the connection was dropped, not kept


async def test_unannounced_body_over_the_limit_fails_as_it_passes() -> None:
    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
        while True:  # an endless answer
            writer.write(b"400\r\n" + b"x" * 1024 + b"\r\n")
            await writer.drain()

    async with Scripted(script) as server, client() as c:
        with pytest.raises(AnswerTooLarge):
            await asyncio.wait_for(c.post(Target(server.url, {}, None), b"", b"{}", limit=64 * 1024), 5)
        await until(lambda: server.ended == 1)


async def test_close_delimited_answer_ends_at_the_close_and_is_not_reused() -> None:
    async with Scripted(answer_once(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n" + BODY)) as server, client() as c:
        await post_twice(c, server)
        assert server.connections == 2


async def test_truncated_answer_is_a_connection_failure_not_a_short_body() -> None:
    async with Scripted(answer_once(b"HTTP/1.1 200 OK\r\nContent-Length: 500\r\n\r\n" + BODY)) as server, client() as c:
        with pytest.raises(ConnectionResetError):
            await c.post(Target(server.url, {}, None), b"", b"{}", limit=1 << 20)


async def test_connection_close_answer_is_not_reused() -> None:
    async with Scripted(keep_answering(ok(extra=b"Connection: close\r\n"))) as server, client() as c:
        target = Target(server.url, {}, None)
        for _ in range(3):
            assert (await c.post(target, b"", b"{}", limit=1 << 20)).status == 200
        assert server.connections == 3


async def test_interim_1xx_answers_are_skipped() -> None:
    answer = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n" + ok()
    async with Scripted(keep_answering(answer)) as server, client() as c:
        response = await c.post(Target(server.url, {}, None), b"", b"{}", limit=1 << 20)
        assert (response.status, response.body) == (200, BODY)


async def test_redirect_is_an_answer_never_followed() -> None:
    """AHP-HTTP-001: no redirects. The 3xx is returned (the caller fails it by status)."""
    answer = b"HTTP/1.1 307 Temporary Redirect\r\nLocation: http://127.0.0.1:1/\r\nContent-Length: 0\r\n\r\n"
    async with Scripted(keep_answering(answer)) as server, client() as c:
        response = await c.post(Target(server.url, {}, None), b"", b"{}", limit=1 << 20)
        assert response.status == 307 and response.body is None
        assert server.connections == 1


async def test_garbage_answer_is_a_protocol_error() -> None:
    async with Scripted(keep_answering(b"SSH-2.0-OpenSSH_9.6\r\n\r\n")) as server, client() as c:
        with pytest.raises(ProtocolError):
            await c.post(Target(server.url, {}, None), b"", b"{}", limit=1 << 20)


async def test_cancelled_call_aborts_its_connection() -> None:
    """A cancelled call (deadline, harness gone, parallel deny) must not leave the upstream
    working on a connection the pool still holds: the server sees the connection end."""
    received = asyncio.Event()

    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        received.set()
        await reader.read()  # returns at EOF or reset: the client went away

    async with Scripted(script) as server, client() as c:
        target = Target(server.url, {}, None)
        call = asyncio.ensure_future(c.post(target, b"", b"{}", limit=1 << 20))
        await asyncio.wait_for(received.wait(), 5)
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
        await until(lambda: server.ended == 1)
        assert not c.pool()  # its one connection is gone, so is the origin's entry


async def test_server_closing_an_idle_connection_costs_no_failure() -> None:
    async with Scripted(answer_once(ok())) as server, client() as c:  # closing: a keep-alive timeout
        target = Target(server.url, {}, None)
        assert (await c.post(target, b"", b"{}", limit=1 << 20)).status == 200
        await until(lambda: server.ended == 1)
        await until(lambda: not any(idle for _open, idle in c.pool().values()))  # noticed the close while idle
        assert (await c.post(target, b"", b"{}", limit=1 << 20)).status == 200
        assert server.connections == 2


async def test_idle_connections_expire() -> None:
    async with Scripted(keep_answering(ok())) as server, client(keepalive=0.1) as c:
        assert (await c.post(Target(server.url, {}, None), b"", b"{}", limit=1 << 20)).status == 200
        await until(lambda: server.ended == 1)


async def test_connections_per_origin_are_capped_and_waiters_are_served() -> None:
    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            await read_request(reader)
            await asyncio.sleep(0.02)
            writer.write(ok())

    async with Scripted(script) as server, client(limit_per_host=2) as c:
        target = Target(server.url, {}, None)
        answers = await asyncio.gather(*(c.post(target, b"", b"{}", limit=1 << 20) for _ in range(8)))
        assert all(a.body == BODY for a in answers)
        assert server.peak <= 2 and server.connections <= 2


async def test_a_cancelled_waiter_frees_its_turn() -> None:
    release = asyncio.Event()

    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            await read_request(reader)
            await release.wait()
            writer.write(ok())

    async with Scripted(script) as server, client(limit_per_host=1) as c:
        target = Target(server.url, {}, None)
        first = asyncio.ensure_future(c.post(target, b"", b"{}", limit=1 << 20))
        await until(lambda: server.connections == 1)
        waiting = asyncio.ensure_future(c.post(target, b"", b"{}", limit=1 << 20))
        await asyncio.sleep(0.05)
        waiting.cancel()
        release.set()
        assert (await first).status == 200
        assert (await asyncio.wait_for(c.post(target, b"", b"{}", limit=1 << 20), 5)).status == 200
        assert list(c.pool().values()) == [(1, 1)]  # one connection, idle again


async def test_notification_answer_body_is_never_read() -> None:
    """Observe deliveries: the status decides; an answer with a body drops the connection."""
    async with Scripted(keep_answering(b"HTTP/1.1 202 Accepted\r\nContent-Length: 3\r\n\r\n")) as server:
        async with client() as c:
            response = await c.post(Target(server.url, {}, None), b"", b"{}", limit=0, want_body=False)
            assert (response.status, response.body) == (202, None)
            await until(lambda: server.ended == 1)  # 3 announced bytes never came: not reused
    async with Scripted(keep_answering(b"HTTP/1.1 204 No Content\r\n\r\n")) as server, client() as c:
        for _ in range(3):
            assert (await c.post(Target(server.url, {}, None), b"", b"{}", limit=0, want_body=False)).status == 204
        assert server.connections == 1


async def test_unsolicited_bytes_drop_an_idle_connection() -> None:
    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(ok() + b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")  # one answer too many
        await reader.read()

    async with Scripted(script) as server, client() as c:
        target = Target(server.url, {}, None)
        assert (await c.post(target, b"", b"{}", limit=1 << 20)).body == BODY
        await until(lambda: server.ended == 1)


async def test_connect_failure_is_an_os_error() -> None:
    async with client() as c:
        with pytest.raises(OSError):
            await c.post(Target("http://127.0.0.1:1/", {}, None), b"", b"{}", limit=1 << 20)


@pytest.mark.parametrize(
    ("name", "value"),
    [("X-A", "v\r\nInjected: 1"), ("X-A", "v\nx"), ("X-A", "v\x00"), ("Bad Name", "v"), ("X:A", "v")],
)
def test_header_injection_is_refused_without_echoing_the_value(name: str, value: str) -> None:
    with pytest.raises(ValueError) as err:
        header_block({name: value})
    assert "Injected" not in str(err.value) and "\x00" not in str(err.value)


def test_a_bad_header_name_is_refused_after_good_names_were_remembered() -> None:
    """A good name used before never makes a bad one, or a bad value, pass."""
    for _ in range(3):
        assert header_block({"X-A": "1"}) == b"X-A: 1\r\n"
    for bad in ("X-A ", "X-A\r\nB", "x-a:"):
        with pytest.raises(ValueError):
            header_block({bad: "v"})
    with pytest.raises(ValueError):
        header_block({"X-A": "v\r\nInjected: 1"})  # a remembered name still gets its value checked


def test_target_refuses_what_is_not_an_http_url() -> None:
    for url in ("ftp://h/", "http:///path", "http://h/a b"):
        with pytest.raises(ValueError):
            Target(url, {}, None)
    ipv6 = Target("http://[::1]:8080/x", {}, None)
    assert ipv6.head.startswith(b"POST /x HTTP/1.1\r\nHost: [::1]:8080\r\n")
    assert Target("https://example.org/", {}, None).ssl is not None
    assert b"Host: example.org\r\n" in Target("https://example.org/", {}, None).head


async def test_origins_are_forgotten_when_their_last_connection_ends() -> None:
    """After a reload the old upstreams' TLS contexts are gone; their pool entries must go too."""
    async with Scripted(keep_answering(ok())) as server, client(keepalive=0.05) as c:
        assert (await c.post(Target(server.url, {}, None), b"", b"{}", limit=1 << 20)).status == 200
        assert len(c.pool()) == 1
        await until(lambda: not c.pool())
        assert (await c.post(Target(server.url, {}, None), b"", b"{}", limit=1 << 20)).status == 200


def test_the_pool_key_holds_the_tls_context_itself() -> None:
    """A connection verified under one CA bundle is never handed to an upstream with another,
    even if a later context happens to get the same id."""
    a, b = ssl.create_default_context(), ssl.create_default_context()
    ta, tb = Target("https://h.example/", {}, a), Target("https://h.example/", {}, b)
    assert ta.key != tb.key and ta.key[2] is a and tb.key[2] is b
    shared = Target("https://h.example/", {}, None).ssl
    assert shared is not None and shared is Target("https://other.example/", {}, None).ssl


async def test_a_flood_of_answer_headers_is_a_protocol_error() -> None:
    """Headers are bounded too: 100 KB of them fails the call instead of growing without end."""
    flood = b"".join(b"X-Pad-%d: %s\r\n" % (i, b"y" * 1000) for i in range(100))
    async with Scripted(keep_answering(b"HTTP/1.1 200 OK\r\n" + flood + b"Content-Length: 0\r\n\r\n")) as server:
        async with client() as c:
            with pytest.raises(ProtocolError, match="headers too large"):
                await c.post(Target(server.url, {}, None), b"", b"{}", limit=1 << 20)


async def test_a_deadline_fails_the_answer_with_timeout_and_drops_the_connection() -> None:
    """``deadline`` bounds the exchange without cancelling the caller: TimeoutError, and the
    upstream sees its connection end (nothing is left working on a pooled connection)."""

    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        await reader.read()  # never answers; returns when the client drops the connection

    async with Scripted(script) as server, client() as c:
        loop = asyncio.get_running_loop()
        started = loop.time()
        with pytest.raises(TimeoutError):
            await c.post(Target(server.url, {}, None), b"", b"{}", limit=1 << 20, deadline=started + 0.2)
        assert loop.time() - started >= 0.2
        await until(lambda: server.ended == 1)
        assert not c.pool()


async def test_a_deadline_also_bounds_the_wait_for_a_free_connection() -> None:
    release = asyncio.Event()

    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        await release.wait()
        writer.write(ok())
        await writer.drain()

    async with Scripted(script) as server, client(limit_per_host=1) as c:
        target = Target(server.url, {}, None)
        first = asyncio.ensure_future(c.post(target, b"", b"{}", limit=1 << 20))
        await until(lambda: server.connections == 1)
        with pytest.raises(TimeoutError):
            await c.post(target, b"", b"{}", limit=1 << 20, deadline=asyncio.get_running_loop().time() + 0.1)
        release.set()
        assert (await first).status == 200


async def test_a_connection_used_again_within_its_idle_period_is_kept_for_a_whole_period() -> None:
    """One idle timer per idle period: the timer set by the first release fires while the
    connection is idle again after a second use, and waits out the second period instead."""
    async with Scripted(keep_answering(ok())) as server, client(keepalive=1.0) as c:
        target = Target(server.url, {}, None)
        loop = asyncio.get_running_loop()
        assert (await c.post(target, b"", b"{}", limit=1 << 20)).status == 200
        first = loop.time()
        await asyncio.sleep(0.5)
        assert (await c.post(target, b"", b"{}", limit=1 << 20)).status == 200
        second = loop.time()
        assert server.connections == 1
        await asyncio.sleep(max(0.0, first + 1.2 - loop.time()))  # past the first period's end
        if loop.time() < second + 1.0:  # (a loaded machine may have slept past the second too)
            assert server.ended == 0, "closed at the end of the first idle period"
        await until(lambda: server.ended == 1)
        assert loop.time() >= second + 1.0
