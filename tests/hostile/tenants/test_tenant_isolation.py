"""One tenant must not be able to change what another tenant's request gets.

Issue 28 item 1 (AHP-CAP-001, AHP-FAIL-001): an answer that is invalid only because of the
caller's own request (an effect that request did not advertise) is that request's failure, settled
by the hook's failure policy, but it says nothing about the upstream's health: it must never count
toward the shared circuit breaker, or one tenant could switch a policy off for every tenant.
The other provocations (a timeout within a budget the caller's own chain cut short, a caller that
disconnects), on both lanes and under both policies, are rows of ``tests/e2e/test_faults_matrix_tenants.py``.
"""

from __future__ import annotations

import pytest

from tests.support.config import gateway_config, hook
from tests.support.events import intercept, result, tool_before
from tests.support.inbound import send
from tests.support.tokens import TOKEN_A, TOKEN_B, tokens_file

GUARD = "org.example.shared-guard"
DENY = {"type": "deny", "reason": "force pushes are not allowed", "code": "org.example.force-push"}


@pytest.mark.spec("AHP-CAP-001")
@pytest.mark.spec("AHP-FAIL-001")
async def test_cap_001_unadvertised_effects_a_caller_provokes_never_open_the_shared_breaker(
    gateway_factory, stub_factory, http, tmp_path
):
    """Tenant A advertises only ``message``; the guard denies anyway (invalid for A's request,
    fail-open: A gets no objection). Five such requests must leave the breaker closed, so tenant
    B's force push is still denied by the guard."""
    tokens_file(tmp_path / "tokens.yaml", (TOKEN_A, "team-a", {"tenant": "a"}), (TOKEN_B, "team-b", {"tenant": "b"}))
    guard = await stub_factory(lambda r: result(r, [DENY]))
    cfg = gateway_config(
        [hook(GUARD, guard.url, policy="fail-open", circuitBreaker={"failureThreshold": 5, "openSeconds": 60})],
        inbound={"auth": {"type": "bearer", "tokensFile": "tokens.yaml"}},
    )
    gw = await gateway_factory(cfg)
    as_a = {"Authorization": f"Bearer {TOKEN_A}"}
    as_b = {"Authorization": f"Bearer {TOKEN_B}"}
    for _ in range(5):
        status, body, _ = await send(http, gw.url, intercept(tool_before("git status"), {"effects": ["message"]}), as_a)
        assert status == 200 and body["result"]["effects"] == [], body
    assert len(guard.received) == 5
    status, body, _ = await send(http, gw.url, intercept(tool_before("git push --force origin main")), as_b)
    assert status == 200, body
    assert len(guard.received) == 6, "the guard was not called: its breaker was opened by another tenant"
    effects = body["result"]["effects"]
    assert [e["type"] for e in effects] == ["deny"] and effects[0]["code"] == DENY["code"], effects
