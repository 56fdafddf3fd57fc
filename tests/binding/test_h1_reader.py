"""The fast lane's sans-IO request reader (gateway/binding/h1.py), byte tables in, events out
(AHP-HTTP-001): what it serves, and that everything hostile or unusual is handed off whole."""

from __future__ import annotations

import pytest

from gateway.binding import h1
from gateway.binding.h1 import MAX_FIELD, MAX_FIELDS, MAX_HEAD, HandOff, Head, Malformed, Request, Skipped
from gateway.binding.rules import MALFORMED

LIMIT = 1024
BODY = b'{"jsonrpc":"2.0","id":1,"method":"x"}'


def post(*extra: bytes, body: bytes = BODY, line: bytes = b"POST / HTTP/1.1", length: bytes | None = None) -> bytes:
    lines = [line, b"Host: gw", b"Content-Type: application/json"]
    lines.append(b"Content-Length: " + (str(len(body)).encode() if length is None else length))
    return b"\r\n".join([*lines, *extra]) + b"\r\n\r\n" + body


def events(*chunks: bytes, skip_heads: bool = False) -> list[object]:
    """Every event the chunks give, fed one after another, until the reader needs data."""
    reader = h1.Reader(b"/")
    out: list[object] = []
    for chunk in chunks:
        reader.feed(chunk)
        while True:
            event = reader.next_event(LIMIT)
            if isinstance(event, h1.NeedData):
                break
            out.append(event)
            if isinstance(event, Head) and skip_heads:
                reader.skip()
            if isinstance(event, HandOff | Malformed):
                return out
    return out


def requests(found: list[object]) -> list[bytes]:
    return [e.body for e in found if isinstance(e, Request)]


def test_a_plain_request_is_served_with_its_headers_AHP_HTTP_001() -> None:
    [event] = events(post())
    assert isinstance(event, Request)
    assert event.body == BODY and event.keep_alive
    assert event.headers["content-type"] == "application/json" and event.headers["host"] == "gw"


@pytest.mark.parametrize(
    ("extra", "keep_alive"),
    [((), True), ((b"Connection: close",), False), ((b"Connection: keep-alive",), True)],
)
def test_keep_alive_is_read_from_the_head_AHP_HTTP_001(extra: tuple[bytes, ...], keep_alive: bool) -> None:
    [event] = events(post(*extra))
    assert isinstance(event, Request) and event.keep_alive is keep_alive


HANDED_OFF = {
    "GET": b"GET / HTTP/1.1\r\nHost: gw\r\n\r\n",
    "other path": post(line=b"POST /other HTTP/1.1"),
    "HTTP/1.0": post(line=b"POST / HTTP/1.0"),
    "no Host": b"POST / HTTP/1.1\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}",
    "chunked only": b"POST / HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\n"
    b"Transfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n",
    "no Content-Length": b"POST / HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\n\r\n",
    "over maxBodyBytes": post(body=b"x" * (LIMIT + 1)),
    "text/plain": post(b"X: y").replace(b"application/json", b"text/plain"),
    "Content-Encoding": post(b"Content-Encoding: gzip"),
    "Expect": post(b"Expect: 100-continue"),
    "Upgrade": post(b"Upgrade: websocket", b"Connection: upgrade"),
    "repeated header": post(b"X-A: 1", b"x-a: 2"),
    "field too long": post(b"X-A: " + b"a" * (MAX_FIELD + 1)),
    "too many fields": post(*(b"X-%d: v" % i for i in range(MAX_FIELDS))),
    "absolute-form target": post(line=b"POST http://gw/ HTTP/1.1"),
}
"""Valid HTTP/1.1 that is not the fast lane's: the general server serves or refuses it."""

