"""Configuration messages users act on: unknown-field warnings shown next to the errors, with a
"did you mean" for a near miss, and quoted numbers refused (the schema says integer). The
configuration they load comes from tests/support/messages.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gateway.check_cmd import check
from gateway.config.issues import ConfigError
from gateway.config.load import load
from tests.support.messages import HOOK, config, write

# --- unknown fields: shown with errors, with the closest key -------------------------------------


def test_unknown_field_suggests_the_closest_key(tmp_path: Path) -> None:
    loaded = load(config(tmp_path, head="id: org.example.gateway\nlimit: {deadlineMs: 500}\n"))
    (warning,) = loaded.warnings
    assert warning.path == "$.limit" and warning.line == 2
    assert warning.message == "unknown field ignored (did you mean `limits`?)"


def test_nested_unknown_field_suggests_the_key_of_its_level(tmp_path: Path) -> None:
    text = config(tmp_path).read_text().replace("failurePolicy:", "failurPolicy: fail-closed\n        failurePolicy:")
    (warning,) = load(write(tmp_path, text)).warnings
    assert warning.path == "$.hooks[0].subscriptions[0].failurPolicy"
    assert "did you mean `failurePolicy`?" in warning.message


def test_unknown_field_far_from_any_key_has_no_suggestion(tmp_path: Path) -> None:
    (warning,) = load(config(tmp_path, head="id: org.example.gateway\nzzzqqq: 1\n")).warnings
    assert warning.message == "unknown field ignored"


def test_warnings_are_shown_together_with_a_validation_error(tmp_path: Path) -> None:
    path = config(tmp_path, head="id: not-reverse-dns\nlimit: {deadlineMs: 500}\n")
    with pytest.raises(ConfigError) as caught:
        load(path)
    assert [i.path for i in caught.value.issues] == ["$.id"]
    assert [(w.path, w.severity) for w in caught.value.warnings] == [("$.limit", "warning")]
    result = check(str(path))
    assert result.code == 1
    assert "error:" in result.stderr and "$.id" in result.stderr
    assert "warning:" in result.stderr and "did you mean `limits`?" in result.stderr
    assert result.stderr.rstrip().endswith("1 error(s), 1 warning(s)")
    body = json.loads(check(str(path), "json").stdout)
    assert [w["path"] for w in body["warnings"]] == ["$.limit"]


def test_warnings_are_shown_together_with_a_semantic_error(tmp_path: Path) -> None:
    head = "id: org.example.gateway\nlimit: {deadlineMs: 500}\nregistration: missing.yaml\n"
    result = check(str(config(tmp_path, head=head)))
    assert result.code == 1 and "did you mean `limits`?" in result.stderr


# --- numbers must be numbers ---------------------------------------------------------------------


def test_a_quoted_integer_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        load(config(tmp_path, timeout='"100"'))
    (issue,) = caught.value.issues
    assert issue.path == "$.hooks[0].subscriptions[0].timeoutMs" and issue.line == 8
    assert issue.message == "must be an integer, not a string (remove the quotes)"


def test_a_boolean_is_not_an_integer(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        load(config(tmp_path, timeout="true"))
    assert [i.message for i in caught.value.issues] == ["must be an integer, not a boolean"]


def test_yaml_integers_and_booleans_still_load(tmp_path: Path) -> None:
    head = "id: org.example.gateway\nlimits: {deadlineMs: 2000}\nreload: {watch: Yes}\n"
    loaded = load(config(tmp_path, head=head, timeout="100"))
    assert loaded.hooks[0].subscriptions[0].timeoutMs == 100
    assert loaded.config.limits.deadlineMs == 2000 and loaded.config.reload.watch is True


def test_a_quoted_number_in_a_registration_document_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "registration.yaml").write_text("protocolVersion: draft\n" + HOOK.replace("TIMEOUT", '"250"'))
    path = write(tmp_path, "id: org.example.gateway\nregistration: registration.yaml\n")
    with pytest.raises(ConfigError) as caught:
        load(path)
    assert [i.path for i in caught.value.issues] == ["$.hooks[0].subscriptions[0].timeoutMs"]
