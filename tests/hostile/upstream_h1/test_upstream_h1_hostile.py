"""A hostile or broken upstream (or a man in the middle on plain HTTP) against the hot-path
HTTP/1.1 client (gateway.upstream.h1), end to end through a real gateway on loopback.

Upstream answers are untrusted input. Whatever bytes come back, no answer may be attributed to
the wrong request (cross-request confusion through a reused connection), no call may outlive its
per-call timeout, memory stays bounded, a broken answer is never partly salvaged (it is one
classified Failure that the subscription's failure policy handles: fail-closed gives the
synthetic deny, fail-open skips the upstream; AHP-FAIL-001, AHP-FAIL-002, protocol §6.3-6.4), and
no poisoned connection stays in the pool: the connection that carried a broken answer is closed
and the next request gets its own answer on a new connection (AHP-HTTP-001).

The scripted upstream counts its connections and notes on which one every request arrives; it
keeps reading after a broken answer, so a connection the gateway wrongly kept would show up as a
second request on the first connection. The failure class is read where operators see it: the
synthetic deny's extension and ``ahp_gateway_upstream_calls_total{outcome=...}``.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
import struct
from typing import Any

import pytest

from gateway.upstream.h1 import H1Client, ProtocolError, Target
from tests.hostile.upstream_h1.helpers import (
    GATEWAY,
    HOOK,
    LIMIT,
    SHORT_MS,
    SLACK,
    TIMEOUT_MS,
    answer,
    ask,
    chunked,
    drip,
    forged,
    honest,
    next_request_is_answered_on_a_new_connection,
    own,
    recorded,
    send,
    stream,
    synthetic,
)
from tests.support.fault_tools import sample, scrape
from tests.support.scripted_h1 import ok, read_request

# ------------------------------------------------------------------------------------------------
# Broken answers: one classified failure, fail-closed, and the connection is dropped.

BROKEN: list[Any] = [
    pytest.param(
        send(lambda rid: b"HTTP/1.1 200 OK\r\nContent-Length: -5\r\n\r\n" + answer(rid, own(rid))),
        "invalid_response",
        id="cl-negative",
    ),
    pytest.param(
        send(lambda rid: b"HTTP/1.1 200 OK\r\nContent-Length: +%d\r\n\r\n" % len(answer(rid, [])) + answer(rid, [])),
        "invalid_response",
        id="cl-plus-sign",
    ),
    pytest.param(
        send(
            lambda rid: (
                b"HTTP/1.1 200 OK\r\nContent-Length: %d, %d\r\n\r\n" % ((len(answer(rid, [])),) * 2) + answer(rid, [])
            )
        ),
        "invalid_response",
        id="cl-list",
    ),
    pytest.param(
        send(lambda rid: ok(answer(rid, []), b"Content-Length: %d\r\n" % len(answer(rid, [])))),
        "invalid_response",
        id="cl-twice-same",
    ),
    pytest.param(
        send(lambda rid: ok(answer(rid, []) + b" ", b"Content-Length: %d\r\n" % len(answer(rid, [])))),
        "invalid_response",
        id="cl-twice-different",
    ),
    pytest.param(
        send(lambda rid: chunked(answer(rid, [])).replace(b"\r\n\r\n", b"\r\nContent-Length: 5\r\n\r\n", 1)),
        "invalid_response",
        id="chunked-and-cl",
    ),
    pytest.param(
        send(lambda rid: b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % (2**70) + answer(rid, [])),
        "invalid_response",
        id="cl-over-2**64",
    ),
    pytest.param(
        send(
            lambda rid: b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n %d\r\n\r\n" % len(answer(rid, [])) + answer(rid, [])
        ),
        "invalid_response",
        id="cl-obs-fold",
    ),
    pytest.param(
        send(lambda rid: chunked(answer(rid, []), size_line=b"1" + b"0" * 17)),
        "invalid_response",
        id="chunk-size-over-2**64",
    ),
    pytest.param(
        send(lambda rid: chunked(answer(rid, []), size_line=b"-5")), "invalid_response", id="chunk-size-negative"
    ),
    pytest.param(send(lambda rid: chunked(answer(rid, []), size_line=b"0x5")), "invalid_response", id="chunk-size-0x"),
    pytest.param(
        send(lambda rid: chunked(answer(rid, [])).replace(b"\r\n0\r\n", b"0\r\n", 1)),
        "invalid_response",
        id="chunk-without-crlf",
    ),
    pytest.param(
        send(
            lambda rid: chunked(
                answer(rid, []), trailer=b"".join(b"X-Trailer-%d: %s\r\n" % (i, b"t" * 1000) for i in range(80))
            )
        ),
        "invalid_response",
        id="trailer-flood",
    ),
    pytest.param(
        send(lambda rid: chunked(answer(rid, []), trailer=b"Content-Length: 1\r\n")),
        "invalid_response",
        id="framing-header-in-trailer",
    ),
    pytest.param(
        send(lambda rid: b"HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n"),
        "invalid_response",
        id="101-upgrade",
    ),
    pytest.param(
        send(
            lambda rid: b"HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: h2c\r\n\r\n" + honest(rid)
        ),
        "invalid_response",
        id="101-then-valid-200",
    ),
    pytest.param(send(lambda rid: answer(rid, own(rid))), "invalid_response", id="http-0.9-body-without-status-line"),
    pytest.param(
        send(lambda rid: honest(rid).replace(b"\r\n", b"\n")),
        "invalid_response",
        id="bare-lf-line-ends",
    ),
    pytest.param(send(lambda rid: ok(answer(rid, []), b"X-A: a\x00b\r\n")), "invalid_response", id="nul-in-header"),
    pytest.param(
        send(lambda rid: b"HTTP/1.1 2000 OK\r\nContent-Length: 0\r\n\r\n"), "invalid_response", id="status-4-digits"
    ),
    pytest.param(
        send(lambda rid: b"HTTP/1.1 500 Internal Server Error\r\nContent-Length: 999999999999\r\n\r\n" + forged(rid)),
        "http_status",
        id="500-announcing-a-huge-body",
    ),
    pytest.param(
        stream(
            b"HTTP/1.1 500 Internal Server Error\r\nTransfer-Encoding: chunked\r\n\r\n",
            b"4000\r\n" + b"x" * 0x4000 + b"\r\n",
        ),
        "http_status",
        id="500-with-an-endless-chunked-body",
    ),
    pytest.param(
        send(lambda rid: b"HTTP/1.1 204 No Content\r\nContent-Length: 5\r\n\r\n" + forged(rid)),
        "http_status",
        id="204-with-body",
    ),
    pytest.param(
        send(lambda rid: b"HTTP/1.1 304 Not Modified\r\nContent-Length: 5\r\n\r\n" + forged(rid)),
        "http_status",
        id="304-with-body",
    ),
    pytest.param(
        send(
            lambda rid: (
                b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % (len(answer(rid, [])) + 100) + answer(rid, [])
            ),
            close=True,
        ),
        "connect",
        id="cl-longer-than-body-then-close",
    ),
    pytest.param(
        send(
            lambda rid: chunked(answer(rid, [{"type": "deny", "reason": "partial"}])).removesuffix(b"0\r\n\r\n"),
            close=True,
        ),
        "connect",
        id="chunked-without-last-chunk-then-close",
    ),
    pytest.param(
        send(lambda rid: b"HTTP/1.1 200 OK\r\n\r\n" + answer(rid, []) + b" " * LIMIT, close=True),
        "too_large",
        id="close-delimited-over-the-limit",
    ),
    pytest.param(
        send(
            lambda rid: (
                b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n" % (4 * LIMIT) + b" " * (2 * LIMIT)
            )
        ),
        "too_large",
        id="chunk-size-over-the-limit",
    ),
]


@pytest.mark.spec("AHP-HTTP-001")
@pytest.mark.parametrize(("act", "failure"), BROKEN)
async def test_a_broken_answer_is_one_failure_and_its_connection_is_dropped(rig, http, act, failure):
    """AHP-HTTP-001, AHP-FAIL-001, protocol §6.3-6.4: Content-Length and chunked framing
    variants, upgrades, bodies on bodiless statuses, truncations and over-limit bodies. Each is
    the failure class named, applied by fail-closed as the synthetic deny (nothing of the answer
    salvaged, not even a valid deny), well before the call timeout; the connection is closed and
    the next request gets its own answer on a new one."""
    gateway, upstream = await rig()
    upstream.acts.append(act)
    _, effects, _ = await ask(http, gateway)
    assert effects == synthetic(failure)  # (not "timeout": the broken answer itself ended the call)
    await next_request_is_answered_on_a_new_connection(http, gateway, upstream)
    await recorded(http, gateway, **{failure: 1, "ok": 1})


# ------------------------------------------------------------------------------------------------
# Answers that are not HTTP/1.1 as the gateway asked for it, and framing at its edges.


@pytest.mark.spec("AHP-HTTP-001")
async def test_an_http_2_0_status_line_is_not_an_http_1_1_answer(rig, http):
    """AHP-HTTP-001: h1 promises ProtocolError for bytes that are not an HTTP/1.1 response; an
    ``HTTP/2.0`` status line (HTTP/2 has none) carrying a valid deny must not be accepted."""
    gateway, upstream = await rig()
    upstream.acts.append(send(lambda rid: forged(rid).replace(b"HTTP/1.1", b"HTTP/2.0", 1)))
    _, effects, _ = await ask(http, gateway)
    assert effects == synthetic("invalid_response")
    await next_request_is_answered_on_a_new_connection(http, gateway, upstream)


@pytest.mark.spec("AHP-HTTP-001")
@pytest.mark.parametrize("status", [b"000", b"099"])
async def test_a_status_below_100_is_a_final_answer_not_an_interim_one(rig, http, status):
    """AHP-HTTP-001, RFC 9110 §15: a status outside 100..599 is invalid and is handled like a
    5xx; it ends the call at once as a status failure instead of waiting out the timeout."""
    gateway, upstream = await rig(timeout_ms=SHORT_MS)
    upstream.acts.append(send(lambda rid: b"HTTP/1.1 " + status + b" Odd\r\nContent-Length: 0\r\n\r\n"))
    _, effects, _ = await ask(http, gateway)
    assert effects[0].get("extensions", {}).get(GATEWAY, {}).get("failure") in ("http_status", "invalid_response")
    await next_request_is_answered_on_a_new_connection(http, gateway, upstream)


@pytest.mark.spec("AHP-HTTP-001")
async def test_an_unrequested_transfer_coding_is_an_invalid_answer(rig, http):
    """AHP-HTTP-001, RFC 9112 §6.1/§7: the gateway sends no TE, so a transfer coding other than
    chunked is a protocol violation: invalid_response, not a connection failure."""
    gateway, upstream = await rig()
    upstream.acts.append(
        send(lambda rid: b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n" + answer(rid, []), close=True)
    )
    _, effects, _ = await ask(http, gateway)
    assert effects == synthetic("invalid_response")
    await next_request_is_answered_on_a_new_connection(http, gateway, upstream)


# ------------------------------------------------------------------------------------------------
# Answers that never end: they end at the call timeout (AHP-FAIL-002), memory bounded.

ENDLESS: list[Any] = [
    pytest.param(stream(b"", b"HTTP/1.1 100 Continue\r\n\r\n" * 64), id="endless-100-continue"),
    pytest.param(
        stream(
            b"",
            b"HTTP/1.1 103 Early Hints\r\n"
            + b"".join(b"Link: <%d%s>\r\n" % (i, b"y" * 1000) for i in range(60))
            + b"\r\n",
        ),
        id="endless-103-each-with-60k-headers",
    ),
    pytest.param(
        stream(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", b"1\r\n \r\n", pause=0.01),
        id="endless-1-byte-chunks-slowly",
    ),
    pytest.param(drip(honest), id="headers-drip-one-byte-per-100ms"),
    pytest.param(
        stream(b"HTTP/1.1 200 OK\r\n", b"X-Slow: 1\r\n", pause=0.05),
        id="headers-that-never-end-slowly",
    ),
]


@pytest.mark.spec("AHP-FAIL-002")
@pytest.mark.parametrize("act", ENDLESS)
async def test_an_answer_that_never_ends_fails_at_the_call_timeout(rig, http, act):
    """AHP-FAIL-002, AHP-HTTP-001: interim answers streamed forever (the header budget is per
    message, so only the timeout can end them), bytes that never complete a head, a chunk or a
    drip: the call ends at its timeoutMs as a timeout failure, never later, and the connection is
    dropped."""
    gateway, upstream = await rig(timeout_ms=SHORT_MS)
    upstream.acts.append(act)
    _, effects, elapsed = await ask(http, gateway)
    assert effects == synthetic("timeout")
    assert SHORT_MS / 1000 * 0.9 <= elapsed < SHORT_MS / 1000 + SLACK
    await next_request_is_answered_on_a_new_connection(http, gateway, upstream)
    await recorded(http, gateway, timeout=1, ok=1)


@pytest.mark.spec("AHP-FAIL-002")
@pytest.mark.parametrize(
    ("act", "failure"),
    [
        pytest.param(stream(b"", b"\r\n" * 4096), "invalid_response", id="endless-empty-lines-before-the-status"),
        pytest.param(stream(b"HTTP/1.1 200 ", b"O" * 4096), "invalid_response", id="endless-reason-phrase"),
        pytest.param(
            stream(b"HTTP/1.1 200 OK\r\nX-A:", b" " * 4096), "invalid_response", id="endless-whitespace-before-a-value"
        ),
        pytest.param(
            stream(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5;", b"e" * 4096),
            "too_large",
            id="endless-chunk-extension",
        ),
    ],
)
async def test_a_head_or_framing_that_never_ends_fails_at_its_wire_budget(rig, http, act, failure):
    """AHP-FAIL-002, AHP-HTTP-001 bounded answers: bytes that never complete a head (counted
    against the head's wire budget as they arrive) or a chunk's framing (against the body's) fail
    as soon as the budget is spent, before the call's timeout, and the connection is dropped."""
    gateway, upstream = await rig(timeout_ms=SHORT_MS)
    upstream.acts.append(act)
    _, effects, elapsed = await ask(http, gateway)
    assert effects == synthetic(failure)
    assert elapsed < SHORT_MS / 1000 + SLACK
    await next_request_is_answered_on_a_new_connection(http, gateway, upstream)
    await recorded(http, gateway, **{failure: 1, "ok": 1})


# ------------------------------------------------------------------------------------------------
# Fail-open: the same failures skip the upstream (AHP-FAIL-001).

FAIL_OPEN: list[Any] = [
    pytest.param(
        send(lambda rid: chunked(answer(rid, [])).replace(b"\r\n\r\n", b"\r\nContent-Length: 5\r\n\r\n", 1)),
        "invalid_response",
        id="chunked-and-cl",
    ),
    pytest.param(
        send(lambda rid: b"HTTP/1.1 200 OK\r\n\r\n" + b" " * (2 * LIMIT), close=True),
        "too_large",
        id="close-delimited-over-the-limit",
    ),
    pytest.param(
        send(
            lambda rid: (
                b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % (len(forged(rid)) + 100)
                + answer(rid, [{"type": "deny", "reason": "truncated"}])
            ),
            close=True,
        ),
        "connect",
        id="valid-deny-in-a-truncated-body",
    ),
    pytest.param(stream(b"", b"HTTP/1.1 100 Continue\r\n\r\n" * 64), "timeout", id="endless-100-continue"),
    pytest.param(
        send(lambda rid: b"HTTP/1.1 204 No Content\r\nContent-Length: 5\r\n\r\n" + forged(rid)),
        "http_status",
        id="204-with-body",
    ),
]


@pytest.mark.spec("AHP-FAIL-001")
@pytest.mark.parametrize(("act", "failure"), FAIL_OPEN)
async def test_under_fail_open_a_broken_answer_is_skipped_whole(rig, http, act, failure):
    """AHP-FAIL-001, protocol §6.4 ("do not salvage even a valid deny"): under fail-open a broken
    answer is skipped, never partly applied; the skip is counted under its failure class."""
    gateway, upstream = await rig("fail-open", timeout_ms=SHORT_MS if failure == "timeout" else TIMEOUT_MS)
    upstream.acts.append(act)
    _, effects, elapsed = await ask(http, gateway)
    assert effects == []
    assert elapsed < TIMEOUT_MS / 1000 + SLACK
    await next_request_is_answered_on_a_new_connection(http, gateway, upstream)
    await recorded(http, gateway, **{failure: 1, "ok": 1})
    samples = await scrape(http, gateway.admin_port)
    assert sample(samples, "ahp_gateway_fail_open_skips_total", upstream=HOOK, reason=failure) == 1


# ------------------------------------------------------------------------------------------------
# A close-delimited answer cut by the transport (the h1 client itself).


def _reset(writer: asyncio.StreamWriter) -> None:
    """End the connection with a TCP RST."""
    sock = writer.get_extra_info("socket")
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


def _no_close_notify(writer: asyncio.StreamWriter) -> None:
    """End a TLS connection without its closure alert (what a man in the middle can do)."""
    writer.transport.abort()


@pytest.mark.spec("AHP-HTTP-001")
@pytest.mark.parametrize(
    ("cut", "tls"),
    [pytest.param(_reset, False, id="tcp-reset"), pytest.param(_no_close_notify, True, id="tls-without-close-notify")],
)
async def test_a_close_delimited_answer_cut_by_the_transport_is_not_complete(monkeypatch, cut, tls):
    """AHP-HTTP-001, RFC 9112 §8 and §9.8: a body delimited by the close is complete only if the
    connection ended without error, and over TLS only with a closure alert; a reset or a bare TCP
    close of a TLS connection (a man in the middle truncating it) must be a failure."""
    from gateway.upstream import h1

    server_ctx = client_ctx = None
    if tls:
        trustme = pytest.importorskip("trustme")
        ca = trustme.CA()
        server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ca.issue_cert("127.0.0.1").configure_cert(server_ctx)
        client_ctx = ssl.create_default_context()
        ca.configure_trust(client_ctx)
    body = answer("e1", [])
    received = asyncio.Event()
    seen = bytearray()
    data_received = h1._Connection.data_received

    def noting(self: Any, data: bytes) -> None:
        seen.extend(data)
        data_received(self, data)
        if seen.endswith(body):
            received.set()

    monkeypatch.setattr(h1._Connection, "data_received", noting)

    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\n\r\n" + body)
        await writer.drain()
        await asyncio.wait_for(received.wait(), 5)  # the client has every byte of the body
        cut(writer)

    server = await asyncio.start_server(script, "127.0.0.1", 0, ssl=server_ctx)
    port = server.sockets[0].getsockname()[1]
    client = H1Client()
    try:
        target = Target(f"{'https' if tls else 'http'}://127.0.0.1:{port}/", {}, client_ctx)
        with pytest.raises((OSError, ProtocolError)):
            await asyncio.wait_for(client.post(target, b"", b"{}", limit=LIMIT), 5)
    finally:
        client.close()
        server.close()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(server.wait_closed(), 2)
