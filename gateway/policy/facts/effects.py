"""Effects: what a tool call would do, whatever the tool and however it is spelled.

Rules that match spellings lose to the next spelling; rules over effects do not care whether a
file is deleted by ``rm -r``, ``find -exec rm``, ``rsync --delete``, ``shutil.rmtree`` or a
PowerShell ``Remove-Item``. Every effect is one flat map with the same keys (so a rule never
needs ``has()``)::

    kind       read | write | delete | exec | network | git.update-ref | git.delete-ref |
               credential | persist | privilege
    path       the normalized path ('' when none or unknown)
    recursive  a whole directory tree
    certainty  exact | bounded (somewhere below ``path``) | unknown (only known when it runs)
    source     exec: inline | download | decoded | file | stdin | network | unknown
    host       network: the canonical host; git: the remote
    direction  network: fetch | send | listen | tunnel
    ref        git: the destination ref (``main``; ``*`` for all; '' when unknown)
    force      git: a forced update
    program    the program (or tool) that has the effect
    via        the wrappers and contexts it came through (``sudo``, ``payload``, ``find-exec``,
               ``python``)

Which arguments of a program are paths read, written or deleted, commands run, hosts or secrets
printed is the program table (:mod:`programs`), not code here. Pure: no I/O.
"""

from __future__ import annotations

import base64
import contextvars
import functools
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from gateway.policy.facts import hosts as hostmod
from gateway.policy.facts import options as opts
from gateway.policy.facts import paths as pathmod
from gateway.policy.facts import programs, tools
from gateway.policy.facts.words import Word

KINDS = (
    "read",
    "write",
    "delete",
    "exec",
    "network",
    "git.update-ref",
    "git.delete-ref",
    "credential",
    "persist",
    "privilege",
)

Effect = dict[str, Any]

DECODERS = frozenset(
    {"base64", "base32", "basenc", "xxd", "openssl", "gunzip", "gzip", "zcat", "bzip2", "bunzip2", "xz", "unxz",
     "zstd", "uudecode", "rev", "tr", "od", "iconv", "gpg", "age", "lz4", "brotli", "bzcat", "xzcat", "zstdcat",
     "lzcat", "lz4cat", "unzstd", "uncompress", "unzip", "tar", "bsdtar", "7z", "7za", "cpio"}
)  # fmt: skip
FILE_READERS = frozenset({"cat", "tac", "head", "tail", "less", "more", "sed", "grep"})
DOWNLOAD = frozenset(
    {"curl", "wget", "fetch", "aria2c", "http", "https", "xh", "xhs", "httpie", "lwp-request", "get",
     "invoke-webrequest", "invoke-restmethod", "iwr", "irm", "lynx", "w3m", "links", "ftp", "tftp", "nc", "ncat",
     "netcat", "nc.traditional", "nc.openbsd", "socat", "telnet", "scp", "rsync", "gh", "ssh", "sftp", "openssl",
     "ztcp"}
)  # fmt: skip
"""Programs whose output is downloaded: code from them is ``exec`` with source ``download``."""
_SEND_OPTIONS = frozenset(
    {"-d", "--data", "--data-binary", "--data-raw", "--data-urlencode", "-F", "--form", "-T", "--upload-file",
     "--json", "--post-data", "--post-file", "--body-data", "--body-file"}
)  # fmt: skip
PERSIST_PATHS = re.compile(
    r"(^|/)(\.bashrc|\.bash_profile|\.bash_login|\.bash_logout|\.bash_aliases|\.zlogout|\.profile|\.zshrc|\.zshenv|\.zprofile|\.zlogin|\.kshrc|\.cshrc|"
    r"\.tcshrc|\.config/fish/config\.fish|\.config/fish/conf\.d/.+|\.inputrc|\.xinitrc|\.xprofile|\.ssh/authorized_keys2?|\.ssh/rc|"
    r"\.ssh/config|\.gitconfig|\.config/git/config|\.git/config|\.git/hooks/[^/]+|\.husky/[^/]+|\.vimrc|"
    r"\.config/nvim/.+|\.emacs|\.emacs\.d/init\.el|\.config/autostart/.+|\.config/systemd/user/.+|"
    r"Library/LaunchAgents/.+|\.claude/settings(\.local)?\.json|\.claude/hooks/.+|\.codex/config\.toml|"
    r"\.gemini/settings\.json|\.cursor/hooks\.json|\.cursor/mcp\.json|\.vscode/tasks\.json|\.vscode/settings\.json|"
    r"\.npmrc|\.pip/pip\.conf|\.config/pip/pip\.conf|\.pypirc|\.config/git/hooks/[^/]+|\.envrc|"
    r"site-packages/[^/]+\.pth|(sitecustomize|usercustomize)\.py|\.ipython/profile_[^/]+/startup/[^/]+)$"
    r"|^/etc/(cron\.(d|daily|hourly|weekly|monthly)/.+|crontab|profile|profile\.d/.+|bash\.bashrc|zsh/.+|"
    r"environment|ld\.so\.preload|ld\.so\.conf(\.d/.+)?|rc\.local|systemd/.+|init\.d/.+|sudoers(\.d/.+)?|"
    r"pam\.d/.+|ssh/sshd_config|passwd|shadow|group)$"
    r"|^/(var/spool/cron/.+|Library/LaunchAgents/.+|Library/LaunchDaemons/.+|usr/lib/systemd/.+|lib/systemd/.+)$"
)
"""Places whose contents run later, on their own: shell start-up files, ``authorized_keys``, cron,
systemd and launchd units, git hooks and config, editor and agent configuration."""
SECRET_CONTENT = re.compile(
    r"PRIVATE KEY|aws_secret_access_key|AKIA([0-9A-Z\\\[\]{}.*+]{2,}|\b)|\bgh[pousr]_|\bxox[abpr]-|\bsk-(ant-|proj-|\[|[A-Za-z0-9]{20})",
    re.I,
)
"""Search patterns that look for key material or tokens: searching for them prints secrets."""
_SECRET_VARIABLE = re.compile(
    r"\$\{?[A-Z0-9_]*(TOKEN|SECRET|PASSWORD|PASSWD|API_?KEY|ACCESS_KEY|PRIVATE_KEY|CREDENTIALS?)[A-Z0-9_]*\b"
)
"""A variable of the session's environment that holds a secret (``$GITHUB_TOKEN``, ``${AWS_SECRET_ACCESS_KEY}``)."""
_SEARCHERS = frozenset({"grep", "egrep", "fgrep", "zgrep", "rg", "ag", "ack", "git-grep", "findstr", "select-string"})
_NOWHERE = frozenset({"/dev/null", "/dev/stdout", "/dev/stderr", "/dev/stdin", "/dev/tty", "/dev/zero"})
"""Redirect targets that are no file: ``2>/dev/null`` writes nothing."""
_DEV_NET = re.compile(r"^/dev/(tcp|udp)/([^/]+)/")


