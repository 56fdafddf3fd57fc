"""Uploads under attack: isolation between tenants and receivers."""

from __future__ import annotations

import json
import logging
import stat
from typing import Any

import pytest
import yaml

from gateway.config.load import load
from gateway.server.app import GatewayServer
from tests.hostile.uploads.helpers import (
    MEMORY,
    TOKEN_U,
    Raw,
    assert_gap,
    call,
    config,
    confirming,
    raw_upload,
    scrape,
    sha,
    spool_files,
    upload,
    upload_head,
)
from tests.support.tokens import TOKEN_A, TOKEN_B
from tests.support.uploads import PNG, image_part, model_request

# ================================================================================================
# (c) isolation


@pytest.fixture
async def tenant_gateway(gateway_factory, secrets_env, stub_factory, receivers):
    stub = await stub_factory()
    receiver = await receivers(confirming)
    gw = await gateway_factory(config(receiver.url, event_url=stub.url))
    return gw, stub, receiver


def normalized(body: bytes) -> Any:
    answer = json.loads(body)
    answer.pop("id", None)
    return answer


async def test_another_principals_ref_is_indistinguishable_from_an_unknown_one(tenant_gateway, http, no_secrets_logged):
    """docs/operations/uploads.md: refs are usable only by the principal that uploaded; another principal's
    ref is a gap, never an error that confirms it exists (protocol §13.2, refs scoped to the
    verified credentials)."""
    gw, stub, receiver = tenant_gateway
    status, receipt = await upload(http, gw, PNG, token=TOKEN_A)
    assert status == 201
    ref = receipt["ref"]
    guesses = [ref, ref.upper(), ref + "=", ref[:-1], " " + ref, "upl_" + "A" * 43]
    answers = []
    for guess in guesses:
        status, body, _ = await call(http, gw, model_request(guess), token=TOKEN_B)
        assert status == 200
        answers.append(normalized(body))
    assert all(a == answers[-1] for a in answers), "the owner's ref answers like any unknown ref"
    for sent in stub.received:
        assert_gap(sent["params"]["event"])
    assert receiver.requests == []
    seen = await scrape(gw)
    assert not any(k.startswith("ahp_gateway_upstream_uploads_total") and v for k, v in seen.items())
    # the owner still can use it
    status, _, _ = await call(http, gw, model_request(ref), token=TOKEN_A)
    assert status == 200 and len(receiver.requests) == 1 and receiver.requests[0][1] == PNG
    assert image_part(stub.received[-1]["params"]["event"])["body"] == {"ref": "urn:hostile:1"}
    assert ref not in json.dumps(stub.received) and ref not in receiver.requests[0][0].decode()


async def test_a_principal_name_that_is_not_ascii_neither_breaks_nor_reveals_refs(tenant_gateway, http):
    """docs/operations/uploads.md / protocol §13.2: principal names are arbitrary strings; another principal's
    ref is a gap, never an error that confirms it exists, and the owner's own ref works."""
    gw, stub, receiver = tenant_gateway
    status, receipt = await upload(http, gw, PNG, token=TOKEN_U)
    assert status == 201
    unknown = await call(http, gw, model_request("upl_" + "B" * 43), token=TOKEN_B)
    probe = await call(http, gw, model_request(receipt["ref"]), token=TOKEN_B)
    assert probe[0] == unknown[0] == 200
    assert normalized(probe[1]) == normalized(unknown[1]), "existence must not be observable"
    own = await call(http, gw, model_request(receipt["ref"]), token=TOKEN_U)
    assert own[0] == 200 and "error" not in json.loads(own[1])
    assert len(receiver.requests) == 1 and receiver.requests[0][1] == PNG


