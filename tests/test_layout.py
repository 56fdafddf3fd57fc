"""The tests' own layout (see docs/design/development.md): helpers come from tests/support/, never conftest."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent


def _test_files() -> list[Path]:
    return sorted(p for p in TESTS.rglob("test_*.py") if "support" not in p.relative_to(TESTS).parts)


def _imports_conftest(path: Path) -> bool:
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[-1] == "conftest":
            return True
        if isinstance(node, ast.ImportFrom) and any(alias.name == "conftest" for alias in node.names):
            return True
        if isinstance(node, ast.Import) and any(a.name.split(".")[-1] == "conftest" for a in node.names):
            return True
    return False


def test_no_test_file_imports_a_conftest() -> None:
    """conftest.py holds fixtures and hooks; what a test imports lives in tests/support/."""
    offenders = [str(p.relative_to(TESTS)) for p in _test_files() if _imports_conftest(p)]
    assert offenders == []


AREAS = {"unit", "binding", "e2e", "hostile", "bench", "deploy", "observability", "harnesses", "docs"}
"""Where a test file may live (docs/design/development.md); tests/test_layout.py is the one file at the top."""


def test_every_test_file_sits_in_an_agreed_directory() -> None:
    misplaced = [
        str(p.relative_to(TESTS))
        for p in _test_files()
        if p.relative_to(TESTS).parts[0] not in AREAS and p.relative_to(TESTS) != Path("test_layout.py")
    ]
    assert misplaced == []


def test_every_test_directory_is_a_package() -> None:
    """Test modules are imported by their dotted path, so two files of one name cannot collide."""
    dirs = {p.parent for p in _test_files() if p.relative_to(TESTS).parts[0] != "harnesses"}
    assert [str(d.relative_to(TESTS)) for d in sorted(dirs) if not (d / "__init__.py").exists()] == []


MAX_LINES = 800


def test_no_test_file_is_over_800_lines() -> None:
    """A longer file is split by topic into files in the same directory, sharing a local helpers.py."""
    long = {str(p.relative_to(TESTS)): n for p in _test_files() if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert long == {}
