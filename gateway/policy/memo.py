"""Rule results remembered by exactly what the rules read.

CEL is pure: a rule's result depends on nothing but the values at the paths it reads
(:mod:`gateway.routing.reads`, from the engine's checked AST). So a library keeps, per event
type, the results of its rules keyed by the exact JSON bytes of those values; the next event
that agrees on every one of them (the same command in the same directory, whatever its id, time
or session) gets the same results without deriving facts or calling the engine. Facts are a
pure function of their inputs (:data:`gateway.policy.facts.INPUTS`), so a rule that reads
``facts`` is keyed by those inputs instead.

Exact by construction: the key is the values themselves, not a hash of them; missing fields and
non-map values are encoded apart from any JSON value; anything the key cannot encode exactly (a
number beyond 64 bits, a non-finite float, invalid text) is not remembered; an evaluation error
is never remembered. Bounded: at most :data:`MAX_ENTRIES` results and :data:`MAX_KEY_BYTES` of
keys per library, least recently used first out; a key over :data:`MAX_KEY` is not kept. A
reload builds a new library and so starts empty.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import orjson

from gateway.routing.reads import Path

MAX_ENTRIES = 1024
MAX_KEY_BYTES = 4 * 1024 * 1024
MAX_KEY = 64 * 1024
Results = tuple[bool | None, ...]
"""One result per rule of the event type, in order; None where the rule was not evaluated (the
evaluation stopped at a deny first)."""
Entry = tuple[Results, tuple[int, ...]]
"""The results and the positions of those that are not False (all an evaluation without a trace
has to visit)."""


class Memo:
    __slots__ = ("_bytes", "_entries", "_paths")

    def __init__(self, paths: Mapping[str, tuple[Path, ...]]) -> None:
        self._paths = paths
        """Per event type, the paths its rules read (event types whose rules are not all
        readable are absent: they are never remembered)."""
        self._entries: dict[bytes, Entry] = {}
        self._bytes = 0

    def key(self, event_type: str, values: Mapping[str, Any]) -> bytes | None:
        """The exact key of ``values`` for ``event_type``'s rules, or None when not remembered."""
        paths = self._paths.get(event_type)
        if paths is None:
            return None
        projection = [event_type, *[_walk(values, path) for path in paths]]
        try:
            key = orjson.dumps(projection)
        except TypeError:  # integers beyond 64 bits, lone surrogates, non-string keys
            return None
        if len(key) > MAX_KEY or (b"null" in key and not _finite(projection)):
            return None  # orjson writes NaN and infinities as null
        return key

    def get(self, key: bytes) -> Entry | None:
        found = self._entries.pop(key, None)
        if found is not None:
            self._entries[key] = found  # most recently used last
        return found

    def put(self, key: bytes, results: Results, visit: tuple[int, ...] | None = None) -> None:
        """``visit``: the positions in ``results`` that are not False, when the caller knows them
        (the evaluation that produced the results visited only those)."""
        if key in self._entries:
            return
        if visit is None:
            visit = tuple([i for i, r in enumerate(results) if r is not False])
        self._entries[key] = (results, visit)
        self._bytes += len(key)
        while len(self._entries) > MAX_ENTRIES or self._bytes > MAX_KEY_BYTES:
            oldest = next(iter(self._entries))
            del self._entries[oldest]
            self._bytes -= len(oldest)

    def __len__(self) -> int:
        return len(self._entries)


def _walk(values: Mapping[str, Any], path: Path) -> list[Any]:
    """``[0, value]`` at ``path``; ``[1, depth]`` when a map lacks the key at ``depth``;
    ``[2, depth, value]`` when the value at ``depth`` is not a map (so cannot be selected from)."""
    value: Any = values
    if not isinstance(value, Mapping):
        return [2, 0, value]
    value = value.get(path[0], _MISSING)
    if value is _MISSING:
        return [1, 0]
    for depth in range(1, len(path)):
        if type(value) is not dict:
            return [2, depth, value]
        value = value.get(path[depth], _MISSING)
        if value is _MISSING:
            return [1, depth]
    return [0, value]


_MISSING = object()


def _finite(value: Any) -> bool:
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, dict):
        return all(_finite(v) for v in value.values())
    if isinstance(value, list):
        return all(_finite(v) for v in value)
    return True
