"""The HTTP binding rules of an AHP endpoint (AHP-HTTP-001), pure: values in, values out.

:func:`judge` decides from a request's headers whether its body may be read and evaluated or what
the refusal is (415 for another media type or content coding, 413 for a declared length over
``maxBodyBytes``, before any body byte is read; :func:`denied_natively` says which of them a native
hook endpoint answers with the harness's denial); :func:`frame` turns the pipeline's answer into
the response (200 with the JSON-RPC response, 202 with no body for a notification). Both HTTP
adapters (the fast lane and the aiohttp routes) call them, so they answer alike. Bodies with
``Content-Encoding`` (gzip or deflate) are decoded by :class:`Decoder` with ``maxBodyBytes``
enforced on the decoded size while decoding: a compression bomb is refused after at most
``maxBodyBytes`` of output, never inflated.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from http import HTTPStatus

JSON = "application/json"
UNSUPPORTED_MEDIA = "AHP over HTTP requires Content-Type: application/json\n"


@dataclass(slots=True)
class Serve:
    """Read the body (at most ``limit`` bytes, decoded with ``coding``) and evaluate it."""

    coding: str | None
    limit: int


@dataclass(slots=True)
class Refuse:
    """Answer ``status`` with ``body`` (text/plain) without evaluating the request; ``close``:
    the rest of the stream cannot be trusted to frame a next request."""

    status: int
    body: bytes
    close: bool = False
    challenge: str | None = None
    """The ``WWW-Authenticate`` value of a 401."""


class BodyRejected(Exception):
    """The body cannot be evaluated; ``status`` is the HTTP answer (400, 408, 413, 415)."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason

    def refusal(self) -> Refuse:
        """400 and 408 close the connection: the body's framing cannot be trusted after them."""
        return Refuse(self.status, (self.reason + "\n").encode(), close=self.status in (400, 408))


def malformed(status: int = 400) -> Refuse:
    """The answer to a request whose head no HTTP/1.1 parser accepts (the fast lane's reader, and
    aiohttp's parser when it answers): the status and its phrase only, never a quote of the
    request, which may hold a credential (protocol §12); the connection closes, since nothing
    after such a head can be framed."""
    try:
        phrase = HTTPStatus(status).phrase
    except ValueError:
        phrase = "Error"
    return Refuse(status, f"{status} {phrase} (malformed request)\n".encode(), close=True)


MALFORMED = malformed()


def media_type(content_type: str | None) -> str:
    """The media type of a ``Content-Type`` value, lowercase, without parameters."""
    return (content_type or "").split(";", 1)[0].strip().lower()


def judge(media: str | None, length: int | None, encodings: Sequence[str], limit: int) -> Serve | Refuse:
    """The rules applied from the head of an AHP request (after authentication, protocol §12):
    ``media`` is its media type (None: not checked), ``length`` its
    ``Content-Length`` (None: not declared), ``encodings`` its ``Content-Encoding`` values."""
    if media is not None and media != JSON:
        return Refuse(415, UNSUPPORTED_MEDIA.encode())
    try:
        coding = coding_of(encodings) if encodings else None
    except BodyRejected as exc:
        return exc.refusal()
    if length is not None and length > limit:
        return Refuse(413, f"body exceeds {limit} bytes\n".encode())
    return Serve(coding, limit)


def denied_natively(refusal: Refuse) -> bool:
    """Whether ``POST /native/<harness>`` answers this refusal with the harness's own denial (2xx)
    instead of its status: native HTTP hooks proceed on any non-2xx, so every refusal of a body on
    size or shape is a denial. Only 415 stays: a web page can post another media type without a
    CORS preflight, such a request is never processed, and a real hook always sends JSON."""
    return refusal.status != 415


def auth_denied_natively(status: int) -> bool:
    """Whether ``POST /native/<harness>`` answers an inbound-authentication refusal (401, 403) with
    the harness's own denial in a 200, for the same reason as :func:`denied_natively`; the
    ``WWW-Authenticate`` challenge is kept on that 200 and the refusal is counted as on any route."""
    return status in (401, 403)


def frame(answer: bytes | None) -> tuple[int, str | None, bytes]:
    """``(status, content type, body)`` of the pipeline's answer: None is a notification's."""
    if answer is None:
        return 202, None, b""
    return 200, JSON, answer


def body_timeout_reason(timeout: float) -> str:
    """The 408 text when a body did not arrive within ``timeout`` seconds (both HTTP paths)."""
    return f"body not received within {timeout * 1000:.0f} ms"


# ---------------------------------------------------------------------------------------------
# Content codings

CODINGS = {"gzip": 16 + zlib.MAX_WBITS, "x-gzip": 16 + zlib.MAX_WBITS, "deflate": zlib.MAX_WBITS}
"""Accepted content codings and their zlib window setting (``deflate`` is the zlib format, RFC 9110 §8.4.1.2)."""


def coding_of(values: Sequence[str]) -> str | None:
    """The one content coding of a request (None: identity). More than one layer, or a coding
    other than gzip/deflate, is refused (415): nested layers multiply a compression bomb."""
    codings = [c.strip().lower() for value in values for c in value.split(",")]
    codings = [c for c in codings if c and c != "identity"]
    if not codings:
        return None
    if len(codings) > 1:
        raise BodyRejected(415, "only one Content-Encoding layer (gzip or deflate) is accepted")
    if codings[0] not in CODINGS:
        raise BodyRejected(415, "Content-Encoding must be gzip, deflate or identity")
    return codings[0]


class Decoder:
    """Incremental decoding that never produces more than ``limit + 1`` bytes in total."""

    def __init__(self, coding: str, limit: int) -> None:
        self._wbits = CODINGS[coding]
        self._gzip = coding != "deflate"
        self._limit = limit
        self._size = 0
        self._out: list[bytes] = []
        self._zlib = zlib.decompressobj(self._wbits)

    @property
    def size(self) -> int:
        """Decoded bytes produced so far (at most ``limit + 1``: decoding stops there)."""
        return self._size

    def feed(self, data: bytes) -> None:
        while data:
            if self._zlib.eof:
                if not self._gzip:
                    raise BodyRejected(400, "data after the end of the deflate stream")
                self._zlib = zlib.decompressobj(self._wbits)  # another gzip member (RFC 1952 §2.2)
            try:
                piece = self._zlib.decompress(data, self._limit + 1 - self._size)
            except zlib.error:
                raise BodyRejected(400, "body is not valid for its Content-Encoding") from None
            self._size += len(piece)
            if self._size > self._limit:
                raise BodyRejected(413, f"decoded body exceeds {self._limit} bytes")
            self._out.append(piece)
            data = self._zlib.unconsumed_tail or self._zlib.unused_data

    def finish(self) -> bytes:
        if not self._zlib.eof:
            raise BodyRejected(400, "compressed body is truncated")
        return b"".join(self._out)