def effect(
    kind: str,
    program: str,
    via: Sequence[str] = (),
    *,
    path: str = "",
    recursive: bool = False,
    certainty: str = "exact",
    source: str = "",
    host: str = "",
    direction: str = "",
    ref: str = "",
    force: bool = False,
) -> Effect:
    return {
        "kind": kind,
        "path": path,
        "recursive": recursive,
        "certainty": certainty,
        "source": source,
        "host": host,
        "direction": direction,
        "ref": ref,
        "force": force,
        "program": program,
        "via": list(via),
    }


def of_path(
    kind: str, program: str, via: Sequence[str], w: Word, cwd: str, home: str, recursive: bool, lost: bool = False
) -> list[Effect]:
    """The effects of one path word: exact, bounded by a glob's directory (plus the sensitive
    names it can reach), or unknown (its static directory, or ''). ``lost``: the working
    directory was known and a ``cd`` made it unknown, so a relative path is unknown too (with no
    known directory at all, a relative path stays relative)."""
    if "{}" in w.text and "find-exec" in via:  # `find ROOT -exec rm {} +`: anything below ROOT
        root = pathmod.normalize(w.text.split("{}", 1)[0] or ".", cwd, home, shell=True)
        return [effect(kind, program, via, path=root, recursive=True, certainty="bounded")]
    if w.dynamic:
        where = pathmod.static_dir(w.text[: w.fixed], cwd, home)
        return [effect(kind, program, via, path=where, recursive=recursive, certainty="unknown")]
    if w.text == "":
        return []
    if cwd == "" and lost and not w.text.startswith(("/", "~")):  # relative, after `cd "$X"`
        return [effect(kind, program, via, path="", recursive=recursive, certainty="unknown")]
    norm = pathmod.normalize(w.text, cwd, home, shell=True)
    if not w.glob:
        return [effect(kind, program, via, path=norm, recursive=recursive)]
    pattern = pathmod.normalize(w.pattern(), cwd, home, shell=True)
    out = [effect(kind, program, via, path=glob_base(pattern), recursive=True, certainty="bounded")]
    extra = [home.rsplit("/", 1)[-1]] if home.startswith("/") else []
    out += [effect(kind, program, via, path=p, recursive=recursive) for p in pathmod.glob_candidates(pattern, extra)]
    return out


def of_code(
    kind: str, value: str | None, recursive: bool, program: str, via: Sequence[str], cwd: str, home: str
) -> Effect:
    """One effect of inline code (:mod:`code`): a path or URL it names, or unknown."""
    if kind in ("network", "network-send"):
        hosts = hostmod.in_text(value) if value and "://" in value else hostmod.of_argument(value or "")
        direction = "send" if kind == "network-send" else "fetch"
        return effect("network", program, via, host=hosts[0] if hosts else "", direction=direction)
    if kind.startswith("exec"):
        source = kind.partition("-")[2] or "unknown"
        return effect("exec", program, via, source=source, certainty="unknown")
    if value is None:
        return effect(kind, program, via, recursive=recursive, certainty="unknown")
    return effect(kind, program, via, path=pathmod.normalize(value, cwd, home), recursive=recursive)


def glob_base(pattern: str) -> str:
    """The directory a glob stays in: ``/etc/*.conf`` -> ``/etc``, ``/*`` -> ``/``, ``*`` -> ``.``."""
    head = re.split(r"[*?\[]", pattern, maxsplit=1)[0]
    if "/" not in head:
        return "."
    return head.rsplit("/", 1)[0] or "/"


