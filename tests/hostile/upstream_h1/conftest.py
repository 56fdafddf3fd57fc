"""Fixtures of the hostile upstream attacks."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from tests.hostile.upstream_h1.helpers import (
    HOOK,
    LIMIT,
    TIMEOUT_MS,
    Upstream,
)
from tests.support.config import gateway_config, hook


@pytest.fixture
async def rig(gateway_factory: Any) -> AsyncIterator[Callable[..., Awaitable[tuple[Any, Upstream]]]]:
    made: list[Upstream] = []

    async def make(
        policy: str = "fail-closed", timeout_ms: int = TIMEOUT_MS, url: str | None = None
    ) -> tuple[Any, Upstream]:
        upstream = Upstream()
        await upstream.server.__aenter__()
        made.append(upstream)
        entry = hook(
            HOOK,
            url or upstream.url,
            policy=policy,
            timeout=timeout_ms,
            circuitBreaker={"enabled": False},  # every call reaches the upstream
        )
        config = gateway_config(
            [entry],
            limits={"deadlineMs": 5000, "maxResponseBytes": LIMIT, "maxBodyBytes": 1048576},
            log={"decisions": "off"},
        )
        return await gateway_factory(config), upstream

    yield make
    for upstream in made:
        await upstream.server.__aexit__(None, None, None)
