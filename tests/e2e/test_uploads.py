"""Uploads (protocol §13.2): the gateway as an upload receiver (framing, limits enforced before
and while reading, refs scoped to the principal, bounded storage) and the per-upstream re-upload
that gives each upstream refs from its own receiver, with its own credentials, or a gap."""

from __future__ import annotations

import asyncio
import copy
import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiohttp import web

from gateway.config.models import UploadStorage
from gateway.uploads.store import DigestMismatch, IncompleteBody, StoreFull, UploadStore
from tests.support.client import metric, raw_exchange
from tests.support.config import gateway_config
from tests.support.events import intercept
from tests.support.tokens import TOKEN_A, TOKEN_B, tokens_file
from tests.support.upload_calls import call, upload, upload_url
from tests.support.uploads import EVENT_TOKEN, PNG, UPLOAD_TOKEN, image_part, model_request, upload_hook


@pytest.fixture
async def upload_gateway(gateway_factory, stub_factory, receiver_factory, tmp_path, monkeypatch):
    monkeypatch.setenv("A_UPLOAD_TOKEN", UPLOAD_TOKEN)
    monkeypatch.setenv("A_EVENT_TOKEN", EVENT_TOKEN)
    tokens_file(tmp_path / "tokens.yaml", (TOKEN_A, "team-a", {"tenant": "a"}), (TOKEN_B, "team-b", {"tenant": "b"}))
    a, b = await stub_factory(), await stub_factory()
    receiver = await receiver_factory()
    cfg = gateway_config(
        [
            upload_hook(
                "org.example.with-upload",
                a.url,
                {
                    "endpoint": receiver.url,
                    "timeoutMs": 1000,
                    "maxBytes": 65536,
                    "auth": {"type": "bearer", "tokenEnv": "A_UPLOAD_TOKEN"},
                },
                authentication={"type": "bearer", "tokenEnv": "A_EVENT_TOKEN"},
            ),
            upload_hook("org.example.no-upload", b.url, None),
        ],
        inbound={"auth": {"type": "bearer", "tokensFile": "tokens.yaml"}},
        uploads={
            "path": "/uploads",
            "maxBytes": 8192,
            "storage": {"memoryBytes": 4096, "spoolDir": "spool", "totalBytes": 20000},
        },
        limits={"maxBodyBytes": 1048576, "deadlineMs": 3000},
        frontend={"timeoutMs": 4000},
    )
    gw = await gateway_factory(cfg)
    return gw, a, b, receiver


# ------------------------------------------------------------------------------------------------
# the receiver


async def test_upload_round_trip_gives_a_receipt_and_unguessable_refs(upload_gateway, http):
    gw, *_ = upload_gateway
    status, receipt = await upload(http, gw, PNG)
    assert status == 201
    assert receipt["size"] == len(PNG) and receipt["sha256"] == hashlib.sha256(PNG).hexdigest()
    assert set(receipt) == {"ref", "size", "sha256"} and len(receipt["ref"]) >= 40
    status, again = await upload(http, gw, PNG)
    assert status == 201 and again["ref"] != receipt["ref"], "every upload allocates its own ref"
    status, empty = await upload(http, gw, b"")
    assert status == 201 and empty["size"] == 0
    assert metric(gw, 'ahp_gateway_uploads_total{outcome="stored"}') == 3


@pytest.mark.parametrize(
    ("headers", "why"),
    [
        ({"AHP-Content-SHA256": hashlib.sha256(b"other").hexdigest()}, "hash mismatch"),
        ({"AHP-Content-SHA256": hashlib.sha256(PNG).hexdigest().upper()}, "uppercase digest"),
        ({"AHP-Content-SHA256": hashlib.sha256(PNG).hexdigest()[:63]}, "short digest"),
        ({"AHP-Content-SHA256": ""}, "empty digest"),
        ({"Content-Type": "application/json"}, "not octets"),
        ({"Content-Encoding": "gzip"}, "compressed"),
    ],
)
async def test_framing_and_hash_errors_are_400_and_store_nothing(upload_gateway, http, headers, why):
    gw, *_ = upload_gateway
    status, _ = await upload(http, gw, PNG, **headers)
    assert status == 400, why
    assert gw.guard is not None and gw.guard.store is not None and len(gw.guard.store) == 0


async def test_chunked_or_unframed_uploads_are_400(upload_gateway):
    gw, *_ = upload_gateway
    digest = hashlib.sha256(b"abc").hexdigest()
    head = (
        f"POST /uploads HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN_A}\r\n"
        f"Content-Type: application/octet-stream\r\nAHP-Content-SHA256: {digest}\r\n"
    )
    status, _ = await raw_exchange(gw.port, (head + "Transfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n").encode())
    assert status == 400
    status, _ = await raw_exchange(
        gw.port, (head + "AHP-Content-SHA256: " + digest + "\r\nContent-Length: 3\r\n\r\nabc").encode()
    )
    assert status == 400, "two digest headers are ambiguous framing"


