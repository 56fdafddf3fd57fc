"""Why a rule asks reaches the person asked (issue 29): the AHP ``ask`` effect has no fields
(protocol §6.1, effect.schema.json), and ``message`` is the user-facing effect, valid at every
interceptable event; so a local rule that asks sends a ``message`` beside the ``ask`` when the
harness advertised ``message`` (AHP-CAP-001: never otherwise)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gateway.policy.library import Library, load_policies
from gateway.routing.cel import Engine

POLICY = """
namespace: org.example.ask
rules:
  - id: env-read
    description: >-
      Reading a .env file
      needs approval.
    events: [tool.before]
    when: 'event.tool.input.command.contains(".env")'
    ask: {}
    fallback: {deny: {reason: "env files cannot be read here"}}
  - id: undescribed
    events: [tool.before]
    when: 'event.tool.input.command.contains("secret")'
    ask: {}
  - id: reasoned
    description: For policy authors.
    events: [tool.before]
    when: 'event.tool.input.command.contains("curl")'
    ask: {reason: "Downloads need approval."}
  - id: force
    description: Force pushes are reviewed.
    events: [tool.before]
    when: 'event.tool.input.command.contains("--force")'
    deny: {reason: "no force pushes"}
  - id: tip
    events: [tool.before]
    when: 'event.tool.input.command.contains("push")'
    message: {text: "a tip"}
"""
ENGINE = Engine()


@pytest.fixture(scope="module")
def library(tmp_path_factory: pytest.TempPathFactory) -> Library:
    path: Path = tmp_path_factory.mktemp("ask") / "ask.yaml"
    path.write_text(POLICY)
    return load_policies([path], ENGINE)


def _effects(library: Library, command: str, effects: list[str]) -> list[dict[str, Any]]:
    event = {"type": "tool.before", "tool": {"name": "Bash", "input": {"command": command}}}
    values = {"event": event, "method": "hooks/intercept", "protocolVersion": "draft", "principal": {}, "headers": {}}
    caps = {"effects": effects}
    return library.evaluate("tool.before", ENGINE.activation({**values, "capabilities": caps}), caps).effects


@pytest.mark.spec("AHP-CAP-001")
def test_an_asking_rule_sends_its_description_as_a_message(library: Library) -> None:
    assert _effects(library, "cat .env", ["deny", "ask", "message"]) == [
        {"type": "ask"},
        {"type": "message", "text": "Reading a .env file needs approval."},
    ]


@pytest.mark.spec("AHP-CAP-001")
def test_no_message_unless_message_is_advertised(library: Library) -> None:
    assert _effects(library, "cat .env", ["deny", "ask"]) == [{"type": "ask"}]


@pytest.mark.spec("AHP-CAP-001")
def test_an_ask_reason_is_sent_instead_of_the_description(library: Library) -> None:
    """``ask: {reason: ...}`` is written for the person asked; the description is for authors."""
    assert _effects(library, "curl x", ["deny", "ask", "message"]) == [
        {"type": "ask"},
        {"type": "message", "text": "Downloads need approval."},
    ]


def test_a_rule_without_a_description_asks_without_a_message(library: Library) -> None:
    assert _effects(library, "cat secret", ["deny", "ask", "message"]) == [{"type": "ask"}]


def test_each_asking_rule_gives_its_reason_under_one_ask(library: Library) -> None:
    assert _effects(library, "cat .env secret", ["deny", "ask", "message"]) == [
        {"type": "ask"},
        {"type": "message", "text": "Reading a .env file needs approval."},
    ]
    two = _effects(library, "cat .env && git push", ["ask", "message"])
    assert two == [{"type": "ask"}, {"type": "message", "text": "Reading a .env file needs approval."}] + [
        {"type": "message", "text": "a tip"}
    ]


@pytest.mark.spec("AHP-CAP-001")
def test_a_deny_standing_in_as_an_ask_gives_the_deny_reason(library: Library) -> None:
    """Without ``deny`` advertised a denying rule asks; the person asked reads its deny reason
    (not its description, written for policy authors)."""
    assert _effects(library, "git push --force", ["ask", "message"]) == [
        {"type": "ask"},
        {"type": "message", "text": "no force pushes"},
    ]


def test_the_fallback_deny_is_unchanged(library: Library) -> None:
    effects = _effects(library, "cat .env", ["deny", "message"])
    assert [e["type"] for e in effects] == ["deny"] and effects[0]["reason"] == "env files cannot be read here"
