"""The agent's version for ``event.harness.version``, where the hook's environment tells it: the
payloads carry none, but some agents set it for the hooks they run (observed with the pinned
versions): Claude Code ``AI_AGENT=claude-code_2-1-332_harness``, Copilot CLI
``COPILOT_CLI_BINARY_VERSION=1.0.102``, and npm-installed Codex ``CODEX_MANAGED_PACKAGE_ROOT``
(its ``package.json`` holds the version). Gemini CLI, Cursor (whose payload has its own) and
Windsurf give nothing: their version stays ``unknown``. Only the command hook sees an environment;
an agent's HTTP hook reports ``unknown``.

A label, never trusted for anything else: bounded and restricted to version characters."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping

_VERSION = re.compile(r"[0-9A-Za-z][0-9A-Za-z.+-]{0,63}")
_CLAUDE_AGENT = re.compile(r"claude-code_([0-9][0-9A-Za-z-]{0,63})_")
_MAX_PACKAGE_JSON = 64 * 1024


def _clean(value: object) -> str | None:
    return value if isinstance(value, str) and _VERSION.fullmatch(value) else None


def from_environment(harness: str, environ: Mapping[str, str]) -> str | None:
    """The version the agent announced to its hook, or None."""
    if harness == "claude-code":
        found = _CLAUDE_AGENT.match(environ.get("AI_AGENT", ""))
        return _clean(found.group(1).replace("-", ".")) if found else None
    if harness == "copilot":
        return _clean(environ.get("COPILOT_CLI_BINARY_VERSION"))
    if harness == "codex":
        root = environ.get("CODEX_MANAGED_PACKAGE_ROOT")
        if not root:
            return None
        try:
            with open(os.path.join(root, "package.json"), "rb") as file:  # os.path: no pathlib import in the hook
                manifest = json.loads(file.read(_MAX_PACKAGE_JSON))
        except (OSError, ValueError):
            return None
        if not isinstance(manifest, dict) or manifest.get("name") != "@openai/codex":
            return None
        return _clean(manifest.get("version"))
    return None
