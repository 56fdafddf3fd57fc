"""Hostile harnesses, tenants and upstream receivers against the upload binding (protocol §13.2,
docs/operations/uploads.md), end to end over loopback HTTP: storage exhaustion, integrity, isolation,
confusion on re-upload, and cancellation. Gauges and counters are read from the admin
listener's ``/metrics`` and polled with deadlines; files on disk are checked directly."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json

import pytest

from tests.hostile.uploads.helpers import (
    BODY_TIMEOUT_MS,
    MAX,
    MEM,
    MEMORY,
    SPOOL,
    STORED,
    TOTAL,
    Raw,
    assert_gap,
    call,
    config,
    confirming,
    raw_upload,
    reserved,
    scrape,
    settle_metrics,
    sha,
    spool_files,
    store_of,
    until,
    upload,
    upload_head,
    uploads_total,
)
from tests.support.uploads import PNG, model_request

# ================================================================================================
# (a) storage exhaustion


async def test_concurrent_declared_uploads_reserve_the_total_cap_and_release_it_exactly(gw, tmp_path):
    """docs/operations/uploads.md: ``totalBytes`` is reserved before the first byte is read; no room is 503 with
    Retry-After; a harness that gives up frees its reservation (protocol §13.2, bounded storage)."""
    size = 4000
    held = [await Raw.open(gw) for _ in range(TOTAL // size)]
    bodies = [bytes([65 + i]) * size for i in range(len(held))]
    try:
        for conn, body in zip(held, bodies, strict=True):
            await conn.send(upload_head(size, sha(body)))
        await until(lambda: reserved(gw) == TOTAL, what="every declared byte reserved")
        assert store_of(gw).reserved == {"memory": size, "spool": TOTAL - size}
        late = await Raw.open(gw)
        try:
            await late.send(upload_head(1, sha(b"x")))
            status, headers, _ = await late.response()
        finally:
            late.close()
        assert status == 503 and headers["retry-after"] == "5", "answered before its body, not queued"
        # two finish, three give up mid-body
        for conn, body in zip(held[:2], bodies[:2], strict=True):
            await conn.send(body)
            assert (await conn.response())[0] == 201
        for conn, body in zip(held[2:], bodies[2:], strict=True):
            await conn.send(body[:1000])
        await until(lambda: store_of(gw).reserved["spool"] == 3 * size, what="partial bodies read")
        for conn in held[2:]:
            conn.close()
        await until(lambda: reserved(gw) == 0, what="reservations released")
    finally:
        for conn in held:
            conn.close()
    await settle_metrics(gw, {MEM: size, SPOOL: size, STORED: 2, uploads_total("storage_full"): 1})
    assert [p.read_bytes() for p in spool_files(tmp_path / "spool")] == [bodies[1]], "partial spool files removed"
    room = TOTAL - 2 * size
    assert (await raw_upload(gw, b"r" * (room - 4000)))[0] == 201
    assert (await raw_upload(gw, b"s" * 4001))[0] == 503, "exactly the freed room, not a byte more"
    assert (await raw_upload(gw, b"s" * 4000))[0] == 201
    await settle_metrics(gw, {MEM: size, SPOOL: TOTAL - size, STORED: 4, uploads_total("storage_full"): 2})
    assert reserved(gw) == 0


async def test_many_small_concurrent_uploads_fill_memory_then_spool_then_stop_exactly(gw, tmp_path, http):
    """docs/operations/uploads.md: memory first, then the spool, bounded by ``totalBytes`` under concurrency
    (uploads large enough that the bytes, not the count of held uploads, are the bound)."""
    size = 1000
    datas = [i.to_bytes(2, "big") * (size // 2) for i in range(TOTAL // size + 10)]
    results = await asyncio.gather(*(upload(http, gw, d) for d in datas))
    statuses = [s for s, _ in results]
    assert statuses.count(201) == TOTAL // size and statuses.count(503) == 10
    await settle_metrics(
        gw,
        {
            MEM: (MEMORY // size) * size,
            SPOOL: TOTAL - (MEMORY // size) * size,
            STORED: TOTAL // size,
            uploads_total("storage_full"): 10,
        },
    )
    assert len(spool_files(tmp_path / "spool")) == TOTAL // size - MEMORY // size
    assert reserved(gw) == 0


async def test_zero_byte_uploads_are_bounded_too(gw, http):
    """docs/operations/uploads.md "Storage is bounded": the store holds at most one upload per 512 bytes of
    ``totalBytes`` (at least 64), so a flood of empty uploads meets 503 instead of growing the
    store's table without bound."""
    flood = TOTAL // 40
    statuses = [(await upload(http, gw, b""))[0] for _ in range(flood)]
    assert 503 in statuses, f"{statuses.count(201)} empty uploads held with totalBytes={TOTAL}"