async def test_over_the_limit_is_413_before_any_byte_is_read(upload_gateway):
    gw, *_ = upload_gateway
    head = (
        f"POST /uploads HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN_A}\r\n"
        f"Content-Type: application/octet-stream\r\nAHP-Content-SHA256: {'0' * 64}\r\nContent-Length: 8193\r\n"
    )
    status, _ = await raw_exchange(gw.port, (head + "\r\n").encode())  # the body is never sent
    assert status == 413
    status, response = await raw_exchange(gw.port, (head + "Expect: 100-continue\r\n\r\n").encode())
    assert status == 413 and b"100 Continue" not in response
    assert metric(gw, 'ahp_gateway_uploads_total{outcome="too_large"}') == 2


async def test_unauthenticated_uploads_are_401_before_the_body(upload_gateway, http):
    gw, *_ = upload_gateway
    assert (await upload(http, gw, PNG, token=None))[0] == 401
    assert (await upload(http, gw, PNG, token="tok-unknown"))[0] == 401
    head = (
        b"POST /uploads HTTP/1.1\r\nHost: x\r\nContent-Type: application/octet-stream\r\nContent-Length: 5000\r\n\r\n"
    )
    assert (await raw_exchange(gw.port, head))[0] == 401
    assert metric(gw, 'ahp_gateway_auth_failures_total{reason="missing"}') == 2


async def test_other_routes_and_methods(upload_gateway, http):
    gw, *_ = upload_gateway
    async with http.post(
        gw.url.rstrip("/") + "/uploads/extra", data=b"x", headers={"Authorization": f"Bearer {TOKEN_A}"}
    ) as r:
        assert r.status in (404, 405)
    async with http.get(upload_url(gw), headers={"Authorization": f"Bearer {TOKEN_A}"}) as r:
        assert r.status == 405


async def test_memory_then_spool_then_total_cap(upload_gateway, http, tmp_path):
    gw, *_ = upload_gateway
    first = b"a" * 4000
    assert (await upload(http, gw, first))[0] == 201
    assert metric(gw, 'ahp_gateway_upload_stored_bytes{tier="memory"}') == 4000
    second = b"b" * 8000
    assert (await upload(http, gw, second))[0] == 201
    assert metric(gw, 'ahp_gateway_upload_stored_bytes{tier="spool"}') == 8000
    spooled = [p for p in (tmp_path / "spool").rglob("*") if p.is_file()]
    assert [p.read_bytes() for p in spooled] == [second]
    status, _ = await upload(http, gw, b"c" * 8100)
    assert status == 503, "20000 total bytes: the third upload does not fit"
    assert metric(gw, 'ahp_gateway_uploads_total{outcome="storage_full"}') == 1


async def test_store_ttl_and_principal_scope():
    now = [0.0]
    store = UploadStore(UploadStorage(memoryBytes=100, totalBytes=100, ttlSeconds=10), Path("."), clock=lambda: now[0])

    async def chunks(*parts: bytes) -> Any:
        for part in parts:
            yield part

    stored = await store.receive(chunks(b"ab", b"c"), 3, hashlib.sha256(b"abc").hexdigest(), "team-a")
    assert store.get(stored.ref, "team-a") is stored
    assert store.get(stored.ref, "team-b") is None
    assert store.get(stored.ref + "x", "team-a") is None
    with pytest.raises(DigestMismatch):
        await store.receive(chunks(b"abd"), 3, hashlib.sha256(b"abc").hexdigest(), "team-a")
    with pytest.raises(IncompleteBody):
        await store.receive(chunks(b"ab"), 3, hashlib.sha256(b"abc").hexdigest(), "team-a")
    with pytest.raises(StoreFull):
        await store.receive(chunks(b"x" * 98), 98, hashlib.sha256(b"x" * 98).hexdigest(), "team-a")
    assert store.used == {"memory": 3, "spool": 0} and store.reserved == {"memory": 0, "spool": 0}
    now[0] = 10.0
    assert store.get(stored.ref, "team-a") is None and store.used["memory"] == 0


# ------------------------------------------------------------------------------------------------
# re-upload to upstreams


