"""Shell commands as simple commands, parsed with tree-sitter-bash, for rules to reason over.

What a rule gets for each simple command (see ``Command.as_fact``): the argv after quote and
escape removal (ANSI-C ``$'..'`` included), brace expansion and static variable substitution; the
program name resolved through paths and wrappers (``env``, ``sudo -u x``, ``nice``, ``exec``,
``command``, ``busybox``, ``xargs``, ...); ``bash -c`` / ``eval`` / heredoc / ``echo ... | sh``
payloads parsed recursively, up to :data:`MAX_DEPTH`; options as the program reads them
(:mod:`options`); redirections; which programs feed its stdin and read its stdout (pipelines,
``|&``, subshells, groups, process substitution); the programs whose output it runs as code; the
effective cwd after ``cd``; and ``dynamic`` when something stays unknown until run time.
Oversized, unparseable or too deeply nested input is reported, not guessed at.
"""

from __future__ import annotations

import ast
import fnmatch
import posixpath
import re
import shlex
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import orjson
import tree_sitter
import tree_sitter_bash

from gateway.policy.facts import code as codemod
from gateway.policy.facts import effects as effectmod
from gateway.policy.facts import hosts as hostmod
from gateway.policy.facts import options as opts
from gateway.policy.facts import paths as pathmod
from gateway.policy.facts import programs
from gateway.policy.facts.words import (
    Word,
    ansi_c,
    brace_expand,
    double_quoted,
    echo_escapes,
    field_split,
    printf_text,
    unquoted,
)

MAX_BYTES = 65536
"""Longer commands are not parsed (``unparsed`` with reason ``too-large``)."""
MAX_DEPTH = 6
"""Nesting of ``bash -c``/``eval``/substitutions beyond which parsing stops (``too-deep``)."""
MAX_COMMANDS = 512

_LANGUAGE = tree_sitter.Language(tree_sitter_bash.language())

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
        "Rscript",
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
_URL_OPTIONS = frozenset(
    {"--url", "--resolve", "--connect-to", "-x", "--proxy", "--preproxy", "-connect", "-Uri", "-uri"}
)
_URL_WORD = re.compile(r"^(-{1,2}[A-Za-z0-9][A-Za-z0-9_.-]*=|[A-Za-z_][A-Za-z0-9_]*=)?[A-Za-z][A-Za-z0-9+.-]{0,15}://")
"""A word that is a URL (also as an ``--option=`` or ``NAME=`` value): for any program, the address
it names is one it may connect to. A URL elsewhere in a word is text, except in an
interpreter's code (``python -c "urlopen('http://...')"``)."""
_SPACE = re.compile(r"\s")
_SPEC_ALIASES = {"egrep": "grep", "fgrep": "grep", "zgrep": "grep", "ag": "rg", "ack": "rg", "git-grep": "grep"}
_DEFAULTS = {"SHELL": "/bin/sh", "BASH": "/bin/bash"}
"""Values of variables a rule may rely on when the command line did not set them."""
_SPECIAL = re.compile(r"[^A-Za-z0-9 \t,._+:@%/=-]")
"""Any character outside this set may quote, expand, redirect or separate: the full parser runs."""
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\+)?=")
_COPIERS = frozenset({"cp", "mv", "ln", "install", "rsync", "ditto", "scp"})
_PRIVILEGE = frozenset({"sudo", "doas", "pkexec", "su", "run0", "runuser", "sudoedit"})

# wrapper name -> (short options with a value, long options with a value, stop words)
_WRAPPERS: dict[str, tuple[str, frozenset[str]]] = {
    "sudo": ("ugpChDrtTURc", frozenset({"user", "group", "prompt", "close-from", "chdir", "role", "type", "command-timeout", "other-user", "host"})),
    "doas": ("uC", frozenset()),
    "pkexec": ("", frozenset({"user"})),
    "run0": ("ugD", frozenset({"user", "group", "chdir", "description", "setenv", "property", "unit", "slice", "nice"})),
    "runuser": ("ugGw", frozenset({"user", "group", "supp-group", "whitelist-environment"})),
    "env": ("uCSP", frozenset({"unset", "chdir", "split-string", "argv0", "default-signal", "ignore-signal", "block-signal"})),
    "nice": ("n", frozenset({"adjustment"})),
    "ionice": ("cnpPtu", frozenset({"class", "classdata", "pid", "pgid", "uid"})),
    "nohup": ("", frozenset()),
    "exec": ("a", frozenset()),
    "command": ("", frozenset()),
    "builtin": ("", frozenset()),
    "time": ("fo", frozenset({"format", "output"})),
    "timeout": ("sk", frozenset({"signal", "kill-after"})),
    "stdbuf": ("ioe", frozenset({"input", "output", "error"})),
    "setsid": ("", frozenset()),
    "unbuffer": ("", frozenset()),
    "caffeinate": ("tw", frozenset()),
    "chrt": ("T", frozenset({"sched-runtime", "sched-deadline", "sched-period"})),
    "taskset": ("", frozenset()),
    "xargs": ("ILnPdEsaeil", frozenset({"replace", "max-lines", "max-args", "max-procs", "delimiter", "eof", "max-chars", "arg-file", "process-slot-var"})),
    "strace": ("oeEpPsSuXbIa", frozenset({"output", "trace", "signal", "env", "user"})),
    "ltrace": ("oeEpsSuna", frozenset({"output"})),
    "torsocks": ("uPpa", frozenset()),
    "proxychains": ("f", frozenset()),
    "proxychains4": ("f", frozenset()),
    "firejail": ("", frozenset()),
    "flock": ("wEc", frozenset({"timeout", "conflict-exit-code", "command"})),
    "chroot": ("", frozenset({"userspec", "groups"})),
    "watch": ("ndqc", frozenset({"interval", "differences"})),
    "then": ("", frozenset()),
    "do": ("", frozenset()),
    "else": ("", frozenset()),
}  # fmt: skip
_TAKES_OPERAND = {"timeout": 1, "chrt": 1, "taskset": 1, "chroot": 1, "flock": 1}
"""Wrappers whose first operand is not the command (a duration, priority, mask, root, lock file)."""


@dataclass
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


@dataclass
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

    resolved: str | None = None
    """``program``, once the wrappers are resolved."""

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


def program_name(text: str) -> str:
    """``/usr/bin/Rm`` -> ``rm``; ``C:\\...\\curl.exe`` -> ``curl``; lower-cased because macOS and
    Windows file systems are case-insensitive."""
    base = posixpath.basename(text.replace("\\", "/")).lower()
    for suffix in (".exe", ".cmd", ".bat", ".com"):
        if base.endswith(suffix):
            base = base[: -len(suffix)]
    return base


