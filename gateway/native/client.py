"""The command adapter's one HTTP/1.1 POST to the gateway, under one overall deadline (connect,
send, wait and read all count; a late answer is discarded).

Written on plain sockets: ``http.client`` pulls in the ``email`` package, which alone costs more
start-up time than the rest of the adapter. Redirects are never followed (AHP-HTTP-001: any
status other than the specified successes is an operational failure). The bearer token goes only
into the ``Authorization`` header and into no message.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable

MAX_ANSWER_BYTES = 16 * 1024 * 1024


class Unreachable(Exception):
    """No usable HTTP answer before the deadline; the message is safe to print."""


def split_url(url: str) -> tuple[str, str, int, str]:
    """(scheme, host, port, path?query) of an http(s) URL."""
    scheme, sep, rest = url.partition("://")
    scheme = scheme.lower()
    if not sep or scheme not in ("http", "https"):
        raise Unreachable("the gateway URL must be http(s)://host[:port]/path")
    netloc, slash, tail = rest.partition("/")
    netloc = netloc.rsplit("@", 1)[-1]
    path = (slash + tail).split("#", 1)[0] or "/"
    if netloc.startswith("["):
        host, _, port_text = netloc[1:].partition("]")
        port_text = port_text[1:] if port_text.startswith(":") else ""
    else:
        host, _, port_text = netloc.partition(":")
    if not host or any(c in url for c in " \r\n\t"):
        raise Unreachable("the gateway URL must be http(s)://host[:port]/path")
    try:
        port = int(port_text) if port_text else (443 if scheme == "https" else 80)
    except ValueError:
        raise Unreachable("the gateway URL has an invalid port") from None
    if not 0 < port < 65536:
        raise Unreachable("the gateway URL has an invalid port")
    return scheme, host, port, path


def post(url: str, body: bytes, *, deadline_s: float, token: str | None, front_end: str) -> tuple[int, bytes]:
    scheme, host, port, path = split_url(url)
    started = time.monotonic()

    def remaining() -> float:
        left = deadline_s - (time.monotonic() - started)
        if left <= 0:
            raise TimeoutError
        return left

    host_header = f"[{host}]" if ":" in host else host
    if port != (443 if scheme == "https" else 80):
        host_header += f":{port}"
    lines = [
        f"POST {path} HTTP/1.1",
        f"Host: {host_header}",
        "Content-Type: application/json",
        f"Content-Length: {len(body)}",
        "Connection: close",
        f"User-Agent: ahp-gateway-hook/{front_end}",
        f"X-AHP-Front-End: native-{front_end}",
    ]
    if token:
        lines.append(f"Authorization: Bearer {token}")
    head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
    sock: socket.socket | None = None
    try:
        sock = socket.create_connection((host, port), timeout=remaining())
        if scheme == "https":
            import ssl  # only paid for by https URLs

            sock = ssl.create_default_context().wrap_socket(sock, server_hostname=host)
        sock.settimeout(remaining())
        sock.sendall(head + body)
        return _read_response(sock, remaining)
    except TimeoutError:
        raise Unreachable(f"no answer from the gateway within {deadline_s * 1000:.0f} ms") from None
    except OSError as exc:
        raise Unreachable(f"gateway unreachable ({type(exc).__name__})") from None
    finally:
        if sock is not None:
            sock.close()


def _read_response(sock: socket.socket, remaining: Callable[[], float]) -> tuple[int, bytes]:
    data = bytearray()
    while b"\r\n\r\n" not in data:
        sock.settimeout(remaining())
        chunk = sock.recv(65536)
        if not chunk:
            raise Unreachable("the gateway closed the connection without an answer")
        data += chunk
        if len(data) > 65536:
            raise Unreachable("the gateway answer headers are too large")
    head, _, tail = bytes(data).partition(b"\r\n\r\n")
    rest = bytearray(tail)
    status_line, *header_lines = head.decode("latin-1").split("\r\n")
    parts = status_line.split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit():
        raise Unreachable("the gateway answer is not HTTP/1.x")
    status = int(parts[1])
    headers: dict[str, str] = {}
    for line in header_lines:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    length = headers.get("content-length")
    chunked = "chunked" in headers.get("transfer-encoding", "").lower()
    if length is not None and not chunked:
        if not length.isdigit() or int(length) > MAX_ANSWER_BYTES:
            raise Unreachable("the gateway answer has an invalid length")
        want = int(length)
        while len(rest) < want:
            sock.settimeout(remaining())
            chunk = sock.recv(65536)
            if not chunk:
                raise Unreachable("the gateway answer was cut short")
            rest += chunk
        return status, bytes(rest[:want])
    while True:  # chunked or close-delimited: read to EOF (we sent Connection: close)
        sock.settimeout(remaining())
        chunk = sock.recv(65536)
        if not chunk:
            break
        rest += chunk
        if len(rest) > MAX_ANSWER_BYTES:
            raise Unreachable("the gateway answer is too large")
    return status, _dechunk(bytes(rest)) if chunked else bytes(rest)


def _dechunk(data: bytes) -> bytes:
    out = bytearray()
    while True:
        size_line, sep, data = data.partition(b"\r\n")
        try:
            size = int(size_line.split(b";", 1)[0].strip() or b"x", 16)
        except ValueError:
            raise Unreachable("the gateway answer has invalid chunked framing") from None
        if not sep or size < 0 or len(data) < size:
            raise Unreachable("the gateway answer was cut short")
        if size == 0:
            return bytes(out)
        out += data[:size]
        data = data[size + 2 :]
