"""State shared between worker processes and replicas (``state.redis``).

What the rest of the gateway names without importing the Redis client (it is imported only
when ``state.redis`` is configured, :mod:`gateway.state.redis`)."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any


class StateUnavailable(Exception):
    """Redis could not answer in time (down, refused, timed out, an error reply)."""


class Script:
    """A Lua script run by its SHA (EVALSHA), loaded again when the server lost it (a restart)."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.sha = hashlib.sha1(source.encode(), usedforsecurity=False).hexdigest()
        self.sha_bytes = self.sha.encode()

    async def run(self, client: Any, keys: Sequence[str], args: Sequence[Any]) -> Any:
        try:
            return await client.evalsha(self.sha, len(keys), *keys, *args)
        except Exception as exc:  # redis.exceptions.NoScriptError, without importing redis here
            if type(exc).__name__ != "NoScriptError":
                raise
            return await client.eval(self.source, len(keys), *keys, *args)
