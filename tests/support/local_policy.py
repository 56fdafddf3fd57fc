"""A gateway configuration with one local policy backend (a shell rule), written to a test's directory."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml


def write_config(tmp_path: Path, **extra: Any) -> Path:
    (tmp_path / "policies").mkdir(exist_ok=True)
    (tmp_path / "policies" / "shell.yaml").write_text(POLICY)
    cfg: dict[str, Any] = {
        "id": "org.example.gateway",
        "log": {"decisions": "off"},
        "hooks": [
            {
                "id": "org.example.policies",
                "transport": {"type": "local", "policies": ["policies/"]},
                "subscriptions": [
                    {
                        "mode": "intercept",
                        "events": ["tool.before"],
                        "timeoutMs": 200,
                        "failurePolicy": "fail-closed",
                        "content": {"default": "body"},
                    }
                ],
            }
        ],
        **extra,
    }
    path = tmp_path / "gateway.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return path


POLICY = """\
namespace: org.example.shell
rules:
  - id: sudo
    events: [tool.before]
    when: 'event.tool.input.command.startsWith("sudo ")'
    deny: {reason: sudo is not allowed here.}
"""
