"""A peer's answer body read to its end, but never more than a limit: ``StreamReader.read(n)``
returns what has arrived so far, so one call would judge an answer split across segments on
its first piece, and ``read()`` has no bound at all."""

from __future__ import annotations

from aiohttp import StreamReader


async def read_bounded(content: StreamReader, limit: int) -> bytes | None:
    """The body, or None when it is longer than ``limit`` (read no further than ``limit + 1``
    bytes; each caller refuses it in its own terms)."""
    body = bytearray()
    while len(body) <= limit:
        chunk = await content.read(limit + 1 - len(body))
        if not chunk:
            return bytes(body)
        body += chunk
    return None
