"""Inbound OAuth principals (issue 28 item 3, AHP-AUTH-001, protocol §12; RFC 9068).

A token's subject and a client identifier are different namespaces: ``{sub: team-a}`` and
``{client_id: team-a}`` (no ``sub``) must never become one principal, neither for upload ownership
nor for CEL ``principal.name``. And RFC 9068 §4 requires ``typ: at+jwt``: a ``JWT`` or untyped
token (an ID token, a token minted for something else) is refused unless the operator opts out.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.conftest import gateway_config, hook, intercept, tool_before
from tests.test_inbound_auth import AUDIENCE, oauth_inbound, send
from tests.test_uploads import (  # noqa: F401  (receiver_factory is a fixture)
    EVENT_TOKEN,
    PNG,
    UPLOAD_TOKEN,
    image_part,
    model_request,
    receiver_factory,
    upload_hook,
)


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
