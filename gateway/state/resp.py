"""The rate limits' own Redis connection: RESP2 written by hand, read by hiredis (sans-IO).

Why not redis-py here: a shared limit makes one Redis round trip per request, and redis-py's
connection spends about 53 µs of CPU per EVALSHA on packing, its reader and its bookkeeping, where
encoding the command and feeding the reply to hiredis' parser costs about 16 µs (measured on this
machine; docs/design/performance.md, "Rate limits and shared state"). Everything else (uploads,
probes, script loads at start) stays on redis-py. The connection is opened exactly as redis-py
opens it for the same ``state.redis`` settings: TCP, or TLS verifying the server's certificate
and host name against ``caFile`` or the platform's trust; ``AUTH`` with the password (and user);
``SELECT`` of the URL's database.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Sequence
from typing import Any
from urllib.parse import unquote, urlsplit

import hiredis

READ_SIZE = 65536


class ReplyError(Exception):
    """An error reply of Redis (``NOSCRIPT ...``, ``ERR ...``): that command's result."""


def encode(*args: bytes | str | int) -> bytes:
    """One command as a RESP2 array of bulk strings."""
    out = [b"*%d\r\n" % len(args)]
    for arg in args:
        data = arg if isinstance(arg, bytes) else str(arg).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(data), data))
    return b"".join(out)


class Lane:
    """One connection, one round trip at a time (the caller serialises them): every command is
    written at once, then the replies are read in order."""

    def __init__(self, url: str, username: str | None, password: str | None, ca: str | None) -> None:
        parts = urlsplit(url)
        self._host = parts.hostname or "127.0.0.1"
        self._port = parts.port or 6379
        path = unquote(parts.path).lstrip("/")
        self._db = int(path) if path.isdigit() else 0
        self._tls = parts.scheme == "rediss"
        self._ca = ca
        self._username = username
        self._password = password
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._parser = hiredis.Reader(replyError=ReplyError)

    async def open(self) -> None:
        context = ssl.create_default_context(cafile=self._ca) if self._tls else None
        self._reader, self._writer = await asyncio.open_connection(
            self._host, self._port, ssl=context, server_hostname=self._host if context else None
        )
        hello: list[bytes] = []
        if self._password is not None:
            who = [self._username] if self._username else []
            hello.append(encode(b"AUTH", *who, self._password))
        if self._db:
            hello.append(encode(b"SELECT", self._db))
        for reply in await self.exchange(hello) if hello else []:
            if isinstance(reply, ReplyError):
                raise ConnectionError(str(reply).split(" ", 1)[0] or "refused")  # never the password

    async def exchange(self, commands: Sequence[bytes]) -> list[Any]:
        """Write ``commands`` (encoded) and read one reply each; an error reply is returned as a
        :class:`ReplyError`, a closed connection raises ``ConnectionError``."""
        assert self._reader is not None and self._writer is not None
        self._writer.write(b"".join(commands))
        replies: list[Any] = []
        while len(replies) < len(commands):
            try:
                reply = self._parser.gets()
            except hiredis.ProtocolError as exc:  # not Redis speaking: drop the connection
                raise ConnectionError("protocol error") from exc
            if reply is False:
                data = await self._reader.read(READ_SIZE)
                if not data:
                    raise ConnectionError("closed by the server")
                self._parser.feed(data)
                continue
            replies.append(reply)
        return replies

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None
