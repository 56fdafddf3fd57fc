"""Which build of the gateway runs: the policy facts compiled by mypyc (``AHP_GATEWAY_MYPYC=1``
at install, setup.py) or interpreted. Shown by ``ahp_gateway_build_info{facts}``, so an operator can
tell a replica's build without a shell in its container."""

from __future__ import annotations

import functools
import importlib.machinery
from pathlib import Path

WALKER = Path(__file__).resolve().parent / "policy" / "facts" / "shell" / "walker"


@functools.cache
def facts_build() -> str:
    """``compiled`` when the shell walker is an extension module (the import system prefers one
    to the ``.py`` beside it), else ``interpreted``; found without importing anything."""
    compiled = any(WALKER.with_name(WALKER.name + s).is_file() for s in importlib.machinery.EXTENSION_SUFFIXES)
    return "compiled" if compiled else "interpreted"
