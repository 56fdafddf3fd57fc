"""``ahp-gateway policy test``: run the tests of policy files (optionally a ``--run`` selection)
and report as text or JSON, with ``--coverage`` (rules no test makes fire) and ``--fail-under``."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gateway.command_result import CommandResult, display, issue_dict, issue_text
from gateway.policy.cases import CaseResult, run_library
from gateway.policy.coverage import Coverage, coverage
from gateway.policy.library import PolicyError, load_policies
from gateway.policy.spec import CaseSpec
from gateway.routing.cel import Engine


@dataclass(frozen=True)
class Options:
    paths: Sequence[Path]
    pattern: str | None = None
    fmt: str = "text"
    verbose: bool = False
    with_coverage: bool = False
    fail_under: float | None = None


def policy_test(options: Options) -> CommandResult:
    try:
        select = re.compile(options.pattern) if options.pattern else None
    except re.error as exc:
        return CommandResult(2, stderr=f"error: --run {options.pattern!r} is not a valid regular expression: {exc}\n")
    engine = Engine()
    try:
        library = load_policies(options.paths, engine)
    except PolicyError as exc:
        if options.fmt == "json":
            body = {"ok": False, "errors": [issue_dict(i) for i in exc.issues]}
            return CommandResult(1, json.dumps(body, indent=2, ensure_ascii=False) + "\n")
        return CommandResult(1, stderr="".join(issue_text(i) + "\n" for i in exc.issues))

    def chosen(case: CaseSpec) -> bool:
        return select is None or select.search(case.name) is not None

    results = run_library(library, engine, chosen)
    cover = coverage(library, results) if options.with_coverage or options.fail_under is not None else None
    failed = sum(not r.passed for r in results)
    below = cover is not None and options.fail_under is not None and cover.percent < options.fail_under
    code = 1 if failed or below else 0
    if options.pattern and not results:
        code = 1
    if options.fmt == "json":
        return CommandResult(
            code, json.dumps(_json(results, cover, options, code), indent=2, ensure_ascii=False) + "\n"
        )
    return CommandResult(code, "\n".join(_text(results, cover, options)) + "\n")


def _json(results: Sequence[CaseResult], cover: Coverage | None, options: Options, code: int) -> dict[str, Any]:
    failed = sum(not r.passed for r in results)
    body: dict[str, Any] = {
        "ok": code == 0,
        "passed": len(results) - failed,
        "failed": failed,
        "tests": [
            {
                "file": display(r.file),
                "name": r.name,
                "passed": r.passed,
                **({} if r.passed else {"expected": r.expected, "actual": r.actual, "error": r.error}),
                "fired": list(r.fired),
            }
            for r in results
        ],
    }
    if options.pattern:
        body["run"] = options.pattern
    if cover is not None:
        body["coverage"] = {
            "rules": cover.total,
            "fired": cover.fired,
            "percent": round(cover.percent, 1),
            "failUnder": options.fail_under,
            "unfired": [{"file": display(u.file), "line": u.line, "rule": u.rule} for u in cover.unfired],
        }
    return body


def _text(results: Sequence[CaseResult], cover: Coverage | None, options: Options) -> list[str]:
    lines: list[str] = []
    current: Path | None = None
    for result in results:
        if result.file != current:
            current = result.file
            lines.append(display(result.file))
        if result.passed:
            if options.verbose:
                lines.append(f"  ok    {result.name}")
            continue
        lines.append(f"  FAIL  {result.name}")
        if result.error:
            lines.append(f"        error:    {result.error}")
        lines.append(f"        expected: {json.dumps(result.expected, ensure_ascii=False)}")
        if result.actual is not None:  # None: nothing was evaluated, the error line says why
            lines.append(f"        actual:   {json.dumps(result.actual, ensure_ascii=False)}")
    failed = sum(not r.passed for r in results)
    if options.pattern and not results:
        lines.append(f"no test name matches --run {options.pattern!r}")
    lines.append(f"{len(results) - failed} passed, {failed} failed")
    if cover is not None:
        lines.append(f"coverage: {cover.fired}/{cover.total} rules fired ({cover.percent:.1f}%)")
        for item in cover.unfired:
            where = display(item.file) + (f":{item.line}" if item.line else "")
            lines.append(f"  not fired by any test: {where} {item.rule}")
        if options.fail_under is not None and cover.percent < options.fail_under:
            lines.append(f"FAIL coverage {cover.percent:.1f}% is below --fail-under {options.fail_under:g}%")
    return lines
