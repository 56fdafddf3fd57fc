"""Hostile configuration and policy files: what someone who can write a file the gateway loads
(a team contributing policies to a shared repository, a broken CI pipeline) can make
``ahp-gateway check`` and hot reload do.

docs/configuration.md and "CLI" (``check``): every problem is an error naming file, JSON path,
line and reason, exit 1, never a traceback, and an answer within a few seconds.
docs/operations/failure-behaviour.md and "Observability": a bad reload keeps the last good configuration
serving and is counted in ``ahp_gateway_config_reloads_total{result="failure"}``.
docs/policies/index.md: policy files, their CEL rules and the engine's bounds.
"""

from __future__ import annotations

import http.client
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.support.events import intercept, tool_before
from tests.support.paths import ROOT

CHECK_TIMEOUT = 6.0
"""'A few seconds' for one ``check`` on a loaded 2-core machine (a healthy one takes about 1 s)."""
RELOAD_DEADLINE = 4.0
"""How long a reload may take to be reported (success or failure)."""
SLOW_ANSWER = 1.0
"""An intercept answered later than this during a reload counts as not served (deadline is 2 s)."""


def _config(port: int = 0, admin: int = 0, *, watch: str = "{watch: false}", policies: str = "[policies/]") -> str:
    """Ten lines; the subscription is on line 10."""
    return (
        "id: org.example.gateway\n"
        f"listen: {{host: 127.0.0.1, port: {port}}}\n"
        f"admin: {{host: 127.0.0.1, port: {admin}}}\n"
        "log: {decisions: off}\n"
        f"reload: {watch}\n"
        "hooks:\n"
        "  - id: org.example.rules\n"
        f"    transport: {{type: local, policies: {policies}}}\n"
        "    subscriptions:\n"
        "      - {mode: intercept, events: [tool.before], timeoutMs: 100, failurePolicy: fail-closed,"
        " content: {default: body}}\n"
    )


RULES = (  # ten lines: rm-root's `when` on line 5, its deny on line 6, backtrack's `when` on line 9
    "namespace: org.example.p\n"
    "rules:\n"
    "  - id: rm-root\n"
    "    events: [tool.before]\n"
    "    when: 'event.tool.input.command.contains(\"rm -rf /\")'\n"
    "    deny: {reason: never}\n"
    "  - id: backtrack\n"
    "    events: [tool.before]\n"
    "    when: 'event.tool.input.command.matches(\"^(a+)+$\")'\n"
    "    deny: {reason: backtracking}\n"
)


def _bomb(levels: int, indent: str = "  ") -> str:
    """Billion laughs: ``levels`` anchors, each a list of ten aliases of the previous one."""
    lines = [f"{indent}l0: &l0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    for level in range(1, levels):
        aliases = ", ".join([f"*l{level - 1}"] * 10)
        lines.append(f"{indent}l{level}: &l{level} [{aliases}]")
    return "\n".join(lines) + "\n"


def _tree(tmp: Path, config: str | bytes | None = None, rules: str | bytes | None = None) -> tuple[Path, Path]:
    """gateway.yaml and policies/rules.yaml (good ones unless given)."""
    (tmp / "policies").mkdir(exist_ok=True)
    cfg, policy = tmp / "gateway.yaml", tmp / "policies" / "rules.yaml"
    for path, text, default in ((cfg, config, _config()), (policy, rules, RULES)):
        data = default if text is None else text
        path.write_bytes(data.encode() if isinstance(data, str) else data)
    return cfg, policy


def _check(config: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], float]:
    started = time.monotonic()
    try:
        out = subprocess.run(
            [sys.executable, "-m", "gateway", "check", "--config", str(config), *args],
            capture_output=True,
            text=True,
            errors="replace",
            check=False,
            cwd=ROOT,
            timeout=CHECK_TIMEOUT,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"ahp-gateway check did not answer within {CHECK_TIMEOUT} s")
    return out, time.monotonic() - started


# --- check: one hostile file per case ------------------------------------------------------------------

Case = Callable[[Path], tuple[Path, list[str]]]
"""Writes the files into a directory; returns the configuration and what stderr must contain."""


def _bomb_and_duplicate_key(tmp: Path) -> tuple[Path, list[str]]:
    cfg, _ = _tree(tmp, _config() + "x-bomb:\n" + _bomb(9) + "id: org.example.again\n")
    return cfg, [f"{cfg}:21: $.id: duplicate key 'id' (first at line 1)"]


