"""A scripted HTTP/1.1 upstream on loopback, at the byte level, and the answers it sends."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable

Script = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]
BODY = b'{"jsonrpc":"2.0","id":"e1","result":{"protocolVersion":"draft","effects":[]}}'


class Scripted:
    """A loopback TCP server running ``script`` per connection; counts connections, live ones and
    the most live at once, and records each connection's end (EOF or reset)."""

    def __init__(self, script: Script) -> None:
        self.script = script
        self.connections = 0
        self.live = 0
        self.peak = 0
        self.ended = 0
        self.port = 0
        self.server: asyncio.Server | None = None

    async def __aenter__(self) -> Scripted:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self.server is not None
        self.server.close()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.server.wait_closed(), 2)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        self.live += 1
        self.peak = max(self.peak, self.live)
        try:
            await self.script(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            self.live -= 1
            self.ended += 1
            writer.close()


async def read_request(reader: asyncio.StreamReader) -> tuple[bytes, bytes]:
    """One request: its head and its body (by Content-Length)."""
    head = await reader.readuntil(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":", 1)[1])
    return head, await reader.readexactly(length)


def ok(body: bytes = BODY, extra: bytes = b"") -> bytes:
    return (
        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
        + extra
        + b"Content-Length: %d\r\n\r\n" % len(body)
        + body
    )