class Unparsed(Exception):
    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class Walker:
    """Walks the syntax tree of one command line (and, recursively, its payloads)."""

    def __init__(self, home: str) -> None:
        self.parser = tree_sitter.Parser(_LANGUAGE)
        self.commands: list[Command] = []
        self.unparsed: list[str] = []
        self.home = home
        self.feed: str | None = None
        """Static text the next simple command reads on stdin (``echo ... | xargs``)."""
        self.called: set[str] = set()
        """Shell functions called (the others are walked at the end, :meth:`uncalled`)."""
        self.defined: list[tuple[dict[str, str], int]] = []

    def uncalled(self, state: State) -> None:
        """Functions defined but never called in the line: their bodies, with unknown arguments."""
        seen: set[str] = set()
        for functions, depth in self.defined:
            for name, body in list(functions.items()):
                if name not in self.called and name not in seen:
                    seen.add(name)
                    self.parse(body, state.copy(), depth, "function")

    # ---- entry ----------------------------------------------------------------------------
    def parse(self, text: str, state: State, depth: int, context: str) -> list[Command]:
        """Commands of ``text``; appended to ``self.commands`` too."""
        if depth > MAX_DEPTH:
            self.unparsed.append("too-deep")
            return []
        data = text.encode("utf-8", "surrogatepass")
        if len(data) > MAX_BYTES:
            self.unparsed.append("too-large")
            return []
        if not _SPECIAL.search(text) and (tokens := text.split()) and not _ASSIGNMENT.match(tokens[0]):
            # no quoting, expansion or operator: bash splits at blanks, nothing else (fast path)
            cmd = Command([Word(t, "0" * len(t)) for t in tokens], state, depth, context)
            return self.resolve(cmd, data, state, depth)
        tree = self.parser.parse(data)
        if tree.root_node.has_error:
            self.unparsed.append("syntax")
        return self.node(tree.root_node, data, state, depth, context)

    # ---- statements -----------------------------------------------------------------------
    def node(self, n: tree_sitter.Node, src: bytes, st: State, depth: int, ctx: str) -> list[Command]:
        t = n.type
        if len(self.commands) > MAX_COMMANDS:
            self.unparsed.append("too-many")
            return []
        if t == "command":
            return self.command(n, src, st, depth, ctx, [])
        if t == "redirected_statement":
            body = n.child_by_field_name("body")
            redirs = [c for c in n.children if c is not body and c.type.endswith("redirect")]
            rest: list[tree_sitter.Node] = []
            after: list[tree_sitter.Node] = []
            for r in redirs if b"<<" in src[n.start_byte : n.end_byte] else []:
                if r.type != "heredoc_redirect":
                    continue
                # the grammar puts what follows `cmd <<EOF` on the same line inside the heredoc
                # redirect: more redirects, the rest of the pipeline, the rest of a list
                right = {x.id for x in r.children_by_field_name("right")}
                for part in r.named_children:
                    if part.type.endswith("redirect"):
                        redirs.append(part)
                    elif part.type in ("heredoc_start", "heredoc_body", "heredoc_end"):
                        continue
                    elif part.type == "pipeline" and part.id not in right and not rest:
                        rest = _pipe_nodes(part)
                    else:
                        after.append(part)
            if rest or after:
                first = (
                    self.command(body, src, st, depth, ctx, redirs)
                    if body is not None and body.type == "command"
                    else self.node(body, src, st, depth, ctx)
                    if body is not None
                    else []
                )
                found = self.pipe(rest, src, st, depth, ctx, first) if rest else first
                for a in after:
                    found += self.node(a, src, st, depth, ctx)
                return found
            if body is not None and body.type == "command":
                return self.command(body, src, st, depth, ctx, redirs)
            inner = self.node(body, src, st, depth, ctx) if body is not None else []
            extra = Command([], st, depth, ctx)
            self.redirections(redirs, src, st, depth, extra)
            reads = [r["path"] for r in extra.redirects if r.get("path") and r["op"] in ("<", "<>")]
            for c in inner:  # `while read l; do ...; done < .env`: every command of the body sees it
                c.redirects += extra.redirects
                c.code_from += extra.code_from
                c.stdin_from = _unique([*c.stdin_from, *extra.stdin_from])
                if c.fact:
                    c.fact["paths"] = _unique([*c.fact["paths"], *reads])
                    self.finish_code(c, src, depth)
            return inner
        if t == "pipeline":
            return self.pipeline(n, src, st, depth, ctx)
        if t == "variable_assignment":
            self.assign(n, src, st, depth, ctx)
            return []
        if t in ("declaration_command", "unset_command"):
            for part in n.named_children:
                if part.type == "variable_assignment":
                    self.assign(part, src, st, depth, ctx)
                else:
                    self.word(part, src, st, depth)
            return []
        if t == "subshell":
            return self.children(n, src, st.copy(), depth, ctx)
        if t == "function_definition":
            body = n.child_by_field_name("body")
            name_node = n.child_by_field_name("name")
            if body is None:
                return []
            if name_node is None or not name_node.text:
                return self.node(body, src, st.copy(), depth, "function")
            # walked when it is called (with its arguments), or at the end if it never is
            st.functions[name_node.text.decode("utf-8", "replace")] = src[body.start_byte : body.end_byte].decode(
                "utf-8", "replace"
            )
            self.defined.append((st.functions, depth))
            return []
        if t in ("for_statement", "select_statement"):
            var = n.child_by_field_name("variable")
            if var is not None:
                st.vars[var.text.decode() if var.text else ""] = Word(dynamic=True)
            return self.children(n, src, st, depth, ctx, skip_words=True)
        if t in ("heredoc_body", "comment", "heredoc_start", "heredoc_end"):
            return []
        if t == "ERROR":
            raw = src[n.start_byte : n.end_byte].decode("utf-8", "replace")
            if raw.startswith("{") and "," in raw.split("}", 1)[0]:
                # `{cat,.env}`: brace expansion in command position, which the grammar rejects
                words: list[Word] = []
                for token in raw.split():
                    w = Word()
                    unquoted(token, w)
                    words.extend(self.split(w, st))
                return self.resolve(Command(words, st, depth, ctx), src, st, depth)
            return self.children(n, src, st, depth, ctx)
        return self.children(n, src, st, depth, ctx)

    def children(
        self, n: tree_sitter.Node, src: bytes, st: State, depth: int, ctx: str, *, skip_words: bool = False
    ) -> list[Command]:
        out: list[Command] = []
        for c in n.named_children:
            if skip_words and c.type in ("word", "string", "raw_string", "concatenation", "variable_name"):
                self.word(c, src, st, depth)  # substitutions inside still run
                continue
            if c.type in ("command_substitution", "process_substitution", "string", "expansion", "simple_expansion"):
                self.word(c, src, st, depth)
                continue
            out += self.node(c, src, st, depth, ctx)
        return out

    def pipeline(self, n: tree_sitter.Node, src: bytes, st: State, depth: int, ctx: str) -> list[Command]:
        return self.pipe(n.named_children, src, st, depth, ctx)

    def pipe(
        self,
        nodes: list[tree_sitter.Node],
        src: bytes,
        st: State,
        depth: int,
        ctx: str,
        first: list[Command] | None = None,
    ) -> list[Command]:
        elements: list[list[Command]] = [first] if first is not None else []
        for c in nodes:
            self.feed = _fed_text(elements[-1][0]) if elements and len(elements[-1]) == 1 else None
            elements.append(self.node(c, src, st.copy() if elements else st, depth, ctx))
            self.feed = None
        out: list[Command] = []
        for i, element in enumerate(elements):
            upstream = [cmd for e in elements[:i] for cmd in e]
            downstream = elements[i + 1] if i + 1 < len(elements) else []
            feeders = _unique(p for u in upstream for p in (u.program, *u.fact.get("_inputs", [])) if p)
            for cmd in element:
                cmd.stdin_from = _unique([*cmd.stdin_from, *feeders])
                cmd.stdout_to = _unique([*cmd.stdout_to, *(d.program for d in downstream if d.program)])
                if i > 0 and len(elements[i - 1]) == 1 and cmd.stdin_text is None:
                    cmd.stdin_text = _fed_text(elements[i - 1][0])
            out += element
        for cmd in out:
            self.finish_code(cmd, src, depth)
        return out

    def assign(
        self, n: tree_sitter.Node, src: bytes, st: State, depth: int, ctx: str, tail: tree_sitter.Node | None = None
    ) -> None:
        name_node = n.child_by_field_name("name")
        name = name_node.text.decode() if name_node is not None and name_node.text else ""
        if tail is not None:  # continuation of the value parsed as a separate node
            if name and name in st.vars:
                st.vars[name].extend(self.word(tail, src, st, depth))
            return
        value_node = n.child_by_field_name("value")
        if value_node is not None and value_node.type == "array":  # `a=(rm -rf /)`
            items = [x for c in value_node.named_children for x in self.split(self.word(c, src, st, depth), st)]
            appending = src[n.start_byte : value_node.start_byte].endswith(b"+=")
            st.arrays[name] = [*(st.arrays.get(name, []) if appending else []), *items]
            st.vars[name] = st.arrays[name][0] if st.arrays[name] else Word()
            return
        value = self.word(value_node, src, st, depth) if value_node is not None else Word()
        if name and "[" not in name:
            st.vars[name] = value
            st.arrays.pop(name, None)

    # ---- one simple command ---------------------------------------------------------------
    def command(
        self, n: tree_sitter.Node, src: bytes, st: State, depth: int, ctx: str, redirs: list[tree_sitter.Node]
    ) -> list[Command]:
        feed, self.feed = self.feed, None
        local = st.copy()
        args: list[tree_sitter.Node] = []
        prefix_assign = False
        last: tree_sitter.Node | None = None
        for c in n.children:
            if not c.is_named:
                if c.type == "$" and c.text != b"$":  # an escaped `\$` the grammar leaves anonymous
                    args.append(c)
                continue
            if last is not None and c.start_byte == last.end_byte and not c.type.endswith("redirect"):
                # tree-sitter-bash ends `B='m'\a'in'` after 'm': the touching rest is still its value
                self.assign(last, src, local, depth, ctx, tail=c)
                last = c
                continue
            last = None
            if c.type == "variable_assignment":
                self.assign(c, src, local, depth, ctx)
                prefix_assign = True
                last = c
            elif c.type.endswith("redirect"):
                redirs.append(c)
            elif c.type == "command_name":
                args.extend(c.named_children or [c])
            else:
                args.append(c)
        raw_words: list[Word] = []
        groups = _adjacent(args, src)
        prefix: Word | None = None
        join = False
        for index, group in enumerate(groups):
            if index > 0 and b"\\" in (gap := src[groups[index - 1][-1].end_byte : group[0].start_byte]):
                # the grammar drops escaped blanks (`\ `) between words: put them back
                for text, touches_prev, touches_next in _gap_tokens(gap.decode("utf-8", "replace")):
                    piece = Word()
                    unquoted(text, piece)
                    if touches_prev and raw_words:
                        raw_words[-1].extend(piece)
                        join = touches_next
                    elif touches_next:
                        prefix = piece
                    else:
                        raw_words.append(piece)
            word = raw_words[-1] if join else (prefix or Word())
            for part in group:
                word.extend(self.word(part, src, local, depth))
            if not join:
                raw_words.append(word)
            prefix, join = None, False
        if groups and b"\\" in (tail := _escaped_tail(src, groups[-1][-1].end_byte)):
            for text, touches_prev, _ in _gap_tokens(tail.decode("utf-8", "replace")):
                piece = Word()
                unquoted(text, piece)
                if touches_prev:
                    raw_words[-1].extend(piece)
                else:
                    raw_words.append(piece)
        words = [w for raw in raw_words for w in self.split(raw, local)]
        if not words and prefix_assign:
            st.vars.update(local.vars)  # a bare `X=1` keeps X for the rest of the line
            return []
        cmd = Command(words, local if prefix_assign else st, depth, ctx)
        cmd.stdin_text = feed
        self.redirections(redirs, src, st, depth, cmd)
        out = self.resolve(cmd, src, st, depth)
        printed = _fed_text(cmd) if cmd.out_readers else None
        for reader in cmd.out_readers:  # `echo ... > >(sh)`
            reader.stdin_from = _unique([*reader.stdin_from, cmd.program])
            if reader.stdin_text is None:
                reader.stdin_text = printed
            self.finish_code(reader, src, reader.depth - 1)
        return out + [r for w in words for r in w.readers]

    def split(self, word: Word, st: State | None = None) -> list[Word]:
        """Brace expansion of one word (and field splitting of unquoted substituted text, at the
        characters of ``IFS`` when the line set it)."""
        if word.dynamic or "0" not in word.mask:
            return [word]
        ifs = " \t\n"
        given = st.vars.get("IFS") if st is not None else None
        if given is not None and not given.dynamic:
            ifs = given.text
        expanded = brace_expand(word.text, word.mask)
        if expanded is None:
            return [
                Word(word.text, word.mask, True, word.sources, word.procsub, readers=word.readers, output=word.output)
            ]
        fields = [f for t, m in expanded for f in field_split(t, m, ifs)]
        return [
            Word(t, m, word.dynamic, word.sources, word.procsub, readers=word.readers, output=word.output)
            for t, m in fields
        ]

    def redirections(self, redirs: list[tree_sitter.Node], src: bytes, st: State, depth: int, cmd: Command) -> None:
        for r in redirs:
            op = ""
            fd = ""
            target: Word | None = None
            for c in r.children:
                if c.type == "file_descriptor":
                    fd = c.text.decode() if c.text else ""
                elif not c.is_named:
                    op = op or (c.text.decode() if c.text else "")
                elif c.type == "heredoc_body":
                    body = c.text.decode() if c.text else ""
                    quoted = any(
                        ch.type == "heredoc_start" and ch.text is not None and ch.text[:1] in (b"'", b'"', b"\\")
                        for ch in r.children
                    )
                    cmd.stdin_text = body if quoted or ("$" not in body and "`" not in body) else None
                    if cmd.stdin_text is None:
                        cmd.dynamic = True
                elif r.type != "heredoc_redirect" and c.type not in ("heredoc_start", "heredoc_end") and target is None:
                    target = self.word(c, src, st, depth)
            if r.type == "herestring_redirect" and target is not None:
                cmd.stdin_text = None if target.dynamic else target.text
                cmd.code_from += target.sources
                if target.dynamic:
                    cmd.dynamic = True
                continue
            if r.type == "heredoc_redirect":
                continue
            text = target.text if target is not None else ""
            entry: dict[str, Any] = {"op": op, "fd": fd, "target": text, "dynamic": bool(target and target.dynamic)}
            if target is not None and not target.dynamic and not op.endswith("&"):
                entry["path"] = pathmod.normalize(text, st.cwd, st.home, shell=True)
            if target is not None and target.procsub and op.startswith("<"):
                cmd.stdin_from = _unique([*cmd.stdin_from, *target.sources])
                if target.output is not None:
                    cmd.stdin_text = target.output  # `sh < <(echo ...)`
            if target is not None and target.procsub and op.startswith(">"):
                cmd.out_readers += target.readers
            cmd.redirects.append(entry)

    # ---- wrappers, payloads ---------------------------------------------------------------
    def resolve(self, cmd: Command, src: bytes, st: State, depth: int) -> list[Command]:
        words = cmd.words
        i = 0
        out: list[Command] = [cmd]
        head = words[0] if words else None
        if head is not None and head.text in st.shell_aliases and "1" not in head.mask and not head.dynamic:
            # `alias x='rm -rf'; x ~`: bash expands it only with expand_aliases (interactive
            # shells, zsh); read conservatively as expanded
            line = Word(st.shell_aliases[head.text], "1" * len(st.shell_aliases[head.text]))
            for arg in words[1:]:
                quoted = shlex.quote(arg.text)
                line.add(" ", True)
                line.extend(Word(quoted, "1" * len(quoted), arg.dynamic, arg.sources))
            out += self.payload(cmd, line, src, st, depth)
        while i < len(words):
            w = words[i]
            if w.dynamic:
                cmd.dynamic = True
                break
            name = program_name(w.text)
            if name in ("busybox", "toybox") and i + 1 < len(words) and not words[i + 1].text.startswith("-"):
                cmd.wrappers.append(name)
                i += 1
                continue
            if name == "command" and any(x.text in ("-v", "-V") for x in words[i + 1 : i + 2]):
                break
            if name in ("su", "script"):
                cmd.wrappers.append(name)
                payload = _option_value(words[i + 1 :], ("-c", "--command"))
                if payload is not None:
                    out += self.payload(cmd, payload, src, st, depth)
                    cmd.resolved = name
                i = len(words)
                break
            if name not in _WRAPPERS:
                break
            short_v, long_v = _WRAPPERS[name]
            cmd.wrappers.append(name)
            j = i + 1
            operands_to_skip = _TAKES_OPERAND.get(name, 0)
            if name == "taskset" and j < len(words) and words[j].text in ("-c", "--cpu-list"):
                j += 1
            while j < len(words):
                a = words[j].text
                if a == "--":
                    j += 1
                    break
                if name == "env" and "=" in a and not a.startswith("-"):
                    key, _, value = a.partition("=")
                    w_value = words[j]
                    cmd.env[key] = Word(value, w_value.mask[len(key) + 1 :], w_value.dynamic, w_value.sources)
                    j += 1
                    continue
                if name == "nice" and a[:1] == "-" and a[1:].lstrip("-").isdigit():
                    j += 1
                    continue
                if a.startswith("--") and len(a) > 2:
                    key, eq, val = a[2:].partition("=")
                    if key in ("split-string", "command") and name in ("env", "flock"):
                        text = val if eq else (words[j + 1].text if j + 1 < len(words) else "")
                        out += self.payload(cmd, Word(text, "1" * len(text)), src, st, depth)
                        j = len(words)
                        break
                    if key == "chdir" and name in ("env", "sudo", "run0"):
                        self.chdir_for(cmd, val if eq else (words[j + 1].text if j + 1 < len(words) else ""))
                    j += 1 if eq or key not in long_v else 2
                    continue
                if a.startswith("-") and len(a) > 1:
                    body = a[1:]
                    consumed = 1
                    for k, ch in enumerate(body):
                        if ch in short_v:
                            if (name in ("env",) and ch == "S") or (name == "flock" and ch == "c"):
                                payload = (
                                    Word(body[k + 1 :])
                                    if body[k + 1 :]
                                    else (words[j + 1] if j + 1 < len(words) else Word())
                                )
                                out += self.payload(cmd, payload, src, st, depth)
                                j = len(words)
                                consumed = 0
                                break
                            if name == "xargs" and ch in "eil":
                                break  # optional attached value only
                            if (name == "env" and ch == "C") or (name in ("sudo", "run0") and ch == "D"):
                                value = body[k + 1 :] or (words[j + 1].text if j + 1 < len(words) else "")
                                self.chdir_for(cmd, value)
                            if not body[k + 1 :]:
                                consumed = 2
                            break
                    if consumed == 0:
                        break
                    j += consumed
                    continue
                if operands_to_skip:
                    operands_to_skip -= 1
                    j += 1
                    continue
                break
            if name == "watch":
                rest = words[j:]
                text = " ".join(x.text for x in rest)
                out += self.payload(cmd, Word(text, "1" * len(text), any(x.dynamic for x in rest)), src, st, depth)
                i = len(words)
                break
            if name == "xargs":
                fed = self.xargs_words(cmd, words, i, j)
                if fed is None:
                    cmd.dynamic = True
                else:
                    given = words[j:]
                    words = cmd.words = fed
                    if given and program_name(given[0].text) in SHELLS and re.fullmatch(r"-[a-z]*c", given[-1].text):
                        text = cmd.stdin_text or ""  # `... | xargs sh -c`: the input is the script
                        out += self.payload(cmd, Word(text, "1" * len(text)), src, st, depth)
            i = j
        cmd.start = i
        if cmd.resolved is None and i >= len(words) and cmd.wrappers and cmd.wrappers[-1] in _PRIVILEGE:
            options = {w.text for w in words[1:]}
            if cmd.wrappers[-1] == "su" or options & {"-s", "-i", "--shell", "--login"}:
                cmd.implied = "sh"  # `sudo -s`, `sudo -i`, `su`: a shell that reads stdin
        program = cmd.resolved = cmd.resolved or cmd.program
        args = words[i + 1 :] if i < len(words) else []
        if program in SHELLS:
            script = _shell_payload(args)
            if script is not None:
                at = next(k for k, w in enumerate(args) if w is script)
                positional = {str(k): w for k, w in enumerate(args[at + 1 :])}  # `sh -c '...$1' _ /`
                out += self.payload(cmd, script, src, st, depth, positional)
        elif program == "eval":
            joined = Word()
            for k, arg in enumerate(args):
                if k:
                    joined.add(" ", True)
                joined.extend(arg)
            out += self.payload(cmd, joined, src, st, depth)
        elif program == "alias":
            for arg in args:
                name, eq, value = arg.text.partition("=")
                if eq and name and not arg.dynamic:
                    st.shell_aliases[name] = value
        elif program == "set" and not cmd.dynamic:
            texts = [a.text for a in args]
            if "--" in texts or (args and not texts[0].startswith(("-", "+"))):
                given = args[texts.index("--") + 1 :] if "--" in texts else args
                for key in [key for key in st.vars if key.isdigit() and key != "0"]:
                    del st.vars[key]
                st.vars.update({str(k + 1): a for k, a in enumerate(given)})
                st.arrays["@"] = list(given)
        elif (
            cmd.start < len(words)
            and (called := words[cmd.start].text) in st.functions
            and "1" not in words[cmd.start].mask
        ):
            self.called.add(called)  # `f(){ rm -rf "$1"; }; f ~`: the body with its arguments
            positional = {"0": words[cmd.start], **{str(k + 1): a for k, a in enumerate(args)}}
            out += self.payload(
                cmd, Word(st.functions[called], "1" * len(st.functions[called])), src, st, depth, positional
            )
        elif program in ("cd", "pushd") and cmd.context != "substitution":
            self.change_dir(args, st)
        elif program == "git":
            if not cmd.dynamic:
                self.git_state(cmd, args, st)
            out += self.git_runs(cmd, args, src, st, depth)
        elif program == "find":
            out += self.find_exec(cmd, args, src, st, depth)
        elif (language := codemod.language_of(program)) is not None:
            inline = _inline_code(language, args)
            if inline is not None:
                out += self.run_code(cmd, language, inline, src, st, depth)
        if program in _RUNS:
            out += self.runs(cmd, program, args, src, st, depth)
        self.build(cmd)
        self.commands.append(cmd)
        self.finish_code(cmd, src, depth)
        self.track_files(cmd, st)
        return out

    def chdir_for(self, cmd: Command, directory: str) -> None:
        """``env -C dir`` / ``sudo -D dir``: the command runs elsewhere (this command only)."""
        cmd.state = cmd.state.copy()
        cmd.state.cwd = pathmod.normalize(directory, cmd.state.cwd, cmd.state.home, shell=True) if directory else ""

    def payload(
        self, cmd: Command, script: Word, src: bytes, st: State, depth: int, positional: dict[str, Word] | None = None
    ) -> list[Command]:
        cmd.code_from = _unique([*cmd.code_from, *script.sources])
        if script.dynamic:
            cmd.dynamic = True
            return []
        inner = st.copy()
        if positional is not None:
            inner.vars = {k: v for k, v in inner.vars.items() if not k.isdigit()} | positional
            inner.arrays = {
                **inner.arrays,
                "@": [positional[str(k)] for k in range(1, len(positional)) if str(k) in positional],
            }
        return self.parse(script.text, inner, depth + 1, "payload")

    def run_code(self, cmd: Command, language: str, code: Word, src: bytes, st: State, depth: int) -> list[Command]:
        """Inline code: the command lines it runs are parsed as payloads, what it does to files
        and hosts becomes ``cmd.code_effects``; code known only at run time is ``exec`` unknown."""
        via = [*cmd.wrappers, language]
        if code.dynamic:
            if not code.sources:  # `python -c "$CODE"` (downloaded code is `code_from`)
                cmd.code_effects.append(
                    effectmod.effect("exec", cmd.program, via, source="unknown", certainty="unknown")
                )
            return []
        found = codemod.analyze(language, code.text)
        out: list[Command] = []
        for line in found.commands:
            out += self.payload(cmd, Word(line, "1" * len(line)), src, st, depth)
        for kind, value, recursive in found.touches:
            cmd.code_effects.append(effectmod.of_code(kind, value, recursive, cmd.program, via, st.cwd, st.home))
        return out

    def finish_code(self, cmd: Command, src: bytes, depth: int) -> None:
        """Programs whose output ``cmd`` runs as code, and a static stdin script parsed as one."""
        program = cmd.program
        args = [w.text for w in cmd.words[cmd.start + 1 :]]
        argw = cmd.words[cmd.start + 1 :]
        if is_interpreter(program) or program in ("source", "."):
            script_at = _script_operand(program, args)
            if program in SHELLS and any(a.startswith("-") and not a.startswith("--") and "s" in a[1:] for a in args):
                script_at = None
            reads_stdin = script_at is None and program not in ("source", ".") and not _has_inline_code(program, args)
            if script_at is not None:
                w = argw[script_at]
                if w.procsub and w.output is not None:
                    self.run_script(cmd, w.output, src, depth)
                elif w.procsub:
                    cmd.code_from = _unique([*cmd.code_from, *w.sources])
                elif w.text in ("-", "/dev/stdin", "/dev/fd/0", "/proc/self/fd/0"):
                    reads_stdin = True
                else:
                    target = pathmod.normalize(w.text, cmd.state.cwd, cmd.state.home, shell=True)
                    if target in cmd.state.downloads:
                        cmd.code_from = _unique([*cmd.code_from, cmd.state.downloads[target]])
                    if target in cmd.state.scripts:  # `echo ... > f.sh && bash f.sh`
                        self.run_script(cmd, cmd.state.scripts[target], src, depth)
            for k, a in enumerate(args[:-1]):
                if a in _INLINE_FLAGS or (
                    a.startswith("-") and not a.startswith("--") and a[-1:] in "ce" and len(a) <= 4
                ):
                    cmd.code_from = _unique([*cmd.code_from, *argw[k + 1].sources])
            if reads_stdin and (cmd.stdin_text is None or not (program in SHELLS or codemod.language_of(program))):
                cmd.code_from = _unique([*cmd.code_from, *cmd.stdin_from])
            if reads_stdin:
                if cmd.stdin_text is not None and program in SHELLS and not cmd.fact.get("_stdin_parsed"):
                    cmd.fact["_stdin_parsed"] = True
                    self.parse(cmd.stdin_text, cmd.state.copy(), depth + 1, "payload")
                language = codemod.language_of(program)
                if cmd.stdin_text is not None and language is not None and not cmd.fact.get("_stdin_parsed"):
                    cmd.fact["_stdin_parsed"] = True  # `python3 - <<'EOF' ... EOF`
                    text = cmd.stdin_text
                    self.run_code(cmd, language, Word(text, "1" * len(text)), src, cmd.state, depth)
        elif cmd.start < len(cmd.words) and cmd.words[cmd.start].dynamic:
            cmd.code_from = _unique([*cmd.code_from, *cmd.words[cmd.start].sources])  # `$(curl ...)` as a command
        elif cmd.start < len(cmd.words):
            target = pathmod.normalize(cmd.words[cmd.start].text, cmd.state.cwd, cmd.state.home, shell=True)
            if "/" in cmd.words[cmd.start].text and target in cmd.state.downloads:
                cmd.code_from = _unique([*cmd.code_from, cmd.state.downloads[target]])
            if "/" in cmd.words[cmd.start].text and target in cmd.state.scripts:  # `chmod +x f && ./f`
                self.run_script(cmd, cmd.state.scripts[target], src, depth)

        if program in ("at", "batch") and cmd.stdin_text is not None and not cmd.fact.get("_stdin_parsed"):
            cmd.fact["_stdin_parsed"] = True  # `at now <<< '...'`: the commands it runs later
            self.parse(cmd.stdin_text, cmd.state.copy(), depth + 1, "payload")
        if cmd.fact:
            cmd.fact["code_from"] = cmd.code_from
            cmd.fact["stdin_from"] = cmd.stdin_from
            cmd.fact["stdout_to"] = cmd.stdout_to
            cmd.fact["dynamic"] = cmd.fact["dynamic"] or cmd.dynamic

    def run_script(self, cmd: Command, text: str, src: bytes, depth: int) -> None:
        """Static script text a shell or interpreter runs (from a file written earlier in the line
        or a ``<(echo ...)``), parsed once."""
        if cmd.fact.get("_script_parsed"):
            return
        cmd.fact["_script_parsed"] = True
        language = codemod.language_of(cmd.program)
        if cmd.program in SHELLS or cmd.program in ("source", ".") or language is None:
            self.parse(text, cmd.state.copy(), depth + 1, "payload")
        else:
            self.run_code(cmd, language, Word(text, "1" * len(text)), src, cmd.state, depth)

    def xargs_words(self, cmd: Command, words: list[Word], i: int, j: int) -> list[Word] | None:
        """``xargs``' command with its static input (``echo ~ | xargs rm -rf``) as arguments, or
        None when the input is only known at run time."""
        text = cmd.stdin_text
        if text is None:
            return None
        options = words[i + 1 : j]
        replace: str | None = None
        delimiter: str | None = None
        for k, o in enumerate(options):
            t = o.text
            if t in ("-I", "--replace") and k + 1 < len(options):
                replace = options[k + 1].text
            elif t.startswith("-I") and len(t) > 2:
                replace = t[2:]
            elif t.startswith(("-i", "--replace")):
                replace = t.split("=", 1)[1] if "=" in t else (t[2:] or "{}")
            elif t in ("-0", "--null"):
                delimiter = "\0"
            elif t in ("-d", "--delimiter") and k + 1 < len(options):
                delimiter = ansi_c(options[k + 1].text)
            elif t.startswith("-d") and len(t) > 2:
                delimiter = ansi_c(t[2:])
            elif t.startswith(("-a", "--arg-file")):
                return None  # the input is a file
        command = words[j:] or [Word("echo", "1111")]
        if replace is not None:
            lines = [line.strip() for line in text.split("\n") if line.strip()]
            out: list[Word] = []
            for w in command:
                if w.text == replace:
                    out += [Word(line, "1" * len(line)) for line in lines]
                elif replace and replace in w.text:
                    t = w.text.replace(replace, " ".join(lines))
                    out.append(Word(t, "1" * len(t), w.dynamic, w.sources))
                else:
                    out.append(w)
            return [*words[:j], *out]
        if delimiter is not None:
            tokens = [t for t in text.split(delimiter) if t and t != "\n"]
        else:
            try:
                tokens = shlex.split(text)
            except ValueError:
                return None
        return [*words[:j], *command, *(Word(t, "1" * len(t)) for t in tokens)]

    def change_dir(self, args: list[Word], st: State) -> None:
        operands = [a for a in args if not (a.text.startswith("-") and len(a.text) > 1)]
        if not operands:
            st.cwd = st.home if st.home != "~" else "~"
        elif operands[0].dynamic or operands[0].text == "-":
            st.cwd = ""
        else:
            base = st.cwd
            text = operands[0].text
            if not base and not text.startswith(("/", "~")):
                st.cwd = ""
            else:
                st.cwd = pathmod.normalize(text, base, st.home, shell=True)

    def git_state(self, cmd: Command, args: list[Word], st: State) -> None:
        texts = [a.text for a in args]
        top = opts.parse(texts, opts.spec_for("git"))
        if not top.operands:
            return
        sub = texts[top.operands[0]]
        rest = texts[top.operands[0] + 1 :]
        if sub == "config":
            _record_config(rest, args[top.operands[0] + 1 :], st)
            return
        if sub in ("checkout", "switch"):
            parsed = opts.parse(rest, opts.spec_for("git", sub))
            for key in ("-b", "-B", "-c", "-C", "--orphan", "--create", "--force-create"):
                if key in parsed.values:
                    st.branch = parsed.values[key][-1]
                    return
            if parsed.operands and "--detach" not in parsed.options:
                st.branch = rest[parsed.operands[0]]
            elif "--detach" in parsed.options:
                st.branch = ""

    def run_word(self, cmd: Command, script: Word, src: bytes, st: State, depth: int) -> list[Command]:
        """A word that some program runs as a shell command line: parsed as a payload, or (known
        only at run time) code of unknown source."""
        if script.dynamic and not script.sources:
            cmd.code_effects.append(
                effectmod.effect("exec", cmd.program, cmd.wrappers, source="unknown", certainty="unknown")
            )
        if not script.dynamic and script.text.strip() in ("", "-"):
            return []
        return self.payload(cmd, script, src, st, depth)

    def runs(self, cmd: Command, program: str, args: list[Word], src: bytes, st: State, depth: int) -> list[Command]:
        """The ``runs`` role of the program table: the selected words are a command the program
        runs (``ssh host 'rm -rf ~'``, ``trap '...' EXIT``, ``tmux new -d '...'``, ``git rebase
        --exec``): one word is a command line, several are the command's words from there on."""
        texts = [w.text for w in args]
        base = args
        sub = ""
        if program == "git":
            top = opts.parse(texts, opts.spec_for("git"))
            if not top.operands:
                return []
            at = top.operands[0]
            base = self.git_expand(cmd, args[at:], top.values.get("-c", []))
            sub = base[0].text.lower()
            if sub not in _GIT_RUNS_SUBS:
                return []
            texts = [w.text for w in base]
        lowered = {t.lower() for t in texts}
        for row in programs.table().get(program, ()):
            spec = row.spec
            if spec.sub and spec.sub[0] not in lowered:
                continue  # cheap: the row's subcommand is not even a word
            rest = base[1:] if program == "git" else base
            parsed = opts.parse([w.text for w in rest], row.parse_spec)
            operand_words = [rest[k] for k in parsed.operands]
            names = [w.text.lower() for w in ([base[0], *operand_words] if program == "git" else operand_words)]
            if spec.sub and names[: len(spec.sub)] != spec.sub:
                continue
            present = set(parsed.options) | set(texts)
            if spec.when and not any(w in present for w in spec.when):
                continue
            if spec.unless and any(w in present for w in spec.unless):
                continue
            if spec.runs is None:
                return []
            chosen = effectmod.select(spec.runs, operand_words, rest, parsed)
            if spec.runs.startswith("option:") or spec.runs in ("first-operand", "last-operand"):
                short = _SHORT_ALIAS.get((program, sub, spec.runs[7:]))
                if short:
                    chosen += [Word(v, "1" * len(v)) for v in parsed.values.get(short, [])]
                return [c for w in chosen for c in self.run_word(cmd, w, src, st, depth)]
            if not chosen:
                return []
            start = next(k for k, w in enumerate(rest) if w is chosen[0])
            stop = len(rest)
            if spec.runs == "operands-before-separator":
                stop = next((k for k in range(start, len(rest)) if rest[k].text in (":::", "::::", ":::+")), stop)
            words = rest[start:stop]
            if program == "parallel" and stop < len(rest):  # the values after `:::` are the arguments
                values = [w for w in rest[stop:] if w.text not in (":::", "::::", ":::+")]
                if any("{}" in w.text for w in words):
                    joined = " ".join(shlex.quote(v.text) for v in values)
                    words = [Word(w.text.replace("{}", joined), w.mask, w.dynamic, w.sources) for w in words]
                else:
                    words = [*words, *values]
            if len(words) == 1 or (program, sub) in _JOINS:
                line = Word()
                for k, w in enumerate(words):
                    if k:
                        line.add(" ", True)
                    line.extend(w)
                return self.run_word(cmd, line, src, st, depth)
            inner = Command(list(words), st, depth + 1, "payload")
            return self.resolve(inner, src, st, depth + 1)
        return []

    def git_expand(self, cmd: Command, sub_args: list[Word], configs: list[str]) -> list[Word]:
        """``[sub, *args]`` with a git alias (``-c alias.x=...``, ``git config alias.x ...``
        earlier in the line) expanded; a ``!`` alias stays as it is."""
        if not sub_args:
            return sub_args
        value = self.git_config(cmd, configs).get("alias." + sub_args[0].text.lower())
        if value is None or value.dynamic or value.text.startswith("!"):
            return sub_args
        expanded = _split_words(value.text)
        if not expanded:
            return sub_args
        return [*(Word(t, "1" * len(t)) for t in expanded), *sub_args[1:]]

    def git_config(self, cmd: Command, configs: list[str]) -> dict[str, Word]:
        """The configuration a git command runs with, as far as the line shows it: ``git config``
        earlier in the line, ``GIT_CONFIG_PARAMETERS``, ``GIT_CONFIG_COUNT``/``KEY_n``/``VALUE_n``,
        then ``-c key=value`` (later wins)."""
        found: dict[str, Word] = dict(cmd.state.gitconfig)

        def env(name: str) -> Word | None:
            return cmd.env.get(name) or cmd.state.vars.get(name)

        params = env("GIT_CONFIG_PARAMETERS")
        if params is not None and params.dynamic:
            found["(unknown)"] = params
        elif params is not None:
            for item in _split_words(params.text):
                key, _, value = item.partition("=")
                found[key.lower()] = Word(value, "1" * len(value))
        count = env("GIT_CONFIG_COUNT")
        if count is not None and count.text.strip().isdigit():
            for n in range(min(int(count.text.strip()), 64)):
                key_w, value_w = env(f"GIT_CONFIG_KEY_{n}"), env(f"GIT_CONFIG_VALUE_{n}")
                if key_w is not None and value_w is not None:
                    found["(unknown)" if key_w.dynamic else key_w.text.lower()] = value_w
        elif count is not None and count.dynamic:
            found["(unknown)"] = count
        for config in configs:
            key, _, value = config.partition("=")
            found[key.lower()] = Word(value, "1" * len(value))
        for config in _config_env(cmd):
            key, _, var = config.partition("=")
            value_w = env(var)
            found[key.lower()] = value_w if value_w is not None else Word("$" + var, "1" * (len(var) + 1), True)
        return found

    def git_runs(self, cmd: Command, args: list[Word], src: bytes, st: State, depth: int) -> list[Command]:
        """Commands git runs by itself: configuration that names a command (``core.sshCommand``,
        ``core.pager``, ``credential.helper='!...'``, a ``!`` alias, ...), the environment
        (``GIT_SSH_COMMAND``, ``GIT_EDITOR``, ...) and options that take a command
        (``filter-branch --tree-filter``, ``fetch --upload-pack``)."""
        texts = [a.text for a in args]
        top = opts.parse(texts, opts.spec_for("git"))
        config = self.git_config(cmd, top.values.get("-c", []))
        scripts: list[Word] = []
        for key, value in config.items():
            if key == "(unknown)" or (value.dynamic and _GIT_RUN_KEYS.match(key)):
                scripts.append(Word(value.text, value.mask, True, value.sources))
                continue
            text = value.text
            if key.startswith("credential.") and key.endswith(".helper"):
                if text.startswith("!"):
                    scripts.append(Word(text[1:], "1" * (len(text) - 1)))
                elif text.startswith(("/", "~")) or " " in text:
                    scripts.append(value)
            elif key == "core.fsmonitor":
                if text.lower() not in ("", "true", "false", "yes", "no", "on", "off", "1", "0"):
                    scripts.append(value)
            elif _GIT_RUN_KEYS.match(key):
                scripts.append(value)
        for name in _GIT_ENV:
            given = cmd.env.get(name) or cmd.state.vars.get(name)
            if given is not None:
                scripts.append(given)
        sub_at = top.operands[0] if top.operands else None
        if sub_at is not None:
            sub = texts[sub_at].lower()
            rest = args[sub_at + 1 :]
            alias = config.get("alias." + sub)
            if alias is not None and (alias.dynamic or alias.text.startswith("!")):
                line = Word(alias.text[1:] if not alias.dynamic else alias.text, "", alias.dynamic, alias.sources)
                line.mask = "1" * len(line.text)
                for w in rest:
                    line.add(" ", True)
                    line.extend(Word(shlex.quote(w.text), "1" * len(shlex.quote(w.text)), w.dynamic, w.sources))
                scripts.append(line)
            for option in _GIT_COMMAND_OPTIONS.get(sub, ()):
                for k, w in enumerate(rest):
                    if w.text == option and k + 1 < len(rest):
                        scripts.append(rest[k + 1])
                    elif w.text.startswith(option + "=") and option.startswith("--"):
                        v = w.text[len(option) + 1 :]
                        scripts.append(Word(v, w.mask[len(option) + 1 :], w.dynamic, w.sources))
        out: list[Command] = []
        for script in scripts:
            out += self.run_word(cmd, script, src, st, depth)
        return out

    def find_exec(self, cmd: Command, args: list[Word], src: bytes, st: State, depth: int) -> list[Command]:
        out: list[Command] = []
        starts = []
        for a in args:
            if a.text.startswith("-") or a.text in ("(", "!"):
                break
            starts.append(a.text)
        starts = starts or ["."]
        if any(a.text == "-delete" for a in args):
            words = [Word("rm", "11"), Word("-rf", "111")] + [Word(x, "1" * len(x)) for x in starts]
            out += self.resolve(Command(words, st, depth + 1, "find-delete"), src, st, depth + 1)
        k = 0
        while k < len(args):
            if args[k].text in ("-exec", "-execdir", "-ok", "-okdir"):
                end = k + 1
                while end < len(args) and args[end].text not in (";", "+"):
                    end += 1
                inner: list[Word] = []
                for a in args[k + 1 : end]:
                    if "{}" in a.text:
                        for start in starts:
                            t = a.text.replace("{}", start.rstrip("/") + "/{}")
                            inner.append(Word(t, "1" * len(t)))
                    else:
                        inner.append(a)
                if inner:
                    sub = Command(inner, st, depth + 1, "find-exec")
                    out += self.resolve(sub, src, st, depth + 1)
                k = end
            k += 1
        return out

    def track_files(self, cmd: Command, st: State) -> None:
        """Copies (``cp a b``, ``cat a > b``) and downloads (``curl -o f``, ``wget``, ``> f``)."""
        fact = cmd.fact
        program = cmd.program
        outs = [
            r["path"]
            for r in cmd.redirects
            if r.get("path") and r["op"] in (">", ">>", ">|", "&>", "&>>") and r["fd"] in ("", "1")
        ]
        if program in DOWNLOADERS:
            written = list(outs)
            values: dict[str, list[str]] = fact.get("_values", {})
            for key in ("-o", "--output", "-O", "--output-document"):
                written += [pathmod.normalize(v, st.cwd, st.home, shell=True) for v in values.get(key, []) if v != "-"]
            if ("-O" in fact["options"] and program == "curl") or (program == "wget" and not values.get("-O")):
                for url in fact["operands"]:
                    name = posixpath.basename(url.split("?", 1)[0].rstrip("/")) if "://" in url else ""
                    if name:
                        written.append(pathmod.normalize(name, st.cwd, st.home, shell=True))
            for p in written:
                st.downloads[p] = program
        if program == "tee" and cmd.stdin_from:
            feeders = [p for p in cmd.stdin_from if p in DOWNLOADERS]
            for operand in fact["operands"]:
                p = pathmod.normalize(operand, st.cwd, st.home, shell=True)
                if feeders:
                    st.downloads[p] = feeders[0]
        if program in _COPIERS and len(fact["operands"]) >= 2 and fact["writes"]:
            dst = fact["writes"][-1]
            for s in fact["paths_raw"]:
                st.aliases.setdefault(dst, []).append(s)
                st.aliases.setdefault(dst.rstrip("/") + "/" + posixpath.basename(s), []).append(s)
                if s in st.downloads:
                    st.downloads[dst] = st.downloads[s]
        for p in outs:
            st.aliases.setdefault(p, []).extend(fact["paths_raw"])
        text = _fed_text(cmd) if outs or program == "tee" else None
        appends = {r["path"] for r in cmd.redirects if r.get("path") and r["op"] == ">>"}
        targets = outs + (
            [pathmod.normalize(o, st.cwd, st.home, shell=True) for o in fact["operands"]] if program == "tee" else []
        )
        for p in targets:  # static text written to a file that may be run later in the line
            if text is None:
                st.scripts.pop(p, None)
            else:
                st.scripts[p] = (st.scripts.get(p, "") if p in appends else "") + text
        if program == "chmod":
            pass

    # ---- words ----------------------------------------------------------------------------
    def word(self, n: tree_sitter.Node, src: bytes, st: State, depth: int) -> Word:
        t = n.type
        w = Word()
        raw = src[n.start_byte : n.end_byte].decode("utf-8", "replace")
        if t == "word" or t == "number":
            unquoted(raw, w)
        elif t == "raw_string":
            w.add(raw[1:-1] if len(raw) >= 2 else "", True)
        elif t == "ansi_c_string":
            w.add(ansi_c(raw[2:-1]), True)
        elif t in ("string", "translated_string"):
            pos = n.start_byte + (2 if t == "translated_string" else 1)
            end = n.end_byte - 1
            for c in n.named_children:
                if c.start_byte > pos:
                    double_quoted(src[pos : c.start_byte].decode("utf-8", "replace"), w)
                if c.type == "string_content":
                    double_quoted(c.text.decode("utf-8", "replace") if c.text else "", w)
                else:
                    inner = self.word(c, src, st, depth)
                    if not inner.dynamic and _ALL_ITEMS.match(
                        src[c.start_byte : c.end_byte].decode("utf-8", "replace")
                    ):
                        w.extend(inner)  # `"${a[@]}"`, `"$@"`: one word per item
                        pos = c.end_byte
                        continue
                    w.extend(
                        Word(
                            inner.text, "1" * len(inner.text), inner.dynamic, inner.sources, inner.procsub, inner.fixed
                        )
                    )
                pos = c.end_byte
            if end > pos:
                double_quoted(src[pos:end].decode("utf-8", "replace"), w)
        elif t == "simple_expansion" or t == "expansion":
            self.expansion(n, raw, st, w)
        elif t == "command_substitution":
            body = self.children_text(n, src)
            if body.lstrip().startswith("<") and not body.lstrip().startswith("<<"):
                body = "cat " + body.lstrip()[1:]  # `$(<file)` is bash for `$(cat file)`
            before = len(self.commands)
            self.parse(body, st.copy(), depth + 1, "substitution")
            produced = self.commands[before:]
            known = _static_output(produced, st) if len(produced) == 1 else None
            if known is not None:  # `$(echo rm)`, `$(pwd)`: the output is known
                w.add(known, False)
            else:
                w.add(raw, True)
                w.dynamic = True
                w.fixed = 0
                w.sources = _unique(c.program for c in produced if c.program)
        elif t == "process_substitution":
            body = self.children_text(n, src)
            before = len(self.commands)
            self.parse(body, st.copy(), depth + 1, "process-substitution")
            w.add("/dev/fd/63", True)
            w.procsub = True
            produced = [c for c in self.commands[before:] if c.depth == depth + 1]
            if raw.startswith("<(") and len(produced) == 1:
                w.output = _fed_text(produced[0])  # `sh <(echo ...)`: static text
            if raw.startswith(">("):
                w.readers = [c for c in self.commands[before:] if c.depth == depth + 1]
            w.sources = _unique(c.program for c in self.commands[before:] if c.program)
        elif t == "concatenation" or t == "command_name":
            pos = n.start_byte
            for c in n.children:
                if c.start_byte > pos:
                    unquoted(src[pos : c.start_byte].decode("utf-8", "replace"), w)
                w.extend(self.word(c, src, st, depth))
                pos = c.end_byte
            if n.end_byte > pos:
                unquoted(src[pos : n.end_byte].decode("utf-8", "replace"), w)
        elif t == "arithmetic_expansion":
            value = _arithmetic(raw[3:-2] if raw.startswith("$((") else "", st)
            if value is not None:  # `$((1+2))` with literals and static variables
                w.add(value, False)
            else:
                w.add(raw, True)
                w.dynamic = True
        elif t == "brace_expression":
            w.add(raw, False)
        else:
            unquoted(raw, w)
        if t in ("word", "concatenation") and w.text.startswith("~") and w.mask[:1] == "0":
            head, sep, rest = w.text.partition("/")
            if head == "~" or ("\n" not in head and all(m == "0" for m in w.mask[: len(head)])):
                expanded = pathmod.normalize(head, "", st.home, shell=True) if head != "~" else st.home
                if head == "~" or expanded != head:
                    tail_mask = w.mask[len(head) :]
                    w.text = expanded + sep + rest
                    w.mask = "1" * len(expanded) + tail_mask
        return w

    def children_text(self, n: tree_sitter.Node, src: bytes) -> str:
        named = n.named_children
        if not named:
            return ""
        return src[named[0].start_byte : named[-1].end_byte].decode("utf-8", "replace")

    def expansion(self, n: tree_sitter.Node, raw: str, st: State, w: Word) -> None:
        if raw in ("$@", "$*") or (raw.startswith("${") and raw.endswith("}")):
            got = _parameter(raw[2:-1] if raw.startswith("${") else raw[1:], st)
            if got is not None:
                w.extend(got)
                return
        name = ""
        for c in n.named_children:
            if c.type in ("variable_name", "special_variable_name"):
                name = c.text.decode() if c.text else ""
                break
        simple = raw in ("$" + name, "${" + name + "}")
        if simple and name == "HOME" and name not in st.vars:
            w.add(st.home, True)
            return
        if simple and name in _DEFAULTS and name not in st.vars:
            w.add(_DEFAULTS[name], True)
            return
        if simple and name == "IFS" and name not in st.vars:
            w.add(" ", False)  # default IFS: the word is split here
            return
        if simple and name == "PWD" and st.cwd:
            w.add(st.cwd, True)
            return
        value = st.vars.get(name) if simple else None
        if value is not None and not value.dynamic:
            w.add(value.text, False)
            return
        w.dynamic = True
        w.fixed = 0
        if value is not None:
            w.sources = list(value.sources)
        w.add(raw, True)

    # ---- the fact ---------------------------------------------------------------------------
    def build(self, cmd: Command) -> None:
        words = cmd.words
        program = cmd.program
        argv = [w.text for w in words[cmd.start :]]
        args = argv[1:]
        argw = words[cmd.start + 1 :]
        sub = ""
        spec_args = args
        offset = 0
        if program == "git":
            top = opts.parse(args, opts.spec_for("git"))
            if top.operands:
                offset = top.operands[0] + 1
                sub = args[top.operands[0]]
                spec_args = args[offset:]
                expanded = self.git_expand(cmd, argw[offset - 1 :], top.values.get("-c", []))
                if expanded[0] is not argw[offset - 1]:  # an alias
                    added = expanded[1 : len(expanded) - (len(argw) - offset)]
                    sub, spec_args = expanded[0].text, [w.text for w in added] + spec_args
                    argw = [*argw[:offset], *added, *argw[offset:]]
                    args = [w.text for w in argw]
        elif program in (
            "gh",
            "docker",
            "kubectl",
            "npm",
            "cargo",
            "go",
            "aws",
            "gcloud",
            "az",
            "diskutil",
            "systemctl",
            "brew",
            "pip",
            "helm",
        ):
            first = next((k for k, a in enumerate(args) if not a.startswith("-")), None)
            if first is not None:
                sub = args[first]
        spec = opts.spec_for(program, sub) if program == "git" else opts.spec_for(_SPEC_ALIASES.get(program, program))
        parsed = opts.parse(spec_args, spec)
        operands = [spec_args[k] for k in parsed.operands]
        operand_words = [argw[offset + k] for k in parsed.operands]
        st = cmd.state
        paths_raw: list[str] = []
        paths: list[str] = []
        globs: list[str] = []
        extra = [st.home.rsplit("/", 1)[-1]] if st.home.startswith("/") else []
        if program in _SPEC_ALIASES or program in ("grep", "rg"):
            # the first operand of a search program is its pattern (unless -e/-f give one), never a file
            given = {"-e", "-f", "--regexp", "--file"} & set(parsed.values)
            pathish = operand_words if given else operand_words[1:]
            values = {k: v for k, v in parsed.values.items() if k not in ("-e", "--regexp")}
        else:
            pathish, values = operand_words, parsed.values
        candidates: list[tuple[Word, str]] = [(w, w.text) for w in pathish]
        candidates += [(Word(v, "1" * len(v)), v) for vs in values.values() for v in vs]
        for w in argw if pathish is operand_words else []:
            t = w.text
            if t.startswith("--") and "=" in t:
                candidates.append((w, t.split("=", 1)[1]))
            if "@" in t:
                candidates.append((w, t.split("@", 1)[1]))
            if "=" in t and not t.startswith("-"):
                candidates.append((w, t.split("=", 1)[1]))
        unresolved = [pathmod.static_dir(w.text[: w.fixed], st.cwd, st.home) for w in operand_words if w.dynamic]
        candidates += [
            (Word(r["target"], "1" * len(r["target"])), r["target"])
            for r in cmd.redirects
            if r["op"] in ("<", "<>") and r.get("path")
        ]
        writes: list[str] = [r["path"] for r in cmd.redirects if r.get("path") and r["op"].startswith(">")]
        copy_dest = program in _COPIERS and len(operand_words) >= 2
        if copy_dest or program == "tee":
            dests = operand_words[-1:] if copy_dest else operand_words
            writes += [pathmod.normalize(w.text, st.cwd, st.home, shell=True) for w in dests if not w.dynamic]
            candidates = [(w, t) for w, t in candidates if not any(w is d for d in dests)]
        for w, text in candidates:
            if w.dynamic or text == "":
                continue
            text = text.lstrip("<") if text.startswith("<") else text
            norm = pathmod.normalize(text, st.cwd, st.home, shell=True)
            if norm and w.glob and text == w.text:
                pattern = pathmod.normalize(w.pattern(), st.cwd, st.home, shell=True)
                globs.append(pattern)
                paths += pathmod.glob_candidates(pattern, extra)
            if norm:
                paths_raw.append(norm)
                paths.append(norm)
        for p in list(paths):  # the original of a copy made earlier (also inside a copied directory)
            for dst, origins in st.aliases.items():
                if p == dst or p.startswith(dst.rstrip("/") + "/"):
                    paths += [o + p[len(dst.rstrip("/")) :] if p != dst else o for o in origins]
        hosts: list[str] = []
        if program not in SEARCHERS and not (program == "git" and sub in ("grep", "log", "commit", "tag", "notes")):
            bare = set(operands) | {v for key, vs in parsed.values.items() for v in vs if key in _URL_OPTIONS}
            for w in argw:
                if program in NETWORK and w.text in bare and (_URL_WORD.match(w.text) or not _SPACE.search(w.text)):
                    found = hostmod.of_argument(w.text)  # an address operand (not a text: gh issue create "...")
                elif "://" in w.text and (program in INTERPRETERS or _URL_WORD.match(w.text)):
                    found = hostmod.in_text(w.text)  # code, or a word that is a URL (--url=..., URL=...)
                else:
                    found = []  # a URL inside text (a sed script, an issue title) is not an access
                if program == "curl" and not found and "{" in w.text:
                    variants = brace_expand(w.text, "0" * len(w.text)) or []
                    found = [h for text, _ in variants for h in hostmod.of_argument(text)]
                hosts += found
        inputs = [s for w in argw for s in w.sources]
        cmd.fact = {
            "program": program,
            "argv": argv,
            "args": args,
            "subcommand": sub,
            "options": _unique(parsed.options),
            "operands": operands,
            "wrappers": cmd.wrappers,
            "privileged": any(w in _PRIVILEGE for w in cmd.wrappers),
            "dynamic": cmd.dynamic or any(w.dynamic for w in words),
            "globs": globs,
            "unresolved": unresolved,
            "paths": _unique(paths),
            "writes": _unique(writes),
            "paths_raw": paths_raw,
            "hosts": _unique(hosts),
            "cwd": st.cwd,
            "branch": st.branch,
            "redirects": cmd.redirects,
            "stdin_from": cmd.stdin_from,
            "stdout_to": cmd.stdout_to,
            "code_from": cmd.code_from,
            "context": cmd.context,
            "depth": cmd.depth,
            "_inputs": _unique(inputs),
            "_values": parsed.values,
        }