def select(selector: str, operands: list[Word], argw: list[Word], parsed: opts.Parsed) -> list[Word]:
    """The words a table selector names (:data:`programs.SELECTORS`)."""
    if selector == "operands":
        return operands
    if selector == "operands-but-last":
        return operands[:-1]
    if selector == "last-operand":
        return operands[-1:] if len(operands) >= 2 else operands
    if selector == "first-operand":
        return operands[:1]
    if selector == "operands-after-first":
        return operands[1:]
    if selector == "operands-before-separator":
        texts = [w.text for w in operands]
        cut = next((k for k, t in enumerate(texts) if t in (":::", "::::", ":::+")), len(texts))
        return operands[:cut]
    if selector == "plus-operands":  # vim `+cmd`, less `+cmd`: a command, not a file
        cut = next((k for k, w in enumerate(argw) if w.text == "--"), len(argw))
        return [Word(w.text[1:], w.mask[1:], w.dynamic, w.sources) for w in argw[:cut] if w.text[:1] == "+"]
    if selector == "object-paths":  # git's `REV:PATH` (`HEAD:.env`, `:0:.env`, `main:config/x`)
        found = []
        for w in operands:
            rev, sep, path = w.text.partition(":")
            if sep and rev == "" and path[:2] in ("0:", "1:", "2:", "3:"):
                path = path[2:]  # a stage of the index
            if sep and path and not w.dynamic:
                found.append(Word(path, "1" * len(path)))
        return found
    if selector == "at-files":  # `-d @file`, `-F key=@file`, `-F 'key=<file'`, httpie `@file`, `k:=@file`
        found = []
        for w in argw:
            at = 1 if w.text.startswith("@") else next((k + 2 for k in _at_marks(w.text)), 0)
            if at and w.text[at:] not in ("", "-"):
                found.append(Word(w.text[at:], w.mask[at:], w.dynamic))
        return found
    if selector.startswith("option:"):
        name = selector[7:]
        if len(name) > 2 and name[1] != "-" and not name.endswith("="):  # `openssl -in FILE`: one dash, long
            return [argw[k + 1] for k in range(len(argw) - 1) if argw[k].text == name]
        if name.endswith("="):
            return [Word(w.text[len(name) :], w.mask[len(name) :], w.dynamic) for w in argw if w.text.startswith(name)]
        return [Word(v, "1" * len(v)) for v in parsed.values.get(name, [])]
    return []


def _at_marks(text: str) -> list[int]:
    """Where ``=@``/``=<`` (a form field read from a file) starts in an argument."""
    if "=" not in text:
        return []
    return [k for k in (text.find("=@"), text.find("=<")) if k > 0][:1]


def of_command(
    fact: dict[str, Any],
    argw: list[Word],
    cwd: str,
    home: str,
    lost: bool = False,
    parsed_as: tuple[opts.Spec | None, list[str], opts.Parsed] | None = None,
) -> list[Effect]:
    """The effects of one simple command from its facts and argument words (``argv[1:]``);
    ``lost`` as in :func:`of_path`; ``parsed_as``: how the facts split the arguments already
    (spec, arguments, result), reused by a row that splits them alike."""
    program: str = fact["program"]
    via = [*fact["wrappers"], *([fact["context"]] if fact["context"] else [])]
    out: list[Effect] = []
    argw = _old_style(program, argw)
    args = [w.text for w in argw]
    found = _row(program, fact, args, parsed_as) if program else None
    if found is not None:
        out += _table_effects(found[0], found[1], program, via, fact, argw, args, cwd, home, lost)
    elif not program and fact["dynamic"] and _RECURSIVE & set(fact["options"]):
        # `$c -rf ~`: a program only known at run time, given a recursive option, may be `rm`
        out += [e | {"certainty": "unknown"} for w in argw if not w.text.startswith("-")
                for e in of_path("delete", "", via, w, cwd, home, True, lost)]  # fmt: skip
    for r in fact["redirects"]:
        target = r.get("path") or r.get("target") or ""
        net = _DEV_NET.match(target)
        if net:
            host = hostmod.canonical(net.group(2))
            direction = "send" if r["op"].startswith(">") else "fetch"
            out.append(effect("network", program, via, host=host, direction=direction, path=target))
            continue
        if not r.get("path") or r["path"] in _NOWHERE or r["path"].startswith("/dev/fd/"):
            continue
        if r["op"].startswith(">") or r["op"] == "<>":
            out.append(effect("write", program, via, path=r["path"]))
        if r["op"] in ("<", "<>"):
            out.append(effect("read", program, via, path=r["path"]))
    out += _exec_effects(program, via, fact)
    if fact["privileged"]:
        out.append(effect("privilege", program, via))
    if fact["hosts"]:  # the hosts its words name that no effect above reaches yet
        known = {e["host"] for e in out if e["kind"] == "network"}
        sending = not _SEND_OPTIONS.isdisjoint(fact["options"]) or any(a.startswith(_SEND_PREFIXES) for a in args)
        for host in fact["hosts"]:
            if host not in known:
                out.append(effect("network", program, via, host=host, direction="send" if sending else "fetch"))
    if program in _SAVED_BY:  # `curl -o ~/.bashrc URL`, `wget -O f URL`: the file it saves
        for key in _SAVED_BY[program]:
            out += [effect("write", program, via, path=pathmod.normalize(v, cwd, home, shell=True))
                    for v in fact.get("_values", {}).get(key, []) if v not in ("-", "")]  # fmt: skip
    if program == "git" and fact["subcommand"] in ("push", "send-pack"):
        out += _git_push(fact, via)
    if program == "gh" and fact["subcommand"] == "api":
        out += _gh_api_ref(fact, via)
    elif program in _HTTP_CLIENTS and any("/git/refs/" in a for a in args):
        out += _rest_ref(program, args, via)
    if program in ("echo", "printf") and any("$" in a and _SECRET_VARIABLE.search(a) for a in args):
        out.append(effect("credential", program, via))  # `echo $GITHUB_TOKEN`: a token the session holds
    searcher = program in _SEARCHERS or (program == "git" and fact["subcommand"] == "grep")
    if searcher and any(SECRET_CONTENT.search(a) for a in args if not a.startswith("--")):
        roots = [e["path"] for e in out if e["kind"] == "read" and e["path"]] or [cwd]
        out += [effect("credential", program, via, path=r, certainty="bounded") for r in dict.fromkeys(roots)]
    return out


