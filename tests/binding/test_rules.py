"""The binding rules shared by both HTTP adapters (gateway/binding/rules.py): judge and frame
(AHP-HTTP-001), and the bounded content-coding decoder."""

from __future__ import annotations

import gzip
import zlib

import pytest

from gateway.binding.rules import JSON, BodyRejected, Decoder, Refuse, Serve, coding_of, frame, judge, media_type

LIMIT = 100

JUDGED = [
    ((JSON, 10, []), Serve(None, LIMIT)),
    ((JSON, None, []), Serve(None, LIMIT)),
    ((JSON, LIMIT, []), Serve(None, LIMIT)),
    ((JSON, LIMIT + 1, []), Refuse(413, b"body exceeds 100 bytes\n")),
    (("text/plain", 10, []), Refuse(415, b"AHP over HTTP requires Content-Type: application/json\n")),
    (("application/octet-stream", None, []), Refuse(415, b"AHP over HTTP requires Content-Type: application/json\n")),
    ((None, 10, []), Serve(None, LIMIT)),  # native hooks: any media type
    ((JSON, 10, ["gzip"]), Serve("gzip", LIMIT)),
    ((JSON, 10, ["identity", "deflate"]), Serve("deflate", LIMIT)),
    ((JSON, 10, ["gzip, gzip"]), Refuse(415, b"only one Content-Encoding layer (gzip or deflate) is accepted\n")),
    ((JSON, 10, ["br"]), Refuse(415, b"Content-Encoding must be gzip, deflate or identity\n")),
    # the media type is refused before the coding, the coding before the length
    (("text/plain", LIMIT + 1, ["br"]), Refuse(415, b"AHP over HTTP requires Content-Type: application/json\n")),
    ((JSON, LIMIT + 1, ["br"]), Refuse(415, b"Content-Encoding must be gzip, deflate or identity\n")),
]


@pytest.mark.parametrize(("args", "verdict"), JUDGED)
def test_judge_AHP_HTTP_001(args: tuple[str | None, int | None, list[str]], verdict: Serve | Refuse) -> None:
    media, length, encodings = args
    assert judge(media, length, encodings, LIMIT) == verdict


def test_frame_answers_200_json_or_202_empty_for_a_notification_AHP_HTTP_001() -> None:
    assert frame(b'{"x":1}') == (200, "application/json", b'{"x":1}')
    assert frame(None) == (202, None, b"")


@pytest.mark.parametrize(
    ("value", "media"),
    [("application/json", JSON), ("Application/JSON; charset=utf-8", JSON), (" application/json ;x", JSON), (None, "")],
)
def test_media_type(value: str | None, media: str) -> None:
    assert media_type(value) == media


@pytest.mark.parametrize("status", [400, 408])
def test_framing_errors_close_the_connection(status: int) -> None:
    assert BodyRejected(status, "x").refusal() == Refuse(status, b"x\n", close=True)
    assert BodyRejected(413, "x").refusal().close is False


def test_coding_of_identity_is_none() -> None:
    assert coding_of([]) is None and coding_of(["identity", ""]) is None


@pytest.mark.parametrize(
    ("coding", "encode"), [("gzip", gzip.compress), ("deflate", zlib.compress), ("x-gzip", gzip.compress)]
)
def test_decoder_round_trip(coding: str, encode: object) -> None:
    decoder = Decoder(coding, LIMIT)
    data = encode(b"a" * LIMIT)  # type: ignore[operator]
    for i in range(len(data)):
        decoder.feed(data[i : i + 1])
    assert decoder.finish() == b"a" * LIMIT


def test_a_compression_bomb_is_refused_after_the_limit_not_inflated() -> None:
    decoder = Decoder("gzip", LIMIT)
    with pytest.raises(BodyRejected) as caught:
        decoder.feed(gzip.compress(b"\0" * 10_000_000))
    assert caught.value.status == 413
    assert decoder.size <= LIMIT + 1  # never inflated past the limit (one byte over shows it)


@pytest.mark.parametrize(
    ("coding", "data", "status"),
    [
        ("gzip", b"not gzip", 400),
        ("gzip", gzip.compress(b"{}")[:-4], 400),
        ("deflate", zlib.compress(b"{}") + b"x", 400),
    ],
)
def test_broken_codings_are_refused(coding: str, data: bytes, status: int) -> None:
    decoder = Decoder(coding, LIMIT)
    with pytest.raises(BodyRejected) as caught:
        decoder.feed(data)
        decoder.finish()
    assert caught.value.status == status


def test_concatenated_gzip_members_decode() -> None:
    decoder = Decoder("gzip", LIMIT)
    decoder.feed(gzip.compress(b"ab") + gzip.compress(b"cd"))
    assert decoder.finish() == b"abcd"