_RUNS = frozenset(name for name, rows in programs.table().items() if any(r.spec.runs for r in rows))
"""Programs with a ``runs`` row in the program table."""
_GIT_RUNS_SUBS = frozenset(r.spec.sub[0] for r in programs.table().get("git", ()) if r.spec.runs and r.spec.sub)
_JOINS = frozenset({("ssh", ""), ("parallel", ""), ("git", "submodule")})
"""Programs that join the words of the command they run into one shell line."""
_SHORT_ALIAS = {("git", "rebase", "--exec"): "-x"}
_GIT_RUN_KEYS = re.compile(
    r"^(core\.(sshcommand|pager|editor|askpass|gitproxy|alternaterefscommand)|sequence\.editor|diff\.external|"
    r"diff\.[^.]+\.(command|textconv)|merge\.[^.]+\.driver|filter\.[^.]+\.(clean|smudge|process)|"
    r"gpg(\.[^.]+)?\.program|uploadpack\.packobjectshook|pager\..+|interactive\.difffilter|"
    r"(difftool|mergetool|man|browser)\.[^.]+\.(cmd|path)|web\.browser|remote\.[^.]+\.(uploadpack|receivepack)|"
    r"sendemail\.(tocmd|cccmd|smtpserver)|trailer\.[^.]+\.(command|cmd)|core\.fsmonitor|credential(\..+)?\.helper)$"
)
"""Configuration keys whose value is a command git runs."""
_GIT_ENV = (
    "GIT_SSH_COMMAND",
    "GIT_SSH",
    "GIT_EDITOR",
    "GIT_PAGER",
    "GIT_EXTERNAL_DIFF",
    "GIT_ASKPASS",
    "GIT_SEQUENCE_EDITOR",
    "GIT_PROXY_COMMAND",
    "SSH_ASKPASS",
)
"""Environment variables whose value is a command git runs."""
_GIT_COMMAND_OPTIONS: dict[str, tuple[str, ...]] = {
    "filter-branch": ("--setup", "--env-filter", "--tree-filter", "--index-filter", "--parent-filter",
                      "--msg-filter", "--commit-filter", "--tag-name-filter"),
    "difftool": ("-x", "--extcmd"),
    "fetch": ("--upload-pack",),
    "pull": ("--upload-pack",),
    "clone": ("-u", "--upload-pack"),
    "ls-remote": ("--upload-pack",),
    "push": ("--receive-pack", "--exec"),
    "archive": ("--exec",),
    "send-email": ("--to-cmd", "--cc-cmd"),
}  # fmt: skip
"""git subcommand options whose value is a command git runs (``rebase --exec`` is in the table)."""


