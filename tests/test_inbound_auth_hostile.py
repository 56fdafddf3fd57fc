"""Inbound authentication under attack (protocol §12, AHP-SEC-001, README "Authentication"),
end to end over real HTTP on loopback, on the fast lane and on the aiohttp path.

An attacker without valid credentials tries to get a request accepted or a principal confused:
near-miss bearer tokens, forged JWTs (``alg: none``, HMAC with the public key, embedded or remote
keys, ``kid`` tricks), flooding unknown ``kid`` values to drive JWKS fetches, hostile issuer
endpoints (slow, huge, redirecting, malformed, weak keys), claim edge cases, claims that try to
steer CEL through ``principal``, and oversized or control-byte-laden credentials. Every refusal
must carry the documented status and ``WWW-Authenticate`` challenge, never reach an upstream,
and never echo the credential in an answer, a log line or ``/metrics``."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
import logging
import random
import ssl
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import trustme
import yaml
from aiohttp import web
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature
from joserfc import jws
from joserfc.jwk import ECKey, RSAKey

from gateway.server.app import GatewayServer
from tests.conftest import gateway_config, hook, intercept, tool_before, wait_for
from tests.oauth_server import LoopbackAuthServer

AUDIENCE = "https://gw.example/"
RESOURCE_METADATA = 'Bearer resource_metadata="https://gw.example/.well-known/oauth-protected-resource"'
INVALID_TOKEN = RESOURCE_METADATA + ', error="invalid_token"'
INVALID_REQUEST = RESOURCE_METADATA + ', error="invalid_request"'
TOKEN = "tok-hostile-5d4c3b2a1f9e"
"""The one valid static bearer token."""

LANES = pytest.mark.parametrize("fast", [True, False], ids=["fastLane", "aiohttp"])


# ------------------------------------------------------------------------------------------------
# helpers


def listen(fast: bool) -> dict[str, Any]:
    return {"host": "127.0.0.1", "port": 0, "path": "/", "fastLane": fast}


def body() -> bytes:
    return json.dumps(intercept(tool_before())).encode()


def request(*lines: bytes | str, payload: bytes | None = None) -> bytes:
    """One ``POST /`` with exact framing and ``Connection: close``; ``lines`` are extra header
    lines sent byte for byte."""
    data = body() if payload is None else payload
    head: list[bytes] = [
        b"POST / HTTP/1.1",
        b"Host: 127.0.0.1",
        b"Content-Type: application/json",
        b"Content-Length: %d" % len(data),
        b"Connection: close",
    ]
    head += [line.encode("utf-8") if isinstance(line, str) else line for line in lines]
    return b"\r\n".join(head) + b"\r\n\r\n" + data


def bearer(token: str | bytes) -> bytes:
    return b"Authorization: Bearer " + (token.encode("utf-8") if isinstance(token, str) else token)


@dataclass
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes
    raw: bytes


async def exchange(port: int, data: bytes, timeout: float = 10.0) -> Answer:
    """Send ``data`` on a fresh connection and read the whole answer (until the server closes;
    every request carries ``Connection: close``), within a deadline."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    raw = b""
    try:
        writer.write(data)
        await writer.drain()
        async with asyncio.timeout(timeout):
            while True:
                try:
                    chunk = await reader.read(65536)
                except ConnectionResetError:
                    break
                if not chunk:
                    break
                raw += chunk
    finally:
        writer.close()
    head, _, rest = raw.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return Answer(int(lines[0].split(" ", 2)[1]), headers, rest, raw)


async def jwks_gateway(gateway_factory: Any, stub_factory: Any, hostile: Any) -> tuple[Any, Any]:
    """A gateway (fast lane on) whose OAuth key set is ``hostile``'s ``/jwks``, and its upstream."""
    upstream = await stub_factory()
    cfg = gateway_config(
        [hook("org.example.a", upstream.url)],
        listen=listen(True),
        inbound=oauth(hostile.url, hostile.ca_file, jwksUri=hostile.url + "/jwks"),
    )
    return await gateway_factory(cfg), upstream


def metric(gw: GatewayServer, reason: str) -> float:
    assert gw.observability is not None
    needle = f'ahp_gateway_auth_failures_total{{reason="{reason}"}} '
    for line in gw.observability.metrics.render()[0].decode().splitlines():
        if line.startswith(needle):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def failures(gw: GatewayServer) -> dict[str, float]:
    from gateway.inbound.principal import REASONS

    return {reason: metric(gw, reason) for reason in REASONS}


async def metrics_text(gw: GatewayServer) -> str:
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"http://127.0.0.1:{gw.admin_port}/metrics") as response,
    ):
        assert response.status == 200
        return await response.text()


def b64(data: bytes | dict[str, Any]) -> str:
    raw = json.dumps(data).encode() if isinstance(data, dict) else data
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def compact(header: dict[str, Any], payload: bytes, key: Any) -> str:
    """A JWS compact token with exactly this protected header and payload bytes."""
    return jws.serialize_compact(header, payload, key)


def es256(header: dict[str, Any], payload: bytes, key: ECKey) -> str:
    """An ES256 token signed by hand, so the header may hold what a library would refuse to
    write (a list ``kid``, a ``jku``, an embedded ``jwk``): a forger is not bound by one."""
    signing_input = f"{b64(header)}.{b64(payload)}"
    der = key.private_key.sign(signing_input.encode(), ec.ECDSA(hashes.SHA256()))
    r, s = decode_dss_signature(der)
    return f"{signing_input}.{b64(r.to_bytes(32, 'big') + s.to_bytes(32, 'big'))}"


def hs256(header: dict[str, Any], claims: dict[str, Any], secret: bytes) -> str:
    """An HMAC-signed token (``HS256``/``HS512`` as the header says) built by hand: no library
    guard stops a forger."""
    signing_input = f"{b64(header)}.{b64(claims)}"
    digest = hashlib.sha512 if header["alg"] == "HS512" else hashlib.sha256
    mac = hmac.new(secret, signing_input.encode(), digest).digest()
    return f"{signing_input}.{b64(mac)}"


def attacker_key(kid: str) -> ECKey:
    return ECKey.generate_key("P-256", parameters={"kid": kid, "alg": "ES256"})