PERSIST_DIRS = re.compile(
    r"(^|/)(\.git/hooks|\.husky|\.config/autostart|\.config/systemd/user|Library/LaunchAgents|\.claude/hooks)/?$"
    r"|^/(etc/(cron\.(d|daily|hourly|weekly|monthly)|profile\.d|systemd/system|init\.d|sudoers\.d)|var/spool/cron"
    r"(/crontabs)?|Library/LaunchAgents|Library/LaunchDaemons)/?$"
)
"""Directories whatever is copied into runs later (``cp evil.sh .git/hooks/``)."""
_INTO_DIR = frozenset({"cp", "mv", "install", "ln", "rsync", "scp", "ditto", "tar", "unzip", "copy-item", "cpi",
                       "copy", "move-item", "mi", "move"})  # fmt: skip
"""Programs whose destination may be a directory they put files into."""


def with_persist(found: list[Effect]) -> list[Effect]:
    """``found`` plus a ``persist`` effect for each write to a place whose contents run later
    (a file of :data:`PERSIST_PATHS`, or into a directory of :data:`PERSIST_DIRS`)."""
    if not found:
        return found  # (most commands have no effect to look at)
    return found + [
        effect("persist", e["program"], e["via"], path=e["path"])
        for e in found
        if e["kind"] == "write"
        and e["path"]
        and (PERSIST_PATHS.search(e["path"]) or (e["program"] in _INTO_DIR and PERSIST_DIRS.search(e["path"])))
    ]


_OLD_STYLE = frozenset({"tar", "gtar", "bsdtar", "ar"})
_SEND_PREFIXES = ("--data", "--form", "--upload-file", "--post-")


def _old_style(program: str, argw: list[Word]) -> list[Word]:
    """``tar czf out.tgz dir``: a first word of bundled options without the dash."""
    if program in _OLD_STYLE and argw and argw[0].text.isalpha():
        return [Word("-" + argw[0].text, "1" + argw[0].mask), *argw[1:]]
    return argw


def row_of(fact: dict[str, Any]) -> programs.Row | None:
    """The program-table row a command's facts match (for tests and ``explain``)."""
    args = [w.text for w in _old_style(fact["program"], [Word(a, "1" * len(a)) for a in fact["args"]])]
    found = _row(fact["program"], fact, args) if fact["program"] else None
    return found[0] if found is not None else None


def _row(
    program: str,
    fact: dict[str, Any],
    args: list[str],
    parsed_as: tuple[opts.Spec | None, list[str], opts.Parsed] | None = None,
) -> tuple[programs.Row, opts.Parsed] | None:
    """The program's first matching row (``sub``, ``when``, ``unless``) and the arguments parsed
    with that row's option spec (``parsed_as``'s result when it split the same arguments alike)."""
    rows = programs.table().get(program)
    if not rows:
        return None
    parsed_by: dict[int, opts.Parsed] = {}
    lowered: set[str] | None = None
    for row in rows:
        spec = row.spec
        if spec.sub:  # the subcommand's first word must be an argument: no parse needed to know
            if lowered is None:
                lowered = {a.lower() for a in args}
            if spec.sub[0] not in lowered:
                continue
        if spec.case_insensitive:  # PowerShell: its own parameter matching (_ps_effects)
            if _ps_matches(row, [Word(a, "0" * len(a)) for a in args]):
                return row, opts.Parsed()
            continue
        parsed = parsed_by.get(id(row.parse_spec))
        if (
            parsed is None
            and parsed_as is not None
            and parsed_as[1] == args
            and opts.parse_alike(parsed_as[0], row.parse_spec)
        ):
            parsed = parsed_by[id(row.parse_spec)] = parsed_as[2]
        if parsed is None:
            parsed = parsed_by[id(row.parse_spec)] = opts.parse(args, row.parse_spec)
        if spec.sub and not _contains([args[k].lower() for k in parsed.operands[: len(spec.sub) + 2]], spec.sub):
            continue
        if spec.when or spec.unless:
            present = set(parsed.options) | set(args)
            if spec.when and present.isdisjoint(spec.when):
                continue
            if spec.unless and not present.isdisjoint(spec.unless):
                continue
        if spec.operand is not None:
            pattern = _operand_pattern(spec.operand)
            if not any(pattern.search(args[k]) for k in parsed.operands[len(spec.sub) :]):
                continue
        return row, parsed
    return None


@functools.cache
def _operand_pattern(text: str) -> re.Pattern[str]:
    return re.compile(text, re.I)


def _contains(items: list[str], part: list[str]) -> bool:
    n = len(part)
    return any(items[k : k + n] == part for k in range(len(items) - n + 1))