@pytest.mark.spec("AHP-CONTENT-002")
async def test_each_upstream_gets_its_own_ref_or_a_gap(upload_gateway, http):
    gw, a, b, receiver = upload_gateway
    _, receipt = await upload(http, gw, PNG)
    body = await call(http, gw, model_request(receipt["ref"]))
    assert body["result"]["effects"] == []
    assert len(receiver.requests) == 1
    headers, data = receiver.requests[0]
    assert data == PNG and headers["AHP-Content-SHA256"] == hashlib.sha256(PNG).hexdigest()
    assert headers["Authorization"] == f"Bearer {UPLOAD_TOKEN}", "the upload binding, never the event credential"
    assert headers["Content-Type"] == "application/octet-stream" and headers["Content-Length"] == str(len(PNG))
    seen_a = image_part(a.received[0]["params"]["event"])
    assert seen_a["body"] == {"ref": "urn:receiver:1"}
    assert receiver.refs["urn:receiver:1"] == PNG
    assert a.headers[0]["Authorization"] == f"Bearer {EVENT_TOKEN}"
    seen_b = image_part(b.received[0]["params"]["event"])
    assert "body" not in seen_b and seen_b["gap"]["reason"]
    assert receipt["ref"] not in json.dumps(a.received + b.received), "the gateway's own ref never leaves it"
    assert metric(gw, 'ahp_gateway_upstream_uploads_total{outcome="ok",upstream="org.example.with-upload"}') == 1
    # the same bytes for the same receiver and credential: the confirmed ref is reused
    _, receipt2 = await upload(http, gw, PNG)
    await call(http, gw, model_request(receipt2["ref"]))
    assert len(receiver.requests) == 1
    assert image_part(a.received[1]["params"]["event"])["body"]["ref"] == "urn:receiver:1"
    assert metric(gw, 'ahp_gateway_upstream_uploads_total{outcome="reused",upstream="org.example.with-upload"}') == 1


async def test_another_principals_ref_is_a_gap_and_nothing_is_uploaded(upload_gateway, http):
    gw, a, b, receiver = upload_gateway
    _, receipt = await upload(http, gw, PNG, token=TOKEN_A)
    await call(http, gw, model_request(receipt["ref"]), token=TOKEN_B)
    assert receiver.requests == []
    assert "gap" in image_part(a.received[0]["params"]["event"])


@pytest.mark.parametrize(
    "answer",
    [
        lambda data: web.json_response(
            {"ref": "r1", "size": len(data), "sha256": hashlib.sha256(data).hexdigest()}, status=202
        ),
        lambda data: web.Response(status=204),
        lambda data: web.json_response(
            {"ref": "r1", "size": len(data) - 1, "sha256": hashlib.sha256(data).hexdigest()}, status=201
        ),
        lambda data: web.json_response(
            {"ref": "r1", "size": len(data), "sha256": hashlib.sha256(b"x").hexdigest()}, status=201
        ),
        lambda data: web.json_response(
            {"ref": "", "size": len(data), "sha256": hashlib.sha256(data).hexdigest()}, status=201
        ),
        lambda data: web.json_response(
            {"ref": "r1", "size": len(data), "sha256": hashlib.sha256(data).hexdigest(), "url": "x"}, status=201
        ),
        lambda data: web.Response(status=201, text="r1"),
        lambda data: web.Response(status=302, headers={"Location": "http://127.0.0.1:9/"}),
        lambda data: web.Response(status=413),
    ],
    ids=["202", "204", "wrong-size", "wrong-hash", "empty-ref", "extra-field", "not-json", "redirect", "413"],
)
async def test_an_unconfirmed_upload_leaves_a_gap_never_inline_bytes(upload_gateway, http, answer):
    gw, a, _, receiver = upload_gateway
    receiver.answer = answer
    _, receipt = await upload(http, gw, PNG)
    await call(http, gw, model_request(receipt["ref"]))
    assert len(receiver.requests) == 1
    part = image_part(a.received[0]["params"]["event"])
    assert "body" not in part and "gap" in part
    assert PNG.hex()[:32] not in json.dumps(a.received)


async def test_an_attachment_over_the_upstream_max_bytes_is_not_sent(
    gateway_factory, stub_factory, receiver_factory, http, tmp_path
):
    upstream = await stub_factory()
    receiver = await receiver_factory(token=None)
    cfg = gateway_config(
        [upload_hook("org.example.small", upstream.url, {"endpoint": receiver.url, "timeoutMs": 500, "maxBytes": 100})],
        uploads={"maxBytes": 8192},
    )
    gw = await gateway_factory(cfg)
    digest = hashlib.sha256(PNG).hexdigest()
    async with http.post(
        upload_url(gw), data=PNG, headers={"Content-Type": "application/octet-stream", "AHP-Content-SHA256": digest}
    ) as r:
        receipt = await r.json()
    async with http.post(
        gw.url, data=json.dumps(intercept(model_request(receipt["ref"]))), headers={"Content-Type": "application/json"}
    ) as r:
        assert r.status == 200
    assert receiver.requests == [] and "gap" in image_part(upstream.received[0]["params"]["event"])
    assert metric(gw, 'ahp_gateway_upstream_uploads_total{outcome="too_large",upstream="org.example.small"}') == 1


