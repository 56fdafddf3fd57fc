"""A peer's answer body read to its end, but never more than a limit: ``StreamReader.read(n)``
returns what has arrived so far, so one call would judge an answer split across segments on
its first piece, and ``read()`` has no bound at all."""

from __future__ import annotations

from aiohttp import StreamReader


async def read_bounded(content: StreamReader, limit: int) -> bytes:
    """The body, or its first ``limit + 1`` bytes when it is longer (the caller refuses those)."""
    body = bytearray()
    while len(body) <= limit:
        chunk = await content.read(limit + 1 - len(body))
        if not chunk:
            break
        body += chunk
    return bytes(body)