def _table_effects(
    row: programs.Row,
    parsed: opts.Parsed,
    program: str,
    via: list[str],
    fact: dict[str, Any],
    argw: list[Word],
    args: list[str],
    cwd: str,
    home: str,
    lost: bool,
) -> list[Effect]:
    spec = row.spec
    if spec.case_insensitive:
        return _ps_effects(row, program, via, fact, argw, cwd, home, lost)
    operand_words = [argw[k] for k in parsed.operands]
    if spec.sub:  # the subcommand words are not operands of the subcommand
        texts = [w.text.lower() for w in operand_words]
        at = next((k for k in range(len(texts)) if texts[k : k + len(spec.sub)] == spec.sub), 0)
        operand_words = operand_words[at + len(spec.sub) :]
    if program in _PATTERN_FIRST and any(o in parsed.values for o in _PATTERN_OPTIONS):
        operand_words = [Word("", ""), *operand_words]  # the pattern came from an option
    recursive = spec.recursive == "always" or (
        isinstance(spec.recursive, list) and not ({*parsed.options, *args}).isdisjoint(spec.recursive)
    )
    out: list[Effect] = []
    for kind in ("read", "write", "delete"):
        role = getattr(spec, kind)
        selectors = [role] if isinstance(role, str) else role or []
        if not selectors or selectors == ["none"]:
            continue
        if "always-cwd" in selectors:  # `git clean -fdx [PATHSPEC...]`, in `git -C DIR`'s directory
            here = _git_dir(fact, cwd, home) if program == "git" else cwd
            specs = [w for w in operand_words if not w.text.startswith("-")]
            if specs:
                for w in specs:
                    out += [e | {"certainty": "bounded" if e["certainty"] == "exact" else e["certainty"]}
                            for e in of_path(kind, program, via, w, here, home, True, lost)]  # fmt: skip
                continue
            out.append(
                effect(kind, program, via, path=here, recursive=True, certainty="bounded" if here else "unknown")
            )
            continue
        chosen = [w for selector in selectors for w in select(selector, operand_words, argw, parsed)]
        if "plus-operands" in spec.code:  # `vim +42 f`: `+42` is a command, not a file
            chosen = [w for w in chosen if w.text[:1] != "+"]
        if not chosen and kind == "delete" and ("xargs" in via or fact["dynamic"]):
            out.append(effect(kind, program, via, recursive=recursive, certainty="unknown"))  # `xargs rm -rf`
        for w in chosen:
            if w.text != "-" and "://" not in w.text:  # `aws s3 cp s3://b/.env .`: a URL is no local path
                out += of_path(kind, program, via, w, cwd, home, recursive, lost)
    if spec.credential:
        out.append(effect("credential", program, via))
    if spec.persist:
        out.append(effect("persist", program, via))
    if spec.network is not None:
        words = (
            operand_words
            if spec.network in ("operands", "always")
            else select(spec.network, operand_words, argw, parsed)
        )
        for w in words:  # a name only known at run time is a host too (`dig $(…).evil.example`)
            for host in hostmod.of_argument(w.text.split("@", 1)[-1]) or ([""] if w.dynamic else []):
                out.append(effect("network", program, via, host=host, direction=spec.direction))
        for key in ("-L", "-R", "-D", "-W"):
            if program == "ssh" and key in parsed.values:
                for value in parsed.values[key]:
                    for host in hostmod.of_argument(value.replace(":", "/", 1) if value.count(":") >= 2 else value):
                        out.append(effect("network", program, via, host=host, direction="tunnel"))
                    for piece in value.split(":"):
                        for host in hostmod.of_argument(piece) if "." in piece else []:
                            out.append(effect("network", program, via, host=host, direction="tunnel"))
    return out


_RECURSIVE = frozenset({"-r", "-R", "--recursive"})


def _git_dir(fact: dict[str, Any], cwd: str, home: str) -> str:
    """The directory a git command works in: ``git -C DIR`` (each one relative to the last)."""
    args: list[str] = fact["args"]
    here = cwd
    for k, a in enumerate(args):
        if a == "-C" and k + 1 < len(args):
            here = pathmod.normalize(args[k + 1], here, home, shell=True)
        elif not a.startswith("-") and (k == 0 or args[k - 1] not in ("-C", "-c")):
            break
    return here


_PATTERN_FIRST = frozenset({"grep", "egrep", "fgrep", "zgrep", "rg", "ag", "ack", "sed", "gsed", "awk", "gawk",
                            "mawk", "nawk"})  # fmt: skip
_PATTERN_OPTIONS = ("-e", "-f", "--regexp", "--file", "--expression")


def _exec_effects(program: str, via: list[str], fact: dict[str, Any]) -> list[Effect]:
    sources: list[str] = fact["code_from"]
    if not sources:
        return []
    return [effect("exec", program, via, source=source_of(sources), certainty="unknown")]


def source_of(programs_: Iterable[str]) -> str:
    """What code from these programs' output is: downloaded, decoded, a file's text, or unknown."""
    names = set(programs_)
    if names & DOWNLOAD:
        return "download"
    if names & DECODERS:
        return "decoded"
    if names and names <= FILE_READERS:
        return "file"
    return "unknown"


_PROTECTED_PREFIXES = ("refs/heads/", "heads/")


def _ref(text: str) -> str:
    for prefix in _PROTECTED_PREFIXES:
        if text.startswith(prefix):
            return text[len(prefix) :]
    if text.startswith("refs/"):
        return text[5:]
    return text


def _git_push(fact: dict[str, Any], via: list[str]) -> list[Effect]:
    """``git push``: one ``git.update-ref`` (or ``git.delete-ref``) per destination ref."""
    options = set(fact["options"])
    force = bool(options & {"--force", "-f", "--force-with-lease", "--force-if-includes"})
    delete = bool(options & {"--delete", "-d"})
    operands: list[str] = fact["operands"]
    remote = operands[0] if operands else ""
    refspecs = operands[1:]
    out: list[Effect] = []
    prune = "--prune" in options  # remote refs the pushed ones do not match are deleted
    if options & {"--all", "--branches", "--mirror"}:
        out.append(effect("git.update-ref", "git", via, host=remote, ref="*", force=force))
        if "--mirror" in options or prune:
            out.append(effect("git.delete-ref", "git", via, host=remote, ref="*"))
    for spec in refspecs:
        plus = spec.startswith("+")
        body = spec[1:] if plus else spec
        src, colon, dst = body.partition(":")
        target = dst if colon else src
        if target in ("HEAD", "@") or (not colon and src in ("HEAD", "@")):
            target = fact["branch"]
        ref = _ref(target) or "HEAD"
        if "*" in ref:
            ref = "*"
        certainty = "unknown" if fact["dynamic"] and any(c in target for c in "$`") else "exact"
        if prune and ref == "*":
            out.append(effect("git.delete-ref", "git", via, host=remote, ref="*", certainty=certainty))
        if delete or (colon and src == ""):
            out.append(effect("git.delete-ref", "git", via, host=remote, ref=ref, certainty=certainty))
        else:
            out.append(
                effect("git.update-ref", "git", via, host=remote, ref=ref, force=force or plus, certainty=certainty)
            )
    if not refspecs and not options & {"--all", "--branches", "--mirror", "--tags"}:
        ref = fact["branch"] or "HEAD"  # HEAD: the current branch, not visible in the command
        certainty = "unknown" if fact["dynamic"] and any("$" in o or "`" in o for o in operands) else "exact"
        out.append(effect("git.update-ref", "git", via, host=remote, ref=ref, force=force, certainty=certainty))
    return out