async def test_an_upload_that_never_finishes_is_answered_within_the_body_timeout(gw, tmp_path):
    """docs/operations/failure-behaviour.md (harness-facing listener): a body not complete within
    ``limits.bodyTimeoutMs`` is 408 and the connection closes; the reservation is released."""
    slow, waiting = await Raw.open(gw), await Raw.open(gw)
    try:
        await slow.send(upload_head(MAX, sha(b"z" * MAX)) + b"z" * 100)
        await waiting.send(upload_head(MAX, sha(b"z" * MAX), extra="Expect: 100-continue\r\n"))
        assert (await waiting.response())[0] == 100
        await until(lambda: reserved(gw) == 2 * MAX, what="both reserved")
        timeout = BODY_TIMEOUT_MS / 1000 + 3.0
        assert (await slow.response(timeout))[0] == 408
        assert (await waiting.response(timeout))[0] == 408
        assert reserved(gw) == 0 and spool_files(tmp_path / "spool") == []
        await settle_metrics(gw, {'ahp_gateway_connections_closed_total{listener="main",reason="body_timeout"}': 2})
    finally:
        slow.close()
        waiting.close()


async def test_a_failed_spooled_upload_leaves_no_file_and_no_bytes(gw, tmp_path):
    """docs/operations/uploads.md: a SHA-256 mismatch is 400 and nothing is kept (spool tier included)."""
    data = b"m" * (MEMORY + 1)  # does not fit in memory: spooled while read
    assert (await Raw.exchange(gw, upload_head(len(data), sha(b"other")) + data))[0] == 400
    await settle_metrics(gw, {MEM: 0, SPOOL: 0, STORED: 0, uploads_total("hash_mismatch"): 1})
    assert spool_files(tmp_path / "spool") == [] and reserved(gw) == 0 and len(store_of(gw)) == 0


async def test_an_expired_spooled_upload_is_removed_by_the_next_upload_and_is_a_gap(
    gateway_factory, secrets_env, stub_factory, receivers, tmp_path, http
):
    """docs/operations/uploads.md: uploads expire after ``storage.ttlSeconds``; an expired ref is a gap
    (protocol §13.2) and its spool file is deleted."""
    stub = await stub_factory()
    receiver = await receivers(confirming)
    gw = await gateway_factory(config(receiver.url, storage={"ttlSeconds": 0.5}, event_url=stub.url))
    data = b"e" * (MEMORY + 10)
    status, receipt = await raw_upload(gw, data)
    assert status == 201 and len(spool_files(tmp_path / "spool")) == 1
    await settle_metrics(gw, {SPOOL: len(data)})
    # private: the store's public get() checks the owner and drops expired uploads; the test needs the raw entry
    expires = store_of(gw)._items[receipt["ref"]].expires
    loop = asyncio.get_running_loop()
    await until(lambda: loop.time() > expires + 0.05, what="ttl elapsed")
    assert (await raw_upload(gw, b"tiny"))[0] == 201  # sweeps on the way in
    await settle_metrics(gw, {SPOOL: 0, MEM: 4})
    assert spool_files(tmp_path / "spool") == []
    event = model_request(receipt["ref"])
    status, _, _ = await call(http, gw, event)
    assert status == 200 and receiver.requests == []
    assert_gap(stub.received[0]["params"]["event"])


async def test_an_expired_spooled_upload_is_removed_without_further_traffic(gateway_factory, secrets_env, tmp_path):
    """docs/operations/uploads.md: uploads expire after ``storage.ttlSeconds``: the bytes must not stay on disk
    (and in ``ahp_gateway_upload_stored_bytes``) after that just because no one uploads again."""
    gw = await gateway_factory(config(None, storage={"ttlSeconds": 0.5}))
    status, _ = await raw_upload(gw, b"e" * (MEMORY + 10))
    assert status == 201
    await settle_metrics(gw, {SPOOL: 0}, timeout=4.0)
    assert spool_files(tmp_path / "spool") == []