def _config_env(cmd: Command) -> list[str]:
    """``git --config-env=key=ENVVAR`` values."""
    out = []
    words = cmd.words[cmd.start + 1 :]
    for k, w in enumerate(words):
        if w.text.startswith("--config-env="):
            out.append(w.text[len("--config-env=") :])
        elif w.text == "--config-env" and k + 1 < len(words):
            out.append(words[k + 1].text)
        elif not w.text.startswith("-"):
            break
    return out


_CONFIG_VALUED = frozenset({"-f", "--file", "--blob", "--type", "--default", "--comment", "--value"})


def _record_config(rest: list[str], words: list[Word], st: State) -> None:
    """``git config [--global|--file f|...] KEY VALUE`` (also ``git config set KEY VALUE``): the
    value the rest of the line runs with."""
    operands: list[Word] = []
    k = 0
    unset = False
    while k < len(rest):
        t = rest[k]
        if t in _CONFIG_VALUED:
            k += 2
            continue
        if t.startswith("--unset") or t in ("--get", "--get-all", "--get-regexp", "--list", "-l", "--remove-section"):
            unset = True
        if not t.startswith("-") or t == "-":
            operands.append(words[k])
        k += 1
    if operands and operands[0].text in ("set", "unset", "get", "list", "edit", "rename-section", "remove-section"):
        unset = unset or operands[0].text != "set"
        operands = operands[1:]
    if not operands:
        return
    key = operands[0].text.lower()
    if unset or len(operands) < 2:
        if unset:
            st.gitconfig.pop(key, None)
        return
    value = operands[1]
    st.gitconfig[key] = value


