"""The fact of one simple command: the program, its subcommand, options, operands, the paths and
hosts it names, as rules read them."""

from __future__ import annotations

import re

from gateway.policy.facts import hosts as hostmod
from gateway.policy.facts import options as opts
from gateway.policy.facts import paths as pathmod
from gateway.policy.facts.shell import git
from gateway.policy.facts.shell.command import COPIERS, INTERPRETERS, NETWORK, PRIVILEGE, SEARCHERS, Command, unique
from gateway.policy.facts.words import (
    Word,
    brace_expand,
)

# ---- the fact ---------------------------------------------------------------------------
_URL_OPTIONS = frozenset(
    {"--url", "--resolve", "--connect-to", "-x", "--proxy", "--preproxy", "-connect", "-Uri", "-uri"}
)
_URL_WORD = re.compile(r"^(-{1,2}[A-Za-z0-9][A-Za-z0-9_.-]*=|[A-Za-z_][A-Za-z0-9_]*=)?[A-Za-z][A-Za-z0-9+.-]{0,15}://")
"""A word that is a URL (also as an ``--option=`` or ``NAME=`` value): for any program, the address
it names is one it may connect to. A URL elsewhere in a word is text, except in an
interpreter's code (``python -c "urlopen('http://...')"``)."""
_SPACE = re.compile(r"\s")
_GIT_REMOTE_FIRST = frozenset({"push", "fetch", "pull"})
"""git subcommands whose operands are a remote, then refspecs: neither is a file of the workspace."""
_GIT_REFS_ONLY = frozenset({"branch", "switch", "merge", "rebase", "tag", "cherry-pick", "revert"})
"""git subcommands whose operands are refs (branch, tag, commit names), never files."""
_PATH_LIKE = re.compile(r"^(/|\./|\.\./|~|file://)")


def _git_pathish(sub: str | None, words: list[Word]) -> list[Word]:
    """The operands of a git command that name files: a remote is one only when it is spelt as a
    path (``git push ../mirror main``); refs and refspecs never are."""
    if sub in _GIT_REFS_ONLY:
        return []
    if sub in _GIT_REMOTE_FIRST:
        return [w for w in words[:1] if w.dynamic or _PATH_LIKE.match(w.text)]
    return words


_SPEC_ALIASES = {"egrep": "grep", "fgrep": "grep", "zgrep": "grep", "ag": "rg", "ack": "rg", "git-grep": "grep"}
_PATTERN_FIRST = frozenset({*_SPEC_ALIASES, "grep", "rg"})
"""Search programs: their first operand is the pattern unless an option gives it (:data:`_PATTERN_GIVEN`)."""
_PATTERN_GIVEN = frozenset({"-e", "-f", "--regexp", "--file"})
_SUBCOMMANDS = frozenset({
    "gh", "docker", "kubectl", "npm", "cargo", "go", "aws", "gcloud", "az", "diskutil", "systemctl", "brew", "pip", "helm",
})  # fmt: skip
"""Programs whose first word that is not an option is their subcommand."""
_GIT_TEXT = frozenset({"grep", "log", "commit", "tag", "notes"})
"""git subcommands whose arguments are text or patterns, never addresses."""


