"""S8: a replay of real tool calls (``python -m bench.run --only S0n,S8``).

Real agents almost never repeat a command, so a benchmark of one repeated command is answered by
the rule-result memo and the parse cache. S8 sends the 7,155 real tool calls of the ``realcmds``
corpus (``../shared/realcmds/corpus.json`` beside the repository, or the file ``$AHP_REALCMDS``
names; it is not part of the repository) as full ``tool.before`` events, one per request, to the
default gateway.

Every path-like word is renamed per run and per pass over the corpus, so no cache can be filled
in advance and a second pass is as new to the gateway as the first:

- the project root ``/home/dev/proj`` and the home ``/home/dev`` become ``/home/<user>/<project>``
  and ``/home/<user>`` (the Windows sessions: the user and the project directory of their
  workspace root, in every spelling: ``C:\\…``, ``C:/…``, ``/c/…``);
- a random directory is inserted after the project root in project-absolute paths and in front
  of relative paths (``src/app.py`` → ``k3x9tq2m/src/app.py``), basenames kept, so ``.env``,
  ``id_rsa`` and every other name a rule reads stay what they were and every path stays inside
  or outside the workspace as before. Paths with a ``..`` component, ``~`` and ``$VAR`` paths,
  system paths (``/tmp``, ``/dev/null``), URLs and git remote refs are left alone.

The names come from a seed (``--seed``, else a random one, printed). :func:`check_sample`
evaluates a sample of the calls in process, randomized and as recorded, and raises
:class:`MixMismatch` if any effect type differs: the renaming must not change a verdict.
"""

from __future__ import annotations

import json
import math
import os
import random
import re
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.payloads import encode, tool_before_event

REPO = Path(__file__).resolve().parent.parent
ENV = "AHP_REALCMDS"
DEFAULT_CORPUS = REPO.parent / "shared" / "realcmds" / "corpus.json"
POSIX_ROOT = "/home/dev/proj"
POSIX_HOME = "/home/dev"
SAMPLE = 200
"""Cases whose effect types are compared, randomized against as recorded, before a run."""
ORDER_SEED = "S8"
"""The corpus is replayed in one fixed shuffled order (every prefix is a mix of every source);
only the names change with the run's seed."""

CAPS_CLAUDE_CODE: dict[str, Any] = {
    "effects": ["deny", "allow", "ask", "modify", "message", "flow", "inject"],
    "modify": {"input": {"replace": True, "merge": True}},
    "flow": {"operations": ["stop"]},
    "inject": {"timing": ["now"]},
}
"""What the gateway's Claude Code adapter advertises for ``PreToolUse``
(``gateway/native/claude.py``); :func:`claude_code_caps` reads it from there when it can."""


def claude_code_caps() -> dict[str, Any]:
    try:
        from gateway.native.claude import PROFILES

        caps = PROFILES["claude-code"].caps.get("PreToolUse")
    except (ImportError, KeyError, AttributeError):
        return CAPS_CLAUDE_CODE
    return dict(caps) if isinstance(caps, dict) else CAPS_CLAUDE_CODE


class CorpusMissing(RuntimeError):
    """The corpus file is not there: S8 is skipped."""


class MixMismatch(RuntimeError):
    """A randomized call got other effect types than the same call as recorded."""


@dataclass(frozen=True)
class Case:
    tool: str
    input: dict[str, Any]
    cwd: str = POSIX_ROOT
    roots: tuple[str, ...] = (POSIX_ROOT,)
    source: str = ""


def corpus_path() -> Path:
    env = os.environ.get(ENV)
    return Path(env) if env else DEFAULT_CORPUS


def load_cases(path: Path | None = None) -> list[Case]:
    """The corpus in the fixed replay order; :class:`CorpusMissing` when it is not there."""
    path = path or corpus_path()
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise CorpusMissing(
            f"S8 needs the realcmds corpus: {path} does not exist (set {ENV} to its corpus.json)"
        ) from None
    items = raw.get("cases", raw) if isinstance(raw, dict) else raw
    cases = []
    for item in items:
        session = item.get("session") or {}
        roots = tuple(session.get("workspaceRoots") or (POSIX_ROOT,))
        cases.append(
            Case(item["tool"], item["input"], session.get("cwd") or roots[0], roots, str(item.get("source", "")))
        )
    if not cases:
        raise CorpusMissing(f"{path} holds no cases")
    random.Random(ORDER_SEED).shuffle(cases)
    return cases