async def test_a_slow_upstream_receiver_counts_against_the_deadline(
    gateway_factory, stub_factory, receiver_factory, http
):
    upstream = await stub_factory()
    receiver = await receiver_factory(token=None)
    release = asyncio.Event()

    async def slow(data: bytes) -> web.Response:
        await release.wait()
        return web.Response(status=500)

    receiver.answer = slow
    cfg = gateway_config(
        [
            upload_hook(
                "org.example.slow", upstream.url, {"endpoint": receiver.url, "timeoutMs": 60000, "maxBytes": 65536}
            )
        ],
        uploads={"maxBytes": 8192},
        limits={"deadlineMs": 300, "maxBodyBytes": 1048576},
        frontend={"timeoutMs": 2000},
    )
    gw = await gateway_factory(cfg)
    digest = hashlib.sha256(PNG).hexdigest()
    async with http.post(
        upload_url(gw), data=PNG, headers={"Content-Type": "application/octet-stream", "AHP-Content-SHA256": digest}
    ) as r:
        receipt = await r.json()
    request = intercept(model_request(receipt["ref"]), {"effects": ["deny"]})
    async with http.post(gw.url, data=json.dumps(request), headers={"Content-Type": "application/json"}) as r:
        body = await r.json()
    release.set()
    # the upload used the whole deadline, so the fail-closed upstream could not be asked in time
    assert body["result"]["effects"][0]["type"] == "deny"
    assert metric(gw, 'ahp_gateway_upstream_uploads_total{outcome="timeout",upstream="org.example.slow"}') == 1


def test_manifest_advertises_the_upload_limit(tmp_path):
    from gateway.config.load import load
    from gateway.runtime import build
    from gateway.upstream.http import ClientPool

    path = tmp_path / "gateway.yaml"
    path.write_text(
        yaml.safe_dump(
            gateway_config([upload_hook("org.example.a", "http://127.0.0.1:9/", None)], uploads={"maxBytes": 4096})
        )
    )
    snap = build(load(path), ClientPool())
    assert snap.manifest["limits"]["maxUploadBytes"] == 4096
    assert all(g["path"] != "items.body" for g in snap.manifest["gaps"])
    assert "upload" not in json.dumps(snap.configuration), "SDK harnesses skip a backend whose answer carries upload"
    copy.deepcopy(snap.manifest)


async def test_observations_get_their_own_refs_and_tenant_routing(
    gateway_factory, stub_factory, receiver_factory, http, tmp_path, monkeypatch
):
    monkeypatch.setenv("A_UPLOAD_TOKEN", UPLOAD_TOKEN)
    tokens_file(tmp_path / "tokens.yaml", (TOKEN_A, "team-a", {"tenant": "a"}), (TOKEN_B, "team-b", {"tenant": "b"}))
    observer = await stub_factory()
    receiver = await receiver_factory()
    entry = {
        "id": "org.example.observer",
        "transport": {"type": "http", "url": observer.url},
        "when": 'principal.attributes.tenant == "a"',
        "subscriptions": [
            {
                "mode": "observe",
                "events": ["model.*"],
                "content": {"default": "body"},
                "upload": {
                    "endpoint": receiver.url,
                    "timeoutMs": 1000,
                    "maxBytes": 65536,
                    "auth": {"type": "bearer", "tokenEnv": "A_UPLOAD_TOKEN"},
                },
            }
        ],
    }
    gw = await gateway_factory(
        gateway_config(
            [entry], inbound={"auth": {"type": "bearer", "tokensFile": "tokens.yaml"}}, uploads={"maxBytes": 8192}
        )
    )
    for token in (TOKEN_B, TOKEN_A):  # tenant b is not routed to this observer
        _, receipt = await upload(http, gw, PNG, token=token)
        note = {
            "jsonrpc": "2.0",
            "method": "hooks/observe",
            "params": {"protocolVersion": "draft", "event": model_request(receipt["ref"] + token[-4:])},
        }
        note["params"]["event"]["items"][0]["parts"][1]["body"]["ref"] = receipt["ref"]
        headers = {"Content-Type": "application/json", "Authorization": f"Bearer {token}"}
        async with http.post(gw.url, data=json.dumps(note), headers=headers) as r:
            assert r.status == 202
    assert gw.gateway is not None
    await gw.gateway.drain(5)  # both observations fully handled
    assert len(observer.observed) == 1
    assert image_part(observer.observed[0]["params"]["event"])["body"] == {"ref": "urn:receiver:1"}
    assert len(receiver.requests) == 1