def sha(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


# ------------------------------------------------------------------------------------------------
# servers on loopback


@dataclass
class Hostile:
    """A scriptable issuer on loopback TLS: ``routes[path]`` answers, ``hits[path]`` counts."""

    url: str = ""
    ca_file: str = ""
    routes: dict[str, Callable[[web.Request], Awaitable[web.StreamResponse]]] = field(default_factory=dict)
    hits: dict[str, int] = field(default_factory=dict)
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    """Set at teardown: releases every handler that hangs."""

    def json(self, path: str, document: Any, status: int = 200) -> None:
        async def answer(_: web.Request) -> web.StreamResponse:
            return web.json_response(document, status=status)

        self.routes[path] = answer

    def hang(self, path: str) -> None:
        async def answer(_: web.Request) -> web.StreamResponse:
            await self.stop.wait()
            return web.json_response({})

        self.routes[path] = answer


@pytest.fixture
async def hostile(tmp_path: Path) -> Any:
    ca = trustme.CA()
    ca_file = tmp_path / "hostile-ca.pem"
    ca.cert_pem.write_to_path(str(ca_file))
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(context)
    state = Hostile(ca_file=str(ca_file))

    async def handle(request: web.Request) -> web.StreamResponse:
        state.hits[request.path] = state.hits.get(request.path, 0) + 1
        answer = state.routes.get(request.path)
        return web.Response(status=404) if answer is None else await answer(request)

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handle)
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.1, handler_cancellation=True)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=context)
    await site.start()
    state.url = f"https://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"  # type: ignore[union-attr]
    yield state
    state.stop.set()
    await runner.cleanup()


def oauth(issuer: str, ca_file: str, **extra: Any) -> dict[str, Any]:
    return {
        "auth": {
            "type": "oauth",
            "issuer": issuer,
            "audience": AUDIENCE,
            "requiredScopes": ["ahp.hooks"],
            "caFile": ca_file,
            **extra,
        }
    }


def claims_for(issuer: str, **overrides: Any) -> dict[str, Any]:
    now = int(time.time())
    out: dict[str, Any] = {
        "iss": issuer,
        "aud": AUDIENCE,
        "sub": "svc-a",
        "exp": now + 300,
        "iat": now,
        "scope": "ahp.hooks",
    }
    out.update(overrides)
    return {k: v for k, v in out.items() if v is not None}


async def oauth_gateway(
    gateway_factory: Any, stub_factory: Any, auth_server: LoopbackAuthServer, fast: bool, **extra: Any
) -> tuple[GatewayServer, Any]:
    upstream = await stub_factory()
    cfg = gateway_config(
        [hook("org.example.a", upstream.url)],
        listen=listen(fast),
        inbound=oauth(auth_server.issuer, auth_server.ca_file, **extra),
        log={"decisions": "decisions.jsonl"},
    )
    return await gateway_factory(cfg, name=f"gateway-{int(fast)}.yaml"), upstream


def assert_refused(answer: Answer, status: int, challenge: str | None, *secrets: str) -> None:
    assert answer.status == status, answer.raw[:300]
    assert answer.headers.get("www-authenticate") == challenge, answer.raw[:300]
    if status in (401, 403):
        assert answer.body == (b"unauthorized\n" if status == 401 else b"forbidden\n")
    for secret in secrets:
        assert secret.encode() not in answer.raw, "the credential is echoed in the answer"


# ------------------------------------------------------------------------------------------------
# static bearer tokens


@pytest.fixture
async def bearer_pair(gateway_factory, stub_factory, tmp_path):
    """The same bearer-protected gateway on the fast lane and on the aiohttp path."""
    (tmp_path / "tokens.yaml").write_text(
        yaml.safe_dump([{"sha256": sha(TOKEN), "principal": {"name": "ci", "attributes": {"tenant": "a"}}}])
    )
    upstream = await stub_factory()
    out = {}
    for fast in (True, False):
        cfg = gateway_config(
            [hook("org.example.a", upstream.url)],
            listen=listen(fast),
            inbound={"auth": {"type": "bearer", "tokensFile": "tokens.yaml"}},
            log={"decisions": "decisions.jsonl"},
        )
        out[fast] = await gateway_factory(cfg, name=f"gateway-{int(fast)}.yaml")
    return out, upstream


LOOKALIKE = TOKEN.replace("o", "\u043e")  # Cyrillic small o
BEARER_NEAR_MISSES = {
    "empty token": (b"Authorization: Bearer ", "malformed"),
    "scheme only": (b"Authorization: Bearer", "malformed"),
    "empty header": (b"Authorization:", "malformed"),
    "a prefix of the token": (bearer(TOKEN[:8]), "unknown_token"),
    "all but the last byte": (bearer(TOKEN[:-1]), "unknown_token"),
    "the token upper-cased": (bearer(TOKEN.upper()), "unknown_token"),
    "token68 padding appended": (bearer(TOKEN + "=="), "unknown_token"),
    "base64 of the token": (bearer(base64.b64encode(TOKEN.encode()).decode()), "unknown_token"),
    "Cyrillic look-alike letters": (bearer(LOOKALIKE), "malformed"),
    "full-width look-alike letter": (bearer("\uff54" + TOKEN[1:]), "malformed"),
    "zero-width space appended": (bearer(TOKEN + "\u200b"), "malformed"),
    "no-break space after the scheme": ("Authorization: Bearer\u00a0" + TOKEN, "malformed"),
    "two tokens, comma-separated": (bearer(f"{TOKEN},Bearer {TOKEN}"), "malformed"),
    "two tokens, space-separated": (bearer(f"{TOKEN} {TOKEN}"), "malformed"),
    "quoted token": (bearer(f'"{TOKEN}"'), "malformed"),
    "percent-encoded token": (bearer(TOKEN.replace("-", "%2D")), "malformed"),
    "scheme glued to the token": (f"Authorization: Bearer{TOKEN}", "malformed"),
}


@LANES
@pytest.mark.spec("AHP-SEC-001")
@pytest.mark.parametrize("case", list(BEARER_NEAR_MISSES))
async def test_bearer_near_miss_tokens_are_refused_with_the_documented_challenge_protocol_12(
    bearer_pair, fast, case, caplog
):
    """README "Authentication" refusal table: a token that is not exactly a listed one is 401
    ``invalid_token``; one that is not a single token68 is 401 ``invalid_request``. The
    upstream is never called and the token never echoed; the valid token still works."""
    gateways, upstream = bearer_pair
    gw = gateways[fast]
    line, reason = BEARER_NEAR_MISSES[case]
    before = failures(gw)
    answer = await exchange(gw.port, request(line))
    challenge = 'Bearer error="invalid_request"' if reason == "malformed" else 'Bearer error="invalid_token"'
    assert_refused(answer, 401, challenge, TOKEN)
    after = failures(gw)
    assert after[reason] == before[reason] + 1
    assert sum(after.values()) == sum(before.values()) + 1
    assert upstream.received == []
    assert TOKEN not in caplog.text and LOOKALIKE not in caplog.text
    control = await exchange(gw.port, request(bearer(TOKEN)))
    assert control.status == 200 and len(upstream.received) == 1


CONTROL_BYTES = {"NUL": b"\x00", "DEL": b"\x7f", "SOH": b"\x01", "ESC": b"\x1b"}


