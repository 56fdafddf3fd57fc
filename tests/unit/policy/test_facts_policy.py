"""How facts reach CEL: only for libraries that reference them, once per evaluation, with the NUL
guard kept; `policy test` cases may assert facts; `explain` prints them."""

from __future__ import annotations

import subprocess
import sys

from gateway.policy.cases import run
from gateway.policy.facts import references_facts, with_facts
from gateway.policy.library import load_policies
from gateway.routing.cel import Engine
from tests.support.paths import ROOT as REPO

PLAIN = """
namespace: org.example.plain
rules:
  - id: ls
    events: [tool.before]
    when: 'has(event.tool.input.command) && event.tool.input.command == "ls"'
    deny: {reason: no ls}
"""

FACTS = """
namespace: org.example.facts
rules:
  - id: rm
    events: [tool.before]
    when: 'facts.commands.exists(c, c.program == "rm")'
    deny: {reason: no rm}
tests:
  - name: rm behind quotes is rm, and the facts say so
    event: {type: tool.before, tool: {name: Bash, input: {command: "\\\\r'm' -f x"}}}
    expect: [{type: deny}]
    facts: {commands: [{program: rm, argv: [rm, -f, x]}]}
  - name: a wrong facts expectation fails
    event: {type: tool.before, tool: {name: Bash, input: {command: "ls"}}}
    expect: []
    facts: {commands: [{program: rm}]}
"""


def _activation(engine: Engine, command: str):
    event = {"type": "tool.before", "tool": {"name": "Bash", "input": {"command": command}}}
    return engine.activation({"event": event, "method": "hooks/intercept", "protocolVersion": "draft",
                              "capabilities": {}, "principal": {}, "headers": {}})  # fmt: skip


def test_facts_are_computed_only_for_libraries_that_reference_them(tmp_path):
    engine = Engine()
    (tmp_path / "plain.yaml").write_text(PLAIN)
    (tmp_path / "facts.yaml").write_text(FACTS)
    assert not load_policies([tmp_path / "plain.yaml"], engine).uses_facts
    assert load_policies([tmp_path / "facts.yaml"], engine).uses_facts
    activation = _activation(engine, "rm x")
    assert with_facts(engine, activation, False) is activation
    added = with_facts(engine, activation, True)
    assert added.values["facts"]["commands"][0]["program"] == "rm"
    assert with_facts(engine, added, True) is added  # never twice for one evaluation


def test_references_are_whole_words():
    assert references_facts("facts.commands.size() > 0")
    assert not references_facts("event.tool.input.artifacts == 1")


def test_nul_guard_holds_for_facts():
    engine = Engine()
    library = load_policies([REPO / "policies" / "destructive.yaml"], engine)
    activation = with_facts(engine, _activation(engine, "echo hi\x00; rm -rf /"), True)
    assert [c["program"] for c in activation.values["facts"]["commands"]] == ["echo", "rm"]
    result = library.evaluate("tool.before", activation, {"effects": ["deny"]})
    assert [e["type"] for e in result.effects] == ["deny"]


def test_policy_test_cases_can_assert_facts(tmp_path):
    (tmp_path / "facts.yaml").write_text(FACTS)
    results = run([tmp_path / "facts.yaml"])
    assert [r.passed for r in results] == [True, False]
    assert results[1].error is not None and results[1].error.startswith("facts differ")


def test_explain_prints_the_facts_of_the_event(tmp_path):
    event = tmp_path / "event.json"
    event.write_text('{"type": "tool.before", "tool": {"name": "Bash", "input": {"command": "cd / && sudo rm -rf *"}}}')
    out = subprocess.run(
        [sys.executable, "-m", "gateway", "explain", "--config", str(REPO / "gateway/data/gateway.default.yaml"), "--event", str(event)],
        capture_output=True, text=True, check=True, cwd=REPO,
    )  # fmt: skip
    assert "facts: tool 'bash' kind=shell" in out.stdout
    assert "program=rm" in out.stdout and "wrappers=['sudo']" in out.stdout and "cwd=/" in out.stdout
    assert "rm-root-home-system = true -> deny" in out.stdout