# ------------------------------------------------------------------------------ randomization
_NAME = "bcdfghjkmnpqrstvwxz"
_NAME_REST = _NAME + "23456789"
_SEP = r"(?:\\+|/)"
_RELATIVE = re.compile(
    r"(?<![^\s\"'=(<>,`|;&])"  # at the start of a word, after a quote, =, a redirection, …
    r"(?P<dot>\./)?(?P<path>[\w.][\w.+@-]*(?:/[\w.+@*{},-]+)+/?)"
)
_GIT_REFS = frozenset({"origin", "upstream", "refs", "heads", "remotes"})
_SED = frozenset({"s", "y"})
_PATH_KEYS = ("file_path", "path", "notebook_path")
_RELATIVE_KEYS = ("pattern", "glob")


def _name(rng: random.Random, length: int = 8) -> str:
    return rng.choice(_NAME) + "".join(rng.choice(_NAME_REST) for _ in range(length - 1))


def _windows_parts(root: str) -> tuple[str | None, str]:
    """(user, project directory) of a Windows-style workspace root."""
    parts = [p for p in re.split(r"[\\/]+", root) if p]
    user = None
    for i, part in enumerate(parts[:-1]):
        if part.lower() == "users" and i + 1 < len(parts):
            user = parts[i + 1]
    return user, parts[-1]


class Renaming:
    """The names of one pass: :meth:`apply` renames a string, :meth:`case` a whole call."""

    def __init__(self, key: str, user: str, project: str) -> None:
        self.key = key
        self.user = user
        self.project = project
        self.windows: dict[str, str] = {}
        """Windows user and project directory names → their names in this pass."""
        self.projects: set[str] = {POSIX_ROOT}
        """The tokens after which a project-absolute path goes on (and gets the segment)."""
        self._tokens: re.Pattern[str] | None = None
        self.last_segment = ""
        """The directory :meth:`case` inserted last."""

    def tokens(self) -> re.Pattern[str]:
        if self._tokens is None:
            names = sorted(self.windows, key=len, reverse=True)
            alternatives = [re.escape(POSIX_ROOT) + r"(?![\w.-])", re.escape(POSIX_HOME) + r"(?![\w.-])"]
            alternatives += [r"(?<![^\W_])" + re.escape(n) + r"(?![^\W_])" for n in names]
            self._tokens = re.compile("|".join(alternatives))
        return self._tokens

    def apply(self, text: str, segment: str, relative: bool = True) -> str:
        """``text`` with its roots renamed, ``segment`` inserted after a project root and (when
        ``relative``) in front of relative paths."""
        found: list[str] = []

        def mask(m: re.Match[str]) -> str:
            found.append(m.group(0))
            return f"\x00{len(found) - 1}\x00"

        masked = self.tokens().sub(mask, text)
        if not found and not relative:
            return text
        if relative:
            masked = _RELATIVE.sub(lambda m: _insert(m, segment), masked)

        def unmask(m: re.Match[str]) -> str:
            old = found[int(m.group(1))]
            sep = m.group(2) or ""
            if old == POSIX_ROOT:
                new = f"/home/{self.user}/{self.project}"
            elif old == POSIX_HOME:
                new = f"/home/{self.user}"
            else:
                new = self.windows[old]
            rest = m.string[m.end() :]
            if not sep or old not in self.projects or rest.startswith("..") or not rest or rest[0] in _ENDS:
                return new + sep
            return new + sep + segment + sep

        return _MASKED.sub(unmask, masked)

    def case(self, case: Case, index: int = 0) -> Case:
        """``case`` (number ``index`` of the corpus, whose directory the renaming draws from the
        pass's key and the index, so a call is renamed alike whatever was renamed before)."""
        segment = self.last_segment = _name(random.Random(f"{self.key}:{index}"))
        new_input: dict[str, Any] = {}
        for key, value in case.input.items():
            if not isinstance(value, str):
                new_input[key] = value
            elif (case.tool == "Bash" and key == "command") or key in _PATH_KEYS or key in _RELATIVE_KEYS:
                # a command, or a field that is one path or glob: relative paths get the segment
                new_input[key] = self.apply(value, segment)
            else:  # contents, regexes, prompts, URLs: only the roots are renamed
                new_input[key] = self.apply(value, segment, relative=False)
        return Case(
            case.tool,
            new_input,
            self.apply(case.cwd, segment, relative=False),
            tuple(self.apply(r, segment, relative=False) for r in case.roots),
            case.source,
        )


_MASKED = re.compile(r"\x00(\d+)\x00(\\+|/)?")
_ENDS = frozenset(" \"'`\t\n;&|)")


