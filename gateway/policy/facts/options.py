"""Command-line options of the programs the shipped rules judge, so rules see what the program sees.

Choice: abbreviations are expanded here, at fact time. GNU ``getopt_long`` and git's
parse-options accept any unambiguous prefix of a long option (``--recur`` is ``--recursive``,
``--force-w`` is ``--force-with-lease``), so ``options`` lists canonical long names; an
ambiguous prefix lists every candidate (the program would refuse it; the rules stay
conservative). Short option clusters are split (``-rf`` is ``-r``, ``-f``) and options that take
a value consume it, so ``operands`` are what the program treats as arguments. Programs without a
spec get the generic treatment: ``--name=value`` is ``--name``, ``-abc`` is ``-a -b -c``, and
nothing consumes a value.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Spec:
    flags: frozenset[str] = frozenset()
    """Long options without a value."""
    valued: frozenset[str] = frozenset()
    """Long options that take a value (``--name value`` or ``--name=value``)."""
    optional: frozenset[str] = frozenset()
    """Long options with an optional ``=value``."""
    short_valued: str = ""
    """Short options that take a value (``-o file``, ``-ofile``)."""
    prefixes: bool = True
    """Whether the program accepts unambiguous prefixes of long options."""
    stop_at_operand: bool = False
    """Options end at the first operand (POSIX ``+`` getopt, wrappers)."""
    all_names: frozenset[str] = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "all_names", self.flags | self.valued | self.optional)


def _s(*names: str) -> frozenset[str]:
    return frozenset(names)


SPECS: dict[str, Spec] = {
    "rm": Spec(
        flags=_s("recursive", "force", "dir", "verbose", "one-file-system", "no-preserve-root", "preserve-root", "help", "version"),
        optional=_s("interactive"),
    ),
    "git": Spec(
        flags=_s("bare", "no-pager", "paginate", "no-replace-objects", "literal-pathspecs", "glob-pathspecs",
                 "noglob-pathspecs", "icase-pathspecs", "no-optional-locks", "html-path", "man-path", "info-path",
                 "version", "help", "no-lazy-fetch", "no-advice"),
        valued=_s("git-dir", "work-tree", "namespace", "config-env", "super-prefix", "list-cmds", "attr-source"),
        optional=_s("exec-path"),
        short_valued="Cc",
        stop_at_operand=True,
    ),
    "git push": Spec(
        flags=_s("all", "branches", "mirror", "tags", "follow-tags", "atomic", "no-atomic", "dry-run", "porcelain",
                 "delete", "prune", "force", "force-if-includes", "no-force-if-includes", "set-upstream", "thin",
                 "no-thin", "quiet", "verbose", "progress", "no-progress", "no-verify", "verify", "ipv4", "ipv6",
                 "no-force-with-lease", "no-follow-tags", "no-signed", "no-recurse-submodules"),
        valued=_s("repo", "receive-pack", "exec", "push-option"),
        optional=_s("force-with-lease", "signed", "recurse-submodules"),
        short_valued="o",
    ),
    "git checkout": Spec(
        flags=_s("quiet", "progress", "no-progress", "force", "ours", "theirs", "track", "no-track", "guess",
                 "no-guess", "detach", "merge", "ignore-skip-worktree-bits", "ignore-other-worktrees",
                 "overwrite-ignore", "no-overwrite-ignore", "recurse-submodules", "no-recurse-submodules",
                 "overlay", "no-overlay", "pathspec-file-nul", "patch"),
        valued=_s("orphan", "conflict", "pathspec-from-file"),
        short_valued="bB",
    ),
    "git switch": Spec(
        flags=_s("quiet", "progress", "no-progress", "force", "discard-changes", "track", "no-track", "guess",
                 "no-guess", "detach", "merge", "ignore-other-worktrees", "recurse-submodules",
                 "no-recurse-submodules"),
        valued=_s("create", "force-create", "orphan", "conflict"),
        short_valued="cC",
    ),
    "git filter-repo": Spec(prefixes=False),
    "curl": Spec(
        valued=_s("url", "output", "data", "data-raw", "data-binary", "data-urlencode", "data-ascii", "form",
                  "form-string", "header", "request", "user", "proxy", "upload-file", "config", "cookie",
                  "cookie-jar", "referer", "user-agent", "max-time", "connect-timeout", "resolve", "connect-to",
                  "output-dir", "cacert", "cert", "key", "write-out", "retry", "json", "proxy-user", "range",
                  "dump-header", "interface", "unix-socket", "abstract-unix-socket", "variable", "expand-url"),
        short_valued="AbcCdDeEFHhKmoPQrtTuUwxXyYz",
        prefixes=False,
    ),
    "wget": Spec(
        flags=_s("quiet", "verbose", "no-verbose", "continue", "timestamping", "spider", "recursive", "mirror",
                 "no-check-certificate", "server-response", "page-requisites", "convert-links", "no-clobber",
                 "content-disposition", "no-parent", "debug", "background"),
        valued=_s("output-document", "output-file", "append-output", "directory-prefix", "execute", "input-file",
                  "user-agent", "tries", "timeout", "wait", "quota", "level", "domains", "accept", "reject",
                  "header", "post-data", "post-file", "body-data", "body-file", "method", "user", "password",
                  "http-user", "http-password", "base", "config", "bind-address"),
        short_valued="OoaPeiUtTwQlDARIXB",
    ),
    "cp": Spec(
        flags=_s("recursive", "force", "archive", "link", "symbolic-link", "no-clobber", "verbose", "update",
                 "dereference", "no-dereference", "parents", "no-target-directory", "one-file-system"),
        valued=_s("target-directory", "suffix"),
        optional=_s("backup", "preserve", "reflink", "sparse"),
        short_valued="tS",
    ),
    "mv": Spec(
        flags=_s("force", "interactive", "no-clobber", "verbose", "update", "no-target-directory"),
        valued=_s("target-directory", "suffix"),
        optional=_s("backup"),
        short_valued="tS",
    ),
    "tee": Spec(flags=_s("append", "ignore-interrupts"), optional=_s("output-error")),
    "dd": Spec(prefixes=False),
    "grep": Spec(
        valued=_s("regexp", "file", "max-count", "after-context", "before-context", "context", "label", "include",
                  "exclude", "exclude-from", "exclude-dir", "devices", "directories", "binary-files"),
        optional=_s("color", "colour"),
        short_valued="efmABCDd",
    ),
    "rg": Spec(
        valued=_s("regexp", "file", "max-count", "after-context", "before-context", "context", "glob", "iglob",
                  "type", "type-not", "max-depth", "replace", "encoding", "sort", "sortr"),
        short_valued="efmABCgtTrEMdj",
        prefixes=False,
    ),
}  # fmt: skip


def parse_alike(a: Spec | None, b: Spec | None) -> bool:
    """Whether :func:`parse` splits any arguments alike with ``a`` and with ``b``: the same spec,
    or two that name no option and give none a value (parsed as with no spec at all)."""
    return a is b or (_plain(a) and _plain(b))


def _plain(spec: Spec | None) -> bool:
    return spec is None or (not spec.all_names and not spec.short_valued and not spec.stop_at_operand)


def spec_for(program: str, subcommand: str = "") -> Spec | None:
    return SPECS.get(f"{program} {subcommand}" if subcommand else program)


def _long(name: str, spec: Spec | None) -> list[str]:
    if spec is None or name in spec.all_names or not spec.prefixes:
        return [name]
    hits = sorted(n for n in spec.all_names if n.startswith(name))
    return hits or [name]


@dataclass(slots=True)
class Parsed:
    options: list[str] = field(default_factory=list)
    """Canonical options: ``--name`` for long ones, ``-x`` for each short one."""
    values: dict[str, list[str]] = field(default_factory=dict)
    """Option values by canonical option (``--output`` -> [file]); ``-o`` is kept as given."""
    operands: list[int] = field(default_factory=list)
    """Indexes (into the argument list) of the operands."""


def parse(args: list[str], spec: Spec | None) -> Parsed:
    """Split ``args`` (argv without argv[0]) into options, option values and operands."""
    options: list[str] = []
    values: dict[str, list[str]] = {}
    operands: list[int] = []
    i = 0
    while i < len(args):
        a = args[i]
        if a[:1] != "-" or a == "-":  # an operand (the usual word: tested first)
            operands.append(i)
            if spec is not None and spec.stop_at_operand:
                operands += range(i + 1, len(args))
                break
            i += 1
            continue
        if a == "--":
            operands += range(i + 1, len(args))
            break
        if a.startswith("--"):  # a long option (`--` alone ended the options above)
            name, eq, value = a[2:].partition("=")
            names = _long(name, spec)
            options += ["--" + n for n in names]
            n0 = names[0]
            if eq:
                values.setdefault("--" + n0, []).append(value)
            elif spec is not None and len(names) == 1 and n0 in spec.valued and i + 1 < len(args):
                values.setdefault("--" + n0, []).append(args[i + 1])
                i += 1
        else:  # a cluster of short options
            body = a[1:]
            for j, ch in enumerate(body):
                options.append("-" + ch)
                if spec is not None and ch in spec.short_valued:
                    rest = body[j + 1 :]
                    if rest:
                        values.setdefault("-" + ch, []).append(rest)
                    elif i + 1 < len(args):
                        values.setdefault("-" + ch, []).append(args[i + 1])
                        i += 1
                    break
        i += 1
    return Parsed(options, values, operands)