# ================================================================================================
# (b) integrity


DIGEST = sha(PNG)


@pytest.mark.parametrize(
    ("lines", "why"),
    [
        ("AHP-Content-SHA256: sha-256=:" + base64.b64encode(bytes.fromhex(DIGEST)).decode() + ":\r\n", "sf"),
        ("AHP-Content-SHA256: " + base64.b64encode(bytes.fromhex(DIGEST)).decode() + "\r\n", "base64"),
        ("AHP-Content-SHA256: sha256:" + DIGEST + "\r\n", "prefixed"),
        ("AHP-Content-SHA256: " + hashlib.sha512(PNG).hexdigest() + "\r\n", "sha512 hex"),
        ("AHP-Content-SHA256: " + hashlib.sha1(PNG).hexdigest() + "\r\n", "sha1 hex"),
        ("AHP-Content-SHA256: " + DIGEST[:32] + DIGEST[32:].upper() + "\r\n", "mixed case hex"),
        ("AHP-Content-SHA256: " + DIGEST + ", " + DIGEST + "\r\n", "a list in one header"),
        ("AHP-Content-SHA256: " + DIGEST + "\r\nahp-content-sha256: " + DIGEST + "\r\n", "twice, other case"),
        ("AHP-Content-SHA256: " + DIGEST + "0\r\n", "65 hex digits"),
        ("Digest: SHA-256=" + DIGEST + "\r\n", "only another digest header"),
        ("Repr-Digest: sha-256=:" + DIGEST + ":\r\n", "only an RFC 9530 header"),
    ],
    ids=lambda v: v if len(v) < 40 else None,
)
async def test_a_digest_in_another_algorithm_case_or_encoding_is_400_and_nothing_is_kept(gw, lines, why):
    """protocol §13.1/§13.2: ``AHP-Content-SHA256`` is exactly one 64-lowercase-hex SHA-256."""
    status, _, body = await Raw.exchange(gw, upload_head(len(PNG), "", extra=lines) + PNG)
    assert status == 400, why
    assert b"AHP-Content-SHA256" in body
    assert len(store_of(gw)) == 0
    await settle_metrics(gw, {uploads_total("bad_request"): 1, STORED: 0, MEM: 0})


async def test_header_names_are_case_insensitive_and_foreign_digests_are_ignored(gw):
    """protocol §13.2 with RFC 9110 §5.1: a lower-case header name is the same header; other digest
    headers (even wrong ones) neither replace nor weaken the check."""
    extra = f"ahp-content-sha256: {DIGEST}\r\nDigest: SHA-256={sha(b'x')}\r\nContent-MD5: AAAA\r\n"
    status, _, body = await Raw.exchange(gw, upload_head(len(PNG), "", extra=extra) + PNG)
    assert status == 201 and json.loads(body)["sha256"] == DIGEST


async def test_a_body_longer_than_content_length_stores_exactly_the_declared_bytes(gw):
    """protocol §13.2: exact ``Content-Length``; what follows is the next request on the connection,
    never part of the upload (here garbage: 400 and the connection closes)."""
    data = b"L" * 1000
    conn = await Raw.open(gw)
    try:
        await conn.send(upload_head(len(data), sha(data)) + data)
        status, _, body = await conn.response()
        assert status == 201
        ref = json.loads(body)["ref"]
        await conn.send(b"EXTRA BYTES\r\n\r\n")
        assert (await conn.response())[0] == 400
        assert await conn.closed_by_peer()
    finally:
        conn.close()
    # private: the store's public get() checks the owner; the test reads the stored entry whatever its owner
    stored = store_of(gw)._items[ref]
    assert stored.size == 1000 and stored.sha256 == sha(data) and store_of(gw).read(stored) == data
    assert len(store_of(gw)) == 1
    await settle_metrics(gw, {MEM: 1000, STORED: 1})