@LANES
@pytest.mark.spec("AHP-SEC-001")
@pytest.mark.parametrize("byte", list(CONTROL_BYTES))
async def test_a_valid_token_followed_by_a_control_byte_is_refused_and_never_logged_protocol_12(
    bearer_pair, fast, byte, caplog
):
    """A valid token with a trailing NUL (or another control byte) is not that token: the
    request is refused before authentication (400, the header is not a valid field value), the
    upstream is not called and no log line records the token."""
    caplog.set_level(logging.DEBUG)
    gateways, upstream = bearer_pair
    gw = gateways[fast]
    answer = await exchange(gw.port, request(bearer(TOKEN.encode() + CONTROL_BYTES[byte])))
    assert answer.status == 400
    assert upstream.received == []
    assert TOKEN not in caplog.text
    assert TOKEN not in await metrics_text(gw)


@LANES
@pytest.mark.spec("AHP-SEC-001")
@pytest.mark.parametrize("byte", list(CONTROL_BYTES))
async def test_a_rejected_authorization_header_is_not_echoed_in_the_answer_protocol_12(bearer_pair, fast, byte):
    """Protocol §12: secrets MUST NOT occur in answers; README: inbound credentials never
    appear in answers. A header refused by the HTTP parser must not be quoted back."""
    gateways, upstream = bearer_pair
    answer = await exchange(gateways[fast].port, request(bearer(TOKEN.encode() + CONTROL_BYTES[byte])))
    assert answer.status in (400, 401) and upstream.received == []
    assert TOKEN.encode() not in answer.raw, answer.body


# ------------------------------------------------------------------------------------------------
# OAuth: forged tokens


def forgeries(auth_server: LoopbackAuthServer, evil_url: str) -> dict[str, tuple[list[bytes | str], str, str]]:
    """Name -> (header lines, expected reason, expected challenge). Every token is built by
    someone without the issuer's private key."""
    issuer = auth_server.issuer
    claims = claims_for(issuer)
    payload = json.dumps(claims).encode()
    real = auth_server.signing_key
    public = real.as_dict(private=False)
    pem = real.public_key.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    valid = auth_server.mint(claims)
    header_seg, payload_seg, signature_seg = valid.split(".")
    evil = attacker_key("evil-1")
    evil_public = evil.as_dict(private=False)
    admin_claims = claims_for(issuer, sub="admin", scope="ahp.hooks ahp.admin")
    admin_payload = b64(admin_claims)

    def none(alg: str, signature: str = "") -> str:
        return f"{b64({'alg': alg, 'typ': 'at+jwt', 'kid': 'key-1'})}.{admin_payload}.{signature}"

    def signed_by_evil(**header: Any) -> str:
        return es256({"alg": "ES256", "typ": "at+jwt", **header}, payload, evil)

    invalid = ("invalid_token", INVALID_TOKEN)
    unknown = ("unknown_key", INVALID_TOKEN)
    out: dict[str, tuple[list[bytes | str], str, str]] = {
        "alg none, empty signature": ([bearer(none("none"))], *invalid),
        "alg None": ([bearer(none("None"))], *invalid),
        "alg NONE with the real signature": ([bearer(none("NONE", signature_seg))], *invalid),
        "alg none, no signature segment": ([bearer(none("none").rstrip("."))], *invalid),
        "HS256 keyed with the public key PEM": (
            [bearer(hs256({"alg": "HS256", "typ": "at+jwt", "kid": "key-1"}, admin_claims, pem))],
            *invalid,
        ),
        "HS256 keyed with the public JWK JSON": (
            [
                bearer(
                    hs256(
                        {"alg": "HS256", "typ": "at+jwt", "kid": "key-1"},
                        admin_claims,
                        json.dumps(public).encode(),
                    )
                )
            ],
            *invalid,
        ),
        "HS512 keyed with the x coordinate": (
            [bearer(hs256({"alg": "HS512", "kid": "key-1"}, admin_claims, public["x"].encode()))],
            *invalid,
        ),
        "real header and signature, attacker payload": (
            [bearer(f"{header_seg}.{admin_payload}.{signature_seg}")],
            *invalid,
        ),
        "alg switched to ES384 on a real token": (
            [bearer(f"{b64({'alg': 'ES384', 'typ': 'at+jwt', 'kid': 'key-1'})}.{payload_seg}.{signature_seg}")],
            *invalid,
        ),
        "alg switched to RS256 on a real token": (
            [bearer(f"{b64({'alg': 'RS256', 'typ': 'at+jwt', 'kid': 'key-1'})}.{payload_seg}.{signature_seg}")],
            *unknown,  # joserfc finds no RSA key under that kid: counted as an unknown key
        ),
        "attacker key under the real kid": ([bearer(signed_by_evil(kid="key-1"))], *invalid),
        "attacker key embedded as jwk, real kid": ([bearer(signed_by_evil(kid="key-1", jwk=evil_public))], *invalid),
        "attacker key embedded as jwk, its own kid": (
            [bearer(signed_by_evil(kid="evil-1", jwk=evil_public))],
            *unknown,
        ),
        "attacker key embedded as jwk, no kid": ([bearer(signed_by_evil(jwk=evil_public))], *invalid),
        "jku pointing at the attacker's JWKS": (
            [bearer(signed_by_evil(kid="evil-1", jku=evil_url + "/evil-jwks"))],
            *unknown,
        ),
        "x5u pointing at the attacker": ([bearer(signed_by_evil(kid="evil-1", x5u=evil_url + "/evil-x5u"))], *unknown),
        "kid as a path traversal": ([bearer(signed_by_evil(kid="../../../../../../dev/null"))], *unknown),
        "kid as an absolute path": ([bearer(signed_by_evil(kid="/dev/null"))], *unknown),
        "kid as a URL": ([bearer(signed_by_evil(kid=evil_url + "/evil-jwks#key-1"))], *unknown),
        "kid with a NUL after the real one": ([bearer(signed_by_evil(kid="key-1\u0000"))], *unknown),
        "kid with a trailing space": ([bearer(signed_by_evil(kid="key-1 "))], *unknown),
        "kid upper-cased": ([bearer(signed_by_evil(kid="KEY-1"))], *unknown),
        "kid as SQL": ([bearer(signed_by_evil(kid="' OR '1'='1"))], *unknown),
        "kid as a list holding the real one": ([bearer(signed_by_evil(kid=["key-1"]))], *invalid),
        "empty signature on a real token": ([bearer(f"{header_seg}.{payload_seg}.")], *invalid),
        "base64 padding on the signature": ([bearer(valid + "==")], *invalid),
        "standard-alphabet base64 on the signature": (
            [bearer(f"{header_seg}.{payload_seg}.{signature_seg.replace('-', '+').replace('_', '/')}")]
            if "-" in signature_seg or "_" in signature_seg
            else [bearer(f"{header_seg}.{payload_seg}.{signature_seg}+")],
            *invalid,
        ),
        "a fourth segment": ([bearer(valid + ".AAAA")], *invalid),
        "two tokens joined by a dot": ([bearer(f"{valid}.{valid}")], *invalid),
        "typ of an ID token": ([bearer(auth_server.mint(claims, header={"typ": "id_token+jwt"}))], *invalid),
        "typ JWE": ([bearer(auth_server.mint(claims, header={"typ": "JWE"}))], *invalid),
        "crit naming an unknown extension": (
            [bearer(es256({"alg": "ES256", "kid": "key-1", "crit": ["urn:evil"], "urn:evil": True}, payload, real))],
            *invalid,
        ),
        "a valid token then a second token": ([bearer(f"{valid} {valid}")], "malformed", INVALID_REQUEST),
        "two Authorization headers, both the valid token": (
            [bearer(valid), bearer(valid)],
            "malformed",
            INVALID_REQUEST,
        ),
        "two Authorization headers, forged then valid": (
            [bearer(none("none")), bearer(valid)],
            "malformed",
            INVALID_REQUEST,
        ),
        "the token in another scheme": ([f"Authorization: DPoP {valid}"], "malformed", INVALID_REQUEST),
        "the token in a query-like header only": ([f"X-Access-Token: {valid}"], "missing", RESOURCE_METADATA),
    }
    return out


