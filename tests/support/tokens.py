"""Static bearer tokens the tests present and the tokens file that names their principals."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import yaml

TOKEN_A = "tok-team-a-7f3c9e1b2d"
TOKEN_B = "tok-team-b-0a9d8c7b6e"


def sha(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def tokens_file(path: Path, *entries: tuple[str, str, dict[str, Any]]) -> Path:
    path.write_text(
        yaml.safe_dump([{"sha256": sha(t), "principal": {"name": n, "attributes": a}} for t, n, a in entries])
    )
    return path
