"""``policy test --coverage``: which rules no test makes fire (condition true), so a policy
author sees rules whose tests are missing or whose conditions can no longer match.

A rule counts as covered when at least one selected test of its own file evaluated its condition
to true (the effect may still have been suppressed by the test's capabilities). Rules after a deny
are not evaluated in that test, exactly as in production."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from gateway.config.load import line_of
from gateway.policy.cases import CaseResult
from gateway.policy.library import Library


@dataclass(frozen=True, slots=True)
class Unfired:
    file: Path
    rule: str
    line: int | None


@dataclass(frozen=True, slots=True)
class Coverage:
    total: int
    fired: int
    unfired: tuple[Unfired, ...]

    @property
    def percent(self) -> float:
        return 100.0 if self.total == 0 else 100.0 * self.fired / self.total


def coverage(library: Library, results: Sequence[CaseResult]) -> Coverage:
    fired = {(r.file, rule) for r in results for rule in r.fired}
    unfired = []
    total = 0
    for policy_file in library.files:
        for index, raw in enumerate(policy_file.spec.rules):
            rule_id = str(raw.get("id"))
            total += 1
            if (policy_file.path, rule_id) not in fired:
                unfired.append(Unfired(policy_file.path, rule_id, line_of(policy_file.path, ["rules", index, "id"])))
    return Coverage(total, total - len(unfired), tuple(unfired))
