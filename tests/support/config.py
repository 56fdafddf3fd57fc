"""Gateway configurations the tests write: hook entries, whole configurations, stdio command lines."""

from __future__ import annotations

import sys
from typing import Any


def hook(
    hook_id: str,
    url: str,
    *,
    policy: str = "fail-closed",
    timeout: int = 1000,
    events: list[str] | None = None,
    **extra: Any,
) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "id": hook_id,
        "transport": {"type": "http", "url": url},
        "subscriptions": [
            {
                "mode": "intercept",
                "events": events or ["tool.before"],
                "timeoutMs": timeout,
                "failurePolicy": policy,
                "content": {"default": "body"},
            }
        ],
    }
    entry.update(extra)
    return entry


def stdio_argv(config: Any, *args: str) -> list[str]:
    """The command line of ``ahp-gateway [args] stdio --config <config>`` in this interpreter."""
    return [sys.executable, "-m", "gateway", *args, "stdio", "--config", str(config)]


def gateway_config(hooks: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    cfg: dict[str, Any] = {
        "id": "org.example.gateway",
        "listen": {"host": "127.0.0.1", "port": 0, "path": "/"},
        "admin": {"host": "127.0.0.1", "port": 0},
        "limits": {"maxBodyBytes": 1048576, "deadlineMs": 2000},
        "hooks": hooks,
    }
    cfg.update(extra)
    return cfg
