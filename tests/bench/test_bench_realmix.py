"""S8, the replay of real tool calls (bench/realmix.py): the renaming keeps every verdict and
changes every name a cache could be filled with in advance; the sample check catches a renaming
that changes a verdict; a short live run against the default gateway gets valid answers with
the effect types the same gateway gives in process."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.paths import ROOT

if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench import realmix  # noqa: E402
from bench.realmix import Case, Mix, MixMismatch  # noqa: E402

WINDOWS_ROOT = "C:\\Users\\Ana\\Code\\My Project"
SYNTHETIC = [
    Case("Bash", {"command": "cat src/app.py && python -m pytest tests/unit/test_x.py -q"}),
    Case("Bash", {"command": "cat /home/dev/proj/.env | head -1"}),
    Case("Bash", {"command": "rm -rf ../other/build ~/scratch $HOME/x /tmp/y 2>/dev/null"}),
    Case("Bash", {"command": "curl -s http://localhost:3000/api/v1 && git diff origin/main -- lib/a.py"}),
    Case("Bash", {"command": "sed -i 's/a/b/' ./lib/x.py; ls /home/dev/.ssh/id_rsa"}),
    Case("Read", {"file_path": "/home/dev/proj/src/config/settings.py"}),
    Case("Write", {"file_path": "/home/dev/proj/../elsewhere/x.txt", "content": "/home/dev/proj/a"}),
    Case("Glob", {"pattern": "src/**/*.ts", "path": "/home/dev/proj"}),
    Case(
        "Edit",
        {"file_path": WINDOWS_ROOT + "\\src\\main.ts", "old_string": "a", "new_string": "b"},
        WINDOWS_ROOT,
        (WINDOWS_ROOT,),
    ),
    Case(
        "Bash",
        {"command": 'ls "/c/Users/Ana/Code/My Project/src" C:/Users/Ana/Code/My Project/lib'},
        WINDOWS_ROOT,
        (WINDOWS_ROOT,),
    ),
]


def corpus_or_skip() -> list[Case]:
    try:
        return realmix.load_cases()
    except realmix.CorpusMissing as exc:
        pytest.skip(str(exc))


def test_renaming_changes_roots_and_adds_a_directory_but_keeps_basenames() -> None:
    name = realmix.renaming(42, 0, SYNTHETIC)
    out, seg = [], []
    for index, case in enumerate(SYNTHETIC):
        out.append(name.case(case, index))
        seg.append(name.last_segment)
    root = f"/home/{name.user}/{name.project}"
    assert all("/home/dev" not in json.dumps(c.input) for c in out)
    assert all(c.cwd == root and c.roots == (root,) for c in out[:8])
    assert out[0].input["command"] == f"cat {seg[0]}/src/app.py && python -m pytest {seg[0]}/tests/unit/test_x.py -q"
    assert out[1].input["command"] == f"cat {root}/{seg[1]}/.env | head -1"
    # .. paths, ~, $VAR, system paths, URLs and git refs are left alone
    assert out[2].input == SYNTHETIC[2].input
    assert (
        out[3].input["command"] == f"curl -s http://localhost:3000/api/v1 && git diff origin/main -- {seg[3]}/lib/a.py"
    )
    assert out[4].input["command"] == f"sed -i 's/a/b/' ./{seg[4]}/lib/x.py; ls /home/{name.user}/.ssh/id_rsa"
    assert out[5].input["file_path"] == f"{root}/{seg[5]}/src/config/settings.py"
    assert out[6].input["file_path"] == root + "/../elsewhere/x.txt"
    assert out[6].input["content"] == f"{root}/{seg[6]}/a"  # in contents too, but no relative path
    assert out[7].input == {"pattern": f"{seg[7]}/src/**/*.ts", "path": root}
    win = out[8]
    user, project = name.windows["Ana"], name.windows["My Project"]
    assert win.cwd == win.roots[0] == f"C:\\Users\\{user}\\Code\\{project}"
    assert win.input["file_path"] == f"{win.cwd}\\{seg[8]}\\src\\main.ts"
    assert out[9].input["command"] == (
        f'ls "/c/Users/{user}/Code/{project}/{seg[9]}/src" C:/Users/{user}/Code/{project}/{seg[9]}/lib'
    )
    # the same seed and pass, the same names; another pass, other names
    again = realmix.renaming(42, 0, SYNTHETIC)
    assert [again.case(c, i) for i, c in reversed(list(enumerate(SYNTHETIC)))] == out[::-1]
    other = realmix.renaming(42, 1, SYNTHETIC)
    assert all(other.case(c, i) != o for i, (c, o) in enumerate(zip(SYNTHETIC, out, strict=True)))


def test_requests_are_full_tool_before_events_with_unique_ids() -> None:
    mix = Mix(SYNTHETIC, seed=7)
    bodies = list(mix.bodies(3, len(SYNTHETIC) + 2))
    messages = [json.loads(b) for b in bodies]
    ids = [m["id"] for m in messages]
    assert len(set(ids)) == len(ids)
    for m in messages:
        event = m["params"]["event"]
        assert m["method"] == "hooks/intercept" and event["id"] == m["id"] and event["type"] == "tool.before"
        assert event["path"] == "native" and event["tool"]["origin"] == "native" and event["session"]["id"]
        assert set(event["tool"]) == {"name", "input", "origin"}
        assert {"deny", "ask", "message"} <= set(m["params"]["capabilities"]["effects"])


def test_the_renaming_keeps_the_verdicts_of_a_sample_of_the_corpus() -> None:
    cases = corpus_or_skip()
    report = realmix.check_sample(Mix(cases, seed=20261202), size=120)
    assert report.checked == 120 and report.changed > 40
    assert sum(report.effects.values()) >= 120


def test_the_sample_check_catches_a_renaming_that_changes_verdicts() -> None:
    """A renaming that forgets the tool input (the session's root is renamed, the paths still
    name the old one) moves every project-absolute write outside the workspace: denied."""
    cases = corpus_or_skip()
    mix = Mix(cases, seed=5)

    def broken(pass_no: int, index: int, case: Case) -> Case:
        good = mix.randomize(pass_no, index, case)
        return Case(case.tool, case.input, good.cwd, good.roots, case.source)

    with pytest.raises(MixMismatch, match=r"changed the verdict of \d+ of 200"):
        realmix.check_sample(mix, randomize=broken)


def test_a_missing_corpus_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(realmix.ENV, str(tmp_path / "nowhere.json"))
    with pytest.raises(realmix.CorpusMissing, match="nowhere.json does not exist"):
        realmix.load_cases()


def test_a_short_live_run_gets_valid_answers_from_the_default_gateway(tmp_path: Path) -> None:
    """``ahp-gateway serve`` on its default configuration, ports chosen free at run time: every
    answer to 40 calls of the mix is a result with the request's id and the effect types the
    same configuration gives in process."""
    from bench.procs import free_port, http_request, wait_until

    cases = corpus_or_skip()
    mix = Mix(cases, seed=99)
    decide = realmix.in_process()
    port, admin = free_port(), free_port()
    log = (tmp_path / "gateway.log").open("wb")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gateway",
            "--log-level",
            "WARNING",
            "serve",
            "--port",
            str(port),
            "--admin-port",
            str(admin),
        ],
        cwd=tmp_path,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        from bench.procs import Proc

        watched = Proc("gateway", [], proc, tmp_path / "gateway.log", None)
        wait_until(
            lambda: http_request(admin, "GET", "/readyz")[0] == 200, deadline_s=60, procs=[watched], what="readyz"
        )
        seen = 0
        for index in range(40):
            body = mix.body(1, index)
            status, answer = http_request(port, "POST", "/", body, timeout=20)
            assert status == 200, answer[:300]
            event_id = mix.event_id(1, index)
            got = realmix.effect_types(answer, event_id)
            assert got == realmix.effect_types(decide(body), event_id), (index, answer[:300])
            seen += 1
        assert seen == 40

        def logged() -> bool:  # the decision log goes out in batches, at the latest every 0.1 s
            text = (tmp_path / "gateway.log").read_text()
            return sum(line.startswith("{") and '"outcome"' in line for line in text.splitlines()) >= 40

        wait_until(logged, deadline_s=10, procs=[watched], what="40 decision lines on stdout")
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
        log.close()