async def test_trailing_bytes_in_the_same_segment_refuse_the_upload_and_keep_nothing_extra(gw):
    """protocol §13.2 (exact ``Content-Length``) with docs/design/performance.md ("The fast lane"): aiohttp answers one 400
    for a good request sharing a segment with a malformed one; whatever it did with the upload,
    no stored upload holds a byte past ``Content-Length``."""
    data = b"L" * 1000
    conn = await Raw.open(gw)
    try:
        await conn.send(upload_head(len(data), sha(data)) + data + b"EXTRA BYTES\r\n\r\n")
        assert (await conn.response())[0] == 400
        assert await conn.closed_by_peer()
    finally:
        conn.close()
    store = store_of(gw)
    # private: the store lists no entries publicly; the test checks every one it kept
    assert all(s.size == 1000 and store.read(s) == data for s in store._items.values())
    await until(lambda: reserved(gw) == 0, what="released")
    seen = await scrape(gw)
    assert seen.get(MEM, 0) == 1000 * len(store) and seen.get(STORED, 0) == len(store)


async def test_a_body_longer_than_content_length_cannot_pass_the_digest_of_the_whole(gw):
    """protocol §13.2: only the declared ``Content-Length`` bytes are the upload: a digest of more
    bytes than declared is a mismatch (400, nothing kept), and the surplus is not an upload."""
    data = b"L" * 1000
    conn = await Raw.open(gw)
    try:
        await conn.send(upload_head(500, sha(data)) + data[:500])
        status, _, body = await conn.response()
        assert status == 400 and b"does not match" in body
        await conn.send(data[500:])
        assert (await conn.response())[0] == 400
        assert await conn.closed_by_peer()
    finally:
        conn.close()
    await settle_metrics(gw, {uploads_total("hash_mismatch"): 1, STORED: 0, MEM: 0})
    assert len(store_of(gw)) == 0 and reserved(gw) == 0


async def test_a_body_shorter_than_content_length_then_half_close_keeps_nothing(gw, tmp_path):
    """docs/operations/uploads.md: a body shorter than ``Content-Length`` keeps nothing (spool tier, the
    harness half-closes: no answer can be framed, the connection closes)."""
    conn = await Raw.open(gw)
    try:
        await conn.send(upload_head(MAX, sha(b"q" * MAX)) + b"q" * 100)
        await until(lambda: reserved(gw) == MAX, what="reserved")
        conn.writer.write_eof()
        assert await conn.closed_by_peer()
    finally:
        conn.close()
    await until(lambda: reserved(gw) == 0, what="released")
    assert spool_files(tmp_path / "spool") == [] and len(store_of(gw)) == 0
    await settle_metrics(gw, {MEM: 0, SPOOL: 0, STORED: 0})


@pytest.mark.parametrize(
    ("extra", "body"),
    [
        ("Transfer-Encoding: chunked\r\n", b"%x\r\n" % (MAX + 1) + b"c" * (MAX + 1) + b"\r\n0\r\n\r\n"),
        ("Transfer-Encoding: chunked\r\nExpect: 100-continue\r\n", b""),
        ("Transfer-Encoding: gzip, chunked\r\n", b"0\r\n\r\n"),
    ],
    ids=["past-the-limit", "expect-continue", "coded"],
)
async def test_chunked_uploads_past_the_limit_are_refused_before_the_body(gw, extra, body):
    """docs/operations/uploads.md: ``Transfer-Encoding`` is 400 (protocol §13.2: no chunking), decided from the
    head: no ``100 Continue``, nothing kept, whatever the chunks would have carried."""
    status, _, _ = await Raw.exchange(gw, upload_head(-1, sha(b"c" * (MAX + 1)), extra=extra) + body)
    assert status == 400
    assert len(store_of(gw)) == 0 and reserved(gw) == 0
    await settle_metrics(gw, {STORED: 0, MEM: 0, SPOOL: 0})


async def test_content_length_with_transfer_encoding_is_refused(gw):
    """protocol §13.2 / RFC 9112 §6.3: a request smuggling both framings is never stored."""
    conn = await Raw.open(gw)
    try:
        frame = b"3\r\nabc\r\n0\r\n\r\n"
        await conn.send(upload_head(len(frame), sha(frame), extra="Transfer-Encoding: chunked\r\n") + frame)
        assert (await conn.response())[0] == 400
    finally:
        conn.close()
    assert len(store_of(gw)) == 0
    await settle_metrics(gw, {STORED: 0})