_API_REF = re.compile(r"^/?repos/[^/]+/[^/]+/git/refs/(heads/.+)$")
_API_FIELDS = frozenset({"-f", "-F", "--field", "--raw-field"})
_GRAPHQL_REF = re.compile(r"\b(deleteRef|updateRefs?)\b")


def _gh_api_ref(fact: dict[str, Any], via: list[str]) -> list[Effect]:
    """``gh api`` on a branch ref (``repos/o/r/git/refs/heads/main``): ``-X DELETE`` deletes it,
    a PATCH or POST with ``force=true`` force-updates it (REST, as a force push does)."""
    args: list[str] = fact["args"][1:]
    refs = [m.group(1) for a in args if (m := _API_REF.match(a))]
    if args[:1] == ["graphql"] and any(_GRAPHQL_REF.search(a) for a in args):
        # `deleteRef`/`updateRef(s)` name refs by opaque ids: which branch is not known
        kind = "git.delete-ref" if any("deleteRef" in a for a in args) else "git.update-ref"
        return [effect(kind, "gh", via, host="github.com", force=True, certainty="unknown")]
    if not refs:
        return []
    method, fields = "", []
    for k, a in enumerate(args):
        value = args[k + 1] if k + 1 < len(args) else ""
        if a in ("-X", "--method"):
            method = value.upper()
        elif a.startswith(("--method=", "-X")) and len(a) > 2:
            method = a.split("=", 1)[-1].removeprefix("-X").upper()
        elif a in _API_FIELDS:
            fields.append(value)
        elif a.startswith(("--field=", "--raw-field=")):
            fields.append(a.split("=", 1)[1])
    method = method or ("POST" if fields else "GET")
    force = any(f.replace(" ", "").lower() == "force=true" for f in fields)
    out: list[Effect] = []
    for ref in refs:
        if method == "DELETE":
            out.append(effect("git.delete-ref", "gh", via, host="github.com", ref=_ref(ref)))
        elif method in ("PATCH", "POST", "PUT"):
            out.append(effect("git.update-ref", "gh", via, host="github.com", ref=_ref(ref), force=force))
    return out


_HTTP_CLIENTS = frozenset({"curl", "wget", "http", "https", "xh", "xhs", "invoke-webrequest", "invoke-restmethod",
                           "iwr", "irm"})  # fmt: skip
_SAVED_BY = {"curl": ("-o", "--output"), "wget": ("-O", "--output-document")}
"""Options naming the file a downloader saves (kept in the facts as ``_values``)."""
_REST_REF = re.compile(r"^(?:https?://[^/]+)?(?:/api/v3)?/repos/[^/]+/[^/]+/git/refs/(heads/[^?#]+)")
_METHOD_OPTIONS = frozenset({"-x", "--request", "--method", "-method"})
_HTTP_METHODS = frozenset({"GET", "POST", "PUT", "PATCH", "DELETE"})
_FORCE = re.compile(r"""["']?force["']?\s*[:=]+\s*["']?true""", re.I)


def _rest_ref(program: str, args: list[str], via: list[str]) -> list[Effect]:
    """The GitHub REST API's refs endpoint called by an HTTP client (``curl -X PATCH
    https://api.github.com/repos/o/r/git/refs/heads/main -d '{"sha": "…", "force": true}'``): a
    DELETE deletes the branch, a PATCH or POST updates it (forced with ``force: true``), exactly as
    ``gh api`` does (:func:`_gh_api_ref`)."""
    refs = [m.group(1) for a in args if (m := _REST_REF.match(a))]
    if not refs:
        return []
    method = ""
    for k, a in enumerate(args):
        low = a.lower()
        if low in _METHOD_OPTIONS and k + 1 < len(args):
            method = args[k + 1].upper()
        elif low.startswith(("--request=", "--method=", "-method:")):
            method = a.split("=", 1)[-1].split(":", 1)[-1].upper()
        elif a.startswith("-X") and len(a) > 2:
            method = a[2:].upper()
        elif a in _HTTP_METHODS and not method:  # httpie: `http PATCH URL`
            method = a
    force = any(_FORCE.search(a) for a in args)
    sending = any(
        a.startswith(("-d", "--data", "--json", "-F", "--form", "--post-", "--body")) or "=" in a for a in args
    )
    method = method or ("POST" if sending else "GET")
    out: list[Effect] = []
    for ref in refs:
        if method == "DELETE":
            out.append(effect("git.delete-ref", program, via, host="github.com", ref=_ref(ref)))
        elif method in ("PATCH", "POST", "PUT"):
            out.append(effect("git.update-ref", program, via, host="github.com", ref=_ref(ref), force=force))
    return out


