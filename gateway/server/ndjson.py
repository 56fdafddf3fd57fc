"""stdio framing for the harness-facing binding (AHP-STDIO-001), pure and I/O-free.

One UTF-8 JSON-RPC object per ``\\n``-terminated line. :class:`LineSplitter` cuts a byte stream
into bounded lines; :class:`Framer` turns each line into what the front end must do with it:

- :class:`Forward`: a line that parses as JSON goes to the engine unchanged (the engine owns the
  JSON-RPC checks, exactly as over HTTP); ``rid`` says whether its answer may be written
  (only a message with a valid request id ever gets a line: notifications never do, and a reply
  to ``id: null`` cannot be correlated by a harness that reads one line per request);
- :class:`Answer`: a framing error answered directly, because a request id could be found in it
  (multi-line JSON -32600, malformed JSON -32700, oversized or unterminated line -32600);
- :class:`Skip`: nothing to answer (blank line, or no id could be found); the front end counts it.

Finding an id in a broken frame uses a bracket/string tokenizer (on at most :data:`SCAN_BYTES`
bytes of an oversized line or fragment) and accepts only a key ``"id"`` of the top-level object
whose value is complete. The tokenizer runs in linear time on any input (its quantifiers are
possessive and an unclosed string is one token), so a hostile line cannot stall the event loop.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from gateway.protocol import jsonrpc, wire
from gateway.protocol.errors import RpcCode

SCAN_BYTES = 65_536
"""How much of a broken frame is searched for its request id."""
MULTILINE = "multi-line JSON: one object per line (AHP-STDIO-001)"
UNTERMINATED = "message not terminated by a newline (AHP-STDIO-001)"

_TOKEN = re.compile(rb'"(?:[^"\\\n]++|\\.)*+(?:(")(\s*+:)?)?|[{}\[\]]')
"""A bracket, or a string (group 1: its closing quote, absent when unclosed; group 2: the colon of
a key). An unclosed string ends where no closing quote can follow; no quote inside it can start a
closed string either, so it is consumed whole instead of being retried at each of its quotes."""
_ID_VALUE = re.compile(rb'\s*+("(?:[^"\\\n]++|\\.)*+"|-?(?:0|[1-9][0-9]*+))(?=\s*+[,}])')
_STARTS_REQUEST = re.compile(rb'\s*+\{\s*+"' + re.escape(jsonrpc.MEMBER.encode()) + b'"')


@dataclass(frozen=True, slots=True)
class Line:
    data: bytes
    """The line without its terminator (only the first ``limit`` bytes when oversized)."""
    oversized: bool = False
    terminated: bool = True


@dataclass(frozen=True, slots=True)
class Forward:
    body: bytes
    rid: Any
    """The request id, or None when the engine's answer must not be written."""


@dataclass(frozen=True, slots=True)
class Answer:
    body: bytes


@dataclass(frozen=True, slots=True)
class Skip:
    reason: str
    """blank | multiline | malformed | oversized | unterminated | no_id"""


Frame = Forward | Answer | Skip


