"""Configuration problems as values, shared by configuration and policy loading.

An :class:`Issue` names the file, the JSON path, the line where known and the reason; loaders
collect all of them before failing with one :class:`ConfigError`, so ``ahp-gateway check`` can
print every problem at once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

PathItem = str | int


@dataclass(frozen=True, slots=True)
class Issue:
    file: str
    path: str
    message: str
    line: int | None = None
    severity: Literal["error", "warning"] = "error"

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" if self.line else self.file
        return f"{where}: {self.path}: {self.message}"


class ConfigError(Exception):
    """``issues`` are the errors; ``warnings`` found on the way travel with them, so a typo that
    caused an error (an unknown key next to a missing one) is shown together with it."""

    def __init__(self, issues: list[Issue], warnings: list[Issue] | None = None) -> None:
        super().__init__("\n".join(str(i) for i in issues))
        self.issues = issues
        self.warnings = list(warnings or ())


def json_path(items: tuple[PathItem, ...] | list[PathItem]) -> str:
    """``$.hooks[0].transport.url`` style path of ``items``."""
    out = "$"
    for item in items:
        out += f"[{item}]" if isinstance(item, int) else f".{item}"
    return out
