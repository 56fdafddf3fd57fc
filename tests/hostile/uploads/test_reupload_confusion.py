"""Uploads under attack: confusion on re-upload to upstream receivers."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import struct
from typing import Any

import pytest

from tests.hostile.uploads.helpers import (
    DEADLINE_MS,
    EVENT_TOKEN,
    SECRETS,
    UPLOAD_TOKEN,
    Behaviour,
    RawReceiver,
    answer,
    assert_gap,
    call,
    config,
    confirming,
    outcome,
    peer_closed,
    receipt_for,
    settle_metrics,
    sha,
    upload,
)
from tests.support.uploads import PNG, image_part, model_request

# ================================================================================================
# (d) confusion on re-upload


def redirect_to(target: RawReceiver) -> Behaviour:
    async def behave(receiver: RawReceiver, reader: Any, writer: asyncio.StreamWriter, body: bytes) -> None:
        await receiver.write(writer, answer(307, b"", extra=f"Location: {target.url}\r\n"))

    return behave


async def drip(receiver: RawReceiver, reader: Any, writer: asyncio.StreamWriter, body: bytes) -> None:
    data = receipt_for(body)
    await receiver.write(writer, answer(201, data)[: -len(data)])
    for byte in data:
        await receiver.write(writer, bytes([byte]))
        if await peer_closed(reader, 0.2):
            return


async def hang_after_head(receiver: RawReceiver, reader: Any, writer: asyncio.StreamWriter, body: bytes) -> None:
    await receiver.write(
        writer, b"HTTP/1.1 201 Created\r\nContent-Type: application/json\r\nContent-Length: 200\r\n\r\n"
    )
    await peer_closed(reader, 10)


async def huge_body(receiver: RawReceiver, reader: Any, writer: asyncio.StreamWriter, body: bytes) -> None:
    size = 64 * 1024 * 1024
    await receiver.write(
        writer, f"HTTP/1.1 201 Created\r\nContent-Type: application/json\r\nContent-Length: {size}\r\n\r\n".encode()
    )
    chunk = b" " * 65536
    while receiver.written < size:
        await receiver.write(writer, chunk)


async def huge_head(receiver: RawReceiver, reader: Any, writer: asyncio.StreamWriter, body: bytes) -> None:
    data = receipt_for(body)
    await receiver.write(writer, answer(201, data, extra="X-Pad: " + "p" * 200_000 + "\r\n"))


async def other_bytes(receiver: RawReceiver, reader: Any, writer: asyncio.StreamWriter, body: bytes) -> None:
    await receiver.write(writer, answer(201, receipt_for(PNG[::-1] + b"!", "urn:hostile:replayed")))


def typed(**fields: Any) -> Behaviour:
    async def behave(receiver: RawReceiver, reader: Any, writer: asyncio.StreamWriter, body: bytes) -> None:
        receipt = {"ref": "urn:hostile:1", "size": len(body), "sha256": sha(body), **fields}
        await receiver.write(writer, answer(201, json.dumps(receipt).encode()))

    return behave


async def reset(receiver: RawReceiver, reader: Any, writer: asyncio.StreamWriter, body: bytes) -> None:
    transport = writer.transport
    sock = transport.get_extra_info("socket")
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    transport.abort()


HOSTILE: dict[str, tuple[Any, str]] = {
    "slow-drip": (drip, "timeout"),
    "hang-after-head": (hang_after_head, "timeout"),
    "huge-body": (huge_body, "receipt"),
    "huge-head": (huge_head, "unavailable"),
    "receipt-for-other-bytes": (other_bytes, "receipt"),
    "size-as-bool": (typed(size=True), "receipt"),
    "size-as-float": (typed(size=float(len(PNG))), "receipt"),
    "size-as-string": (typed(size=str(len(PNG))), "receipt"),
    "sha-uppercase": (typed(sha256=sha(PNG).upper()), "receipt"),
    "ref-not-a-string": (typed(ref=1), "receipt"),
    "reset": (reset, "unavailable"),
}


@pytest.mark.parametrize(
    "name",
    list(HOSTILE),
)
async def test_a_hostile_upload_receiver_leaves_a_gap_within_the_deadline(
    gateway_factory, secrets_env, stub_factory, receivers, http, name, no_secrets_logged
):
    """docs/operations/uploads.md (per-upstream re-upload) / protocol §13.2: only a ``201`` receipt with exactly
    the size and SHA-256 sent confirms; anything else (slow, huge, malformed, for other bytes)
    leaves that upstream a schema-valid gap, never inline bytes, and the intercept still settles
    within ``limits.deadlineMs``."""
    behaviour, expected = HOSTILE[name]
    receiver = await receivers(behaviour)
    stub = await stub_factory()
    # 1 s for the re-upload: the receipts that answer at once must arrive within it even on a
    # loaded machine (400 ms was once exceeded by a stall), and the slow receivers take 20 s or more
    gw = await gateway_factory(config(receiver.url, upload_timeout=1000, event_url=stub.url))
    status, receipt = await upload(http, gw, PNG)
    assert status == 201
    status, body, took = await call(http, gw, model_request(receipt["ref"]))
    assert status == 200 and json.loads(body)["result"]["effects"] == []
    assert took < DEADLINE_MS / 1000 + 1.0, f"settled in {took:.2f}s"
    assert len(receiver.requests) == 1 and receiver.requests[0][1] == PNG
    assert f"Authorization: Bearer {UPLOAD_TOKEN}".lower() in receiver.requests[0][0].decode().lower()
    assert_gap(stub.received[0]["params"]["event"])
    assert stub.headers[0]["Authorization"] == f"Bearer {EVENT_TOKEN}"
    await settle_metrics(gw, {outcome(expected): 1, outcome("ok"): 0})
    if name == "huge-body":
        assert receiver.written < 16 * 1024 * 1024, "the gateway stopped reading a huge receipt"
    for secret in SECRETS:
        assert secret.encode() not in body


async def test_a_redirecting_receiver_is_not_followed_and_never_sees_the_credential_again(
    gateway_factory, secrets_env, stub_factory, receivers, http, no_secrets_logged
):
    """protocol §13.2: POST to the exact endpoint, no redirects: a 307/308 to a receiver that would
    confirm is a failure (gap), and the redirect target receives neither bytes nor credential."""
    good = await receivers(confirming)
    hostile = await receivers(redirect_to(good))
    stub = await stub_factory()
    gw = await gateway_factory(config(hostile.url, event_url=stub.url))
    _, receipt = await upload(http, gw, PNG)
    status, _, took = await call(http, gw, model_request(receipt["ref"]))
    assert status == 200 and took < DEADLINE_MS / 1000 + 1.0
    assert len(hostile.requests) == 1 and good.requests == []
    assert_gap(stub.received[0]["params"]["event"])
    await settle_metrics(gw, {outcome("status"): 1, outcome("ok"): 0})


async def split_receipt(receiver: RawReceiver, reader: Any, writer: asyncio.StreamWriter, body: bytes) -> None:
    """A valid receipt whose body arrives in two writes: the second is held until the gateway
    either gives up on the connection (a bug) or has waited a while (correct)."""
    data = receipt_for(body)
    await receiver.write(writer, answer(201, data)[: -len(data) // 2])
    await peer_closed(reader, 0.3)
    with contextlib.suppress(ConnectionError):
        await receiver.write(writer, data[-len(data) // 2 :])


async def test_a_valid_receipt_that_arrives_in_pieces_is_confirmed(
    gateway_factory, secrets_env, stub_factory, receivers, http
):
    """protocol §13.2: a 201 JSON receipt with exactly the size and SHA-256 sent confirms the upload,
    however its bytes are segmented on the wire."""
    receiver = await receivers(split_receipt)
    stub = await stub_factory()
    gw = await gateway_factory(config(receiver.url, upload_timeout=1500, event_url=stub.url))
    _, receipt = await upload(http, gw, PNG)
    status, _, _ = await call(http, gw, model_request(receipt["ref"]))
    assert status == 200
    assert image_part(stub.received[0]["params"]["event"])["body"] == {"ref": "urn:hostile:1"}
    await settle_metrics(gw, {outcome("ok"): 1})
