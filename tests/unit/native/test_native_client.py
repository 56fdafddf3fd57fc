"""The adapter's socket-level HTTP/1.1 client against real loopback servers: every framing a
server may use, and every way an answer can be broken, late or oversized (AHP-HTTP-001)."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Iterator

import pytest

from gateway.native import client

Script = Callable[[socket.socket, bytes], None]


@pytest.fixture
def raw_server() -> Iterator[Callable[[Script], str]]:
    """A threaded loopback server whose connection handling is scripted per test; it records
    the raw request bytes it received."""
    sockets: list[socket.socket] = []
    threads: list[threading.Thread] = []

    def start(script: Script) -> str:
        srv = socket.socket()
        srv.bind(("127.0.0.1", 0))
        srv.listen(4)
        sockets.append(srv)

        def serve() -> None:
            try:
                conn, _ = srv.accept()
            except OSError:
                return
            with conn:
                conn.settimeout(5)
                data = b""
                while b"\r\n\r\n" not in data:
                    chunk = conn.recv(65536)
                    if not chunk:
                        return
                    data += chunk
                head, _, body = data.partition(b"\r\n\r\n")
                length = next(
                    (
                        int(line.split(b":", 1)[1])
                        for line in head.split(b"\r\n")
                        if line.lower().startswith(b"content-length:")
                    ),
                    0,
                )
                while len(body) < length:
                    body += conn.recv(65536)
                received.append(head + b"\r\n\r\n" + body)
                script(conn, body)

        thread = threading.Thread(target=serve, daemon=True)
        thread.start()
        threads.append(thread)
        return f"http://127.0.0.1:{srv.getsockname()[1]}/hooks?x=1"

    received: list[bytes] = []
    start.received = received  # type: ignore[attr-defined]
    yield start
    for srv in sockets:
        srv.close()
    for thread in threads:
        thread.join(timeout=5)


def _post(url: str, deadline: float = 2.0, token: str | None = None) -> tuple[int, bytes]:
    return client.post(url, b'{"a":1}', deadline_s=deadline, token=token, front_end="claude-code")


def test_content_length_answer_and_the_request_it_sent(raw_server: Callable[..., str]) -> None:
    url = raw_server(
        lambda c, b: c.sendall(b'HTTP/1.1 200 OK\r\nContent-Length: 7\r\nContent-Type: application/json\r\n\r\n{"b":2}')
    )
    assert _post(url, token="tok-123") == (200, b'{"b":2}')
    request = raw_server.received[0]  # type: ignore[attr-defined]
    assert request.startswith(b"POST /hooks?x=1 HTTP/1.1\r\n")
    assert b"\r\nHost: 127.0.0.1:" in request and b"\r\nContent-Length: 7\r\n" in request
    assert b"\r\nAuthorization: Bearer tok-123\r\n" in request
    assert b"\r\nX-AHP-Front-End: native-claude-code\r\n" in request
    assert request.endswith(b'\r\n\r\n{"a":1}')


def test_chunked_and_close_delimited_answers(raw_server: Callable[..., str]) -> None:
    chunked = raw_server(
        lambda c, b: c.sendall(
            b'HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3;x=y\r\n{"b\r\n4\r\n":2}\r\n0\r\n\r\n'
        )
    )
    assert _post(chunked) == (200, b'{"b":2}')
    closing = raw_server(lambda c, b: c.sendall(b"HTTP/1.0 202 Accepted\r\n\r\n"))
    assert _post(closing) == (202, b"")
    no_token = raw_server.received[-1]  # type: ignore[attr-defined]
    assert b"Authorization" not in no_token


@pytest.mark.parametrize(
    ("reply", "message"),
    [
        (b"", "closed the connection without an answer"),
        (b"SSH-2.0-OpenSSH\r\n\r\n", "not HTTP/1.x"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 99\r\n\r\n{}", "cut short"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n{}", "invalid length"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 99999999999\r\n\r\n", "invalid length"),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", "invalid chunked framing"),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n10\r\nab", "cut short"),
    ],
)
def test_broken_answers_are_operational_failures(raw_server: Callable[..., str], reply: bytes, message: str) -> None:
    url = raw_server(lambda c, b: c.sendall(reply))
    with pytest.raises(client.Unreachable, match=message):
        _post(url)


def test_redirects_are_not_followed(raw_server: Callable[..., str]) -> None:
    url = raw_server(
        lambda c, b: c.sendall(
            b"HTTP/1.1 307 Temporary Redirect\r\nLocation: http://evil.example/\r\nContent-Length: 0\r\n\r\n"
        )
    )
    assert _post(url) == (307, b"")
    assert len(raw_server.received) == 1  # type: ignore[attr-defined]


def test_an_answer_that_trickles_past_the_deadline_is_discarded(raw_server: Callable[..., str]) -> None:
    release = threading.Event()

    def trickle(conn: socket.socket, _: bytes) -> None:
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{")
        release.wait(5)  # the rest never comes before the client's deadline

    url = raw_server(trickle)
    try:
        with pytest.raises(client.Unreachable, match="within 200 ms"):
            _post(url, deadline=0.2)
    finally:
        release.set()


def test_oversized_headers_are_refused(raw_server: Callable[..., str]) -> None:
    def flood(conn: socket.socket, _: bytes) -> None:
        try:
            conn.sendall(b"HTTP/1.1 200 OK\r\n" + b"X: " + b"a" * 200_000)
        except OSError:
            pass  # the client hangs up once it has seen enough

    url = raw_server(flood)
    with pytest.raises(client.Unreachable, match="headers are too large"):
        _post(url, deadline=10)


def test_oversized_bodies_are_refused(raw_server: Callable[..., str]) -> None:
    def flood(conn: socket.socket, _: bytes) -> None:
        try:
            conn.sendall(b"HTTP/1.1 200 OK\r\n\r\n")
            block = b"x" * 1_048_576
            for _ in range(client.MAX_ANSWER_BYTES // len(block) + 2):
                conn.sendall(block)
        except OSError:
            pass

    url = raw_server(flood)
    with pytest.raises(client.Unreachable, match="answer is too large"):
        _post(url, deadline=10)
