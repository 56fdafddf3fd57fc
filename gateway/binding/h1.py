"""The fast lane's HTTP/1.1 request reader and response serializer, without I/O.

:class:`Reader` takes the bytes of one connection (:meth:`Reader.feed`) and returns what they
amount to (:meth:`Reader.next_event`): :data:`NEED_DATA`, a :class:`Head` whose body is still on
its way, a whole :class:`Request`, a :class:`Skipped` body, :class:`Malformed` — the head is not
HTTP/1.1: answer 400 and close — or :class:`HandOff` — this request is valid but not the fast
lane's, and it and every later byte belong to the general HTTP server. It serves only
``POST <path>`` with ``Content-Type: application/json`` (and, if asked, ``POST /native/<harness>``
with at most an ``event`` parameter), one exact ``Content-Length`` within ``maxBodyBytes``, no
content or transfer coding, no ``Expect`` or ``Upgrade``, HTTP/1.1, a ``Host``.

Every head is read by llhttp first (an incomplete one as its bytes come, so garbage is refused at
once): what llhttp refuses — a bad token or byte, a bare LF, folding, two ``Content-Length``, a
``Content-Length`` beside ``Transfer-Encoding`` — is :class:`Malformed`, answered here with
:data:`gateway.binding.rules.MALFORMED`, so the general server is only ever handed whole heads
llhttp accepted. Why a hand-off stays exact: llhttp accepts only CRLF line endings, so the first
``CRLFCRLF`` ends the head it parsed and the body is exactly ``Content-Length`` bytes after it.
Whatever the general server might refuse although llhttp accepts it (a repeated header, no
``Host``, an upgrade, fields near its limits, a head over :data:`MAX_HEAD`) is handed off, so the
fast lane never serves a request the general server would refuse. A request is read only to its
head before it is judged, so a handed-off request is still whole in the buffer.
"""

from __future__ import annotations

import email.utils
import operator
import re
import time
from dataclasses import dataclass
from typing import Final

import httptools
from multidict import CIMultiDict

from gateway.binding.rules import JSON, MALFORMED, Refuse, Serve, judge, media_type

MAX_HEAD = 16384
"""A head longer than this is handed off (the general server applies its own limits)."""
MAX_FIELDS = 64
MAX_FIELD = 4096
"""A head with more header lines, or a longer name or value, is handed off, below aiohttp's own
limits (128 lines, 8190 bytes a field): every answer to such a head is then aiohttp's."""
_END = b"\r\n\r\n"
_HANDS_OFF = frozenset({"transfer-encoding", "content-encoding", "expect", "upgrade", "sec-websocket-key1"})
"""Headers whose presence hands a request off (the general server implements or refuses them)."""
_NO_CODING: Final[tuple[str, ...]] = ()
_NATIVE = re.compile(r"/native/([a-z0-9][a-z0-9-]{0,39})(?:\?event=([A-Za-z0-9_.-]{1,64}))?")
"""The native targets read here: anything else (percent-encoding, other parameters) is handed off."""


class NeedData:
    """Nothing to act on until more bytes come; ``in_body``: a head was read, its body is due."""

    __slots__ = ("in_body",)

    def __init__(self, in_body: bool) -> None:
        self.in_body = in_body

    def __repr__(self) -> str:
        return f"NeedData(in_body={self.in_body})"


NEED_DATA = NeedData(False)
NEED_BODY = NeedData(True)


@dataclass(slots=True)
class Head:
    """A fast-lane request head whose body is not all here yet (authenticate from it now)."""

    headers: CIMultiDict[str]
    length: int


@dataclass(slots=True)
class Request:
    headers: CIMultiDict[str]
    body: bytes
    keep_alive: bool
    native: Native | None = None
    """For ``POST /native/<harness>``: which harness, and the ``event`` query parameter."""


@dataclass(slots=True)
class Native:
    harness: str
    event: str | None


class Skipped:
    """The body of a request refused from its head (:meth:`Reader.skip`) has been read past."""

    __slots__ = ()

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Skipped)

    def __hash__(self) -> int:
        return 0


SKIPPED = Skipped()


@dataclass(slots=True)
class HandOff:
    """Not the fast lane's: ``data`` is every byte from the first of this request on."""

    data: bytes


@dataclass(slots=True)
class Malformed:
    """The head is not HTTP/1.1 (llhttp refuses it: bad tokens or bytes, folding, bare LF, a
    smuggling pair of framing headers, ...): answer ``refusal`` (400) and close. The reader is
    done; no byte of it reaches the general server."""

    refusal: Refuse
    reason: str
    """llhttp's error class, for the DEBUG log (never the bytes)."""


Event = NeedData | Head | Request | Skipped | HandOff | Malformed


class _Quiet:
    """No callbacks: llhttp only validates."""

    __slots__ = ()