def build(cmd: Command) -> None:
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
            expanded = git.expand(cmd, argw[offset - 1 :], top.values.get("-c", []))
            if expanded[0] is not argw[offset - 1]:  # an alias
                added = expanded[1 : len(expanded) - (len(argw) - offset)]
                sub, spec_args = expanded[0].text, [w.text for w in added] + spec_args
                argw = [*argw[:offset], *added, *argw[offset:]]
                args = [w.text for w in argw]
    elif program in _SUBCOMMANDS:
        first = next((k for k, a in enumerate(args) if not a.startswith("-")), None)
        if first is not None:
            sub = args[first]
    spec = opts.spec_for(program, sub) if program == "git" else opts.spec_for(_SPEC_ALIASES.get(program, program))
    parsed = opts.parse(spec_args, spec)
    cmd.parsed = (spec, spec_args, parsed)
    operands = [spec_args[k] for k in parsed.operands]
    operand_words = [argw[offset + k] for k in parsed.operands]
    st = cmd.state
    paths_raw: list[str] = []
    paths: list[str] = []
    globs: list[str] = []
    if program in _PATTERN_FIRST:
        # the first operand of a search program is its pattern (unless -e/-f give one), never a file
        given = not _PATTERN_GIVEN.isdisjoint(parsed.values)
        pathish = operand_words if given else operand_words[1:]
        values = {k: v for k, v in parsed.values.items() if k not in ("-e", "--regexp")}
    elif program == "git":
        pathish, values = _git_pathish(sub, operand_words), parsed.values
    else:
        pathish, values = operand_words, parsed.values
    candidates: list[tuple[Word, str]] = [(w, w.text) for w in pathish]
    for vs in values.values():  # (a loop, not a comprehension: most commands give no option a value)
        candidates += [(Word(v, "1" * len(v)), v) for v in vs]
    for w in argw if pathish is operand_words or program == "git" else []:
        t = w.text
        assigns = "=" in t
        if assigns and t.startswith("--"):
            candidates.append((w, t.split("=", 1)[1]))
        if "@" in t:
            candidates.append((w, t.split("@", 1)[1]))
        if assigns and not t.startswith("-"):
            candidates.append((w, t.split("=", 1)[1]))
    unresolved = [pathmod.static_dir(w.text[: w.fixed], st.cwd, st.home) for w in operand_words if w.dynamic]
    writes: list[str] = []
    if cmd.redirects:
        candidates += [
            (Word(r["target"], "1" * len(r["target"])), r["target"])
            for r in cmd.redirects
            if r["op"] in ("<", "<>") and r.get("path")
        ]
        writes += [r["path"] for r in cmd.redirects if r.get("path") and r["op"].startswith(">")]
    copy_dest = program in COPIERS and len(operand_words) >= 2
    if copy_dest or program == "tee":
        dests = operand_words[-1:] if copy_dest else operand_words
        writes += [pathmod.normalize(w.text, st.cwd, st.home, shell=True) for w in dests if not w.dynamic]
        candidates = [(w, t) for w, t in candidates if not any(w is d for d in dests)]
    cwd, home = st.cwd, st.home
    for w, text in candidates:
        if w.dynamic or text == "":
            continue
        if text.startswith("<"):
            text = text.lstrip("<")
        norm = pathmod.normalize(text, cwd, home, shell=True)
        if not norm:
            continue
        if text == w.text and w.glob:
            pattern = pathmod.normalize(w.pattern(), cwd, home, shell=True)
            globs.append(pattern)
            extra = [home.rsplit("/", 1)[-1]] if home.startswith("/") else []  # the user's name
            paths += pathmod.glob_candidates(pattern, extra)
        paths_raw.append(norm)
        paths.append(norm)
    for p in list(paths) if st.aliases else []:  # the original of a copy made earlier (also in a copied directory)
        for dst, origins in st.aliases.items():
            if p == dst or p.startswith(dst.rstrip("/") + "/"):
                paths += [o + p[len(dst.rstrip("/")) :] if p != dst else o for o in origins]
    hosts: list[str] = []
    if program not in SEARCHERS and not (program == "git" and sub in _GIT_TEXT):
        network = program in NETWORK
        interpreter = program in INTERPRETERS
        # the words a network program may take as an address: its operands and URL options' values
        bare = (
            set(operands) | {v for key, vs in parsed.values.items() for v in vs if key in _URL_OPTIONS}
            if network
            else set()
        )
        # (for any other program only a word with `://` can name a host)
        for w in argw if network or program == "curl" else [w for w in argw if "://" in w.text]:
            t = w.text
            if network and t in bare and (_URL_WORD.match(t) or not _SPACE.search(t)):
                found = hostmod.of_argument(t)  # an address operand (not a text: gh issue create "...")
            elif "://" in t and (interpreter or _URL_WORD.match(t)):
                found = hostmod.in_text(t)  # code, or a word that is a URL (--url=..., URL=...)
            else:
                found = []  # a URL inside text (a sed script, an issue title) is not an access
            if program == "curl" and not found and "{" in t:
                variants = brace_expand(t, "0" * len(t)) or []
                found = [h for text, _ in variants for h in hostmod.of_argument(text)]
            hosts += found
    inputs: list[str] = []
    for w in argw:
        inputs += w.sources
    # (the lists below are fresh: one of no item or one item has no repeat to drop)
    cmd.fact = {
        "program": program,
        "argv": argv,
        "args": args,
        "subcommand": sub,
        "options": unique(parsed.options) if len(parsed.options) > 1 else parsed.options,
        "operands": operands,
        "wrappers": cmd.wrappers,
        "privileged": not PRIVILEGE.isdisjoint(cmd.wrappers),
        "dynamic": cmd.dynamic or any(w.dynamic for w in words),
        "globs": globs,
        "unresolved": unresolved,
        "paths": unique(paths) if len(paths) > 1 else paths,
        "writes": unique(writes) if len(writes) > 1 else writes,
        "paths_raw": paths_raw,
        "hosts": unique(hosts) if len(hosts) > 1 else hosts,
        "cwd": st.cwd,
        "branch": st.branch,
        "redirects": cmd.redirects,
        "stdin_from": cmd.stdin_from,
        "stdout_to": cmd.stdout_to,
        "code_from": cmd.code_from,
        "context": cmd.context,
        "depth": cmd.depth,
        "_inputs": unique(inputs) if len(inputs) > 1 else inputs,
        "_values": parsed.values,
    }
