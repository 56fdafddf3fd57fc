"""Build hook: with ``AHP_GATEWAY_MYPYC=1`` the policy facts (``gateway/policy/facts``, the shell
walk that every tool call pays for) are compiled to C extensions with mypyc, which measured 1.6x
faster on real tool calls (docs/design/performance.md, "Compiled facts"). Without it the package
is pure Python and behaves the same. Everything else is in ``pyproject.toml``."""

from __future__ import annotations

import os
from pathlib import Path

from setuptools import setup

FACTS = Path("gateway/policy/facts")
INTERPRETED = {FACTS / "programs.py"}
"""Modules left to the interpreter: the program table's pydantic models (mypyc cannot compile a
pydantic model; the table is loaded once, at import)."""


def compiled_modules() -> list[str]:
    return sorted(str(p) for p in FACTS.rglob("*.py") if p not in INTERPRETED)


def ext_modules() -> list[object]:
    if os.environ.get("AHP_GATEWAY_MYPYC", "0") != "1":
        return []
    from mypyc.build import mypycify

    # The project's own mypy settings (strict) stay for `mypy`; here the runtime dependencies may be
    # absent (an isolated wheel build), so they are typed Any: the compiled code is the same code.
    flags = ["--config-file=", "--ignore-missing-imports", "--python-version=3.11"]
    return list(mypycify([*flags, *compiled_modules()], opt_level="3"))


setup(ext_modules=ext_modules())