class _Head:
    """llhttp callbacks for one request head. llhttp validates the head (tokens, value bytes,
    CRLF only, no folding, the request line); the fields are then read from the validated bytes
    in C (:data:`_FIELD`), not by a Python callback per header line."""

    __slots__ = ("complete", "keep_alive", "parser")

    def __init__(self) -> None:
        self.complete = self.keep_alive = False
        self.parser: httptools.HttpRequestParser | None = None
        """Set while a head is fed (and cleared after, so the two do not form a cycle)."""

    def on_headers_complete(self) -> None:
        self.complete = True
        # Read now: a head without a body completes the message, and llhttp resets its flags then.
        self.keep_alive = self.parser is not None and self.parser.should_keep_alive()


@dataclass(slots=True)
class Parsed:
    """A fast-lane request head, read and judged."""

    headers: CIMultiDict[str]
    length: int
    keep_alive: bool
    native: Native | None = None


_FIELD = re.compile(r"([^:\r\n]+):[ \t]*((?:[^\r\n]*[^ \t\r\n])?)[ \t]*\r\n")
"""One header line of a head llhttp accepted: name, and value without its surrounding OWS
(RFC 9110 §5.5, as aiohttp). Linear: the value ends at the last byte that is not OWS."""
_NAME = operator.itemgetter(0)
_VERSION = " HTTP/1.1"


def read_head(head: bytes, target: str, limit: int, native: bool = False) -> Parsed | Malformed | None:
    """The parsed head of a fast-lane request (``head`` through its ``CRLFCRLF``), or
    :class:`Malformed`, or None (a valid head that is not the fast lane's: hand it off);
    ``native``: ``POST /native/<harness>`` is read too."""
    parsed = _Head()
    parser = parsed.parser = httptools.HttpRequestParser(parsed)
    try:
        parser.feed_data(head)
    except httptools.HttpParserUpgrade:
        return None  # the general server serves the upgrade request (or refuses it)
    except httptools.HttpParserError as exc:
        return Malformed(MALFORMED, type(exc).__name__)
    finally:
        parsed.parser = None
    lines = head.count(b"\r\n") - 2  # header lines: llhttp accepted no bare LF and no folding
    if not parsed.complete or not head.startswith(b"POST ") or lines > MAX_FIELDS:
        return None  # another method, or more header lines than the fast lane reads
    text = head.decode("utf-8", "surrogateescape")  # values as aiohttp decodes them; names are ASCII tokens
    line_end = text.find("\r\n")
    if not text.endswith(_VERSION, 0, line_end):
        return None
    fields = _FIELD.findall(text, line_end + 2)
    names = set(map(str.lower, map(_NAME, fields)))
    if (
        len(fields) != lines  # every line one field, or the general server decides
        or len(names) != lines  # a repeated header: the general server decides
        or not _HANDS_OFF.isdisjoint(names)
        or "host" not in names  # 400 from the general server (RFC 9112 §3.2)
        or (len(head) > MAX_FIELD and _too_long(fields))
    ):
        return None
    headers: CIMultiDict[str] = CIMultiDict(fields)
    length_text = headers.get("content-length")
    if length_text is None or not (length_text.isascii() and length_text.isdigit()):
        return None
    length = int(length_text)
    content_type = headers.get("content-type", "")
    media: str | None = JSON if content_type == JSON else media_type(content_type)  # JSON only, on both paths
    url = text[5 : line_end - len(_VERSION)]
    found: Native | None = None
    if url != target:
        matched = _NATIVE.fullmatch(url) if native else None
        if matched is None:
            return None
        found = Native(matched.group(1), matched.group(2))
    # The binding rules; a refusal is the general server's to answer, after authentication.
    if not isinstance(judge(media, length, _NO_CODING, limit), Serve):
        return None
    return Parsed(headers, length, parsed.keep_alive, found)


def _too_long(fields: list[tuple[str, str]]) -> bool:
    """A header name or value longer than :data:`MAX_FIELD` bytes (only a long head can have one)."""
    return any(
        len(name.encode("utf-8", "surrogateescape")) > MAX_FIELD
        or len(value.encode("utf-8", "surrogateescape")) > MAX_FIELD
        for name, value in fields
    )


