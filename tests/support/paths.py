"""Where the tests find the repository and its vendored vectors."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
VECTORS = ROOT / "tests" / "vectors"
"""Vendored upstream test vectors (see tests/vectors/README.md)."""
