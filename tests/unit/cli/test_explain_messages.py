"""``explain`` with an event type AHP does not define warns on stderr (with the closest known
type) and exits 1, so a typo is not mistaken for "no subscription"."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gateway import cli
from tests.support.messages import config

# --- explain with an unknown event type ----------------------------------------------------------


def test_explain_warns_about_an_unknown_event_type(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    event = tmp_path / "event.json"
    event.write_text(json.dumps({"type": "tool.befor", "tool": {"name": "shell", "input": {"command": "ls"}}}))
    code = cli.main(["explain", "--config", str(config(tmp_path)), "--event", str(event)])
    out, err = capsys.readouterr()
    assert code == 1
    assert "unknown event type 'tool.befor' (did you mean `tool.before`?)" in err
    assert "routing:" in out  # the explanation is still shown
    event.write_text(json.dumps({"type": "tool.before", "tool": {"name": "shell", "input": {"command": "ls"}}}))
    assert cli.main(["explain", "--config", str(config(tmp_path)), "--event", str(event)]) == 0
    assert "unknown event type" not in capsys.readouterr().err
