"""Fixtures of the upload attacks."""

from __future__ import annotations

import logging

import pytest

from tests.hostile.uploads.helpers import (
    EVENT_TOKEN,
    SECRETS,
    TOKEN_U,
    UPLOAD_TOKEN,
    Behaviour,
    RawReceiver,
    config,
)
from tests.support.tokens import TOKEN_A, TOKEN_B, tokens_file


@pytest.fixture
def secrets_env(tmp_path, monkeypatch):
    monkeypatch.setenv("HOSTILE_UPLOAD_TOKEN", UPLOAD_TOKEN)
    monkeypatch.setenv("HOSTILE_EVENT_TOKEN", EVENT_TOKEN)
    tokens_file(
        tmp_path / "tokens.yaml",
        (TOKEN_A, "team-a", {"tenant": "a"}),
        (TOKEN_B, "team-b", {"tenant": "b"}),
        (TOKEN_U, "équipe-ü", {"tenant": "u"}),
    )


@pytest.fixture
async def receivers():
    made: list[RawReceiver] = []

    async def make(behaviour: Behaviour) -> RawReceiver:
        receiver = await RawReceiver(behaviour).start()
        made.append(receiver)
        return receiver

    yield make
    for receiver in made:
        await receiver.aclose()


@pytest.fixture
async def gw(gateway_factory, secrets_env):
    """A receiver with no upstream upload binding: storage and framing attacks."""
    return await gateway_factory(config(None))


@pytest.fixture
def no_secrets_logged(caplog):
    """Credentials never reach the log (asserted after the test body)."""
    caplog.set_level(logging.DEBUG)
    yield caplog
    text = caplog.text + "".join(str(r.args) for r in caplog.records)
    for secret in SECRETS:
        assert secret not in text