def _bomb_in_policy(tmp: Path) -> tuple[Path, list[str]]:
    _, policy = _tree(tmp, rules=RULES + "x-bomb:\n" + _bomb(9))
    return tmp / "gateway.yaml", [f"{policy}:12: $.x-bomb: Extra inputs are not permitted"]


def _deep_flow_sequence(tmp: Path) -> tuple[Path, list[str]]:
    cfg, _ = _tree(tmp, _config() + "x-deep: " + "[" * 100_000 + "]" * 100_000 + "\n")
    return cfg, [f"{cfg}: $: parse error: nested too deeply"]


def _huge_file(tmp: Path) -> tuple[Path, list[str]]:
    padding = ("# " + "x" * 97 + "\n") * 300_000  # 30 MB
    cfg, _ = _tree(tmp, _config() + padding + "limits: {deadlineMs: -1}\n")
    return cfg, [f"{cfg}: $: larger than 1048576 bytes"]  # refused before it is parsed


def _python_object_in_config(tmp: Path) -> tuple[Path, list[str]]:
    marker = tmp / "executed"
    cfg, _ = _tree(tmp, _config() + f"x-run: !!python/object/apply:os.system ['touch {marker}']\n")
    return cfg, [
        f"{cfg}:11: $: parse error: could not determine a constructor for the tag "
        "'tag:yaml.org,2002:python/object/apply:os.system'"
    ]


def _python_object_in_policy(tmp: Path) -> tuple[Path, list[str]]:
    marker = tmp / "executed"
    rules = RULES.replace(
        "'event.tool.input.command.contains(\"rm -rf /\")'", f"!!python/object/new:os.system ['touch {marker}']"
    )
    _, policy = _tree(tmp, rules=rules)
    return tmp / "gateway.yaml", [f"{policy}:5: $: parse error: could not determine a constructor for the tag"]


def _python_name_in_policy(tmp: Path) -> tuple[Path, list[str]]:
    _, policy = _tree(tmp, rules=RULES + "x-name: !!python/name:os.system\n")
    return tmp / "gateway.yaml", [f"{policy}:11: $: parse error: could not determine a constructor for the tag"]


def _not_utf8(tmp: Path) -> tuple[Path, list[str]]:
    cfg, _ = _tree(tmp, _config().encode() + b"# caf\xe9 latin-1\n")
    return cfg, [f"{cfg}:11: "]


def _bom_and_an_error(tmp: Path) -> tuple[Path, list[str]]:
    cfg, _ = _tree(tmp, b"\xef\xbb\xbf" + _config().replace("timeoutMs: 100", "timeoutMs: -5").encode())
    return cfg, [f"{cfg}:10: $.hooks[0].subscriptions[0].timeoutMs: Input should be greater than or equal to 1"]


def _bom_policy_cel_error(tmp: Path) -> tuple[Path, list[str]]:
    _, policy = _tree(tmp, rules=b"\xef\xbb\xbf" + RULES.replace("contains(", "contanes(").encode())
    return tmp / "gateway.yaml", [f"{policy}:5: $.rules[0].when: CEL 1:"]


def _nul_byte(tmp: Path) -> tuple[Path, list[str]]:
    _, policy = _tree(tmp, rules=RULES.encode().replace(b"reason: never", b"reason: nev\x00er"))
    return tmp / "gateway.yaml", [f"{policy}:6: $: parse error: character #x0000 is not allowed"]


def _crlf_validation_error(tmp: Path) -> tuple[Path, list[str]]:
    cfg, _ = _tree(tmp, _config().replace("timeoutMs: 100", "timeoutMs: -5").replace("\n", "\r\n"))
    return cfg, [f"{cfg}:10: $.hooks[0].subscriptions[0].timeoutMs: Input should be greater than or equal to 1"]


def _crlf_duplicate_key(tmp: Path) -> tuple[Path, list[str]]:
    _, policy = _tree(tmp, rules=(RULES + "    deny: {reason: again}\n").replace("\n", "\r\n"))
    return tmp / "gateway.yaml", [f"{policy}:11: $.rules[1].deny: duplicate key 'deny' (first at line 10)"]


def _crlf_cel_error(tmp: Path) -> tuple[Path, list[str]]:
    _, policy = _tree(tmp, rules=RULES.replace("matches(", "matchez(").replace("\n", "\r\n"))
    return tmp / "gateway.yaml", [f"{policy}:9: $.rules[1].when: CEL 1:"]