MALFORMED_HEADS = {
    "two Content-Length (smuggling)": post(b"Content-Length: 5"),
    "Content-Length and Transfer-Encoding (smuggling)": post(b"Transfer-Encoding: chunked"),
    "signed Content-Length": post(length=b"+37"),
    "hex Content-Length": post(length=b"0x25"),
    "bare LF": post().replace(b"Host: gw\r\n", b"Host: gw\n"),
    "bare LF line ending the head": b"POST / HTTP/1.1\r\nHost: gw\n\n",
    "obsolete line folding": post(b"X-A: 1", b" folded"),
    "space before colon": post(b"X-A : 1"),
    "NUL in a value": post(b"X-A: a\x00b"),
    "CR alone in a value": post(b"X-A: a\rb"),
    "non-ASCII in a name": post("X-Caf\u00e9: a".encode()),
    "lowercase method": post(line=b"post / HTTP/1.1"),
    "malformed GET": b"GET / HTTP/1.1\r\nHost: gw\r\nX-A : 1\r\n\r\n",
    "TLS on the plain port": b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03",
}
"""Heads llhttp refuses: the reader answers them itself (400, close); none reaches the general server."""


@pytest.mark.parametrize("data", MALFORMED_HEADS.values(), ids=MALFORMED_HEADS.keys())
def test_a_malformed_head_is_refused_by_the_reader_itself_AHP_HTTP_001(data: bytes) -> None:
    """400 and close (:data:`gateway.binding.rules.MALFORMED`, which quotes nothing of the
    request); nothing is handed to the general server, and the reader is done."""
    reader = h1.Reader(b"/")
    reader.feed(data)
    event = reader.next_event(LIMIT)
    assert isinstance(event, Malformed) and event.refusal == MALFORMED
    assert MALFORMED.status == 400 and MALFORMED.close and MALFORMED.body == b"400 Bad Request (malformed request)\n"
    assert reader.refused and not reader.handed_off and reader.buffered == 0
    reader.feed(post())
    assert reader.next_event(LIMIT) is h1.NEED_DATA and reader.buffered == 0


@pytest.mark.parametrize("data", MALFORMED_HEADS.values(), ids=MALFORMED_HEADS.keys())
def test_a_malformed_head_fed_byte_by_byte_is_refused_never_handed_off_AHP_HTTP_001(data: bytes) -> None:
    found = events(*(data[i : i + 1] for i in range(len(data))))
    assert len(found) == 1 and isinstance(found[0], Malformed)


def test_a_malformed_head_is_refused_before_it_ends_AHP_HTTP_001() -> None:
    """Garbage, a bad token or a bare LF is refused as soon as it arrives, not at the header
    timeout: llhttp reads the incomplete head, each byte once."""
    for start in (b"\x16\x03\x01", b"POST / HTTP/1.1\r\nHost: gw\r\nX-A : 1", b"POST / HTTP/1.1\r\nHost: gw\nX"):
        reader = h1.Reader(b"/")
        reader.feed(start)
        assert isinstance(reader.next_event(LIMIT), Malformed), start


def test_a_valid_head_of_another_request_is_handed_off_only_once_complete_AHP_HTTP_001() -> None:
    """The general server is given whole heads only (the reader validated them first)."""
    data = b"GET /healthz HTTP/1.1\r\nHost: gw\r\n\r\n"
    reader = h1.Reader(b"/")
    for i in range(len(data) - 1):
        reader.feed(data[i : i + 1])
        assert reader.next_event(LIMIT) is h1.NEED_DATA
    reader.feed(data[-1:])
    assert reader.next_event(LIMIT) == HandOff(data)


def test_a_good_request_then_a_malformed_one_serves_the_first_AHP_HTTP_001() -> None:
    found = events(post() + post(b"X-A : 1"))
    assert requests(found) == [BODY] and isinstance(found[-1], Malformed)


@pytest.mark.parametrize("data", HANDED_OFF.values(), ids=HANDED_OFF.keys())
def test_anything_unusual_is_handed_off_whole_AHP_HTTP_001(data: bytes) -> None:
    """The general server answers it (or refuses it) from the first byte: nothing is consumed."""
    found = events(data)
    assert found == [HandOff(data)]


def test_an_oversized_head_is_handed_off_before_its_end_arrives_AHP_HTTP_001() -> None:
    data = b"POST / HTTP/1.1\r\nX: " + b"a" * MAX_HEAD
    assert events(data) == [HandOff(data)]


def test_a_head_without_its_end_waits_for_more_AHP_HTTP_001() -> None:
    reader = h1.Reader(b"/")
    reader.feed(post()[:30])
    assert reader.next_event(LIMIT) is h1.NEED_DATA
    assert reader.in_head and reader.in_request