async def test_path_like_and_odd_refs_never_reach_the_filesystem(tenant_gateway, http, tmp_path, no_secrets_logged):
    """protocol §13.2: refs are opaque and receiver-allocated; a caller-chosen ref (a path, the
    spool file's own name, a URL, control characters) is an unknown ref: a gap, nothing read."""
    gw, stub, receiver = tenant_gateway
    status, _ = await upload(http, gw, b"s" * (MEMORY + 1))  # a real spool file to aim at
    assert status == 201
    (victim,) = spool_files(tmp_path / "spool")
    outside = tmp_path / "outside.bin"
    outside.write_bytes(PNG)
    refs = [
        str(victim),
        victim.name,
        f"../{victim.parent.name}/{victim.name}",
        "../../../../" + str(outside).lstrip("/"),
        "file://" + str(outside),
        "upl_/../../outside.bin",
        "upl_\x00" + victim.name,
        "upl_\r\nX-Injected: 1",
        "%2e%2e%2f" * 20 + "outside.bin",
        "upl_" + "é" * 40,
        "x" * 10000,
    ]
    for ref in refs:
        status, _, _ = await call(http, gw, model_request(ref))
        assert status == 200, ref
    assert len(stub.received) == len(refs)
    for sent in stub.received:
        assert_gap(sent["params"]["event"])
    assert receiver.requests == [], "nothing was read and re-uploaded"
    assert not any(r.levelno >= logging.ERROR for r in no_secrets_logged.records)


async def test_client_chosen_names_never_name_a_file_and_the_spool_is_private(gw, tmp_path):
    """docs/operations/uploads.md: spooled uploads go to a private directory under ``storage.spoolDir``; no
    header, query or path a harness sends chooses a file name."""
    before = set(tmp_path.rglob("*"))
    data = b"n" * (MEMORY + 1)
    extra = 'Content-Disposition: attachment; filename="../../escape.bin"\r\nX-Ref: ../../escape.bin\r\n'
    conn = await Raw.open(gw)
    try:
        head = upload_head(len(data), sha(data), extra=extra, path="/uploads?name=../../escape.bin&ref=../x")
        await conn.send(head + data)
        status, _, body = await conn.response()
    finally:
        conn.close()
    assert status == 201 and "escape" not in json.loads(body)["ref"]
    for path in ("/uploads/..%2f..%2fescape.bin", "/uploads%2F..%2Fescape.bin", "/uploads/../escape.bin/"):
        conn = await Raw.open(gw)
        try:
            await conn.send(upload_head(len(data), sha(data), path=path) + data)
            assert (await conn.response())[0] == 404, path
        finally:
            conn.close()
    created = set(tmp_path.rglob("*")) - before
    (private,) = [p for p in created if p.is_dir() and p.parent == tmp_path / "spool"]
    (spooled,) = [p for p in created if p.is_file()]
    assert spooled.parent == private and spooled.read_bytes() == data
    assert created <= {tmp_path / "spool", private, spooled}
    assert "escape" not in " ".join(str(p) for p in tmp_path.rglob("*"))
    assert stat.S_IMODE(private.stat().st_mode) == 0o700 and stat.S_IMODE(spooled.stat().st_mode) == 0o600


async def test_symlinks_in_the_spool_are_never_followed(secrets_env, tmp_path):
    """docs/operations/uploads.md (private spool directory): a symlink planted in ``spoolDir`` or in the
    gateway's private directory is neither written through nor followed when the spool is removed."""
    outside = tmp_path / "outside"
    outside.mkdir()
    keep = outside / "keep.txt"
    keep.write_text("not the gateway's")
    spool = tmp_path / "spool"
    spool.mkdir()
    (spool / "ahp-uploads-planted").symlink_to(outside, target_is_directory=True)
    path = tmp_path / "gateway.yaml"
    path.write_text(yaml.safe_dump(config(None), sort_keys=False))
    gw = GatewayServer(load(path))
    await gw.start()
    try:
        for i in range(3):
            assert (await raw_upload(gw, bytes([i]) * (MEMORY + 1)))[0] == 201
        (private,) = [p for p in spool.iterdir() if not p.is_symlink()]
        assert len(list(private.iterdir())) == 3
        (private / "planted").symlink_to(outside, target_is_directory=True)
        (private / "planted-file").symlink_to(keep)
    finally:
        await gw.stop()
    assert not private.exists(), "the private spool directory is removed on stop"
    assert sorted(p.name for p in outside.iterdir()) == ["keep.txt"] and keep.read_text() == "not the gateway's"
    assert (spool / "ahp-uploads-planted").is_symlink()
