"""Running ``ahp-gateway stdio`` as a child process for tests: its configuration file (no
listener, no reload watcher), its environment, its whole output."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import yaml

from tests.support.config import gateway_config, stdio_argv
from tests.support.paths import ROOT


def write_config(tmp_path: Path, hooks: list[dict[str, Any]], **extra: Any) -> Path:
    cfg = gateway_config(hooks, **extra)
    cfg.pop("listen")
    cfg.setdefault("reload", {"watch": False})
    path = tmp_path / "gateway.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return path


def child_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH",)}
    return {**env, **extra}


async def run_stdio(
    config: Path, stdin: bytes, *, env: dict[str, str] | None = None, args: tuple[str, ...] = ()
) -> tuple[int, list[bytes], str]:
    proc = await asyncio.create_subprocess_exec(
        *stdio_argv(config, *args),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        cwd=ROOT,
        env=child_env() if env is None else env,
    )
    out, err = await asyncio.wait_for(proc.communicate(stdin), 60)
    assert proc.returncode is not None
    return proc.returncode, out.splitlines(), err.decode(errors="replace")
