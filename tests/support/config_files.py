"""A complete gateway configuration (one HTTP hook with bearer credentials) and writing one to a test's directory, for the configuration tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

BASE: dict[str, Any] = {
    "id": "org.example.gateway",
    "hooks": [
        {
            "id": "org.example.guard",
            "transport": {"type": "http", "url": "http://127.0.0.1:8801/"},
            "authentication": {"type": "bearer", "tokenEnv": "GUARD_TOKEN"},
            "subscriptions": [
                {
                    "mode": "intercept",
                    "events": ["tool.before"],
                    "timeoutMs": 300,
                    "failurePolicy": "fail-closed",
                    "content": {"default": "body"},
                },
                {"mode": "observe", "events": ["*"], "content": {"default": "metadata"}},
            ],
        }
    ],
}


def write_yaml(tmp_path: Path, cfg: dict[str, Any], name: str = "gateway.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return path