def _tab_indentation(tmp: Path) -> tuple[Path, list[str]]:
    _, policy = _tree(tmp, rules=RULES.replace("    events", "\tevents", 1))
    return tmp / "gateway.yaml", [f"{policy}:4: $: parse error: found character '\\t' that cannot start any token"]


def _fifo_policy(tmp: Path) -> tuple[Path, list[str]]:
    cfg, _ = _tree(tmp, _config(policies="[policies/, pipe.yaml]"))
    os.mkfifo(tmp / "pipe.yaml")
    return cfg, [f"{tmp / 'pipe.yaml'}: $: "]


def _directory_registration(tmp: Path) -> tuple[Path, list[str]]:
    cfg, _ = _tree(tmp, "id: org.example.gateway\nregistration: registration.json\n")
    (tmp / "registration.json").mkdir()
    return cfg, [f"{tmp / 'registration.json'}: $: cannot read: IsADirectoryError"]


def _symlink_loop_policy(tmp: Path) -> tuple[Path, list[str]]:
    cfg, _ = _tree(tmp, _config(policies="[policies/, a.yaml]"))
    (tmp / "a.yaml").symlink_to("b.yaml")
    (tmp / "b.yaml").symlink_to("a.yaml")
    return cfg, [f"{tmp / 'a.yaml'}: $: a dangling or looping symlink"]


def _symlink_loop_in_policy_directory(tmp: Path) -> tuple[Path, list[str]]:
    cfg, _ = _tree(tmp)
    (tmp / "policies" / "git.yaml").symlink_to("git2.yaml")
    (tmp / "policies" / "git2.yaml").symlink_to("git.yaml")
    return cfg, [f"{tmp / 'policies' / 'git.yaml'}: $: "]


def _thousand_files_one_broken(tmp: Path) -> tuple[Path, list[str]]:
    cfg, _ = _tree(tmp)
    for n in range(1000):
        when = f'event.tool.input.command == "x{n}"' if n != 997 else "event.tool.input.command =="
        (tmp / "policies" / f"team-{n:04}.yaml").write_text(
            f"namespace: org.example.team{n}\nrules:\n  - id: r{n}\n    events: [tool.before]\n"
            f"    when: '{when}'\n    deny: {{reason: never}}\n"
        )
    return cfg, [f"{tmp / 'policies' / 'team-0997.yaml'}:5: $.rules[0].when: CEL 1:"]


def _enormous_cel(tmp: Path) -> tuple[Path, list[str]]:
    when = " || ".join(f'event.tool.input.command == "x{n}"' for n in range(6000))
    _, policy = _tree(tmp, rules=RULES.replace("'event.tool.input.command.contains(\"rm -rf /\")'", f"'{when}'"))
    return tmp / "gateway.yaml", [f"{policy}:5: $.rules[0].when: CEL expression size exceeds codepoint limit"]


def _deeply_nested_cel(tmp: Path) -> tuple[Path, list[str]]:
    when = "(" * 5000 + "true" + ")" * 5000
    _, policy = _tree(tmp, rules=RULES.replace("'event.tool.input.command.contains(\"rm -rf /\")'", f"'{when}'"))
    return tmp / "gateway.yaml", [f"{policy}:5: $.rules[0].when: CEL ", "recursion limit"]


def _odd_rule_id(tmp: Path) -> tuple[Path, list[str]]:
    _, policy = _tree(tmp, rules=RULES.replace("id: rm-root", 'id: "rm-root\\n\\u202e/../x"'))
    return tmp / "gateway.yaml", [f"{policy}:3: $.rules[0].id: String should match pattern"]


def _odd_namespace(tmp: Path) -> tuple[Path, list[str]]:
    _, policy = _tree(tmp, rules=RULES.replace("namespace: org.example.p", 'namespace: "org.example.p\\n"'))
    return tmp / "gateway.yaml", [f"{policy}:1: $.namespace: String should match pattern"]


def _config_as_its_own_registration(tmp: Path) -> tuple[Path, list[str]]:
    cfg, _ = _tree(tmp, "id: org.example.gateway\nregistration: gateway.yaml\n")
    return cfg, [f"{cfg}:1: $.hooks: required field is missing"]


def _config_as_its_own_policy_directory(tmp: Path) -> tuple[Path, list[str]]:
    cfg, _ = _tree(tmp, _config(policies="[.]"))
    return cfg, [f"{cfg}:1: $.id: Extra inputs are not permitted", f"{cfg}:7: $.hooks: Extra inputs are not permitted"]


