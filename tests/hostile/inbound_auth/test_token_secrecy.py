"""Tokens never reach logs, metrics, decisions or upstreams (protocol section 12, AHP-SEC-001)."""

from __future__ import annotations

import json
import logging
import time

import pytest

from tests.hostile.inbound_auth.helpers import (
    LANES,
    attacker_key,
    bearer,
    claims_for,
    compact,
    exchange,
    metrics_text,
    oauth_gateway,
    request,
)
from tests.support.client import wait_for

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