@LANES
@pytest.mark.spec("AHP-SEC-001")
async def test_forged_and_confused_jwts_are_refused_protocol_12(
    gateway_factory, stub_factory, auth_server, hostile, fast, caplog
):
    """README "Authentication" (oauth): only asymmetric ``algorithms`` (``none`` and ``HS*``
    refused), the signature is checked against the issuer's JWKS only (``jwk``, ``jku`` and
    ``x5u`` headers are never trusted or fetched), ``kid`` is a lookup key and nothing more,
    ``typ`` must be a JWT access token, one token68 in one header. Each refusal is 401 with the
    documented challenge and reason; no forged token reaches the upstream or makes the gateway
    fetch the JWKS again (unknown ``kid`` within ``jwksRefetchSeconds``)."""
    gw, upstream = await oauth_gateway(gateway_factory, stub_factory, auth_server, fast, jwksRefetchSeconds=3600)
    valid = auth_server.mint(claims_for(auth_server.issuer))
    assert (await exchange(gw.port, request(bearer(valid)))).status == 200
    assert auth_server.jwks_fetches == 1 and len(upstream.received) == 1
    for name, (lines, reason, challenge) in forgeries(auth_server, hostile.url).items():
        before = failures(gw)
        answer = await exchange(gw.port, request(*lines))
        assert answer.status == 401, (name, answer.raw[:300])
        assert answer.headers.get("www-authenticate") == challenge, name
        assert answer.body == b"unauthorized\n", name
        after = failures(gw)
        assert after[reason] == before[reason] + 1, (name, {k: after[k] - before[k] for k in after})
        assert sum(after.values()) == sum(before.values()) + 1, name
    assert len(upstream.received) == 1, "a forged token reached the upstream"
    assert auth_server.jwks_fetches == 1, "a forged kid drove a JWKS fetch"
    assert hostile.hits == {}, "a jku/x5u/kid URL was fetched"
    assert valid not in caplog.text


# ------------------------------------------------------------------------------------------------
# OAuth: unknown-kid floods and a slow issuer


@pytest.mark.spec("AHP-SEC-001")
async def test_an_unknown_kid_flood_fetches_the_jwks_at_most_once_per_interval_protocol_12(
    gateway_factory, stub_factory, auth_server
):
    """README: a token with an unknown ``kid`` triggers a JWKS fetch at most every
    ``jwksRefetchSeconds`` (single flight). Waves of concurrent requests, each with a fresh
    ``kid``, while valid requests keep being served: the issuer sees at most one fetch per
    interval, and does see one once an interval has passed (so rotation still works)."""
    interval = 0.4
    gw, upstream = await oauth_gateway(gateway_factory, stub_factory, auth_server, True, jwksRefetchSeconds=interval)
    valid = auth_server.mint(claims_for(auth_server.issuer))
    loop = asyncio.get_running_loop()
    assert (await exchange(gw.port, request(bearer(valid)))).status == 200
    started = loop.time()
    assert auth_server.jwks_fetches == 1
    claims = json.dumps(claims_for(auth_server.issuer)).encode()
    sent = waves = 0
    while loop.time() - started < 3 * interval:
        waves += 1
        keys = [attacker_key(f"flood-{sent + i}") for i in range(20)]
        tokens = [compact({"alg": "ES256", "typ": "at+jwt", "kid": k.kid}, claims, k) for k in keys]
        sent += len(tokens)
        answers = await asyncio.gather(
            *(exchange(gw.port, request(bearer(t))) for t in tokens),
            exchange(gw.port, request(bearer(valid))),
        )
        assert [a.status for a in answers[:-1]] == [401] * len(tokens)
        assert all(a.headers.get("www-authenticate") == INVALID_TOKEN for a in answers[:-1])
        assert answers[-1].status == 200, "a valid caller was refused during the flood"
    # one more unknown kid, an interval after the start: a refetch has happened by now
    last = attacker_key("flood-last")
    late = compact({"alg": "ES256", "typ": "at+jwt", "kid": last.kid}, claims, last)
    assert (await exchange(gw.port, request(bearer(late)))).status == 401
    elapsed = loop.time() - started
    assert metric(gw, "unknown_key") == sent + 1
    refetches = auth_server.jwks_fetches - 1
    assert 1 <= refetches <= int(elapsed / interval) + 1, (refetches, elapsed, sent)
    assert len(upstream.received) == waves + 1


FETCH_TIMEOUT = 5.0
"""The gateway's bound on one JWKS fetch (gateway/inbound/oauth.py)."""


def hanging_gateways(
    gateway_factory: Any, upstream: Any, hostile: Hostile, path: str, **extra: Any
) -> Awaitable[list[GatewayServer]]:
    async def make() -> list[GatewayServer]:
        out = []
        for fast in (True, False):
            cfg = gateway_config(
                [hook("org.example.a", upstream.url)],
                listen=listen(fast),
                inbound=oauth(hostile.url, hostile.ca_file, jwksUri=hostile.url + path, **extra),
            )
            out.append(await gateway_factory(cfg, name=f"gateway-{int(fast)}.yaml"))
        return out

    return make()