_ALL_ITEMS = re.compile(r"^\$(@|\*|\{@\}|\{\*\}|\{[A-Za-z_]\w*\[[@*]\]\})$")
"""``"$@"``, ``"${a[@]}"``: quoted, still one word per item."""
_PARAM = re.compile(r"^(#)?(!)?([A-Za-z_]\w*|[0-9]+|[@*])(?:\[([^\]]*)\])?(.*)$", re.S)
_MAX_VALUE = 512


def _plain(text: str) -> Word:
    return Word(text, "0" * len(text))


def _operand(text: str, st: State) -> tuple[str, bool] | None:
    """A parameter-expansion operand that is static text: (text, quoted); None otherwise."""
    if "$" in text or "`" in text:
        return None
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"" and text[0] not in text[1:-1]:
        return text[1:-1], True
    if any(c in text for c in "'\"\\"):
        return None
    if text == "~" or text.startswith("~/"):
        return st.home + text[1:], False
    return text, False


def _pattern(text: str, st: State) -> re.Pattern[str] | None:
    got = _operand(text, st)
    if got is None:
        return None
    body, quoted = got
    return re.compile(re.escape(body) + r"\Z" if quoted else fnmatch.translate(body), re.S)


def _parameter(body: str, st: State) -> Word | None:
    """``${...}`` with static operands (``${v/a/b}``, ``${v#x}``, ``${v:-d}``, ``${v^^}``,
    ``${v:1:3}``, ``${#v}``, ``${!v}``, ``${a[0]}``, ``${a[@]}``, ``$@``), or None (then the
    plain lookup or dynamic). A name the line did not set is unknown, except a lower-case one
    (not an environment variable), which is unset."""
    m = _PARAM.match(body)
    if m is None:
        return None
    length, indirect, name, index, op = m.groups()
    if not (length or indirect or index is not None or op or name in ("@", "*")):
        return None  # `${name}`: the plain lookup
    if indirect:
        ref = st.vars.get(name)
        if index is not None or ref is None or ref.dynamic or not re.fullmatch(r"[A-Za-z_]\w*", ref.text):
            return None
        name = ref.text
    if name in ("@", "*") or index in ("@", "*"):
        items = st.arrays.get("@" if name in ("@", "*") else name)
        if items is None or op or any(x.dynamic for x in items):
            return None
        if length:
            return _plain(str(len(items)))
        out = Word()
        for k, x in enumerate(items):
            if k:
                out.add(" ", False)
            out.add(x.text, True)
        return out
    value: Word | None
    if index is not None:
        at = _arithmetic(index, st) if name in st.arrays else None
        if at is not None and int(at) >= 0:
            items = st.arrays[name]
            value = items[int(at)] if int(at) < len(items) else Word()
        elif index.strip() == "0":
            value = st.vars.get(name)
        else:
            return None
    else:
        value = st.vars.get(name)
        if value is None and name == "HOME":
            value = Word(st.home, "1" * len(st.home))
    if value is not None and value.dynamic:
        return None
    unset_known = value is None and any(c.islower() for c in name)
    if length:
        return _plain(str(len(value.text))) if value is not None and not op else None
    if not op:
        return _plain(value.text) if value is not None else None
    m2 = re.match(r"^(:?)([-=+?])(.*)$", op, re.S)
    if m2:
        colon, kind, given = m2.groups()
        if value is None and not unset_known:
            return None
        empty = value is None or (colon == ":" and value.text == "")
        arg = _operand(given, st)
        if kind in "-=":
            if not empty and value is not None:
                return _plain(value.text)
            if arg is None:
                return None
            if kind == "=":
                st.vars[name] = Word(arg[0], "1" * len(arg[0]))
            return Word(arg[0], ("1" if arg[1] else "0") * len(arg[0]))
        if kind == "+":
            return _plain("") if empty else (Word(arg[0], "0" * len(arg[0])) if arg is not None else None)
        return None if empty or value is None else _plain(value.text)
    if value is None or len(value.text) > _MAX_VALUE:
        return None
    text = value.text
    m2 = re.match(r"^(##?|%%?)(.*)$", op, re.S)
    if m2:
        rx = _pattern(m2.group(2), st)
        if rx is None:
            return None
        cuts = range(len(text) + 1) if len(m2.group(1)) == 1 else range(len(text), -1, -1)
        for k in cuts:
            if m2.group(1)[0] == "#" and rx.match(text[:k]):
                return _plain(text[k:])
            if m2.group(1)[0] == "%" and rx.match(text[len(text) - k :]):
                return _plain(text[: len(text) - k])
        return _plain(text)
    m2 = re.match(r"^/([/#%]?)((?:\\.|[^/])*)(?:/(.*))?$", op, re.S)
    if m2:
        mode, pat, rep = m2.group(1), m2.group(2), m2.group(3) or ""
        rx = _pattern(pat, st) if pat else None
        got = _operand(rep, st) if rep else ("", False)
        if (pat and rx is None) or got is None or len(text) > 128:
            return None
        if rx is None:
            return _plain(text)
        out_text, k = "", 0
        while k < len(text):
            if mode == "#" and k > 0:
                break
            ends = [len(text)] if mode == "%" else range(len(text), k, -1)
            hit = next((e for e in ends if rx.match(text[k:e])), None)
            if hit is not None:
                out_text += got[0]
                if mode != "/":
                    return _plain(out_text + text[hit:])
                k = hit
                continue
            out_text += text[k]
            k += 1
        return _plain(out_text + text[k:])
    if op in ("^^", "^", ",,", ","):
        if op == "^^":
            return _plain(text.upper())
        if op == ",,":
            return _plain(text.lower())
        return _plain((text[:1].upper() if op == "^" else text[:1].lower()) + text[1:])
    m2 = re.match(r"^:\s*\(?\s*(-?\d+)\s*\)?\s*(?::\s*\(?\s*(-?\d+)\s*\)?\s*)?$", op)
    if m2:
        off = int(m2.group(1))
        off = len(text) + off if off < 0 else off
        if off < 0 or off > len(text):
            return _plain("")
        if m2.group(2) is None:
            return _plain(text[off:])
        size = int(m2.group(2))
        end = off + size if size >= 0 else len(text) + size
        return _plain(text[off:end]) if end >= off else None
    return None


