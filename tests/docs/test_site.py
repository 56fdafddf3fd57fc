"""The manual (docs/, mkdocs.yml) builds with ``mkdocs build --strict``: a broken link, a missing
anchor or a page left out of the navigation fails this test, so it fails in CI as it would on the
site."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.support.paths import ROOT

pytest.importorskip("mkdocs", reason="mkdocs is in the test extra: pip install -e '.[test]'")
pytest.importorskip("material", reason="mkdocs-material is in the test extra: pip install -e '.[test]'")


def test_the_manual_builds_strictly_without_a_warning(tmp_path: Path) -> None:
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=110,
        start_new_session=True,
    )
    warnings = [line for line in proc.stderr.splitlines() if line.startswith(("WARNING", "ERROR"))]
    assert proc.returncode == 0 and warnings == [], proc.stderr
    assert (tmp_path / "site" / "index.html").is_file()
    assert (tmp_path / "site" / "reference" / "configuration" / "index.html").is_file()


def test_every_markdown_file_in_docs_is_in_the_navigation() -> None:
    """``validation.omitted_files: warn`` makes a page outside ``nav`` a warning; this names it."""
    text = (ROOT / "mkdocs.yml").read_text()
    nav = yaml.load(text, Loader=_Loader)["nav"]  # noqa: S506 -- a SafeLoader that ignores Python tags

    def pages(node: object) -> set[str]:
        if isinstance(node, str):
            return set() if "://" in node else {node}
        if isinstance(node, list):
            return set().union(*(pages(n) for n in node))
        if isinstance(node, dict):
            return set().union(*(pages(v) for v in node.values()))
        return set()

    files = {str(p.relative_to(ROOT / "docs")) for p in (ROOT / "docs").rglob("*.md")}
    assert files == pages(nav)


class _Loader(yaml.SafeLoader):
    """Reads mkdocs.yml's Python tags as plain data: only ``nav`` is read here."""


_Loader.add_multi_constructor("tag:yaml.org,2002:python/", lambda loader, suffix, node: None)


def _github_anchor(heading: str) -> str:
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def test_every_link_of_the_front_page_resolves() -> None:
    """README.md is outside the site, so mkdocs does not check it: its links into docs/ and the
    repository must name files that exist, and anchors that their headings make."""
    readme = (ROOT / "README.md").read_text()
    links = re.findall(r"\]\(([^)\s]+)\)", readme)
    assert links
    for link in links:
        if re.match(r"^[a-z]+://", link):
            continue
        target, _, anchor = link.partition("#")
        path = ROOT / target if target else ROOT / "README.md"
        assert path.exists(), f"README.md links to {link}, which does not exist"
        if anchor:
            headings = re.findall(r"^#{1,6} (.+)$", path.read_text(), re.MULTILINE)
            assert anchor in {_github_anchor(h) for h in headings}, f"README.md: no heading for #{anchor} in {target}"