def _ok(case: Case) -> object:
    return pytest.param(case, id=case.__name__.strip("_"))


CASES = [
    _ok(_bomb_and_duplicate_key),
    _ok(_bomb_in_policy),
    _ok(_deep_flow_sequence),
    _ok(_huge_file),
    _ok(_python_object_in_config),
    _ok(_python_object_in_policy),
    _ok(_python_name_in_policy),
    _ok(_not_utf8),
    _ok(_bom_and_an_error),
    _ok(_bom_policy_cel_error),
    _ok(_nul_byte),
    _ok(_crlf_validation_error),
    _ok(_crlf_duplicate_key),
    _ok(_crlf_cel_error),
    _ok(_tab_indentation),
    _ok(_fifo_policy),
    _ok(_directory_registration),
    _ok(_symlink_loop_policy),
    _ok(_symlink_loop_in_policy_directory),
    _ok(_thousand_files_one_broken),
    _ok(_enormous_cel),
    _ok(_deeply_nested_cel),
    _ok(_odd_rule_id),
    _ok(_odd_namespace),
    _ok(_config_as_its_own_registration),
    _ok(_config_as_its_own_policy_directory),
]


@pytest.mark.parametrize("case", CASES)
def test_check_answers_a_hostile_file_quickly_with_file_line_and_reason(tmp_path, case):
    """docs/configuration.md / "CLI": ``check`` reports every error with file, JSON path, line and
    reason and exits 1; docs/policies/index.md: policy files and CEL rules are checked the same way."""
    config, expected = case(tmp_path)
    out, took = _check(config)
    assert "Traceback" not in out.stderr, out.stderr[-2000:]
    assert out.returncode == 1, out.stdout[-2000:]
    for fragment in expected:
        assert fragment in out.stderr, out.stderr[-2000:]
    assert took < CHECK_TIMEOUT
    assert not (tmp_path / "executed").exists()  # no YAML tag ever runs code


def test_a_billion_laughs_in_an_unknown_field_is_not_expanded(tmp_path):
    """docs/configuration.md: unknown fields are warnings (``--strict`` fails on them); a field of
    10**9 aliased leaves stays shared references and answers as fast as a small file."""
    cfg, _ = _tree(tmp_path, _config() + "x-bomb:\n" + _bomb(10))
    out, _ = _check(cfg, "--strict", "--format", "json")
    assert out.returncode == 1 and "Traceback" not in out.stderr
    report = json.loads(out.stdout)
    assert {"file": str(cfg), "line": 12, "path": "$.x-bomb"}.items() <= next(
        w for w in report["warnings"] if w["path"] == "$.x-bomb"
    ).items()


# --- hot reload: a real gateway process ------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class _Answer:
    started: float
    took: float
    verdict: str
    """``deny`` (the last good rules decided), ``allow``, or what went wrong."""


@dataclass
class _Gateway:
    """``ahp-gateway serve`` on loopback with a client that keeps asking it to judge ``rm -rf /``."""

    proc: subprocess.Popen[bytes]
    port: int
    admin: int
    config: Path
    policy: Path
    answers: list[_Answer] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)

    def metric(self, name: str) -> float:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.admin}/metrics", timeout=2) as resp:
            text = resp.read().decode()
        found = re.search(rf"^{re.escape(name)} (\S+)$", text, re.M)
        return float(found.group(1)) if found else 0.0

    def reloads(self, result: str) -> float:
        return self.metric(f'ahp_gateway_config_reloads_total{{result="{result}"}}')

    def ask(self, command: str, timeout: float = 2.0) -> tuple[str, float]:
        body = json.dumps(intercept(tool_before(command)))
        started = time.monotonic()
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            conn.request("POST", "/", body, {"Content-Type": "application/json"})
            answer = json.loads(conn.getresponse().read())
            effects = answer["result"]["effects"]
            verdict = effects[0]["type"] if effects else "allow"
        except (OSError, ValueError, KeyError) as exc:
            verdict = type(exc).__name__
        finally:
            conn.close()
        return verdict, time.monotonic() - started

    def client(self) -> None:
        while not self.stop.is_set():
            started = time.monotonic()
            verdict, took = self.ask("rm -rf /")
            self.answers.append(_Answer(started, took, verdict))

    def served_since(self, since: float) -> list[_Answer]:
        return [a for a in self.answers if a.started >= since]

    def wait_served(self, since: float, count: int = 3, deadline: float = RELOAD_DEADLINE) -> list[_Answer]:
        """At least ``count`` answers to requests sent after ``since``, within ``deadline``."""
        end = time.monotonic() + deadline
        while len(found := self.served_since(since)) < count:
            assert time.monotonic() < end, f"only {len(found)} answers in {deadline} s"
            time.sleep(0.02)
        return found

    def reload_reported(self, result: str, before: float, deadline: float = RELOAD_DEADLINE) -> None:
        end = time.monotonic() + deadline
        while self.reloads(result) <= before:
            assert self.proc.poll() is None, "the gateway exited"
            assert time.monotonic() < end, f"no reload {result} reported within {deadline} s"
            time.sleep(0.05)


