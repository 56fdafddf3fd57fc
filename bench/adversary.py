"""An adversarial AHP upstream on loopback: a bare asyncio server that misbehaves on purpose.

Used by the fault-matrix tests and the soak run. The fault for a request is the event's
``tool.input.command`` when it reads ``fault:<name>``, else :attr:`Adversary.mode`. Faults:

``hang`` never answers; ``reset`` answers with a TCP RST; ``half_close`` shuts its write side
without answering; ``drip`` sends headers then one body byte per 50 ms; ``http_500`` a 500 with a
valid-looking answer; ``http_401`` a 401; ``rpc_error`` a JSON-RPC error answer; ``html`` a 200 HTML
page; ``huge`` an 8 MiB chunked answer;
``malformed_json`` a truncated JSON object; ``wrong_id`` a valid answer for another id;
``unadvertised_effect`` an ``ask`` nobody advertised; ``missing_result`` neither result nor
error; ``late`` a valid deny after ``late_after`` seconds; ``hold`` waits for the gateway to close
the connection (a call in flight while the harness goes away). ``ok`` / ``deny`` / ``message``
are well-formed answers. ``tls`` is a server property: with ``tls=True`` the server presents a
certificate for another host name until :meth:`fix_tls`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import ssl
import struct
from pathlib import Path
from typing import Any

FAULTS = (
    "hang",
    "reset",
    "half_close",
    "drip",
    "http_500",
    "http_401",
    "rpc_error",
    "html",
    "huge",
    "malformed_json",
    "wrong_id",
    "unadvertised_effect",
    "missing_result",
    "late",
    "tls",
)
FAILURE_CLASS = {
    "hang": "timeout",
    "reset": "connect",
    "half_close": "connect",
    "drip": "timeout",
    "http_500": "http_status",
    "http_401": "auth",
    "rpc_error": "rpc_error",
    "html": "invalid_response",
    "huge": "too_large",
    "malformed_json": "invalid_response",
    "wrong_id": "invalid_response",
    "unadvertised_effect": "not_granted",
    "missing_result": "invalid_response",
    "late": "timeout",
    "tls": "connect",
}
"""The failure class (metric label) the gateway must record for each fault."""


def _result(rid: Any, effects: list[dict[str, Any]]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": rid, "result": {"protocolVersion": "draft", "effects": effects}}


def _http(status: str, body: bytes, content_type: str = "application/json") -> bytes:
    head = (
        f"HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    )
    return head.encode() + body


class Adversary:
    def __init__(self, *, late_after: float = 0.5, tls_dir: Path | None = None) -> None:
        self.mode = "ok"
        self.late_after = late_after
        self.received = 0
        self.served: dict[str, int] = {}
        self.got_request = asyncio.Event()
        self.peer_closed = asyncio.Event()
        self.ca_file: str | None = None
        self._ssl: ssl.SSLContext | None = None
        self._good: tuple[str, str] | None = None
        if tls_dir is not None:
            self._tls(tls_dir)
        self._server: asyncio.AbstractServer | None = None
        self.port = 0
        self.active = 0
        """Connections still open (the gateway must close the ones it gave up on)."""
        self.gate: asyncio.Event | None = None
        """When set, every answer waits for this event first."""
        self._tasks: set[asyncio.Task[Any]] = set()
        self.seen: set[Any] | None = None
        """When a set, the id of every request received is added (the soak's model needs it)."""

    def _tls(self, directory: Path) -> None:
        import trustme

        ca = trustme.CA()
        directory.mkdir(parents=True, exist_ok=True)
        self.ca_file = str(directory / "ca.pem")
        ca.cert_pem.write_to_path(self.ca_file)
        wrong, good = ca.issue_cert("wrong.example"), ca.issue_cert("127.0.0.1")
        paths = []
        for name, cert in (("wrong", wrong), ("good", good)):
            chain, key = directory / f"{name}.pem", directory / f"{name}.key"
            cert.cert_chain_pems[0].write_to_path(str(chain))
            for extra in cert.cert_chain_pems[1:]:
                extra.write_to_path(str(chain), append=True)
            cert.private_key_pem.write_to_path(str(key))
            paths.append((str(chain), str(key)))
        self._good = paths[1]
        self._ssl = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self._ssl.load_cert_chain(*paths[0])

    def fix_tls(self) -> None:
        """Present a certificate the gateway trusts for new connections."""
        assert self._ssl is not None and self._good is not None
        self._ssl.load_cert_chain(*self._good)

    @property
    def url(self) -> str:
        return f"{'https' if self._ssl else 'http'}://127.0.0.1:{self.port}/"

    async def start(self) -> Adversary:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0, ssl=self._ssl)
        self.port = int(self._server.sockets[0].getsockname()[1])
        return self

    async def aclose(self) -> None:
        """Stop listening and end every connection still being served (nothing outlives a test)."""
        if self._server is not None:
            self._server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._server is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 2)

    def count(self, name: str) -> int:
        return self.served.get(name, 0)

    # ------------------------------------------------------------------ serving
    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.active += 1
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
        try:
            request = await self._read(reader)
            if request is None:
                return
            self.received += 1
            self.got_request.set()
            if self.seen is not None:
                self.seen.add(request.get("id"))
            if self.gate is not None:
                await self.gate.wait()
            mode = self.mode
            command = (request.get("params", {}).get("event", {}).get("tool", {}).get("input", {}) or {}).get("command")
            if isinstance(command, str) and command.startswith("fault:"):
                mode = command.split(":", 2)[1]
            self.served[mode] = self.served.get(mode, 0) + 1
            await self._act(mode, request, reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError, ssl.SSLError, OSError, ValueError):
            pass
        finally:
            self.active -= 1
            if task is not None:
                self._tasks.discard(task)
            with contextlib.suppress(Exception):
                writer.close()

    async def _read(self, reader: asyncio.StreamReader) -> dict[str, Any] | None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            return None
        length = 0
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value.strip())
        message: dict[str, Any] = json.loads(await reader.readexactly(length))
        return message

    async def _until_closed(self, reader: asyncio.StreamReader) -> None:
        with contextlib.suppress(ConnectionError, OSError):
            while await reader.read(65536):
                pass
        self.peer_closed.set()

    async def _act(
        self, mode: str, request: dict[str, Any], reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        rid = request.get("id")
        if mode in ("hang", "hold"):
            await self._until_closed(reader)
            return
        if mode == "reset":
            sock = writer.get_extra_info("socket")
            if sock is not None:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            writer.transport.abort()
            return
        if mode == "half_close":
            if writer.can_write_eof():
                writer.write_eof()
            else:  # TLS cannot half-close; closing is the nearest
                writer.transport.abort()
            await self._until_closed(reader)
            return
        if mode == "drip":
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 4096\r\n\r\n")
            for _ in range(4096):
                writer.write(b" ")
                await writer.drain()
                await asyncio.sleep(0.05)
            return
        if mode == "huge":
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n")
            chunk = b" " * 65536
            for _ in range(128):  # up to 8 MiB (over the default maxResponseBytes), until the gateway gives up
                writer.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                await writer.drain()
            return
        if mode == "late":
            await asyncio.sleep(self.late_after)
            payload = _result(rid, [{"type": "deny", "reason": "late"}])
            writer.write(_http("200 OK", json.dumps(payload).encode()))
            await writer.drain()
            return
        writer.write(self._answer(mode, rid))
        await writer.drain()

    def _answer(self, mode: str, rid: Any) -> bytes:
        if mode == "http_500":
            return _http("500 Internal Server Error", json.dumps(_result(rid, [])).encode())
        if mode == "http_401":
            return _http("401 Unauthorized", b'{"error": "token expired"}')
        if mode == "rpc_error":
            error = {"jsonrpc": "2.0", "id": rid, "error": {"code": -32000, "message": "backend failed"}}
            return _http("200 OK", json.dumps(error).encode())
        if mode == "html":
            return _http("200 OK", b"<html><body><h1>502 Bad Gateway</h1></body></html>", "text/html")
        if mode == "malformed_json":
            return _http("200 OK", b'{"jsonrpc": "2.0", "id": ' + json.dumps(rid).encode() + b', "result": {')
        if mode == "wrong_id":
            return _http("200 OK", json.dumps(_result(f"not-{rid}", [])).encode())
        if mode == "unadvertised_effect":
            return _http("200 OK", json.dumps(_result(rid, [{"type": "ask"}])).encode())
        if mode == "missing_result":
            return _http("200 OK", json.dumps({"jsonrpc": "2.0", "id": rid}).encode())
        if mode == "deny":
            return _http("200 OK", json.dumps(_result(rid, [{"type": "deny", "reason": "adversary"}])).encode())
        if mode == "message":
            return _http("200 OK", json.dumps(_result(rid, [{"type": "message", "text": "adversary"}])).encode())
        return _http("200 OK", json.dumps(_result(rid, [])).encode())
