"""OAuth claims at their edges and claims posing as another principal (protocol section 12)."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from tests.hostile.inbound_auth.helpers import (
    AUDIENCE,
    INVALID_REQUEST,
    INVALID_TOKEN,
    LANES,
    RESOURCE_METADATA,
    assert_refused,
    bearer,
    claims_for,
    compact,
    exchange,
    failures,
    listen,
    metric,
    oauth,
    oauth_gateway,
    request,
)
from tests.support.client import wait_for
from tests.support.config import gateway_config, hook

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
    """README: the principal is ``sub`` (else ``client_id``); ``principal.name`` and
    ``principal.attributes`` reach CEL. Claims named ``name`` or ``principal``, a ``client_id``
    next to a ``sub``, an object ``sub``, and a 4 KB ``sub`` do not make the caller ``admin``,
    and the decision log records the name exactly."""
    gateways, stubs = routed
    gw = gateways[fast]
    issuer = auth_server.issuer
    cases = [
        ({"sub": "svc-a", "name": "admin", "principal": {"name": "admin"}}, 200, "other"),
        ({"sub": "svc-a", "client_id": "admin"}, 200, "other"),
        ({"sub": "", "client_id": "admin"}, 200, "admin"),  # the documented fallback
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
    assert names[3] == "admin " * 700 and names[2] == "admin"


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
