"""Inbound authentication under attack (protocol §12, AHP-SEC-001, docs/operations/authentication.md),
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
import json
import random
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from aiohttp import web
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from joserfc.jwk import ECKey, RSAKey

from gateway.server.app import GatewayServer
from tests.hostile.inbound_auth.helpers import (
    INVALID_REQUEST,
    INVALID_TOKEN,
    LANES,
    RESOURCE_METADATA,
    Hostile,
    assert_refused,
    attacker_key,
    b64,
    bearer,
    claims_for,
    compact,
    es256,
    exchange,
    failures,
    hs256,
    jwks_gateway,
    listen,
    metric,
    oauth,
    oauth_gateway,
    request,
)
from tests.support.client import wait_for
from tests.support.config import gateway_config, hook
from tests.support.oauth_server import LoopbackAuthServer

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
    """docs/operations/authentication.md (oauth): only asymmetric ``algorithms`` (``none`` and ``HS*``
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