_ARITH_REJECT = ("&&", "||", "?", "=", "++", "--", ",", "[", "$(")


def _arithmetic(expr: str, st: State) -> str | None:
    """``$((expr))`` with integer literals and variables set earlier to integers; else None."""
    if len(expr) > 200 or any(r in expr for r in _ARITH_REJECT):
        return None

    def var(m: re.Match[str]) -> str:
        value = st.vars.get(m.group(1) or m.group(2) or "")
        if value is None or value.dynamic or not re.fullmatch(r"\s*-?\d+\s*", value.text):
            raise ValueError(m.group())
        return "(" + value.text.strip() + ")"

    try:
        text = re.sub(r"\$\{?([A-Za-z_]\w*)\}?|\b([A-Za-z_]\w*)\b", var, expr)
        if re.search(r"(?<![\w.])0\d", text):
            return None  # octal
        return str(_arith(ast.parse(text.strip(), mode="eval").body))
    except (ValueError, SyntaxError, ZeroDivisionError, OverflowError, RecursionError):
        return None


def _arith(node: ast.expr) -> int:
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    if isinstance(node, ast.UnaryOp):
        v = _arith(node.operand)
        if isinstance(node.op, ast.USub):
            return -v
        if isinstance(node.op, ast.UAdd):
            return v
        if isinstance(node.op, ast.Invert):
            return ~v
        if isinstance(node.op, ast.Not):
            return int(not v)
    if isinstance(node, ast.BinOp):
        a, b = _arith(node.left), _arith(node.right)
        op = node.op
        if isinstance(op, ast.Add):
            return a + b
        if isinstance(op, ast.Sub):
            return a - b
        if isinstance(op, ast.Mult):
            return a * b
        if isinstance(op, ast.Div | ast.FloorDiv):
            q = abs(a) // abs(b)
            return q if (a >= 0) == (b >= 0) else -q
        if isinstance(op, ast.Mod):
            r = abs(a) % abs(b)
            return r if a >= 0 else -r
        if isinstance(op, ast.Pow) and 0 <= b <= 64:
            return int(a**b)
        if isinstance(op, ast.LShift) and 0 <= b <= 63:
            return a << b
        if isinstance(op, ast.RShift) and 0 <= b <= 63:
            return a >> b
        if isinstance(op, ast.BitAnd):
            return a & b
        if isinstance(op, ast.BitOr):
            return a | b
        if isinstance(op, ast.BitXor):
            return a ^ b
    raise ValueError("not arithmetic")


