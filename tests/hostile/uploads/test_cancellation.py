"""Uploads under attack: cancelled and unfinished uploads."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from tests.hostile.uploads.helpers import (
    MAX,
    MEM,
    SPOOL,
    STORED,
    TOTAL,
    Raw,
    RawReceiver,
    call,
    config,
    confirming,
    outcome,
    peer_closed,
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
from tests.support.events import intercept
from tests.support.tokens import TOKEN_A
from tests.support.uploads import PNG, image_part, model_request

# ================================================================================================
# (e) cancellation


@pytest.mark.parametrize("tier", ["memory", "spool", "spool-after-100-continue"])
async def test_a_harness_disconnecting_mid_upload_leaves_no_reservation(gw, tmp_path, tier):
    """docs/operations/uploads.md / protocol §13.2 (nothing kept on failure): a harness that disconnects
    mid-body leaves no reservation, no spool file, no counted outcome, and gauges at baseline."""
    await raw_upload(gw, b"base")  # a baseline that is not all zeros
    baseline = await settle_metrics(gw, {MEM: 4, SPOOL: 0, STORED: 1})
    size = 1000 if tier == "memory" else MAX
    conn = await Raw.open(gw)
    try:
        extra = "Expect: 100-continue\r\n" if "continue" in tier else ""
        await conn.send(upload_head(size, sha(b"d" * size), extra=extra))
        if extra:
            assert (await conn.response())[0] == 100
        await conn.send(b"d" * (size // 2))
        await until(lambda: reserved(gw) == size, what="reserved")
        if tier != "memory":
            await until(lambda: len(spool_files(tmp_path / "spool")) == 1, what="partial spool file")
    finally:
        conn.close()
    await until(lambda: reserved(gw) == 0, what="reservation released")
    counters = {k: v for k, v in baseline.items() if k.startswith("ahp_gateway_uploads_total")}
    await settle_metrics(gw, {MEM: 4, SPOOL: 0, **counters})
    assert spool_files(tmp_path / "spool") == [] and len(store_of(gw)) == 1
    for fill in (MAX, MAX, TOTAL - 4 - 2 * MAX):
        assert (await raw_upload(gw, b"f" * fill))[0] == 201, "all the room is back"
    assert (await raw_upload(gw, b"g"))[0] == 503 and reserved(gw) == 0


async def test_a_harness_disconnecting_mid_intercept_cancels_the_re_upload(
    gateway_factory, secrets_env, stub_factory, receivers, http, no_secrets_logged
):
    """docs/operations/failure-behaviour.md (the harness disconnects) with protocol §13.2: a re-upload in flight
    is cancelled and its connection closed, no outcome or decision is recorded, storage gauges are
    unchanged, and the next intercept re-uploads afresh (no stale confirmation)."""
    calls: list[str] = []

    async def held(receiver: RawReceiver, reader: Any, writer: asyncio.StreamWriter, body: bytes) -> None:
        calls.append("start")
        if not receiver.release.is_set():
            if await peer_closed(reader, 10):
                receiver.cancelled.set()
                return
        await confirming(receiver, reader, writer, body)

    receiver = await receivers(held)
    stub = await stub_factory()
    gw = await gateway_factory(config(receiver.url, upload_timeout=1800, event_url=stub.url))
    _, receipt = await upload(http, gw, PNG)
    before = await settle_metrics(gw, {MEM: len(PNG), SPOOL: 0, STORED: 1})
    request = intercept(model_request(receipt["ref"]))
    conn = await Raw.open(gw)
    payload = json.dumps(request).encode()
    head = (
        f"POST / HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer {TOKEN_A}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(payload)}\r\n\r\n"
    )
    await conn.send(head.encode() + payload)
    await until(lambda: calls == ["start"], what="re-upload in flight")
    conn.close()
    await asyncio.wait_for(receiver.cancelled.wait(), 5)
    assert stub.received == [], "the event is never published without its upload"
    await settle_metrics(gw, {MEM: len(PNG), SPOOL: 0, STORED: 1, outcome("ok"): 0, outcome("timeout"): 0})
    seen = await scrape(gw)
    assert {k: v for k, v in seen.items() if k.startswith("ahp_gateway_upstream_uploads_total")} == {
        k: v for k, v in before.items() if k.startswith("ahp_gateway_upstream_uploads_total")
    }
    assert reserved(gw) == 0
    receiver.release.set()
    status, _, _ = await call(http, gw, model_request(receipt["ref"]))
    assert status == 200 and len(receiver.requests) == 2
    assert image_part(stub.received[0]["params"]["event"])["body"] == {"ref": "urn:hostile:2"}
    await settle_metrics(gw, {outcome("ok"): 1, outcome("reused"): 0})


async def test_refused_uploads_are_counted_with_or_without_100_continue(gw):
    """docs/operations/observability.md: ``ahp_gateway_uploads_total{outcome}`` counts uploads refused by inbound
    authentication as ``unauthorized``; a harness choosing ``Expect: 100-continue`` must not
    hide its refusals from the counter."""
    for extra in ("", "Expect: 100-continue\r\n"):
        conn = await Raw.open(gw)
        try:
            await conn.send(upload_head(10, sha(b"0" * 10), token="tok-not-known", extra=extra))
            assert (await conn.response())[0] == 401
        finally:
            conn.close()
    await settle_metrics(gw, {uploads_total("unauthorized"): 2}, timeout=2.0)
