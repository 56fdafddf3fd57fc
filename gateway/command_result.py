"""What a command prints and how it exits, and how issues are shown: the commands build an
:class:`CommandResult`; only the CLI writes it and exits. File names are shown relative to the working
directory when they are below it (no machine paths in reports that get pasted around)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gateway.config.issues import Issue


@dataclass
class CommandResult:
    """What the command prints and how it exits (the CLI only writes and exits)."""

    code: int
    stdout: str = ""
    stderr: str = ""


def display(file: str | Path) -> str:
    text = str(file)
    try:
        relative = os.path.relpath(text)
    except ValueError:  # another drive (Windows)
        return text
    return text if relative.startswith("..") else relative


def issue_dict(issue: Issue) -> dict[str, Any]:
    return {
        "severity": issue.severity,
        "file": display(issue.file),
        "line": issue.line,
        "path": issue.path,
        "message": issue.message,
    }


def issue_text(issue: Issue) -> str:
    where = display(issue.file) + (f":{issue.line}" if issue.line else "")
    return f"{issue.severity}: {where}: {issue.path}: {issue.message}"