class Reader:
    """One connection's requests, in order. Feed bytes, then take events until
    :data:`NEED_DATA`/:data:`NEED_BODY`; after :class:`HandOff` the reader is done."""

    __slots__ = (
        "_buf",
        "_head_len",
        "_headers",
        "_keep_alive",
        "_native",
        "_need",
        "_probe",
        "_probed",
        "_skip",
        "handed_off",
        "native",
        "refused",
        "target",
    )

    def __init__(self, target: bytes, native: bool = False) -> None:
        self.target = target.decode("utf-8", "surrogateescape")
        """As the head's text is decoded (:func:`read_head`): equal exactly when the bytes are."""
        self.native = native
        """Read ``POST /native/<harness>`` too."""
        self._native: Native | None = None
        self._buf = bytearray()
        self._head_len = 0
        self._need = -1
        """Body bytes of the request whose head was read; -1 while reading a head."""
        self._headers: CIMultiDict[str] | None = None
        self._keep_alive = True
        self._skip = False
        self.handed_off = False
        self.refused = False
        """A malformed head was answered: the reader is done."""
        self._probe: httptools.HttpRequestParser | None = None
        """llhttp over the head being received, while it is incomplete (:meth:`_probe_head`)."""
        self._probed = 0

    def feed(self, data: bytes) -> None:
        self._buf += data

    @property
    def buffered(self) -> int:
        """Bytes received and not yet consumed by an event."""
        return len(self._buf)

    @property
    def in_head(self) -> bool:
        """A request head has begun and is not complete."""
        return self._need < 0 and bool(self._buf)

    @property
    def in_request(self) -> bool:
        """Part of a request has come (a head begun, or a head whose body is due)."""
        return self._need >= 0 or bool(self._buf)

    @property
    def pending_native(self) -> Native | None:
        """The native target of the request whose body is being read, if it is one."""
        return self._native if self._need >= 0 else None

    def skip(self) -> None:
        """The request whose :class:`Head` was returned is answered: read past its body, which
        later events discard as it comes (none of it is kept)."""
        self._skip = True

    def next_event(self, limit: int) -> Event:
        """What the buffer holds next; ``limit`` is the current ``maxBodyBytes``."""
        buf = self._buf
        if self.handed_off:
            return self._hand_off()
        if self.refused:
            del buf[:]  # after a malformed head nothing is read (the connection is closing)
            return NEED_DATA
        if self._need < 0:
            end = buf.find(_END, 0, MAX_HEAD + 4)
            if end < 0:
                if len(buf) >= MAX_HEAD + 4:
                    return self._hand_off()  # too long: the general server's own limits decide
                return self._probe_head()
            self._probe = None
            parsed = read_head(bytes(buf[: end + 4]), self.target, limit, self.native)
            if parsed is None:
                return self._hand_off()
            if type(parsed) is Malformed:
                return self._refuse(parsed)
            assert isinstance(parsed, Parsed)
            self._head_len = end + 4
            self._need = parsed.length
            self._headers = parsed.headers
            self._keep_alive = parsed.keep_alive
            self._native = parsed.native
            if len(buf) < self._head_len + self._need:
                return Head(parsed.headers, parsed.length)
        if self._skip and len(buf) < self._head_len + self._need:
            # A refused body is read past as it comes, never stored: a refused caller cannot make
            # the gateway hold its body (protocol §12).
            self._need -= len(buf) - self._head_len
            self._head_len = 0
            del buf[:]
            return NEED_BODY
        total = self._head_len + self._need
        if len(buf) < total:
            return NEED_BODY
        headers = self._headers
        assert headers is not None
        self._need, self._headers = -1, None
        if self._skip:  # answered from its head: its body frames nothing, the connection goes on
            del buf[:total]
            self._skip = False
            return SKIPPED
        body = bytes(buf[self._head_len : total])
        del buf[:total]
        return Request(headers, body, self._keep_alive, self._native)

    def _probe_head(self) -> NeedData | Malformed:
        """A head still incomplete: what came of it so far is fed to llhttp once (each byte only
        once, whatever the segmentation), so a malformed head — garbage, a bare LF, a bad token,
        another protocol — is refused as soon as it shows, not at the header timeout."""
        probe = self._probe
        if probe is None:
            probe = self._probe = httptools.HttpRequestParser(_Quiet())
            self._probed = 0
        try:
            probe.feed_data(bytes(self._buf[self._probed :]))
        except httptools.HttpParserUpgrade:  # pragma: no cover - needs a complete head
            pass
        except httptools.HttpParserError as exc:
            return self._refuse(Malformed(MALFORMED, type(exc).__name__))
        self._probed = len(self._buf)
        return NEED_DATA

    def _refuse(self, malformed: Malformed) -> Malformed:
        self.refused = True
        self._probe = None
        del self._buf[:]
        return malformed

    def _hand_off(self) -> HandOff:
        self.handed_off = True
        data, self._buf = bytes(self._buf), bytearray()
        self._need, self._headers = -1, None
        return HandOff(data)


# ---------------------------------------------------------------------------------------------
# Responses

REASONS = {200: b"OK", 202: b"Accepted", 400: b"Bad Request", 401: b"Unauthorized", 403: b"Forbidden"}
REASONS.update({404: b"Not Found", 408: b"Request Timeout", 500: b"Internal Server Error"})
TEXT = b"text/plain; charset=utf-8"
_date: dict[int, bytes] = {}


def http_date(now: float | None = None) -> bytes:
    """RFC 9110 §6.6.1 ``Date``, formatted once per second."""
    second = int(time.time() if now is None else now)
    found = _date.get(second)
    if found is None:
        _date.clear()
        found = _date[second] = email.utils.formatdate(second, usegmt=True).encode("ascii")
    return found


def response(
    status: int, body: bytes, content_type: bytes | None, *, close: bool, extra: bytes = b"", date: bytes | None = None
) -> bytes:
    """One HTTP/1.1 response; ``extra`` is whole header lines."""
    head = b"HTTP/1.1 %d %s\r\n" % (status, REASONS[status])
    if content_type is not None:
        head += b"Content-Type: " + content_type + b"\r\n"
    head += b"Content-Length: %d\r\n%s" % (len(body), extra)
    if close:
        head += b"Connection: close\r\n"
    return head + b"Date: " + (http_date() if date is None else date) + b"\r\n\r\n" + body