def of_tool(
    kind: str, short: str, paths: list[str], globs: list[str], hosts: list[str], inp: dict[str, Any]
) -> list[Effect]:
    """The effects of a non-shell tool call (file, search, fetch and MCP tools)."""
    program = short
    out: list[Effect] = []
    bounded = {glob_base(g) for g in globs}
    if kind in ("read", "search", "edit"):
        out += [effect("read", program, path=p, recursive=kind == "search") for p in paths]
        out += [effect("read", program, path=b, recursive=True, certainty="bounded") for b in bounded]
    if kind in ("write", "edit", "patch"):
        out += _write_effects(kind, short, paths, inp)
    pattern = inp.get("pattern") or inp.get("query") or inp.get("regex")
    if kind == "search" and isinstance(pattern, str) and SECRET_CONTENT.search(pattern):
        out.append(effect("credential", program, path=paths[0] if paths else "", certainty="bounded"))
    if kind == "fetch" or hosts:
        out += [effect("network", program, host=h, direction="fetch") for h in hosts]
    for key in ("url", "uri", "href"):
        value = inp.get(key)
        if isinstance(value, str) and value.lower().startswith("file://"):
            out.append(effect("read", program, path=pathmod.normalize(value)))
    if "upload" in short:
        for p in paths:
            out.append(effect("read", program, path=p))
            out.append(effect("network", program, host="", direction="send", path=p))
    return with_persist(out)


_DELETE_TOOLS = frozenset({"delete", "delete_file", "remove_file", "delete_path"})
_MOVE_TOOLS = frozenset({"move_file", "rename_file", "move", "rename", "move_path"})
_MOVE_SOURCES = frozenset({"source", "old_path"})


def _write_effects(kind: str, short: str, paths: list[str], inp: dict[str, Any]) -> list[Effect]:
    """What a write, edit or patch tool does to its paths: a delete tool deletes them; a move tool
    reads and deletes its ``source`` and writes its ``destination``; a patch deletes, writes or
    moves each file as its text says (:func:`tools.patch_files`)."""
    program = short
    if _named(short, _DELETE_TOOLS):
        return [effect("delete", program, path=p) for p in paths]
    if kind == "patch":
        ops = [op for op, _ in tools.patch_files(tools.patch_text(inp, loose=True) or "")]
        # the patch's files are the last paths, in patch order (tools.tool_paths)
        if ops and len(paths) >= len(ops):
            cut = len(paths) - len(ops)
            head = [effect("write", program, path=p) for p in paths[:cut]]
            return head + [effect(op, program, path=p) for op, p in zip(ops, paths[cut:], strict=True)]
        return [effect("write", program, path=p) for p in paths]
    if _named(short, _MOVE_TOOLS):  # `paths` begin with the path fields, in tools.PATH_FIELDS order
        out: list[Effect] = []
        fields = tools.path_fields(inp)
        for k, p in enumerate(paths):
            if k < len(fields) and fields[k] in _MOVE_SOURCES:
                out += [effect("read", program, path=p), effect("delete", program, path=p)]
            else:
                out.append(effect("write", program, path=p))
        return out
    return [effect("write", program, path=p) for p in paths]


def _named(short: str, names: frozenset[str]) -> bool:
    """``short`` is one of ``names``, also as Gemini spells an MCP tool (``mcp_<server>_<tool>``)."""
    return short in names or (short.startswith("mcp_") and any(short.endswith("_" + n) for n in names))


# ---- PowerShell: case-insensitive rows ------------------------------------------------------------

_PS_PARAMETER = re.compile(r"^-([A-Za-z][A-Za-z0-9_]*)(:(.*))?$", re.S)
_CMD_SWITCH = re.compile(r"^/[A-Za-z?]$")
MAX_NESTING = 6
"""``powershell -Command "powershell -Command ..."`` and ``iex "..."`` are read this deep."""
_nesting: contextvars.ContextVar[int] = contextvars.ContextVar("powershell_nesting", default=0)


@dataclass
class _Bound:
    named: dict[str, list[Word]]
    """Values by parameter (lower case, no dash), from names and positions."""
    operands: list[Word]
    """Operands no positional parameter took."""
    present: set[str]
    """Parameters given (``-recurse``), and cmd-style switches (``/s``), lower case."""


def _ps_parameter(name: str, row: programs.Row) -> list[str]:
    """The row's parameters a (lower-cased) name or prefix stands for; all candidates when ambiguous."""
    name = row.spec.aliases.get(name, name)
    known = row.parse_spec.all_names
    if name in known:
        return [name]
    hits = sorted(n for n in known if n.startswith(name))
    return hits or [name]


def _ps_bind(row: programs.Row, argw: list[Word]) -> _Bound:
    """PowerShell parameter binding, as far as a row tells it: ``-Name value``, ``-Name:value``,
    switches, any unambiguous prefix in any case, aliases, then operands by position."""
    spec = row.spec
    named: dict[str, list[Word]] = {}
    operands: list[Word] = []
    present: set[str] = set()
    rest = {programs._ps_name(r) for r in spec.rest}
    first = programs._ps_name(spec.positional[0]) if spec.positional else ""
    i = 0
    while i < len(argw):
        w = argw[i]
        m = _PS_PARAMETER.match(w.text) if not w.dynamic or w.fixed > 1 else None
        if w.text == "--":
            operands += argw[i + 1 :]
            break
        if m is None:
            if _CMD_SWITCH.match(w.text):  # cmd's `rd /s /q`: a switch, not a path
                present.add(w.text.lower())
            elif not operands and first in rest and first not in named:  # `powershell Remove-Item ...`
                named[first] = [_joined(argw[i:])]
                break
            else:
                operands.append(w)
            i += 1
            continue
        names = _ps_parameter(m.group(1).lower(), row)
        present.update("-" + n for n in names)
        if m.group(2) is not None:
            value = m.group(3) or ""
            named.setdefault(names[0], []).append(Word(value, w.mask[len(w.text) - len(value) :], w.dynamic))
        elif len(names) == 1 and names[0] in rest:
            named.setdefault(names[0], []).append(_joined(argw[i + 1 :]))
            break
        elif len(names) == 1 and names[0] in row.parse_spec.valued and i + 1 < len(argw):
            named.setdefault(names[0], []).append(argw[i + 1])
            i += 1
        i += 1
    for name in map(programs._ps_name, spec.positional):
        if name not in named and operands:
            named[name] = [operands.pop(0)]
    return _Bound(named, operands, present)