@pytest.mark.spec("AHP-SEC-001")
async def test_a_hanging_jwks_refetch_delays_only_its_own_caller_protocol_12(gateway_factory, stub_factory, hostile):
    """A JWKS endpoint that stops answering while the gateway refetches it for an unknown
    ``kid``: callers whose ``kid`` is cached are served at once meanwhile, and the caller that
    triggered the refetch is refused (401 ``unknown_key``) within the fetch timeout. Both lanes."""
    key = attacker_key("k1")  # the issuer's own signing key
    hostile.json("/jwks", {"keys": [key.as_dict(private=False)]})
    upstream = await stub_factory()
    gateways = await hanging_gateways(gateway_factory, upstream, hostile, "/jwks", jwksRefetchSeconds=0)
    claims = json.dumps(claims_for(hostile.url)).encode()
    good = compact({"alg": "ES256", "typ": "at+jwt", "kid": "k1"}, claims, key)
    rotated_key = attacker_key("k2")
    rotated = compact({"alg": "ES256", "typ": "at+jwt", "kid": "k2"}, claims, rotated_key)
    for gw in gateways:
        assert (await exchange(gw.port, request(bearer(good)))).status == 200
    assert hostile.hits == {"/jwks": 2}
    hostile.hang("/jwks")
    loop = asyncio.get_running_loop()
    started = loop.time()
    stuck = [asyncio.ensure_future(exchange(gw.port, request(bearer(rotated)), timeout=15)) for gw in gateways]
    await wait_for(lambda: hostile.hits["/jwks"] == 4, timeout=5)
    for gw in gateways:  # while the refetch hangs, a cached kid is served at once
        async with asyncio.timeout(2):
            assert (await exchange(gw.port, request(bearer(good)))).status == 200
    assert not any(task.done() for task in stuck)
    for task in stuck:
        assert_refused(await task, 401, INVALID_TOKEN, rotated)
    assert loop.time() - started < FETCH_TIMEOUT + 4, "the fetch timeout did not bound the wait"
    for gw in gateways:
        assert metric(gw, "unknown_key") == 1
    assert len(upstream.received) == 4  # two before the hang, two during it


@pytest.mark.spec("AHP-SEC-001")
async def test_a_hanging_issuer_before_any_key_set_costs_each_caller_at_most_one_timeout_protocol_12(
    gateway_factory, stub_factory, hostile
):
    """README: the JWKS cannot be fetched -> 401 ``issuer_unavailable``; an unreachable issuer
    is not asked again for every caller. With an issuer that hangs from the start, two
    concurrent callers are both refused within one fetch timeout, and a caller just after is
    refused at once, the issuer having been asked once. Both lanes."""
    hostile.hang("/jwks")
    upstream = await stub_factory()
    gateways = await hanging_gateways(gateway_factory, upstream, hostile, "/jwks")
    key = attacker_key("k1")
    token = compact({"alg": "ES256", "typ": "at+jwt", "kid": "k1"}, json.dumps(claims_for(hostile.url)).encode(), key)
    loop = asyncio.get_running_loop()
    started = loop.time()
    tasks = [
        asyncio.ensure_future(exchange(gw.port, request(bearer(token)), timeout=30))
        for gw in gateways
        for _ in range(2)
    ]
    done, pending = await asyncio.wait(tasks, timeout=FETCH_TIMEOUT + 3)
    for task in pending:
        task.cancel()
    await asyncio.gather(*pending, return_exceptions=True)
    assert not pending, f"{len(pending)} caller(s) still waiting {loop.time() - started:.1f} s after the first fetch"
    for task in done:
        assert_refused(task.result(), 401, INVALID_TOKEN)
    for gw in gateways:
        again = loop.time()
        assert_refused(await exchange(gw.port, request(bearer(token)), timeout=FETCH_TIMEOUT + 3), 401, INVALID_TOKEN)
        assert loop.time() - again < 2, "a failed issuer is asked again by the next caller"
        assert metric(gw, "issuer_unavailable") == 3
    assert hostile.hits == {"/jwks": 2}
    assert upstream.received == []


# ------------------------------------------------------------------------------------------------
# OAuth: hostile JWKS documents and issuer metadata


def oversized_jwks(key: ECKey) -> dict[str, Any]:
    return {"keys": [key.as_dict(private=False)], "padding": "x" * (600 * 1024)}


HOSTILE_JWKS: dict[str, Callable[[ECKey], tuple[Any, int]]] = {
    "HTML instead of JSON": lambda key: ("<html>login</html>", 200),
    "a JSON list": lambda key: ([key.as_dict(private=False)], 200),
    "keys is a string": lambda key: ({"keys": "x"}, 200),
    "a key without parameters": lambda key: ({"keys": [{"kty": "EC", "kid": "k1"}]}, 200),
    "a key of unknown type": lambda key: ({"keys": [{"kty": "XYZ", "kid": "k1"}]}, 200),
    "a 500 answer carrying the key": lambda key: ({"keys": [key.as_dict(private=False)]}, 500),
    "over 512 KiB": lambda key: (oversized_jwks(key), 200),
}


@pytest.mark.spec("AHP-SEC-001")
@pytest.mark.parametrize("case", list(HOSTILE_JWKS))
async def test_a_hostile_jwks_document_fails_closed_protocol_12(gateway_factory, stub_factory, hostile, case):
    """README: the JWKS cannot be fetched (or is not a key set) -> 401 ``issuer_unavailable``
    with the resource-metadata challenge; the next caller is refused without another fetch."""
    key = attacker_key("k1")
    document, status = HOSTILE_JWKS[case](key)
    if isinstance(document, str):

        async def html(_: web.Request) -> web.StreamResponse:
            return web.Response(text=document, content_type="text/html")

        hostile.routes["/jwks"] = html
    else:
        hostile.json("/jwks", document, status)
    gw, upstream = await jwks_gateway(gateway_factory, stub_factory, hostile)
    token = compact({"alg": "ES256", "typ": "at+jwt", "kid": "k1"}, json.dumps(claims_for(hostile.url)).encode(), key)
    for _ in range(2):
        assert_refused(await exchange(gw.port, request(bearer(token))), 401, INVALID_TOKEN, token)
    assert metric(gw, "issuer_unavailable") == 2
    assert hostile.hits == {"/jwks": 1}
    assert upstream.received == []


@pytest.mark.spec("AHP-SEC-001")
async def test_a_redirecting_jwks_endpoint_is_not_followed_protocol_12(gateway_factory, stub_factory, hostile):
    """A JWKS answer that redirects to a key set the attacker controls: not followed (the
    attacker's key set is never fetched), 401 ``issuer_unavailable``."""
    evil = attacker_key("evil-1")
    hostile.json("/evil-jwks", {"keys": [evil.as_dict(private=False)]})

    async def redirect(_: web.Request) -> web.StreamResponse:
        raise web.HTTPFound(hostile.url + "/evil-jwks")

    hostile.routes["/jwks"] = redirect
    gw, upstream = await jwks_gateway(gateway_factory, stub_factory, hostile)
    token = compact(
        {"alg": "ES256", "typ": "at+jwt", "kid": "evil-1"}, json.dumps(claims_for(hostile.url)).encode(), evil
    )
    assert_refused(await exchange(gw.port, request(bearer(token))), 401, INVALID_TOKEN)
    assert metric(gw, "issuer_unavailable") == 1
    assert hostile.hits == {"/jwks": 1} and upstream.received == []


