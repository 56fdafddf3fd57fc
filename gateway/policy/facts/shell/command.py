"""What a simple command is while a line is walked: its words, the state the line built so far,
and the program sets the walk and the facts look programs up in."""

from __future__ import annotations

import posixpath
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from gateway.policy.facts.cache import short_inputs
from gateway.policy.facts.options import Parsed, Spec
from gateway.policy.facts.words import (
    Word,
)

SHELLS = frozenset(
    {"sh", "bash", "zsh", "dash", "ksh", "mksh", "pdksh", "ash", "fish", "csh", "tcsh", "yash", "rbash", "busybox-sh"}
)
INTERPRETERS = frozenset(
    {
        "python",
        "python2",
        "python3",
        "perl",
        "ruby",
        "node",
        "nodejs",
        "php",
        "lua",
        "deno",
        "bun",
        "pwsh",
        "powershell",
        "tclsh",
        "wish",
        "expect",
        "rscript",
        "luajit",
        "ipython",
        "julia",
        "groovy",
        "jshell",
        "kotlin",
        "scala",
        "osascript",
        "awk",
    }
)
DOWNLOADERS = frozenset(
    {
        "curl",
        "wget",
        "fetch",
        "aria2c",
        "http",
        "https",
        "xh",
        "xhs",
        "httpie",
        "lwp-request",
        "get",
        "invoke-webrequest",
        "invoke-restmethod",
        "iwr",
        "irm",
        "lynx",
        "w3m",
        "links",
        "ftp",
        "tftp",
        "nc",
        "ncat",
        "socat",
        "scp",
        "rsync",
        "gh",
        "git-remote-http",
    }
)
NETWORK = DOWNLOADERS | frozenset({"telnet", "openssl", "sftp", "nmap"})
SEARCHERS = frozenset(
    {
        "grep",
        "egrep",
        "fgrep",
        "zgrep",
        "rg",
        "ag",
        "ack",
        "findstr",
        "select-string",
        "sls",
        "echo",
        "printf",
        "git-grep",
        "git-log",
    }
)
"""Programs whose arguments are text or patterns, never addresses they connect to."""
COPIERS = frozenset({"cp", "mv", "ln", "install", "rsync", "ditto", "scp"})
PRIVILEGE = frozenset({"sudo", "doas", "pkexec", "su", "run0", "runuser", "sudoedit"})


@dataclass(slots=True)
class State:
    """What is statically known while walking a command line, left to right."""

    cwd: str
    home: str
    vars: dict[str, Word]
    branch: str = ""
    aliases: dict[str, list[str]] = field(default_factory=dict)
    downloads: dict[str, str] = field(default_factory=dict)
    """Paths written by a downloader -> that downloader."""
    gitconfig: dict[str, Word] = field(default_factory=dict)
    """``git config KEY VALUE`` run earlier in the line (keys lower case)."""
    scripts: dict[str, str] = field(default_factory=dict)
    """Paths written earlier in the line with static text (``echo ... > f``, ``cat > f <<EOF``)."""
    functions: dict[str, str] = field(default_factory=dict)
    """Shell functions defined earlier in the line -> their body."""
    shell_aliases: dict[str, str] = field(default_factory=dict)
    """``alias NAME=VALUE`` run earlier in the line."""
    arrays: dict[str, list[Word]] = field(default_factory=dict)
    """Arrays (``a=(...)``; ``@`` holds the positional parameters after ``set --``)."""

    def copy(self) -> State:
        return State(
            self.cwd,
            self.home,
            dict(self.vars),
            self.branch,
            self.aliases,
            self.downloads,
            self.gitconfig,
            self.scripts,
            self.functions,
            self.shell_aliases,
            dict(self.arrays),
        )


@dataclass(slots=True)
class Command:
    words: list[Word]
    state: State
    depth: int
    context: str
    redirects: list[dict[str, Any]] = field(default_factory=list)
    stdin_from: list[str] = field(default_factory=list)
    stdout_to: list[str] = field(default_factory=list)
    code_from: list[str] = field(default_factory=list)
    wrappers: list[str] = field(default_factory=list)
    start: int = 0
    """Index of the program word in ``words`` after wrappers."""
    stdin_text: str | None = None
    """Static text fed to stdin (heredoc, here-string, ``echo ... |``), when known."""
    dynamic: bool = False
    fact: dict[str, Any] = field(default_factory=dict)

    code_effects: list[dict[str, Any]] = field(default_factory=list)
    """Effects of the inline code this command runs (:mod:`code`)."""

    implied: str = ""
    """The program run when none is named (``sudo -s`` runs a shell)."""

    env: dict[str, Word] = field(default_factory=dict)
    """Assignments given to ``env`` (``env GIT_SSH_COMMAND=... git fetch``)."""

    out_readers: list[Command] = field(default_factory=list)
    """Commands of an output process substitution this command's stdout goes to (``> >(sh)``)."""

    evals_stdin: bool = False
    """Its inline code evaluates what it reads on stdin (:data:`code.STDIN_CODE`)."""

    resolved: str | None = None
    """``program``, once the wrappers are resolved."""

    parsed: tuple[Spec | None, list[str], Parsed] | None = None
    """How the fact split its arguments (spec, arguments, result): the program table's rows that
    split them alike reuse it (:func:`gateway.policy.facts.effects.of_command`)."""

    @property
    def program(self) -> str:
        if self.resolved is not None:
            return self.resolved
        if self.start >= len(self.words):
            return self.implied
        w = self.words[self.start]
        return program_name(w.text) if not w.dynamic else ""


def is_interpreter(program: str) -> bool:
    """A shell or a script interpreter, also with a version suffix (``python3.11``, ``perl5.36``)."""
    return program in SHELLS or program in INTERPRETERS or program.rstrip("0123456789.") in INTERPRETERS


@short_inputs
def program_name(text: str) -> str:
    """``/usr/bin/Rm`` -> ``rm``; ``C:\\...\\curl.exe`` -> ``curl``; lower-cased because macOS and
    Windows file systems are case-insensitive. Pure, and asked for the same few words (``git``,
    ``cd``, ``python``) again and again: a bounded cache."""
    base = posixpath.basename(text.replace("\\", "/")).lower()
    for suffix in (".exe", ".cmd", ".bat", ".com"):
        if base.endswith(suffix):
            base = base[: -len(suffix)]
    return base


class Unparsed(Exception):
    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def unique(items: Iterable[str]) -> list[str]:
    """``items`` without repeats, in the order each first appears."""
    return list(dict.fromkeys(items))