def _escaped_tail(src: bytes, pos: int) -> bytes:
    """Blanks and escaped characters right after the last word (where the grammar may end a
    command before a trailing ``\\ ``)."""
    end = pos
    while end < len(src):
        c = src[end : end + 1]
        if c in (b" ", b"\t"):
            end += 1
        elif c == b"\\" and end + 1 < len(src) and src[end + 1 : end + 2] != b"\n":
            end += 2
        else:
            break
    return src[pos:end]


def _gap_tokens(gap: str) -> list[tuple[str, bool, bool]]:
    """Escaped characters in the text between two words: (raw text, touches the previous word,
    touches the next word)."""
    out: list[tuple[str, bool, bool]] = []
    start = -1
    i = 0
    while i < len(gap):
        c = gap[i]
        if c == "\\" and i + 1 < len(gap) and gap[i + 1] != "\n":
            if start < 0:
                start = i
            i += 2
            continue
        if c == "\\" and i + 1 < len(gap):  # line continuation
            if start >= 0:
                out.append((gap[start:i], start == 0, False))
                start = -1
            i += 2
            continue
        if c in " \t" and start >= 0:
            out.append((gap[start:i], start == 0, False))
            start = -1
        i += 1
    if start >= 0:
        out.append((gap[start:], start == 0, True))
    return out


def _split_words(text: str) -> list[str]:
    try:
        return shlex.split(text)
    except ValueError:
        return []