def test_a_head_whose_body_is_due_authenticates_before_the_body_AHP_HTTP_001_section_12() -> None:
    data = post()
    end = data.index(b"\r\n\r\n") + 4
    reader = h1.Reader(b"/")
    reader.feed(data[:end])
    head = reader.next_event(LIMIT)
    assert isinstance(head, Head) and head.length == len(BODY)
    assert reader.next_event(LIMIT) is h1.NEED_BODY
    reader.feed(data[end:])
    event = reader.next_event(LIMIT)
    assert isinstance(event, Request) and event.body == BODY


def test_a_refused_head_has_its_body_skipped_and_the_next_request_served_AHP_HTTP_001() -> None:
    data = post()
    end = data.index(b"\r\n\r\n") + 4
    found = events(data[:end], data[end:] + post(body=b"{}"), skip_heads=True)
    assert [type(e) for e in found] == [Head, Skipped, Request]
    assert requests(found) == [b"{}"]


def test_a_request_after_a_handed_off_one_stays_in_the_handed_off_bytes_AHP_HTTP_001() -> None:
    """Pipelined after a request that is not the fast lane's: the general server gets both."""
    tail = b"GET /x HTTP/1.1\r\nHost: gw\r\n\r\n" + post()
    found = events(post() + tail)
    assert requests(found) == [BODY]
    assert found[-1] == HandOff(tail)


PIPELINED = post() + post(body=b'{"a":1}') + post(b"Connection: close", body=b"[]")


@pytest.mark.parametrize("cut", range(len(PIPELINED) + 1))
def test_pipelined_requests_split_at_every_byte_give_the_same_requests_AHP_HTTP_001(cut: int) -> None:
    found = events(PIPELINED[:cut], PIPELINED[cut:])
    assert requests(found) == [BODY, b'{"a":1}', b"[]"]
    assert [e.keep_alive for e in found if isinstance(e, Request)] == [True, True, False]


def test_pipelined_requests_fed_byte_by_byte_AHP_HTTP_001() -> None:
    found = events(*(PIPELINED[i : i + 1] for i in range(len(PIPELINED))))
    assert requests([e for e in found if not isinstance(e, Head)]) == [BODY, b'{"a":1}', b"[]"]


@pytest.mark.parametrize("cut", range(1, 60))
def test_a_smuggling_attempt_split_anywhere_is_refused_whole_AHP_HTTP_001(cut: int) -> None:
    """Neither request is served or handed on: one 400, and the connection closes."""
    data = post(b"Transfer-Encoding: chunked", body=b"0\r\n\r\nGET /admin HTTP/1.1\r\n\r\n")
    found = events(data[:cut], data[cut:])
    assert len(found) == 1 and isinstance(found[0], Malformed)


def test_the_reader_is_done_after_a_hand_off_AHP_HTTP_001() -> None:
    reader = h1.Reader(b"/")
    reader.feed(b"GET / HTTP/1.1\r\nHost: gw\r\n\r\n")
    assert isinstance(reader.next_event(LIMIT), HandOff) and reader.handed_off
    reader.feed(post())
    assert reader.next_event(LIMIT) == HandOff(post())


RESPONSES = [
    (
        (200, b"{}", b"application/json"),
        False,
        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\nDate: D\r\n\r\n{}",
    ),
    ((202, b"", None), False, b"HTTP/1.1 202 Accepted\r\nContent-Length: 0\r\nDate: D\r\n\r\n"),
    (
        (408, b"late\n", h1.TEXT),
        True,
        b"HTTP/1.1 408 Request Timeout\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: 5\r\n"
        b"Connection: close\r\nDate: D\r\n\r\nlate\n",
    ),
]


@pytest.mark.parametrize(("args", "close", "wire"), RESPONSES)
def test_responses_are_serialized_byte_for_byte_AHP_HTTP_001(
    args: tuple[int, bytes, bytes | None], close: bool, wire: bytes
) -> None:
    status, body, content_type = args
    assert h1.response(status, body, content_type, close=close, date=b"D") == wire