@pytest.fixture
def gateway(tmp_path) -> Iterator[Callable[..., _Gateway]]:
    started: list[_Gateway] = []

    def start(watch: str = "{watch: false}", rules: str = RULES) -> _Gateway:
        port, admin = _free_port(), _free_port()
        cfg, policy = _tree(tmp_path, _config(port, admin, watch=watch), rules)
        proc = subprocess.Popen(
            [sys.executable, "-m", "gateway", "serve", "--config", str(cfg)],
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        gw = _Gateway(proc, port, admin, cfg, policy)
        started.append(gw)
        end = time.monotonic() + 30
        while True:
            assert proc.poll() is None, "the gateway exited at start"
            assert time.monotonic() < end, "the gateway did not start"
            try:
                if gw.metric("ahp_gateway_config_last_reload_successful") == 1.0:
                    break
            except OSError:
                pass
            time.sleep(0.05)
        threading.Thread(target=gw.client, daemon=True).start()
        gw.wait_served(0.0, 1, 10)
        return gw

    yield start
    for gw in started:
        gw.stop.set()
        gw.proc.kill()
        gw.proc.wait(10)


def _assert_kept_serving(gw: _Gateway, since: float) -> None:
    answers = gw.wait_served(since)
    wrong = [a for a in answers if a.verdict != "deny" or a.took > SLOW_ANSWER]
    assert not wrong, wrong[:5]


BAD_RELOADS: list[tuple[str, Callable[[Path], None]]] = [
    ("python object", lambda t: (t / "policies" / "rules.yaml").write_text(RULES + "x: !!python/name:os.system\n")),
    ("latin-1 byte", lambda t: (t / "policies" / "rules.yaml").write_bytes(RULES.encode() + b"# caf\xe9\n")),
    ("NUL byte", lambda t: (t / "policies" / "rules.yaml").write_bytes(RULES.encode() + b"# \x00\n")),
    ("tab", lambda t: (t / "policies" / "rules.yaml").write_text(RULES.replace("    events", "\tevents", 1))),
    (
        "CRLF error",
        lambda t: (t / "policies" / "rules.yaml").write_text(RULES.replace("never", "''").replace("\n", "\r\n")),
    ),
    ("duplicate key", lambda t: (t / "policies" / "rules.yaml").write_text(RULES + "    deny: {reason: x}\n")),
    ("bomb in policy", lambda t: (t / "policies" / "rules.yaml").write_text(RULES + "x:\n" + _bomb(9))),
    ("enormous CEL", lambda t: (t / "policies" / "rules.yaml").write_text(RULES.replace("rm -rf /", "x" * 200_000))),
    ("odd rule id", lambda t: (t / "policies" / "rules.yaml").write_text(RULES.replace("id: rm-root", "id: '../rm'"))),
    (
        "policy symlink loop",
        lambda t: ((t / "policies" / "rules.yaml").unlink(), (t / "policies" / "rules.yaml").symlink_to("rules.yaml")),
    ),
    (
        "policy is a directory",
        lambda t: ((t / "policies" / "rules.yaml").unlink(), (t / "policies" / "rules.yaml").mkdir()),
    ),
]


def _restore(gw: _Gateway) -> None:
    """The good policy file again (replacing a link or a directory a case left)."""
    if gw.policy.is_symlink() or gw.policy.is_file():
        gw.policy.unlink()
    elif gw.policy.is_dir():
        gw.policy.rmdir()
    gw.policy.write_text(RULES)


def test_bad_reloads_keep_the_last_good_rules_serving_and_are_counted(gateway, tmp_path):
    """docs/operations/failure-behaviour.md / "Observability" (``ahp_gateway_config_reloads_total``): every
    rejected file (SIGHUP) keeps the last good rules deciding, without stalling requests, and is
    counted as a failure; docs/policies/index.md ("Routing with CEL"): ``matches()`` is RE2, so a backtracking
    pattern on a long input costs no more than a plain one."""
    gw = gateway()
    verdict, took = gw.ask("a" * 50_000 + "!")
    assert verdict == "allow" and took < SLOW_ANSWER
    for name, spoil in BAD_RELOADS:
        _restore(gw)
        spoil(tmp_path)
        before, since = gw.reloads("failure"), time.monotonic()
        gw.proc.send_signal(signal.SIGHUP)
        try:
            gw.reload_reported("failure", before)
            _assert_kept_serving(gw, since)
        except AssertionError as exc:
            raise AssertionError(f"{name}: {exc}") from None
    assert gw.metric("ahp_gateway_config_last_reload_successful") == 0.0
    _restore(gw)
    before = gw.reloads("success")
    since = time.monotonic()
    gw.proc.send_signal(signal.SIGHUP)
    gw.reload_reported("success", before)
    _assert_kept_serving(gw, since)


def test_a_deeply_nested_policy_file_fails_the_watched_reload_and_watching_goes_on(gateway):
    """docs/configuration.md (``reload: {watch}``) and "Observability": a file change that cannot be
    loaded is a counted failure, and the next good change is still picked up."""
    gw = gateway(watch="{watch: true, intervalSeconds: 0.2}")
    before, since = gw.reloads("failure"), time.monotonic()
    gw.policy.write_text(RULES + "x: " + "[" * 100_000 + "]" * 100_000 + "\n")
    _assert_kept_serving(gw, since)
    gw.reload_reported("failure", before)
    ok = gw.reloads("success")
    gw.policy.write_text(RULES.replace("never", "fixed"))
    gw.reload_reported("success", ok)


@pytest.mark.parametrize(
    "spoil",
    [
        pytest.param(
            lambda gw: (
                os.mkfifo(gw.config.parent / "pipe.yaml"),
                gw.config.write_text(gw.config.read_text().replace("[policies/]", "[policies/, pipe.yaml]")),
            ),
            id="fifo-policy-file",
        ),
        pytest.param(
            lambda gw: gw.policy.write_text(RULES + "x:\n" + _bomb(9) + "rules: []\n"),
            id="billion-laughs-and-duplicate-key",
        ),
    ],
)
def test_a_pathological_policy_file_neither_stalls_the_gateway_nor_goes_unreported(gateway, spoil):
    """docs/operations/failure-behaviour.md / "Observability": a reload of a file that cannot be loaded keeps
    the last good configuration answering and is reported within a few seconds."""
    gw = gateway()
    before, since = gw.reloads("failure"), time.monotonic()
    spoil(gw)
    gw.proc.send_signal(signal.SIGHUP)
    _assert_kept_serving(gw, since)
    gw.reload_reported("failure", before)


@pytest.mark.xfail(
    strict=True,
    reason="known limitation (docs/policies/index.md): cel-expr-python bounds comprehensions but not "
    "list or string growth, so one rule can take hundreds of MB for a moment; MemoryError is caught "
    "(an evaluation error, the backend's failure policy decides) but the peak is not bounded",
)
def test_a_rule_whose_evaluation_explodes_is_bounded(gateway):
    """docs/policies/index.md ("The local policy backend"): a rule is evaluated within its
    backend's timeout; docs/policies/index.md ("Routing with CEL"): the engine bounds what one expression costs."""
    when = "cel.bind(v0, [1, 2, 3, 4, 5, 6, 7, 8], "
    when += "".join(f"cel.bind(v{n}, v{n - 1} + v{n - 1}, " for n in range(1, 20))
    when += "v19.size() == 0" + ")" * 20
    rules = RULES + f"  - id: doubling\n    events: [tool.before]\n    when: '{when}'\n    deny: {{reason: big}}\n"
    gw = gateway(rules=rules)
    gw.stop.set()
    verdict, took = gw.ask("ls", timeout=30)
    peak = int(re.search(r"VmHWM:\s+(\d+) kB", Path(f"/proc/{gw.proc.pid}/status").read_text()).group(1))
    assert verdict == "allow"
    assert took < SLOW_ANSWER and peak < 250_000, (took, peak)
