"""Inbound OAuth principals (issue 28 item 3, AHP-AUTH-001, protocol §12; RFC 9068).

A token's subject and a client identifier are different namespaces: ``{sub: team-a}`` and
``{client_id: team-a}`` (no ``sub``) must never become one principal, neither for upload ownership
nor for CEL ``principal.name``. And RFC 9068 §4 requires ``typ: at+jwt``: a ``JWT`` or untyped
token (an ID token, a token minted for something else) is refused unless the operator opts out.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pytest

from tests.support.config import gateway_config, hook
from tests.support.events import intercept, tool_before
from tests.support.inbound import AUDIENCE, oauth_inbound, send
from tests.support.uploads import EVENT_TOKEN, PNG, UPLOAD_TOKEN, image_part, model_request, upload_hook


def _token(auth_server: Any, header: dict[str, Any] | None = None, **claims: Any) -> str:
    return auth_server.mint(auth_server.claims(AUDIENCE, **claims), header=header)


def _bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@pytest.mark.spec("AHP-AUTH-001")
@pytest.mark.parametrize(
    ("typ", "lenient_only"), [(None, True), ("JWT", True), ("at+jwt", False), ("application/at+jwt", False)]
)
async def test_auth_001_access_tokens_must_be_typed_at_jwt_unless_configured(
    gateway_factory, stub_factory, http, auth_server, typ, lenient_only
):
    upstream = await stub_factory()
    if typ is None:  # an untyped token: no typ header member at all
        from joserfc import jwt

        signer = auth_server.signing_key
        token = jwt.encode({"alg": "ES256", "kid": signer.kid}, auth_server.claims(AUDIENCE), signer)
    else:
        token = _token(auth_server, {"typ": typ})
    strict = await gateway_factory(
        gateway_config([hook("org.example.a", upstream.url)], inbound=oauth_inbound(auth_server))
    )
    status, _, _ = await send(http, strict.url, intercept(tool_before()), _bearer(token))
    assert status == (401 if lenient_only else 200)
    lenient = await gateway_factory(
        gateway_config(
            [hook("org.example.a", upstream.url)], inbound=oauth_inbound(auth_server, requireAccessTokenTyp=False)
        ),
        name="lenient.yaml",
    )
    status, _, _ = await send(http, lenient.url, intercept(tool_before()), _bearer(token))
    assert status == 200


@pytest.mark.spec("AHP-AUTH-001")
async def test_auth_001_a_subject_and_a_client_id_of_the_same_spelling_are_different_principals(
    gateway_factory, stub_factory, http, auth_server, tmp_path
):
    """Routing by ``principal.name`` sees the subject unchanged and the client qualified, and the
    decision log records them apart."""
    subject, client = await stub_factory(), await stub_factory()
    cfg = gateway_config(
        [
            hook("org.example.subject", subject.url, when='principal.name == "team-a"'),
            hook("org.example.client", client.url, when='principal.name == "client_id:team-a"'),
        ],
        inbound=oauth_inbound(auth_server),
        log={"decisions": "decisions.jsonl"},
    )
    gw = await gateway_factory(cfg)
    as_subject = _token(auth_server, sub="team-a")
    as_client = _token(auth_server, sub=None, client_id="team-a")
    assert (await send(http, gw.url, intercept(tool_before()), _bearer(as_subject)))[0] == 200
    assert (len(subject.received), len(client.received)) == (1, 0)
    assert (await send(http, gw.url, intercept(tool_before()), _bearer(as_client)))[0] == 200
    assert (len(subject.received), len(client.received)) == (1, 1)
    # A subject spelled like a qualified client id is refused: the namespaces stay apart.
    forged = _token(auth_server, sub="client_id:team-a")
    assert (await send(http, gw.url, intercept(tool_before()), _bearer(forged)))[0] == 401


@pytest.mark.spec("AHP-AUTH-001")
async def test_auth_001_a_client_never_reads_the_uploads_of_a_subject_with_its_name(
    gateway_factory,
    stub_factory,
    receiver_factory,  # noqa: F811  (the fixture imported above)
    http,
    auth_server,
    monkeypatch,
):
    monkeypatch.setenv("A_UPLOAD_TOKEN", UPLOAD_TOKEN)
    monkeypatch.setenv("A_EVENT_TOKEN", EVENT_TOKEN)
    upstream = await stub_factory()
    receiver = await receiver_factory()
    cfg = gateway_config(
        [
            upload_hook(
                "org.example.with-upload",
                upstream.url,
                {
                    "endpoint": receiver.url,
                    "timeoutMs": 1000,
                    "maxBytes": 65536,
                    "auth": {"type": "bearer", "tokenEnv": "A_UPLOAD_TOKEN"},
                },
                authentication={"type": "bearer", "tokenEnv": "A_EVENT_TOKEN"},
            )
        ],
        inbound=oauth_inbound(auth_server),
        uploads={"path": "/uploads", "maxBytes": 8192},
        limits={"maxBodyBytes": 1048576, "deadlineMs": 3000},
    )
    gw = await gateway_factory(cfg)
    as_subject = _token(auth_server, sub="team-a")
    as_client = _token(auth_server, sub=None, client_id="team-a")
    headers = {
        "Content-Type": "application/octet-stream",
        "AHP-Content-SHA256": hashlib.sha256(PNG).hexdigest(),
        **_bearer(as_subject),
    }
    async with http.post(gw.url.rstrip("/") + "/uploads", data=PNG, headers=headers) as response:
        assert response.status == 201, await response.text()
        ref = (await response.json())["ref"]
    body = json.dumps(intercept(model_request(ref))).encode()
    async with http.post(
        gw.url, data=body, headers={"Content-Type": "application/json", **_bearer(as_client)}
    ) as response:
        assert response.status == 200, await response.text()
    assert receiver.requests == [], "the client's request forwarded the subject's upload"
    assert "gap" in image_part(upstream.received[0]["params"]["event"])
    async with http.post(
        gw.url, data=body, headers={"Content-Type": "application/json", **_bearer(as_subject)}
    ) as response:
        assert response.status == 200
    assert len(receiver.requests) == 1  # the owner's own request still gets it