def _ps_matches(row: programs.Row, argw: list[Word]) -> bool:
    spec = row.spec
    present = _ps_bind(row, argw).present
    if spec.when and not any(w.lower() in present for w in spec.when):
        return False
    return not (spec.unless and any(w.lower() in present for w in spec.unless))


def _ps_words(selector: str, bound: _Bound) -> list[Word]:
    """The words a selector names in a case-insensitive row; a comma list is several words, and a
    path is a wildcard pattern except for a ``literal`` parameter (``-LiteralPath``)."""
    if selector.startswith("option:"):
        name = programs._ps_name(selector[7:])
        words, literal = bound.named.get(name, []), "literal" in name
    else:
        words, literal = select(selector, bound.operands, [], opts.Parsed()), False
    out: list[Word] = []
    for w in words:
        parts = [w] if w.dynamic or "," not in w.text else [Word(t, "0" * len(t)) for t in w.text.split(",")]
        out += [p if literal or p.dynamic else Word(p.text, "0" * len(p.text)) for p in parts if p.text.strip()]
    return out


def _ps_effects(
    row: programs.Row,
    program: str,
    via: list[str],
    fact: dict[str, Any],
    argw: list[Word],
    cwd: str,
    home: str,
    lost: bool,
) -> list[Effect]:
    spec = row.spec
    bound = _ps_bind(row, argw)
    recursive = spec.recursive == "always" or (
        isinstance(spec.recursive, list) and any(r.lower() in bound.present for r in spec.recursive)
    )
    out: list[Effect] = []
    for kind in ("read", "write", "delete"):
        role = getattr(spec, kind)
        if role is None:
            continue
        chosen = [w for one in ([role] if isinstance(role, str) else role) for w in _ps_words(one, bound)]
        if not chosen and kind == "delete" and fact["stdin_from"]:  # `Get-ChildItem ~ | Remove-Item -Recurse`
            out.append(effect(kind, program, via, recursive=recursive, certainty="unknown"))
        for w in chosen:
            out += of_path(kind, program, via, w, cwd, home, recursive, lost)
    if spec.network is not None:
        for w in _ps_words(spec.network, bound):
            for host in hostmod.in_text(w.text) if "://" in w.text else hostmod.of_argument(w.text):
                out.append(effect("network", program, via, host=host, direction=spec.direction))
    if spec.command or spec.encoded:
        scripts = [_joined([w for one in spec.command for w in bound.named.get(programs._ps_name(one[7:]), [])])]
        scripts = [w for w in scripts if w.text.strip() or w.dynamic]
        for name in map(programs._ps_name, spec.encoded):
            scripts += [_decoded(w) for w in bound.named.get(name, [])]
        if not scripts and fact["stdin_from"]:  # `iwr https://... | iex`
            out.append(effect("exec", program, via, source=source_of(fact["stdin_from"]), certainty="unknown"))
        for w in scripts:
            inner = _ps_script(w, program, via, cwd, home)
            out += inner
            if w.text.lstrip().startswith(("(", "$(")) and w.text.rstrip().endswith(")"):
                # `iex (iwr URL)`, `iex (New-Object Net.WebClient).DownloadString(URL)`: the code is
                # what the expression returns, known only when it runs
                fetched = any(e["kind"] == "network" for e in inner) or "download" in w.text.lower()
                out.append(
                    effect("exec", program, via, source="download" if fetched else "unknown", certainty="unknown")
                )
    return out


def _joined(words: list[Word]) -> Word:
    joined = Word()
    for k, part in enumerate(words):
        if k:
            joined.add(" ", True)
        joined.extend(part)
    return joined


def _decoded(w: Word) -> Word:
    """The text of a ``-EncodedCommand`` value (base64 of UTF-16LE), or a dynamic word when it is none."""
    try:
        text = base64.b64decode(w.text, validate=True).decode("utf-16-le")
    except (ValueError, UnicodeDecodeError):
        return Word(w.text, "1" * len(w.text), dynamic=True)
    return Word(text, "1" * len(text), w.dynamic)


def _ps_script(w: Word, program: str, via: list[str], cwd: str, home: str) -> list[Effect]:
    """The effects of PowerShell code a command runs (``-Command``, ``Invoke-Expression``): read as
    a command line like a ``powershell`` tool's; code known only at run time runs unknown code."""
    inner = [*via, program]
    if w.dynamic or _nesting.get() >= MAX_NESTING:
        return [effect("exec", program, via, source=source_of(w.sources) if w.sources else "unknown",
                       certainty="unknown")]  # fmt: skip
    from gateway.policy.facts import powershell, shell  # here: both import this module

    token = _nesting.set(_nesting.get() + 1)
    try:
        commands, _ = shell.parse_command(tools.powershell_text(w.text), cwd, home)
    finally:
        _nesting.reset(token)
    found = [e | {"via": [*inner, *e["via"]]} for c in commands for e in c["effects"]]
    return found + powershell.expression_effects(w.text, program, inner)
