"""TLS termination on the harness listener: certificate files reloaded on change, mTLS with a
client CA where the verified certificate names the principal, and a certificate copied into a
header that is never an identity (protocol §12, AHP-AUTH-001: deployment-specific identities
keep the same isolation)."""

from __future__ import annotations

import asyncio
import json
import ssl
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import trustme

from tests.support.config import gateway_config, hook
from tests.support.events import intercept, tool_before


def write_pair(cert: Any, directory: Path, stem: str) -> tuple[Path, Path]:
    cert_file, key_file = directory / f"{stem}.crt", directory / f"{stem}.key"
    cert.cert_chain_pems[0].write_to_path(str(cert_file))
    cert.private_key_pem.write_to_path(str(key_file))
    return cert_file, key_file


def client_context(ca: trustme.CA, client: Any | None = None) -> ssl.SSLContext:
    context = ssl.create_default_context()
    ca.configure_trust(context)
    if client is not None:
        client.configure_cert(context)
    return context


async def peer_serial(port: int, context: ssl.SSLContext) -> int:
    _, writer = await asyncio.open_connection("127.0.0.1", port, ssl=context)
    try:
        ssl_object = writer.get_extra_info("ssl_object")
        der = ssl_object.getpeercert(binary_form=True)
        from cryptography import x509

        return int(x509.load_der_x509_certificate(der).serial_number)
    finally:
        writer.close()


async def test_tls_listener_reloads_a_renewed_certificate(gateway_factory, stub_factory, tmp_path):
    ca = trustme.CA()
    first = ca.issue_cert("127.0.0.1")
    cert_file, key_file = write_pair(first, tmp_path, "server")
    upstream = await stub_factory()
    gw = await gateway_factory(
        gateway_config(
            [hook("org.example.a", upstream.url)],
            inbound={"tls": {"certFile": "server.crt", "keyFile": "server.key"}},
        )
    )
    assert gw.url.startswith("https://")
    context = client_context(ca)
    async with aiohttp.ClientSession() as http:
        body = json.dumps(intercept(tool_before()))
        async with http.post(gw.url, data=body, headers={"Content-Type": "application/json"}, ssl=context) as r:
            assert r.status == 200
    serial = await peer_serial(gw.port, context)
    renewed = ca.issue_cert("127.0.0.1")
    new_cert, new_key = write_pair(renewed, tmp_path, "next")
    new_key.replace(key_file)
    new_cert.replace(cert_file)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 5
    while await peer_serial(gw.port, context) == serial:
        assert loop.time() < deadline, "renewed certificate not served in time"
        await asyncio.sleep(0.1)


@pytest.mark.spec("AHP-AUTH-001")
async def test_mtls_client_certificate_is_the_principal(gateway_factory, stub_factory, tmp_path):
    ca = trustme.CA()
    server = ca.issue_cert("127.0.0.1")
    write_pair(server, tmp_path, "server")
    ca.cert_pem.write_to_path(str(tmp_path / "clients-ca.pem"))
    alice = ca.issue_cert("alice.harness.example", common_name="harness-alice")
    upstream = await stub_factory()
    entry = hook("org.example.a", upstream.url, when='principal.name == "harness-alice"')
    decisions = tmp_path / "decisions.jsonl"
    gw = await gateway_factory(
        gateway_config(
            [entry],
            listen={"host": "127.0.0.1", "port": 0, "path": "/"},
            log={"decisions": "decisions.jsonl"},
            inbound={"tls": {"certFile": "server.crt", "keyFile": "server.key", "clientCaFile": "clients-ca.pem"}},
        )
    )
    body = json.dumps(intercept(tool_before()))
    headers = {"Content-Type": "application/json"}
    async with aiohttp.ClientSession() as http:
        async with http.post(gw.url, data=body, headers=headers, ssl=client_context(ca, alice)) as r:
            assert r.status == 200
        assert len(upstream.received) == 1, "the certificate's CN reached CEL as principal.name"
        with pytest.raises(aiohttp.ClientError):
            async with http.post(gw.url, data=body, headers=headers, ssl=client_context(ca)):
                pass
        stranger_ca = trustme.CA()
        mallory = stranger_ca.issue_cert("mallory.example", common_name="harness-alice")
        with pytest.raises(aiohttp.ClientError):
            async with http.post(gw.url, data=body, headers=headers, ssl=_mixed(ca, mallory)):
                pass
    for _ in range(100):
        if decisions.exists() and decisions.read_text().strip():
            break
        await asyncio.sleep(0.05)
    assert json.loads(decisions.read_text().splitlines()[0])["principal"] == "harness-alice"


def _mixed(trusted: trustme.CA, client: Any) -> ssl.SSLContext:
    """Trust the gateway's CA but present a certificate from another CA."""
    context = client_context(trusted)
    client.configure_cert(context)
    return context


async def test_a_replaced_client_ca_applies_to_new_connections(gateway_factory, stub_factory, tmp_path):
    server_ca, old_clients, new_clients = trustme.CA(), trustme.CA(), trustme.CA()
    write_pair(server_ca.issue_cert("127.0.0.1"), tmp_path, "server")
    old_clients.cert_pem.write_to_path(str(tmp_path / "clients-ca.pem"))
    old_cert = old_clients.issue_cert("old.example", common_name="old-harness")
    new_cert = new_clients.issue_cert("new.example", common_name="new-harness")
    upstream = await stub_factory()
    gw = await gateway_factory(
        gateway_config(
            [hook("org.example.a", upstream.url)],
            inbound={"tls": {"certFile": "server.crt", "keyFile": "server.key", "clientCaFile": "clients-ca.pem"}},
        )
    )
    body = json.dumps(intercept(tool_before()))
    headers = {"Content-Type": "application/json"}

    async def accepted(client: Any) -> bool:
        try:
            async with aiohttp.ClientSession() as http:
                async with http.post(gw.url, data=body, headers=headers, ssl=client_context(server_ca, client)) as r:
                    return r.status == 200
        except aiohttp.ClientError:
            return False

    assert await accepted(old_cert) and not await accepted(new_cert)
    staged = tmp_path / "clients-ca.new"
    new_clients.cert_pem.write_to_path(str(staged))
    staged.replace(tmp_path / "clients-ca.pem")
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 5
    while not await accepted(new_cert):
        assert loop.time() < deadline, "the new client CA was not applied in time"
        await asyncio.sleep(0.1)
    assert not await accepted(old_cert), "the replaced CA is no longer trusted"
