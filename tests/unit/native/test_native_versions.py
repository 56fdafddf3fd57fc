"""``event.harness.version`` from what the agent tells its command hook (issue 29: it was always
``unknown``). The environment values are those the pinned agents set for their hooks (Claude Code
2.1.332, Copilot CLI 1.0.102, Codex 0.171.0 installed by npm)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gateway.native import flow
from gateway.native.versions import from_environment
from tests.support.native_payloads import ALL, event_of


def _codex_root(tmp_path: Path, manifest: object) -> dict[str, str]:
    (tmp_path / "package.json").write_text(json.dumps(manifest))
    return {"CODEX_MANAGED_PACKAGE_ROOT": str(tmp_path)}


def test_versions_the_agents_announce(tmp_path: Path) -> None:
    assert from_environment("claude-code", {"AI_AGENT": "claude-code_2-1-332_harness"}) == "2.1.332"
    assert from_environment("copilot", {"COPILOT_CLI_BINARY_VERSION": "1.0.102"}) == "1.0.102"
    assert (
        from_environment("codex", _codex_root(tmp_path, {"name": "@openai/codex", "version": "0.171.0"})) == "0.171.0"
    )


@pytest.mark.parametrize(
    ("harness", "environ"),
    [
        ("claude-code", {}),
        ("claude-code", {"AI_AGENT": "cursor_1-2_harness"}),  # another agent's value
        ("copilot", {"COPILOT_CLI_BINARY_VERSION": "1.0.102\nX-Injected: 1"}),  # not a version
        ("copilot", {"COPILOT_CLI_BINARY_VERSION": "9" * 200}),  # too long
        ("codex", {"CODEX_MANAGED_PACKAGE_ROOT": "/nonexistent"}),
        ("gemini", {"COPILOT_CLI_BINARY_VERSION": "1.0.102"}),  # another agent's variable
        ("windsurf", {}),
    ],
)
def test_nothing_or_anything_else_leaves_the_version_unknown(harness: str, environ: dict[str, str]) -> None:
    assert from_environment(harness, environ) is None


def test_codex_reads_only_its_own_package_json(tmp_path: Path) -> None:
    assert from_environment("codex", _codex_root(tmp_path, {"name": "left-pad", "version": "1.3.0"})) is None
    assert from_environment("codex", _codex_root(tmp_path, ["not", "an", "object"])) is None
    (tmp_path / "package.json").write_text("{not json")
    assert from_environment("codex", {"CODEX_MANAGED_PACKAGE_ROOT": str(tmp_path)}) is None


@pytest.mark.parametrize("harness", ["claude-code", "copilot"])
def test_the_event_carries_the_version(harness: str) -> None:
    key = next(k for k in ALL[harness] if k.lower().startswith("pretooluse"))
    raw = json.dumps(ALL[harness][key]).encode()
    codec = flow.codec_for(harness)
    plain = flow.prepare(codec, raw, event_of(harness, key), "deny")
    assert plain.tr is not None and plain.tr.message["params"]["event"]["harness"]["version"] == "unknown"
    named = flow.prepare(codec, raw, event_of(harness, key), "deny", version="1.0.102")
    assert named.tr is not None and named.tr.message["params"]["event"]["harness"] == {
        "name": harness,
        "version": "1.0.102",
    }


def test_a_version_in_the_payload_wins() -> None:
    """Cursor's payload names its version (``cursor_version``): the environment does not override it."""
    key = next(k for k in ALL["cursor"] if k.startswith("preToolUse"))
    payload = {**ALL["cursor"][key], "cursor_version": "2.3.4"}
    prepared = flow.prepare(flow.codec_for("cursor"), json.dumps(payload).encode(), event_of("cursor", key), "deny",
                            version="9.9.9")  # fmt: skip
    assert prepared.tr is not None and prepared.tr.message["params"]["event"]["harness"]["version"] == "2.3.4"