def _insert(m: re.Match[str], segment: str) -> str:
    path = m.group("path")
    parts = path.split("/")
    if ".." in parts or parts[0] in _GIT_REFS or parts[0] in _SED or m.string[m.end() : m.end() + 1] == "\x00":
        return m.group(0)
    return (m.group("dot") or "") + segment + "/" + path


def renaming(seed: int, pass_no: int, cases: Sequence[Case] = ()) -> Renaming:
    """The names of pass ``pass_no`` of the run with ``seed``: a user, a project, and for every
    Windows workspace root in ``cases`` its user and project directory."""
    rng = random.Random(f"{seed}:{pass_no}")
    out = Renaming(f"{seed}:{pass_no}", _name(rng, 6), _name(rng, 8))
    for root in sorted({r for c in cases for r in c.roots if r != POSIX_ROOT}):
        user, project = _windows_parts(root)
        if user and user not in out.windows:
            out.windows[user] = _name(rng, 6).capitalize()
        if project not in out.windows:
            out.windows[project] = _name(rng, 10)
            out.projects.add(project)
            mangled = re.sub(r"[^A-Za-z0-9]", "-", project)
            if mangled != project:  # Claude Code's per-project directory name
                out.windows[mangled] = out.windows[project]
    return out


# ----------------------------------------------------------------------------------- requests
def event(case: Case, event_id: str, session_id: str) -> dict[str, Any]:
    """A full ``tool.before`` for ``case``: the benchmark's envelope, the case's session and tool."""
    ev = tool_before_event(event_id)
    ev["session"] = {"id": session_id, "cwd": case.cwd, "workspaceRoots": list(case.roots)}
    ev["call"] = {"id": "call-" + event_id}
    ev["tool"] = {"name": case.tool, "input": case.input, "origin": "native"}
    ev["path"] = "native"
    return ev


def request(case: Case, event_id: str, session_id: str, caps: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": event_id,
        "method": "hooks/intercept",
        "params": {
            "protocolVersion": "draft",
            "event": event(case, event_id, session_id),
            "capabilities": caps if caps is not None else claude_code_caps(),
        },
    }


Randomize = Callable[[int, int, Case], Case]
"""(pass, index, case) → the case as sent in that pass."""