@pytest.mark.spec("AHP-SEC-001")
async def test_a_jwks_delivered_in_two_pieces_is_read_whole_protocol_12(gateway_factory, stub_factory, hostile):
    """A legitimate 3 KB key set whose body arrives in two TCP writes (a slow link, chunked
    proxies): well under the 512 KiB cap, it must be read whole and its key used."""
    key = attacker_key("k1")
    pad = [attacker_key(f"pad-{i}").as_dict(private=False) for i in range(12)]
    document = json.dumps({"keys": [*pad, key.as_dict(private=False)]}).encode()
    answered = asyncio.Event()

    async def two_pieces(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        response.content_length = len(document)
        await response.prepare(request)
        await response.write(document[:200])
        try:  # the rest follows when the gateway has answered, or after a second
            async with asyncio.timeout(1.0):
                await answered.wait()
        except TimeoutError:
            pass
        await response.write(document[200:])
        return response

    hostile.routes["/jwks"] = two_pieces
    gw, upstream = await jwks_gateway(gateway_factory, stub_factory, hostile)
    token = compact({"alg": "ES256", "typ": "at+jwt", "kid": "k1"}, json.dumps(claims_for(hostile.url)).encode(), key)
    answer = await exchange(gw.port, request(bearer(token)))
    answered.set()
    assert answer.status == 200, answer.raw[:300]


HOSTILE_METADATA = {
    "issuer names another issuer": (lambda url: {"issuer": "https://evil.example", "jwks_uri": url + "/jwks"}, False),
    "jwks_uri over plain http": (lambda url: {"issuer": url, "jwks_uri": "http://127.0.0.1:9/jwks"}, False),
    "jwks_uri not a string": (lambda url: {"issuer": url, "jwks_uri": ["x"]}, False),
    "metadata is a JSON list": (lambda url: [{"issuer": url, "jwks_uri": url + "/jwks"}], True),
    "metadata is a JSON string": (lambda url: "jwks", True),
}


@LANES
@pytest.mark.spec("AHP-SEC-001")
@pytest.mark.parametrize(
    "case",
    list(HOSTILE_METADATA),
)
async def test_hostile_issuer_metadata_fails_closed_with_401_protocol_12(
    gateway_factory, stub_factory, hostile, fast, case
):
    """README: without ``jwksUri`` the JWKS comes from the issuer's RFC 8414 metadata, which
    must name the configured issuer; metadata that cannot be used -> 401 ``issuer_unavailable``
    (never a 500, never an upstream call)."""
    key = attacker_key("k1")
    make, _ = HOSTILE_METADATA[case]
    for path in ("/.well-known/oauth-authorization-server", "/.well-known/openid-configuration"):
        hostile.json(path, make(hostile.url))
    hostile.json("/jwks", {"keys": [key.as_dict(private=False)]})
    upstream = await stub_factory()
    cfg = gateway_config(
        [hook("org.example.a", upstream.url)], listen=listen(fast), inbound=oauth(hostile.url, hostile.ca_file)
    )
    gw = await gateway_factory(cfg)
    token = compact({"alg": "ES256", "typ": "at+jwt", "kid": "k1"}, json.dumps(claims_for(hostile.url)).encode(), key)
    answer = await exchange(gw.port, request(bearer(token)))
    assert upstream.received == []
    assert_refused(answer, 401, INVALID_TOKEN)
    assert metric(gw, "issuer_unavailable") == 1
    assert "/jwks" not in hostile.hits


def weak_rsa_key(kid: str) -> RSAKey:
    """A 512-bit RSA key (factorable in hours): cryptography refuses to generate one, so the
    primes are found here, deterministically."""
    rng = random.Random(512)

    def probable_prime(n: int) -> bool:
        if n % 2 == 0:
            return False
        d, s = n - 1, 0
        while d % 2 == 0:
            d, s = d // 2, s + 1
        for a in (2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37):
            x = pow(a, d, n)
            if x in (1, n - 1):
                continue
            for _ in range(s - 1):
                x = x * x % n
                if x == n - 1:
                    break
            else:
                return False
        return True

    def prime() -> int:
        while True:
            candidate = rng.getrandbits(256) | (1 << 255) | 1
            if probable_prime(candidate) and (candidate - 1) % 65537:
                return candidate

    p, q = prime(), prime()
    e, phi = 65537, (p - 1) * (q - 1)
    d = pow(e, -1, phi)
    numbers = rsa.RSAPrivateNumbers(p, q, d, d % (p - 1), d % (q - 1), pow(q, -1, p), rsa.RSAPublicNumbers(e, p * q))
    return RSAKey.import_key(numbers.private_key(), parameters={"kid": kid, "alg": "RS256"})


@pytest.mark.spec("AHP-SEC-001")
@pytest.mark.filterwarnings("ignore::joserfc.errors.SecurityWarning")  # as in production: a warning, not an error
async def test_a_weak_rsa_key_in_the_jwks_is_not_trusted_protocol_12(gateway_factory, stub_factory, hostile):
    """A key set holding a 512-bit RSA key: whoever factors it can mint tokens, so tokens it
    verifies must be refused (401), not served."""
    weak = weak_rsa_key("weak-1")
    hostile.json("/jwks", {"keys": [weak.as_dict(private=False)]})
    gw, upstream = await jwks_gateway(gateway_factory, stub_factory, hostile)
    token = compact(
        {"alg": "RS256", "typ": "at+jwt", "kid": "weak-1"}, json.dumps(claims_for(hostile.url)).encode(), weak
    )
    answer = await exchange(gw.port, request(bearer(token)))
    assert upstream.received == []
    assert answer.status == 401


# ------------------------------------------------------------------------------------------------
# OAuth: claims


def claim_cases(issuer: str) -> dict[str, tuple[dict[str, Any] | bytes, int, str | None]]:
    """Name -> (claims, or raw payload bytes; status; reason or None when accepted)."""
    now = int(time.time())
    return {
        "expired beyond the skew": ({"exp": now - 60}, 401, "expired"),
        "expired within the skew": ({"exp": now - 20}, 200, None),
        "exp as a numeric string": ({"exp": str(now + 300)}, 401, "invalid_token"),
        "exp as a list": ({"exp": [now + 300]}, 401, "invalid_token"),
        "nbf beyond the skew": ({"nbf": now + 60}, 401, "invalid_token"),
        "nbf within the skew": ({"nbf": now + 20}, 200, None),
        "nbf as a string": ({"nbf": "0"}, 401, "invalid_token"),
        "aud a list holding the audience among others": (
            {"aud": ["https://other.example/", AUDIENCE, "urn:x"]},
            200,
            None,
        ),
        "aud an object keyed by the audience": ({"aud": {AUDIENCE: True}}, 401, "wrong_audience"),
        "aud a nested list": ({"aud": [[AUDIENCE]]}, 401, "wrong_audience"),
        "aud upper-cased": ({"aud": AUDIENCE.upper()}, 401, "wrong_audience"),
        "aud with a path appended": ({"aud": AUDIENCE + "admin"}, 401, "wrong_audience"),
        "aud missing": ({"aud": None}, 401, "wrong_audience"),
        "iss with a trailing slash": ({"iss": issuer + "/"}, 401, "wrong_issuer"),
        "iss as a list": ({"iss": [issuer]}, 401, "wrong_issuer"),
        "iss missing": ({"iss": None}, 401, "wrong_issuer"),
        "sub an object, no client_id": ({"sub": {"name": "admin"}}, 401, "invalid_token"),
        "sub a number": ({"sub": 7}, 401, "invalid_token"),
        "sub empty, no client_id": ({"sub": ""}, 401, "invalid_token"),
        "scope as a list": ({"scope": ["ahp.hooks"]}, 403, "insufficient_scope"),
        "scope a prefix of the required one": ({"scope": "ahp.hook"}, 403, "insufficient_scope"),
        "scp as a list": ({"scope": None, "scp": ["ahp.hooks"]}, 200, None),
    }


@LANES
@pytest.mark.spec("AHP-SEC-001")
async def test_claim_edges_get_the_documented_status_and_reason_protocol_12(
    gateway_factory, stub_factory, auth_server, fast
):
    """README refusal table (oauth): ``exp`` numeric and past by more than ``clockSkewSeconds``
    -> ``expired``; ``nbf`` beyond the skew -> ``invalid_token``; ``iss`` exactly the issuer;
    ``aud`` a string or a list containing the audience; ``sub`` (else ``client_id``) a non-empty
    string; missing scope -> 403 ``insufficient_scope`` with ``scope="…"``."""
    gw, upstream = await oauth_gateway(gateway_factory, stub_factory, auth_server, fast, clockSkewSeconds=30)
    served = 0
    for name, (overrides, status, reason) in claim_cases(auth_server.issuer).items():
        assert isinstance(overrides, dict)
        token = auth_server.mint(claims_for(auth_server.issuer, **overrides))
        before = failures(gw)
        answer = await exchange(gw.port, request(bearer(token)))
        assert answer.status == status, (name, answer.raw[:300])
        if reason is None:
            served += 1
            continue
        challenge = (
            RESOURCE_METADATA + ', error="insufficient_scope", scope="ahp.hooks"' if status == 403 else INVALID_TOKEN
        )
        assert answer.headers.get("www-authenticate") == challenge, name
        after = failures(gw)
        assert after[reason] == before[reason] + 1, (name, {k: after[k] - before[k] for k in after})
    assert len(upstream.received) == served


@LANES
@pytest.mark.spec("AHP-SEC-001")
@pytest.mark.parametrize("value", ["NaN", "Infinity", "1e999"])
async def test_a_non_finite_exp_is_not_a_numeric_exp_protocol_12(
    gateway_factory, stub_factory, auth_server, fast, value
):
    """README: no numeric ``exp`` -> 401 ``invalid_token``. ``NaN``/``Infinity`` are not JSON
    numbers (RFC 8259) and a token carrying one must not live forever."""
    gw, upstream = await oauth_gateway(gateway_factory, stub_factory, auth_server, fast)
    head = json.dumps(claims_for(auth_server.issuer, exp=None))[:-1]
    payload = f'{head}, "exp": {value}}}'.encode()
    key = auth_server.signing_key
    token = compact({"alg": "ES256", "typ": "at+jwt", "kid": key.kid}, payload, key)
    answer = await exchange(gw.port, request(bearer(token)))
    assert upstream.received == []
    assert_refused(answer, 401, INVALID_TOKEN)


@LANES
@pytest.mark.spec("AHP-SEC-001")
async def test_a_deeply_nested_token_payload_is_refused_not_a_server_error_protocol_12(
    gateway_factory, stub_factory, auth_server, fast
):
    """A signed token whose payload nests 1200 arrays (under 4 KiB, so the fast lane reads
    the header itself): refused 401 ``invalid_token``, counted, never a 500."""
    gw, upstream = await oauth_gateway(gateway_factory, stub_factory, auth_server, fast)
    head = json.dumps(claims_for(auth_server.issuer))[:-1]
    payload = (head + ', "deep": ' + "[" * 1200 + "]" * 1200 + "}").encode()
    key = auth_server.signing_key
    token = compact({"alg": "ES256", "typ": "at+jwt", "kid": key.kid}, payload, key)
    assert len(token) < 4096
    answer = await exchange(gw.port, request(bearer(token)))
    assert upstream.received == []
    assert_refused(answer, 401, INVALID_TOKEN)
    assert metric(gw, "invalid_token") == 1


@LANES
@pytest.mark.spec("AHP-SEC-001")
async def test_an_oversized_token_gets_the_documented_401_protocol_12(gateway_factory, stub_factory, auth_server, fast):
    """README refusal table: a token over 8000 bytes -> 401 ``error="invalid_request"``, reason
    ``malformed``, without an upstream call or a JWKS fetch; an ``Authorization`` line past the
    HTTP parser's 8190 bytes -> its 400, whose text names the error class and never quotes the
    token."""
    gw, upstream = await oauth_gateway(gateway_factory, stub_factory, auth_server, fast)
    filler = 5400
    token = auth_server.mint(claims_for(auth_server.issuer, filler="f" * filler))
    while len(token) <= 8000:
        filler += 40
        token = auth_server.mint(claims_for(auth_server.issuer, filler="f" * filler))
    assert len(bearer(token)) < 8190, len(token)  # within the parser's field limit
    answer = await exchange(gw.port, request(bearer(token)))
    assert upstream.received == [] and auth_server.jwks_fetches == 0
    assert_refused(answer, 401, INVALID_REQUEST, token[-64:])
    assert metric(gw, "malformed") == 1

    huge = auth_server.mint(claims_for(auth_server.issuer, filler="f" * (17 * 1024)))
    answer = await exchange(gw.port, request(bearer(huge)))
    assert answer.status == 400 and huge[:40].encode() not in answer.raw and huge[-40:].encode() not in answer.raw
    assert upstream.received == [] and auth_server.jwks_fetches == 0


@LANES
@pytest.mark.spec("AHP-SEC-001")
async def test_a_megabyte_token_is_refused_cheaply_without_reaching_the_issuer_protocol_12(
    gateway_factory, stub_factory, auth_server, fast
):
    """A 1 MiB Authorization header: refused from the head (never parsed as a JWT, no JWKS
    fetch, no upstream call), answered within the deadline, and the gateway keeps serving."""
    gw, upstream = await oauth_gateway(gateway_factory, stub_factory, auth_server, fast)
    huge = "A" * (1024 * 1024)
    answer = await exchange(gw.port, request(bearer(huge)))
    assert answer.status in (400, 401, 431)
    assert upstream.received == [] and auth_server.jwks_fetches == 0
    valid = auth_server.mint(claims_for(auth_server.issuer))
    assert (await exchange(gw.port, request(bearer(valid)))).status == 200


# ------------------------------------------------------------------------------------------------
# principal confusion


@pytest.fixture
async def routed(gateway_factory, stub_factory, auth_server):
    """Chains chosen by the principal (the README's per-tenant routing): ``admin`` and tenant
    ``a`` each have their own upstream; everyone else goes to ``other``."""
    admin, tenant_a, other = await stub_factory(), await stub_factory(), await stub_factory()
    hooks = [
        hook("org.example.admin", admin.url, when='principal.name == "admin"'),
        hook(
            "org.example.tenant-a",
            tenant_a.url,
            when='has(principal.attributes.tenant) && principal.attributes.tenant == "a"',
        ),
        hook(
            "org.example.other",
            other.url,
            when='principal.name != "admin" && !(has(principal.attributes.tenant) && principal.attributes.tenant == "a")',
        ),
    ]
    out = {}
    for fast in (True, False):
        cfg = gateway_config(
            hooks,
            listen=listen(fast),
            inbound=oauth(auth_server.issuer, auth_server.ca_file),
            log={"decisions": f"d{int(fast)}.jsonl"},
        )
        out[fast] = await gateway_factory(cfg, name=f"gateway-{int(fast)}.yaml")
    return out, {"admin": admin, "tenant-a": tenant_a, "other": other}


def routed_to(stubs: dict[str, Any]) -> dict[str, int]:
    return {name: len(stub.received) for name, stub in stubs.items()}


@LANES
@pytest.mark.spec("AHP-SEC-001")
async def test_claims_cannot_pose_as_another_principal_protocol_12(routed, auth_server, fast, tmp_path):
    """README: the principal is ``sub`` (else ``client_id:<client_id>``, issue 28 item 3); ``principal.name`` and
    ``principal.attributes`` reach CEL. Claims named ``name`` or ``principal``, a ``client_id``
    next to a ``sub``, an object ``sub``, and a 4 KB ``sub`` do not make the caller ``admin``,
    and the decision log records the name exactly."""
    gateways, stubs = routed
    gw = gateways[fast]
    issuer = auth_server.issuer
    cases = [
        ({"sub": "svc-a", "name": "admin", "principal": {"name": "admin"}}, 200, "other"),
        ({"sub": "svc-a", "client_id": "admin"}, 200, "other"),
        ({"sub": "", "client_id": "admin"}, 200, "other"),  # the fallback, qualified: client_id:admin
        ({"sub": {"name": "admin"}, "client_id": "admin"}, 401, None),
        ({"sub": "admin " * 700}, 200, "other"),
        ({"sub": "Admin"}, 200, "other"),
        ({"sub": "svc-a", "tenant": ["a"]}, 200, "other"),
        ({"sub": "svc-a", "tenant": "a"}, 200, "tenant-a"),
    ]
    for claims, status, chain in cases:
        before = routed_to(stubs)
        answer = await exchange(gw.port, request(bearer(auth_server.mint(claims_for(issuer, **claims)))))
        assert answer.status == status, (claims, answer.raw[:200])
        after = routed_to(stubs)
        moved = {k: after[k] - before[k] for k in after if after[k] != before[k]}
        assert moved == ({chain: 1} if chain else {}), (claims, moved)
    log_file = tmp_path / f"d{int(fast)}.jsonl"
    await wait_for(lambda: log_file.exists() and len(log_file.read_text().splitlines()) == 7)
    names = [json.loads(line)["principal"] for line in log_file.read_text().splitlines()]
    assert names[3] == "admin " * 700 and names[2] == "client_id:admin"


@LANES
@pytest.mark.spec("AHP-SEC-001")
@pytest.mark.parametrize(
    "claims",
    [
        pytest.param({"sub": "admin\u0000.attacker"}, id="NUL in sub"),
        pytest.param({"sub": "svc-b", "tenant": "a\u0000-attacker"}, id="NUL in an attribute value"),
        pytest.param({"sub": "svc-b", "tenant\u0000x": "a"}, id="NUL in an attribute name"),
    ],
)
async def test_a_nul_in_a_claim_does_not_impersonate_another_principal_protocol_12(routed, auth_server, fast, claims):
    """A ``sub`` of ``admin\\u0000.attacker`` is not ``admin``; a ``tenant`` of
    ``a\\u0000-attacker`` is not tenant ``a`` (../shared/reference/cel.md: cel-expr-python
    truncates at NUL, so every activation string must be sanitised)."""
    gateways, stubs = routed
    token = auth_server.mint(claims_for(auth_server.issuer, **claims))
    answer = await exchange(gateways[fast].port, request(bearer(token)))
    assert answer.status == 200
    assert routed_to(stubs) == {"admin": 0, "tenant-a": 0, "other": 1}


# ------------------------------------------------------------------------------------------------
# secret hygiene


@LANES
@pytest.mark.spec("AHP-SEC-001")
async def test_tokens_never_reach_logs_metrics_decisions_or_upstreams_protocol_12(
    gateway_factory, stub_factory, auth_server, fast, caplog, tmp_path
):
    """Protocol §12: secret values MUST NOT occur in logs or answers; README: inbound
    credentials are never forwarded upstream and never appear in logs, metrics or answers.
    After accepted, refused, forged and malformed tokens (DEBUG logging on), the decision log,
    ``/metrics`` over HTTP, every log record and the upstream's requests hold none of them."""
    caplog.set_level(logging.DEBUG)
    gw, upstream = await oauth_gateway(gateway_factory, stub_factory, auth_server, fast)
    issuer = auth_server.issuer
    valid = auth_server.mint(claims_for(issuer))
    expired = auth_server.mint(claims_for(issuer, exp=int(time.time()) - 3600))
    scopeless = auth_server.mint(claims_for(issuer, scope="ahp.upload"))
    evil = attacker_key("evil-9")
    forged = compact({"alg": "ES256", "kid": "evil-9"}, json.dumps(claims_for(issuer)).encode(), evil)
    tokens = [valid, expired, scopeless, forged]
    answers = [await exchange(gw.port, request(bearer(t))) for t in tokens]
    answers.append(await exchange(gw.port, request(bearer(valid + " " + forged))))
    answers.append(await exchange(gw.port, request(bearer(valid), bearer(forged))))
    assert [a.status for a in answers] == [200, 401, 403, 401, 401, 401]
    log_file = tmp_path / "decisions.jsonl"
    await wait_for(lambda: log_file.exists() and len(log_file.read_text().splitlines()) == 1)
    exposed = {
        "decision log": log_file.read_text(),
        "metrics": await metrics_text(gw),
        "logs": caplog.text + "".join(str(r.args) for r in caplog.records),
        "upstream": json.dumps(upstream.headers) + json.dumps(upstream.received),
        "answers": b"".join(a.raw for a in answers).decode("latin-1"),
    }
    for token in tokens:
        signature = token.rsplit(".", 1)[1]
        for where, text in exposed.items():
            assert token not in text and signature not in text, f"a token is in the {where}"
    assert all("authorization" not in {k.lower() for k in h} for h in upstream.headers)
