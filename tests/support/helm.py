"""The Helm chart the deploy tests render, and running helm: paths, release names, results, arguments."""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "ahp-gateway"
CI_VALUES = sorted((CHART / "ci").glob("*-values.yaml"))
KUBE_VERSION = "1.30.0"
NAMESPACE = "ahp"
RELEASE = "demo"


def missing_tool(what: str) -> None:
    """Skip locally; fail in CI, where the tools are part of the test environment."""
    message = f"{what} is not installed (see tests/deploy/README.md)"
    if os.environ.get("CI"):
        pytest.fail(message)
    pytest.skip(message)


@dataclass(frozen=True)
class HelmResult:
    returncode: int
    stdout: str
    stderr: str

    @property
    def output(self) -> str:
        return self.stdout + self.stderr


def values_args(values: Iterable[Path | str] = (), sets: Sequence[str] = ()) -> list[str]:
    args: list[str] = []
    for path in values:
        args += ["-f", str(path)]
    for item in sets:
        args += ["--set", item]
    return args
