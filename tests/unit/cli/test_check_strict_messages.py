"""``check --strict`` never prints OK when it then fails."""

from __future__ import annotations

from pathlib import Path

from gateway.check_cmd import check
from tests.support.messages import config

# --- check --strict ------------------------------------------------------------------------------


def test_check_strict_never_prints_ok_when_it_fails(tmp_path: Path) -> None:
    path = config(tmp_path, head="id: org.example.gateway\nlimit: {deadlineMs: 500}\n")
    relaxed = check(str(path))
    assert relaxed.code == 0 and relaxed.stdout.startswith("OK ")
    strict = check(str(path), strict=True)
    assert strict.code == 1
    assert not any(line.startswith("OK") for line in strict.stdout.splitlines())
    assert strict.stdout.startswith("FAILED (--strict) ")
    assert "1 warning(s) and --strict" in strict.stderr