class Mix:
    """The corpus of one run: its cases, its seed, and request bodies per pass."""

    def __init__(self, cases: Sequence[Case], seed: int, tag: str = "s8") -> None:
        self.cases = list(cases)
        self.seed = seed
        self.tag = tag
        self.caps = claude_code_caps()
        self._renamings: dict[int, Renaming] = {}

    def randomize(self, pass_no: int, index: int, case: Case) -> Case:
        found = self._renamings.get(pass_no)
        if found is None:
            found = self._renamings[pass_no] = renaming(self.seed, pass_no, self.cases)
        return found.case(case, index)

    def event_id(self, pass_no: int, index: int) -> str:
        return f"{self.tag}-{self.seed:x}-{pass_no}-{index}"

    def body(self, pass_no: int, index: int, randomize: Randomize | None = None) -> bytes:
        case = self.cases[index]
        sent = (randomize or self.randomize)(pass_no, index, case)
        session = f"sess-{self.seed:x}-{pass_no}-{'w' if case.roots[0] != POSIX_ROOT else 'p'}"
        return encode(request(sent, self.event_id(pass_no, index), session, self.caps))

    def bodies(self, first_pass: int, count: int, start: int = 0) -> Iterator[bytes]:
        """``count`` bodies, from case ``start`` of pass ``first_pass`` on, in the replay order
        (each pass renamed anew)."""
        n = len(self.cases)
        for k in range(start, start + count):
            yield self.body(first_pass + k // n, k % n)

    def passes(self, requests: float) -> int:
        return max(1, math.ceil(requests / len(self.cases)))

    def write(self, path: Path, first_pass: int, passes: int) -> int:
        """Write ``passes`` passes (one body per line), return the number of bodies."""
        count = passes * len(self.cases)
        with path.open("wb") as handle:
            for body in self.bodies(first_pass, count):
                handle.write(body + b"\n")
        return count


def new_seed() -> int:
    return int.from_bytes(os.urandom(4), "big")


# ------------------------------------------------------------------------------- the check
def effect_types(answer: bytes | dict[str, Any], request_id: str | None = None) -> tuple[str, ...]:
    """The effect types of a valid intercept answer; ValueError when it is not one."""
    message = json.loads(answer) if isinstance(answer, bytes) else answer
    if not isinstance(message, dict) or message.get("jsonrpc") != "2.0":
        raise ValueError(f"not a JSON-RPC message: {str(message)[:300]}")
    if request_id is not None and message.get("id") != request_id:
        raise ValueError(f"answer id {message.get('id')!r} is not the request's {request_id!r}")
    result = message.get("result")
    effects = result.get("effects") if isinstance(result, dict) else None
    if not isinstance(effects, list) or not all(
        isinstance(e, dict) and isinstance(e.get("type"), str) for e in effects
    ):
        raise ValueError(f"not an intercept result: {str(message)[:300]}")
    return tuple(str(e["type"]) for e in effects)


_RISKY = re.compile(r"\.env|id_|_key|secret|token|credential|\.\.|\*|rm |--force|sudo|curl|wget|/c/|[A-Z]:[\\/]")
"""Words near what the bundled rules look for: half of the sample is drawn from such calls, so it
holds the rare calls that get an effect more often than a uniform draw would."""


def sample_indices(cases: Sequence[Case], seed: int, size: int = SAMPLE) -> list[int]:
    """``size`` cases: the first case of each tool, then a seeded draw, half of it from calls
    that mention what the rules look for (:data:`_RISKY`)."""
    if size >= len(cases):
        return list(range(len(cases)))
    first: dict[str, int] = {}
    for i, case in enumerate(cases):
        first.setdefault(case.tool, i)
    chosen = set(list(first.values())[:size])
    rng = random.Random(f"sample:{seed}")
    risky = [i for i, c in enumerate(cases) if i not in chosen and _RISKY.search(json.dumps(c.input))]
    chosen.update(rng.sample(risky, min(len(risky), (size - len(chosen)) // 2)))
    rest = [i for i in range(len(cases)) if i not in chosen]
    chosen.update(rng.sample(rest, size - len(chosen)))
    return sorted(chosen)


@dataclass
class SampleReport:
    checked: int
    effects: Counter[str]
    """Effect types of the sample (randomized), e.g. how many answers asked or denied."""
    changed: int
    """Cases whose tool input the renaming changed (the others have no path-like word; their
    session's names changed all the same)."""


def check_sample(
    mix: Mix,
    decide: Callable[[bytes], bytes] | None = None,
    *,
    size: int = SAMPLE,
    pass_no: int = 0,
    randomize: Randomize | None = None,
) -> SampleReport:
    """Effect types of ``size`` cases, randomized (pass ``pass_no``) and as recorded, must agree:
    :class:`MixMismatch` names every case where they do not. ``decide`` answers a body (default:
    the default gateway in process)."""
    decide = decide or in_process()
    recorded = Mix(mix.cases, mix.seed, mix.tag + "r")

    def unchanged(_pass: int, _index: int, case: Case) -> Case:
        return case

    bad: list[str] = []
    effects: Counter[str] = Counter()
    changed = 0
    for i in sample_indices(mix.cases, mix.seed, size):
        body = mix.body(pass_no, i, randomize)
        plain = recorded.body(pass_no, i, unchanged)
        got = effect_types(decide(body), mix.event_id(pass_no, i))
        want = effect_types(decide(plain), recorded.event_id(pass_no, i))
        effects.update(got or ("none",))
        sent = (randomize or mix.randomize)(pass_no, i, mix.cases[i])
        changed += sent.input != mix.cases[i].input
        if got != want:
            case = mix.cases[i]
            bad.append(
                f"  case {i} ({case.tool}, {case.source}): {list(want)} as recorded, {list(got)} randomized\n"
                f"    recorded:   {json.dumps(case.input)[:300]}\n    randomized: {json.dumps(sent.input)[:300]}"
            )
    if bad:
        raise MixMismatch(
            f"S8: the path renaming changed the verdict of {len(bad)} of {size} sampled calls (seed {mix.seed}):\n"
            + "\n".join(bad[:20])
        )
    return SampleReport(size, effects, changed)


def in_process() -> Callable[[bytes], bytes]:
    """``Gateway.handle`` of the bundled default configuration, run to completion per body."""
    import asyncio

    from gateway.assemble import Assembly
    from gateway.config.load import load
    from gateway.telemetry import NullTelemetry

    gw = Assembly(load(None), telemetry=NullTelemetry()).gateway
    loop = asyncio.new_event_loop()

    def decide(body: bytes) -> bytes:
        answer = loop.run_until_complete(gw.handle(body, {})).answer
        if answer is None:
            raise ValueError("no answer to an intercept")
        return answer

    return decide
