"""File paths from tool inputs and shell words, in one normal form rules can compare.

``normalize`` expands ``~``/``$HOME`` (the home directory comes from the session: the
``/home/<user>``, ``/Users/<user>`` or ``/root`` above ``cwd`` or a workspace root; when none is
visible it stays ``~``), turns Windows separators into ``/``, resolves a relative path against the
effective cwd and folds ``.``, ``..`` and repeated slashes. In a Windows session (the cwd or home
has a drive letter) Git Bash's ``/c/Users/x`` is ``C:/Users/x``: one spelling per path, so
``/c/...``, ``C:\\...`` and ``c:/...`` compare equal (case-insensitively); elsewhere ``/c`` is an
ordinary directory. Case is kept; rules that care about case-insensitive file systems compare
``lowerAscii()``.

``glob_candidates`` answers "which sensitive names could this glob reach": each glob segment is
matched against a vocabulary of names the shipped rules care about (system directories, key and
credential files, ``.env`` files), so ``/[a-z]*`` yields ``/etc``, ``/usr`` ... and ``.en?``
yields ``.env``. A glob never matches a leading dot unless it has one (bash without dotglob).
A key or credential file name is reached only where that is plausible: inside a credential
directory (``~/.ssh/*``), or when the glob's literal part names it (``id_*``, ``*_rsa``, ``.en?``);
``grep TODO *`` in a project reaches directory names only.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Sequence

from gateway.policy.facts.cache import short_inputs

MAX_CANDIDATES = 64

VOCABULARY: tuple[str, ...] = (
    # system directories (top level and the usual second level)
    "bin", "boot", "dev", "etc", "home", "lib", "lib32", "lib64", "libx32", "opt", "proc", "root", "run",
    "sbin", "srv", "sys", "usr", "var", "System", "Library", "Users", "Applications", "Volumes", "private",
    "local", "share", "include", "log", "cache", "spool", "mail", "snap", "mnt", "media", "boot",
    # credentials and keys
    ".ssh", ".aws", ".gnupg", ".config", "gcloud", ".azure", ".kube", ".docker", ".git-credentials", ".netrc",
    "_netrc", "credentials", "config", "id_rsa", "id_dsa", "id_ecdsa", "id_ed25519", "id_ecdsa_sk",
    "id_ed25519_sk", "known_hosts", "authorized_keys", "application_default_credentials.json", "credentials.db",
    "access_tokens.db", "legacy_credentials", "accessTokens.json", "msal_token_cache.json", "msal_token_cache.bin",
    "private-keys-v1.d", "secring.gpg", "ssh_host_rsa_key", "ssh_host_ed25519_key", "ssh_host_ecdsa_key", "sso",
    # dotenv files
    ".env", ".env.local", ".env.production", ".env.development", ".env.staging", ".env.test", ".env.prod",
)  # fmt: skip

DIRECTORIES = frozenset({
    "bin", "boot", "dev", "etc", "home", "lib", "lib32", "lib64", "libx32", "opt", "proc", "root", "run", "sbin",
    "srv", "sys", "usr", "var", "System", "Library", "Users", "Applications", "Volumes", "private", "local", "share",
    "include", "log", "cache", "spool", "mail", "snap", "mnt", "media", ".ssh", ".aws", ".gnupg", ".config",
    "gcloud", ".azure", ".kube", ".docker", "legacy_credentials", "private-keys-v1.d", "sso",
})  # fmt: skip
"""Names that can sit in the middle of a path (a glob segment there is matched against these only)."""

CREDENTIAL_DIRECTORIES = frozenset(
    {".ssh", "ssh", ".gnupg", "private-keys-v1.d", ".aws", ".azure", "gcloud", "legacy_credentials", ".docker", ".kube"}
)
"""Directories whose files are secrets: there, any glob (``~/.ssh/*``, ``/etc/ssh/*``) reaches
every key and credential name. Elsewhere a glob reaches such a file name only when it names it
(:func:`_names_a_file`): ``id_*``, ``*_rsa``, ``.en?``, ``cred*``, but not ``*`` or ``[a-z]*``
(``grep TODO *`` in a project is not a key read)."""

_HOME = re.compile(r"^(/home/[^/]+|/Users/[^/]+|/root)(/|$)")
_DRIVE = re.compile(r"^[A-Za-z]:[\\/]")
_WINDOWS = re.compile(r"^[A-Za-z]:([\\/]|$)")
_GIT_BASH = re.compile(r"^/([A-Za-z])(/|$)")
_WINDOWS_HOME = re.compile(r"^([A-Za-z]:[\\/]Users[\\/][^\\/]+)")


def is_windows(path: str) -> bool:
    """``path`` (a cwd, home or root) is a Windows one: it starts with a drive letter."""
    return path[1:2] == ":" and _WINDOWS.match(path) is not None


def has_drive(path: str) -> bool:
    """``path`` starts with a drive letter and a separator (``C:\\``, ``c:/``)."""
    return path[1:2] == ":" and _DRIVE.match(path) is not None


def drive_spelling(path: str) -> str:
    """The Git Bash (MSYS) spelling of a drive path in its Windows spelling: ``/c/Users/x`` is
    ``C:/Users/x``, ``/c`` is ``C:``. Only a single-letter first segment is a drive; call it only
    for a Windows session (a Linux ``/c/...`` is an ordinary directory)."""
    m = _GIT_BASH.match(path)
    return path if m is None else m.group(1).upper() + ":" + path[2:]


def home_of(cwd: str, roots: Sequence[str]) -> str:
    """The user's home directory as far as the session shows it, else ``~``."""
    for candidate in (cwd, *roots):
        if m := _HOME.match(candidate.replace("\\", "/")):
            return m.group(1)
        if candidate[1:2] == ":" and (m := _WINDOWS_HOME.match(candidate)):
            return fold(m.group(1).replace("\\", "/"))
    return "~"


def fold(path: str) -> str:
    """``.``, ``..`` and ``//`` folded; ``..`` never climbs above the root (or a leading ``~``)."""
    if path == "":
        return ""
    if (
        path.startswith("/")
        and "//" not in path
        and "/./" not in path
        and "/../" not in path
        and not path.endswith(("/", "/.", "/.."))
    ):
        return path  # an absolute path without an empty, ``.`` or ``..`` segment: nothing to fold
    absolute = path.startswith("/")
    parts = path.split("/")
    head: list[str] = []
    if not absolute and parts and (parts[0] == "~" or (parts[0][1:2] == ":" and has_drive(parts[0] + "/"))):
        head = [parts[0]]
        parts = parts[1:]
    out: list[str] = []
    for part in parts:
        if part in ("", "."):
            continue
        if part == "..":
            if out and out[-1] != "..":
                out.pop()
            elif not absolute and not head:
                out.append("..")
            continue
        out.append(part)
    if absolute:
        return "/" + "/".join(out)
    joined = "/".join(head + out)
    return joined or "."


def normalize(path: str, cwd: str = "", home: str = "~", *, shell: bool = False) -> str:
    """One path in normal form (see the module docstring). ``shell=False`` also expands a leading
    ``$HOME``/``${HOME}`` (in shell words the parser already did). Pure, so short inputs (the
    working directory and the paths every command names again) are answered from a bounded
    cache."""
    if len(path) + len(cwd) + len(home) > _CACHED_INPUT:
        return _normalize(path, cwd, home, shell)
    return _normalize_cached(path, cwd, home, shell)


_CACHED_INPUT = 512
"""Characters of input up to which a normalized path is cached: 2,048 of them hold a few MiB at
most, whatever the events."""


def _normalize(path: str, cwd: str, home: str, shell: bool) -> str:
    p = path.strip()
    if p == "":
        return ""
    if ":" in p and p.lower().startswith("file://"):
        p = p[7:]
    # (`p[1:2] == ":"` first: has_drive's own cheap test, without the call for the usual path)
    if (p[1:2] == ":" and has_drive(p)) or ("\\" in p and "/" not in p):
        p = p.replace("\\", "/")
    if not shell:
        for var in ("${HOME}", "$HOME"):
            if p == var or p.startswith(var + "/"):
                p = "~" + p[len(var) :]
    if p == "~" or p.startswith("~/"):
        p = home + p[1:]
    elif p.startswith("~") and re.match(r"^~[A-Za-z0-9_.-]+(/|$)", p):
        user, _, rest = p[1:].partition("/")
        base = "/Users/" if home.startswith("/Users/") else "/home/"
        p = ("/root" if user == "root" else base + user) + ("/" + rest if rest else "")
    if not (p.startswith(("/", "~")) or (p[1:2] == ":" and has_drive(p))) and cwd:
        p = cwd.rstrip("/") + "/" + p
    p = fold(p)
    if p.startswith("/") and (is_windows(cwd) or is_windows(home)):
        p = drive_spelling(p)  # a Windows session: Git Bash's /c/... is C:/... (after folding: //c, /./c)
    return p


_normalize_cached = functools.lru_cache(maxsize=2048)(_normalize)


def static_dir(head: str, cwd: str, home: str) -> str:
    """The directory a word known only at run time stays in, from its static start ``head``
    (``/srv/$X`` -> ``/srv``), or '' when the start names none."""
    return normalize(head.rsplit("/", 1)[0] or "/", cwd, home, shell=True) if "/" in head else ""


def under(path: str, roots: Iterable[str]) -> bool:
    """``path`` is one of ``roots`` or below one (paths already normalized)."""
    for root in roots:
        r = root.rstrip("/") or "/"
        if path == r or path.startswith(r + "/") or r == "/":
            return True
    return False


@short_inputs
def _segment_regex(segment: str) -> re.Pattern[str] | None:
    """A glob segment (backslash-escaped literals) as a regex; None when it has no glob. Pure, and
    the same segments (``*``, ``*.py``) come back in every listing: a bounded cache."""
    out: list[str] = []
    glob = False
    i = 0
    while i < len(segment):
        c = segment[i]
        if c == "\\" and i + 1 < len(segment):
            out.append(re.escape(segment[i + 1]))
            i += 2
            continue
        if c == "*":
            out.append("[^/]*")
            glob = True
        elif c == "?":
            out.append("[^/]")
            glob = True
        elif c == "[":
            end = segment.find("]", i + 2)
            if end < 0:
                out.append(re.escape(c))
            else:
                body = segment[i + 1 : end]
                neg = body[:1] in ("!", "^")
                body = body[1:] if neg else body
                body = body.replace("\\", "\\\\").replace("^", "\\^").replace("[", "\\[")
                out.append(("[^" if neg else "[") + body + "]")
                glob = True
                i = end + 1
                continue
        else:
            out.append(re.escape(c))
        i += 1
    if not glob:
        return None
    try:
        return re.compile("".join(out))
    except re.error:
        return None


def _literal(segment: str) -> str:
    return re.sub(r"\\(.)", r"\1", segment) if "\\" in segment else segment


_WILDCARD = re.compile(r"\*|\?|\[(?:[!^]?\]?[^\]]*)\]")


@short_inputs
def _names_a_file(segment: str) -> bool:
    """A glob segment that says which file it wants: it starts with a literal ``.`` (only dot
    files) or keeps at least two literal characters beside its wildcards (a one-character class
    ``[e]`` is a literal). Pure, and the same segments come back: a bounded cache."""
    if segment.startswith((".", "\\.")):
        return True
    return len(_literal(_WILDCARD.sub(_class_literal, segment))) >= 2


def _class_literal(m: re.Match[str]) -> str:
    token = m.group(0)
    return token[1] if len(token) == 3 and token[1] not in "!^" else ""  # [e] is e; *, ?, [a-z] are nothing


@short_inputs
def _vocabulary_matches(segment: str) -> tuple[str, ...]:
    """The names of :data:`VOCABULARY` the glob ``segment`` matches, in vocabulary order (pure, and
    the same segments come back: a bounded cache)."""
    rx = _segment_regex(segment)
    return tuple(v for v in VOCABULARY if rx is not None and rx.fullmatch(v))


def glob_candidates(pattern: str, extra: Sequence[str] = ()) -> list[str]:
    """Sensitive names the (normalized) glob ``pattern`` could match, as paths; at most
    :data:`MAX_CANDIDATES`. ``extra`` adds names to the vocabulary (e.g. the user's name)."""
    segments = pattern.split("/")
    combos = [""]
    for index, segment in enumerate(segments):
        rx = _segment_regex(segment)
        if rx is None:
            names = [_literal(segment)]
        else:
            dot = segment.startswith((".", "\\."))
            last = index == len(segments) - 1
            names = [
                v
                for v in (*_vocabulary_matches(segment), *(e for e in extra if rx.fullmatch(e)))
                if (dot or not v.startswith(".")) and (last or v in DIRECTORIES or v in extra)
            ]
            if not names:
                return []
        named = rx is None or _names_a_file(segment)  # else a file name only inside a credential directory
        sep = "/" if index > 0 else ""
        combos = [
            c + sep + n
            for c in combos
            for n in names
            if named or n in DIRECTORIES or n in extra or c.rsplit("/", 1)[-1] in CREDENTIAL_DIRECTORIES
        ][:MAX_CANDIDATES]
        if not combos:
            return []
    return [fold(c) if c else c for c in combos]