def test_the_date_is_an_rfc_9110_imf_fixdate() -> None:
    assert h1.http_date(0) == b"Thu, 01 Jan 1970 00:00:00 GMT"


NATIVE_TARGETS = {
    b"/native/claude-code": h1.Native("claude-code", None),
    b"/native/copilot?event=preToolUse": h1.Native("copilot", "preToolUse"),
    b"/native/nobody": h1.Native("nobody", None),  # the endpoint answers 404 for it
    b"/native/claude%2Dcode": None,
    b"/native/copilot?event=a&x=1": None,
    b"/native/copilot?x=1": None,
    b"/native/copilot?event=": None,
    b"/native/": None,
    b"/native/a/b": None,
    b"/native/Claude": None,
}


@pytest.mark.parametrize(("target", "native"), NATIVE_TARGETS.items(), ids=[t.decode() for t in NATIVE_TARGETS])
def test_native_targets_are_read_only_in_their_plain_form_AHP_HTTP_001(target: bytes, native: h1.Native | None) -> None:
    """JSON only (another media type is handed off: the general server answers 415, issue 28 item
    4); anything a router would decode is handed off."""
    data = post(line=b"POST " + target + b" HTTP/1.1")
    reader = h1.Reader(b"/", native=True)
    reader.feed(data)
    event = reader.next_event(LIMIT)
    if native is None:
        assert event == HandOff(data)
    else:
        assert isinstance(event, Request) and event.native == native and event.body == BODY
    plain = data.replace(b"application/json", b"text/plain")
    reader = h1.Reader(b"/", native=True)
    reader.feed(plain)
    assert reader.next_event(LIMIT) == HandOff(plain)


def test_native_targets_are_handed_off_unless_asked_for() -> None:
    data = post(line=b"POST /native/claude-code HTTP/1.1")
    assert events(data) == [HandOff(data)]


SKIPPED_THEN_NEXT = post(body=b'{"refused":"' + b"x" * 200 + b'"}') + post(body=b"{}")


@pytest.mark.parametrize("size", [1, 7, 64, len(SKIPPED_THEN_NEXT)])
def test_a_refused_body_is_never_stored_whatever_the_pieces_AHP_HTTP_001_section_12(size: int) -> None:
    """Fed in pieces of ``size`` bytes after its head was refused, no byte of the body stays in
    the buffer; the request after it is read whole."""
    end = SKIPPED_THEN_NEXT.index(b"\r\n\r\n") + 4
    reader = h1.Reader(b"/")
    reader.feed(SKIPPED_THEN_NEXT[:end])
    assert isinstance(reader.next_event(LIMIT), Head)
    reader.skip()
    first_end = len(post(body=b'{"refused":"' + b"x" * 200 + b'"}'))
    found: list[object] = []
    for offset in range(end, len(SKIPPED_THEN_NEXT), size):
        reader.feed(SKIPPED_THEN_NEXT[offset : offset + size])
        while not isinstance(event := reader.next_event(LIMIT), h1.NeedData):
            found.append(event)
        if offset + size < first_end:
            assert reader.buffered == 0
    assert found[0] == Skipped() and requests(found) == [b"{}"]


FIELD_VALUES = [
    (b"X-A:   spaced  value \t", "spaced  value"),
    (b"X-A: a:b: c", "a:b: c"),
    (b"X-A:", ""),
    (b"X-A: \t ", ""),
    (b"X-A:\tv", "v"),
    ("X-A: caf\u00e9".encode(), "caf\u00e9"),
    (b"X-A: caf\xe9", "caf\udce9"),  # not UTF-8: kept byte for byte (surrogateescape), as aiohttp
    (b"x-a: " + b"v " * 2000 + b"w", "v " * 2000 + "w"),
]


@pytest.mark.parametrize(("line", "value"), FIELD_VALUES)
def test_field_values_lose_only_their_surrounding_whitespace_RFC_9110_section_5_5(line: bytes, value: str) -> None:
    """The fields are read from the head llhttp validated, one per line, names as sent."""
    [event] = events(post(line))
    assert isinstance(event, Request)
    assert event.headers.getall("x-a") == [value]
    assert list(event.headers) == ["Host", "Content-Type", "Content-Length", line.split(b":")[0].decode()]
