"""``policy test`` on a rule that fails to evaluate shows the evaluation error, not ``actual: []``."""

from __future__ import annotations

import json
from pathlib import Path

from gateway.policy.report import Options, policy_test

# --- policy test on a rule that fails to evaluate ------------------------------------------------


def test_policy_test_prints_the_evaluation_error_not_an_empty_actual(tmp_path: Path) -> None:
    (tmp_path / "p.yaml").write_text(
        "namespace: org.example.p\n"
        "rules:\n"
        "  - id: broken\n"
        "    events: [tool.before]\n"
        '    when: event.tool.input.missing == "x"\n'
        "    deny: {reason: nope}\n"
        "tests:\n"
        "  - name: denies\n"
        '    event: {type: tool.before, tool: {name: shell, input: {command: "ls"}}}\n'
        "    expect: [{type: deny}]\n"
    )
    result = policy_test(Options([tmp_path]))
    assert result.code == 1
    assert "error:    rule broken failed to evaluate:" in result.stdout
    assert "actual:   []" not in result.stdout
    body = json.loads(policy_test(Options([tmp_path], fmt="json")).stdout)
    (case,) = body["tests"]
    assert case["actual"] is None and "failed to evaluate" in case["error"]
