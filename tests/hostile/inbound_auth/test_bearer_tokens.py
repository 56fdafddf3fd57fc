"""Static bearer tokens under attack: near misses, control bytes, echoed headers (protocol section 12)."""

from __future__ import annotations

import base64
import logging

import pytest
import yaml

from tests.hostile.inbound_auth.helpers import (
    LANES,
    TOKEN,
    assert_refused,
    bearer,
    exchange,
    failures,
    listen,
    metrics_text,
    request,
    sha,
)
from tests.support.config import gateway_config, hook

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
    """docs/operations/authentication.md refusal table: a token that is not exactly a listed one is 401
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