class LineSplitter:
    """Bytes in, bounded :class:`Line` values out. A line longer than ``limit`` is discarded up
    to its newline; only its first ``limit`` bytes are kept (to look for an id)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._buf = bytearray()
        self._discarding = False

    def feed(self, chunk: bytes) -> list[Line]:
        out: list[Line] = []
        start = 0
        while True:
            nl = chunk.find(b"\n", start)
            piece = chunk[start:] if nl < 0 else chunk[start:nl]
            if not self._discarding:
                room = self.limit - len(self._buf)
                if len(piece) > room:
                    self._buf += piece[:room]
                    self._discarding = True
                else:
                    self._buf += piece
            if nl < 0:
                return out
            out.append(Line(bytes(self._buf), oversized=self._discarding))
            self._buf.clear()
            self._discarding = False
            start = nl + 1

    def finish(self) -> Line | None:
        """What remains at EOF without a newline, if anything."""
        if not self._buf and not self._discarding:
            return None
        line = Line(bytes(self._buf), oversized=self._discarding, terminated=False)
        self._buf.clear()
        self._discarding = False
        return line


def scan(data: bytes, depth: int = 0) -> tuple[int, Any]:
    """(bracket depth after ``data``, the top-level request id if one is complete in it)."""
    found: Any = None
    for match in _TOKEN.finditer(data):
        token = match.group()
        first = token[:1]
        if first in b"{[":
            depth += 1
        elif first in b"}]":
            depth -= 1
        elif match.group(1) is None:  # an unclosed string holds no key: only its brackets count
            depth += token.count(b"{") + token.count(b"[") - token.count(b"}") - token.count(b"]")
        elif depth == 1 and found is None and match.group(2) and data[match.start() : match.end(1)] == b'"id"':
            value = _ID_VALUE.match(data, match.end())
            if value is not None:
                try:
                    candidate = wire.loads(value.group(1))
                except wire.JSONDecodeError:
                    candidate = None
                if wire.is_request_id(candidate):
                    found = candidate
    return depth, found


def _starts_object(data: bytes) -> bool:
    return data.lstrip()[:1] == b"{"


def error_line(rid: Any, code: int, reason: str | None = None) -> bytes:
    return wire.error_body(rid, code, {"reason": reason} if reason else None)


class Framer:
    """Line in, frames out. Remembers one open multi-line fragment so a pretty-printed request
    is answered once (with its id, -32600) instead of once per line."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._parts: list[bytes] = []
        self._size = 0
        self._depth = 0

    def frame(self, line: Line) -> list[Frame]:
        out: list[Frame] = []
        if self._parts:
            if line.oversized:
                out.append(self._close_fragment(oversized=True))
            elif _starts_message(line.data):
                out.append(self._close_fragment())  # a new message ends a broken fragment
            elif self._size + len(line.data) > self.limit:
                out.append(self._close_fragment(oversized=True))
                return out  # the rest of an over-long fragment is dropped with it
            else:
                self._parts.append(line.data)
                self._size += len(line.data) + 1
                self._depth, _ = scan(line.data, self._depth)
                if self._depth <= 0:
                    out.append(self._close_fragment())
                return out
        single = self._single(line)
        if single is not None:
            out.append(single)
        return out

    def close(self) -> list[Frame]:
        return [self._close_fragment()] if self._parts else []

    def _single(self, line: Line) -> Frame | None:
        data = line.data
        if line.oversized:
            _, rid = scan(data[:SCAN_BYTES])
            if rid is None:
                return Skip("oversized")
            return Answer(error_line(rid, RpcCode.INVALID_REQUEST, f"line exceeds {self.limit} bytes"))
        if not data.strip():
            return Skip("blank")
        try:
            message = wire.loads(data)
        except wire.JSONDecodeError:
            message = _BROKEN
        if not line.terminated:
            rid = _id_of(message) if message is not _BROKEN else scan(data[:SCAN_BYTES])[1]
            if rid is None:
                return Skip("unterminated")
            return Answer(error_line(rid, RpcCode.INVALID_REQUEST, UNTERMINATED))
        if message is not _BROKEN:
            return Forward(data, _id_of(message))
        depth, rid = scan(data)  # the whole line: its depth decides whether a fragment starts
        if depth > 0 and _starts_object(data):
            self._parts = [data]
            self._size = len(data) + 1
            self._depth = depth
            return None  # the start of a multi-line fragment: answered when it closes
        if rid is None:
            return Skip("malformed")
        return Answer(error_line(rid, RpcCode.PARSE_ERROR))

    def _close_fragment(self, *, oversized: bool = False) -> Frame:
        parts = self._parts
        joined = b"\n".join(parts)
        self._parts, self._size, self._depth = [], 0, 0
        rid: Any = None
        if len(parts) == 1 and not oversized:  # an unclosed object on one line is just malformed
            rid = scan(joined[:SCAN_BYTES])[1]
            return Skip("malformed") if rid is None else Answer(error_line(rid, RpcCode.PARSE_ERROR))
        if not oversized:
            try:
                rid = _id_of(wire.loads(joined))
            except wire.JSONDecodeError:
                rid = None
        if rid is None:
            rid = scan(joined[:SCAN_BYTES])[1]
        if rid is None:
            return Skip("multiline")
        return Answer(error_line(rid, RpcCode.INVALID_REQUEST, MULTILINE))


_BROKEN = object()


def _id_of(message: Any) -> Any:
    if isinstance(message, dict) and wire.is_request_id(message.get("id")):
        return message["id"]
    return None


def _starts_message(data: bytes) -> bool:
    """Whether a line read while a fragment is open begins a message of its own rather than
    continuing the fragment: it starts like a request (``{"jsonrpc"``), or it alone is an object
    with ``jsonrpc`` or a request id. Then it gets its own answer, instead of vanishing into the
    fragment's; a bare nested object (``{}`` on a line of a pretty-printed body) still continues."""
    if _STARTS_REQUEST.match(data):
        return True
    if not _starts_object(data):
        return False
    try:
        message = wire.loads(data)
    except wire.JSONDecodeError:
        return False
    return isinstance(message, dict) and (jsonrpc.MEMBER in message or _id_of(message) is not None)