def _adjacent(nodes: list[tree_sitter.Node], src: bytes) -> list[list[tree_sitter.Node]]:
    """Argument nodes that touch (``$"x"`` is ``$`` + string; a backslash-newline between parts) form one word."""
    groups: list[list[tree_sitter.Node]] = []
    for n in nodes:
        if groups and src[groups[-1][-1].end_byte : n.start_byte] in (b"", b"\\\n"):
            groups[-1].append(n)
        else:
            groups.append([n])
    return groups


def _unique(items: Iterable[str]) -> list[str]:
    seen: dict[str, None] = {}
    for i in items:
        seen.setdefault(i, None)
    return list(seen)


def _option_value(words: list[Word], names: tuple[str, ...]) -> Word | None:
    for k, w in enumerate(words):
        if (w.text in names or re.fullmatch(r"-[A-Za-z]*c", w.text)) and k + 1 < len(words):
            return words[k + 1]
        for n in names:
            if n.startswith("--") and w.text.startswith(n + "="):
                v = w.text[len(n) + 1 :]
                return Word(v, "1" * len(v), w.dynamic, w.sources)
    return None


def _shell_payload(args: list[Word]) -> Word | None:
    """The script of ``sh -c 'script'`` (``-c`` anywhere in an option cluster: ``-lc``, ``-ec``)."""
    has_c = False
    for w in args:
        t = w.text
        if t == "--":
            continue
        if t.startswith("-") and len(t) > 1 and not t.startswith("--"):
            if "c" in t[1:]:
                has_c = True
            continue
        if (t.startswith("+") and len(t) > 1) or t.startswith("--"):
            continue
        return w if has_c else None
    return None


_INLINE_FLAGS = frozenset({"-c", "-e", "-E", "-r", "--eval", "-Command", "-command", "-EncodedCommand", "-enc"})


_FLAG_ONLY = frozenset("lnpaswWtTuUvXSBbdEiIOqRsV")
"""Single-letter interpreter options that take no value, so a cluster (``perl -lne``,
``python -Bc``) goes on to the code flag."""


def _inline_code(language: str, args: list[Word]) -> Word | None:
    """The inline code word of an interpreter's arguments (``python -c``, ``node -e``, ``perl -e``,
    ``php -r``, an awk program), or None when it runs a file or stdin."""
    k = 0
    while k < len(args):
        t = args[k].text
        if t == "--":
            break
        nxt = args[k + 1] if k + 1 < len(args) else None
        if language == "awk":
            if t in ("-f", "--file") or t.startswith("-f"):
                return None
            if t in ("-F", "-v", "--assign", "--field-separator"):
                k += 2
                continue
            if t.startswith("-"):
                k += 1
                continue
            return args[k]
        if language == "javascript":
            if t in ("-e", "--eval", "-p", "--print", "-pe"):
                return nxt
            if t.startswith(("--eval=", "--print=")):
                value = t.split("=", 1)[1]
                return Word(value, "1" * len(value))
        elif t.startswith("-") and not t.startswith("--") and len(t) > 1:
            flag = {"python": "c", "perl": "eE", "ruby": "eE", "php": "r"}.get(language, "")
            body = t[1:]
            hit = None
            for j, ch in enumerate(body):
                if ch in flag:
                    hit = j
                    break
                if ch not in _FLAG_ONLY:  # `-MFile::Path=rmtree`: the rest is this option's value
                    break
            if hit is not None:
                rest = body[hit + 1 :]
                return Word(rest, "1" * len(rest)) if rest else nxt
        elif not t.startswith("-"):
            return None  # a script file
        k += 1
    return None


def _has_inline_code(program: str, args: list[str]) -> bool:
    flags = _INLINE_FLAGS | {"-m", "-p", "--print", "-File", "-file", "-f"}
    for a in args:
        if a in flags or (
            (program in SHELLS or program.startswith("python"))
            and a.startswith("-")
            and not a.startswith("--")
            and "c" in a[1:]
        ):
            return True
        if program in ("perl", "ruby") and a.startswith("-") and ("e" in a[1:] or "E" in a[1:]):
            return True
    return False


def _script_operand(program: str, args: list[str]) -> int | None:
    """Index of the script file operand, if any (the first non-option argument)."""
    k = 0
    while k < len(args):
        a = args[k]
        if a == "--":
            return k + 1 if k + 1 < len(args) else None
        if a == "-":
            return k
        if a.startswith(("-", "+")):
            if program in SHELLS and a in ("-o", "+o", "-O", "+O", "--rcfile", "--init-file"):
                k += 1
            if program.startswith("python") and a in ("-W", "-X", "-Q"):
                k += 1
            k += 1
            continue
        return k
    return None


def _static_output(commands: list[Command], st: State) -> str | None:
    """The output of a substituted ``echo``/``printf``/``pwd`` whose words are static (trailing
    newlines removed, as bash does), else None."""
    cmd = commands[0]
    if cmd.dynamic or cmd.stdin_from or cmd.redirects:
        return None
    if cmd.program == "pwd" and len(cmd.words) == cmd.start + 1 and cmd.state.cwd:
        return cmd.state.cwd
    if cmd.program in ("echo", "printf"):
        text = _echo_text(cmd)
        return text.rstrip("\n") if text is not None else None
    return None


def _pipe_nodes(n: tree_sitter.Node) -> list[tree_sitter.Node]:
    """The elements of a pipeline, nested pipelines flattened."""
    out: list[tree_sitter.Node] = []
    for c in n.named_children:
        out += _pipe_nodes(c) if c.type == "pipeline" else [c]
    return out


def _fed_text(cmd: Command) -> str | None:
    """The static text a command prints: ``echo``/``printf`` of static words, ``cat`` of its
    heredoc or here-string; else None."""
    if cmd.dynamic or cmd.program not in ("echo", "printf", "cat", "tee"):
        return None
    if cmd.program == "tee":
        return cmd.stdin_text
    if cmd.program == "cat":
        rest = [w.text for w in cmd.words[cmd.start + 1 :]]
        return cmd.stdin_text if all(t.startswith("-") and t != "-" for t in rest) else None
    return _echo_text(cmd, fed=True)


def _echo_text(cmd: Command, fed: bool = False) -> str | None:
    """What a static ``echo``/``printf`` prints (escapes decoded as ``echo -e`` and ``printf`` do),
    else None. ``fed``: the text goes to a shell's stdin; an ``echo`` without ``-e`` whose text
    has a backslash then gives both readings (zsh's and dash's ``echo`` decode by default)."""
    words = cmd.words[cmd.start + 1 :]
    if any(w.dynamic for w in words):
        return None
    texts = [w.text for w in words]
    if cmd.program == "printf":
        if texts[:1] == ["--"]:
            texts = texts[1:]
        if not texts or texts[0] == "-v":
            return None
        return printf_text(texts[0], texts[1:])
    escapes: bool | None = None
    newline = True
    while texts and re.fullmatch(r"-[neE]+", texts[0]):
        for ch in texts[0][1:]:
            if ch == "n":
                newline = False
            else:
                escapes = ch == "e"
        texts = texts[1:]
    text = " ".join(texts)
    if escapes or (escapes is None and fed and "\\" in text):
        decoded, stop = echo_escapes(text)
        newline = newline and not stop
        text = decoded if escapes else text + "\n" + decoded
    return text + ("\n" if newline else "")


CACHE_ENTRIES = 256
CACHE_MAX_TEXT = 2048
CACHE_MAX_FACTS = 16384
"""The parse cache holds at most 256 results of commands up to 2 KiB whose facts encode to at
most 16 KiB (about 4.6 MB at worst): agents repeat the same commands (``git status``, the test
command), and a flood of unique ones only evicts."""
_cache: OrderedDict[tuple[str, str, str], bytes] = OrderedDict()


def parse_command(text: str, cwd: str, home: str) -> tuple[list[dict[str, Any]], list[str]]:
    """Facts of every simple command in ``text`` and the reasons it could not be read fully.

    A pure function of its three inputs, so repeated commands are answered from a bounded LRU
    cache; each call gets its own copy decoded from JSON (cached or not), never a shared object."""
    key = (text, cwd, home)
    cached = _cache.get(key)
    if cached is not None:
        _cache.move_to_end(key)
        facts, reasons = orjson.loads(cached)
        return facts, reasons
    encoded = orjson.dumps(_parse(text, cwd, home))
    if len(text) <= CACHE_MAX_TEXT and len(encoded) <= CACHE_MAX_FACTS:
        _cache[key] = encoded
        if len(_cache) > CACHE_ENTRIES:
            _cache.popitem(last=False)
    facts, reasons = orjson.loads(encoded)  # the same JSON shape whether cached or not
    return facts, reasons


def _parse(text: str, cwd: str, home: str) -> tuple[list[dict[str, Any]], list[str]]:
    walker = Walker(home)
    state = State(cwd=cwd, home=home, vars={})
    try:
        walker.parse(text, state, 0, "")
        walker.uncalled(state)
    except RecursionError:
        walker.unparsed.append("too-deep")
    except ValueError:
        walker.unparsed.append("syntax")
    for cmd in walker.commands:
        lost = cwd != "" and cmd.state.cwd == ""
        found = effectmod.of_command(cmd.fact, cmd.words[cmd.start + 1 :], cmd.state.cwd, cmd.state.home, lost)
        cmd.fact["effects"] = effectmod.with_persist(found + cmd.code_effects)
    _link_effects(walker.commands)
    facts = []
    for cmd in walker.commands:
        fact = dict(cmd.fact)
        fact.pop("_inputs", None)
        fact.pop("_values", None)
        fact.pop("_stdin_parsed", None)
        fact.pop("paths_raw", None)
        facts.append(fact)
    return facts, _unique(walker.unparsed)


_SOCKET_EXEC = re.compile(r"^(exec|system):", re.I)
_NC_EXEC = frozenset({"-e", "-c", "--exec", "--sh-exec", "--lua-exec"})


def _link_effects(commands: list[Command]) -> None:
    """Effects that only the command line as a whole shows: code run from a program that read the
    network is downloaded (``cat < /dev/tcp/h/80 | sh``), and a shell or interpreter whose input or
    output is a socket, or that ``socat``/``nc`` attach to one, is a remote shell."""
    fetching = {c.program for c in commands if any(e["kind"] == "network" for e in c.fact["effects"]) and c.program}
    for cmd in commands:
        fact = cmd.fact
        found: list[dict[str, Any]] = fact["effects"]
        for e in found:
            if e["kind"] == "exec" and e["source"] != "download" and set(cmd.code_from) & fetching:
                e["source"] = "download"
        via = [*fact["wrappers"], *([fact["context"]] if fact["context"] else [])]
        program = cmd.program
        socket = any(e["kind"] == "network" and e["path"].startswith("/dev/") for e in found)
        args = fact["args"]
        attached = (program == "socat" and any(_SOCKET_EXEC.match(a) for a in args)) or (
            program in ("nc", "ncat", "netcat") and any(a in _NC_EXEC for a in args)
        )
        if (socket and is_interpreter(program)) or attached:
            found.append(effectmod.effect("exec", program, via, source="network", certainty="unknown"))
