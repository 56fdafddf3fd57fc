"""The two evaluation shortcuts must never change a result: the ``contains`` pre-test put in
front of ``matches()`` (gateway/routing/regex_guard.py) and the evaluation of a library's rules
as one list expression (``Batch``)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from cel_expr_python import cel
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.policy.library import load_policies
from gateway.routing.cel import VARIABLES, Engine, EvalError
from gateway.routing.regex_guard import cel_string, guard_matches, required_literal, string_value
from tests.support.paths import ROOT

ENGINE = Engine()
RAW = cel.NewEnv(variables=VARIABLES)  # the same engine without pre-tests, as the reference


@pytest.mark.parametrize(
    ("pattern", "literal"),
    [
        (r"(^|[;&|]\s*)benchcmd1\s+--danger\b", "benchcmd1"),
        (r"^mcp__[^_].*__.", "mcp__"),
        (r"(^|[/=@:<>])\.gnupg/(private-keys-v1\.d(/.*)?|secring\.gpg)$", ".gnupg/"),
        (r"git\s+push\s+--force", "--force"),
        (r"colou?r-scheme", "r-scheme"),
        (r"ab*c", "a"),
        (r"ab+c", "ab"),
        (r"abc{2}d", "ab"),
        (r"x[a-z]yz?", "x"),
        (r"[]abc]def", "def"),
        (r"[[:alpha:]]+_key", "_key"),
        (r"\\\.ssh", "\\.ssh"),
        (r"rm -rf", "rm -rf"),
    ],
)
def test_required_literal(pattern, literal):
    assert required_literal(pattern) == literal


@pytest.mark.parametrize(
    "pattern",
    [
        r"rm|del",  # top-level alternation: no single required text
        r"(?i)secret",  # inline flags change what a literal matches
        r"(?i:secret)key",
        r"\Qa.b\E",
        r"a\x41bc",  # escapes with arguments are not followed
        r"\pLabc",
        r"(unbalanced",
        r"[unclosed",
        r"a?",
        r"\s+\d*",
        "",
    ],
)
def test_no_literal_where_none_is_certain(pattern):
    assert required_literal(pattern) is None


PROPERTY_PATTERNS = [
    r"(^|[;&|]\s*)benchcmd7\s+--danger\b",
    r"^mcp__[^_].*__.",
    r"(^|[/=@:<>])\.env(\.[A-Za-z0-9_-]+)*(\.?\*)?$",
    r"colou?r-sch+eme[0-9]{2,3}x",
    r"a(b|c)*d\.e+f?g",
    r"[^x]y{1,2}zz\-q",
]


@pytest.mark.parametrize("pattern", PROPERTY_PATTERNS)
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_every_match_contains_the_required_literal(pattern, data):
    """Property: whatever text the pattern matches contains the literal chosen as pre-test."""
    literal = required_literal(pattern)
    assert literal
    text = data.draw(st.from_regex(pattern))
    assert re.search(pattern, text)
    assert literal in text


@pytest.mark.parametrize(
    ("source", "guarded"),
    [
        ("cmd.matches('abc')", "(cmd.contains('abc') && cmd.matches('abc'))"),
        (
            "event.tool.input.command.matches(r'rm\\s+-rf')",
            "(event.tool.input.command.contains('-rf') && event.tool.input.command.matches(r'rm\\s+-rf'))",
        ),
        ("x ? s.matches('ab') : false", "x ? (s.contains('ab') && s.matches('ab')) : false"),
        ('!s.matches("a\'b")', "!(s.contains('a\\'b') && s.matches(\"a'b\"))"),
        ("f(s).matches('abc')", None),  # a call: evaluating it twice could cost more than it saves
        ("s[0].matches('abc')", None),
        ("a.?b.matches('abc')", None),
        ("(s).matches('abc')", None),
        ("s.matches('abc(')", None),  # an invalid pattern must stay an evaluation error
        ("s.matches(b'abc')", None),
        ("s.matches('a|b')", None),
        ("matches(s, 'abc')", None),
        ("'.matches(\\'abc\\')' == s", None),  # text inside a string literal is not code
    ],
)
def test_guard_rewrites_only_plain_receivers(source, guarded):
    def valid(literal: str) -> bool:
        return "(" not in literal

    assert guard_matches(source, valid) == (guarded or source)


def test_string_literals_round_trip():
    for text in ["plain", "quote ' and \\ backslash", "tab\tnewline\n", "é ☃ \U0001f600"]:
        assert string_value(cel_string(text)) == text
    assert string_value(r"r'\s+'") == "\\s+"
    assert string_value("'\\x41\\u00e9\\101'") == "AéA"
    assert string_value("b'abc'") is None


COMMANDS = st.one_of(
    st.text(max_size=40),
    st.lists(st.sampled_from(["rm", " ", "-rf", "/", "benchcmd3", "--danger", ";", "x", "\t", "é"]), max_size=8).map(
        "".join
    ),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.none(),
)
GUARDED_SOURCES = [
    r"event.cmd.matches('(^|[;&|]\\s*)benchcmd3\\s+--danger\\b')",
    r"event.cmd.matches(r'rm\s+-rf\s+/')",
    r"has(event.cmd) && event.cmd.matches('-rf')",
    r"!event.cmd.matches('rm -rf') || event.cmd.matches(r'^rm')",
]


@pytest.mark.parametrize("source", GUARDED_SOURCES)
@settings(max_examples=120, deadline=None)
@given(command=COMMANDS)
def test_pre_test_never_changes_a_result(source, command):
    """The guarded program gives the same value, or an error where the original errs, on any input
    (strings that match, strings that do not, other types, a missing field)."""
    program = ENGINE.compile(source, "t")
    assert program.compiled != program.source
    event = {} if command is None else {"cmd": command}
    values = {"event": event, "method": "", "protocolVersion": "", "capabilities": {}, "principal": {}, "headers": {}}
    got = program.eval(ENGINE.activation(values))
    reference = RAW.compile(source).eval(RAW.Activation(values))
    if reference.type() == cel.Type.ERROR:
        assert isinstance(got, EvalError)
    else:
        assert got == reference.value()


def _library(tmp_path: Path, rules: str):
    path = tmp_path / "rules.yaml"
    path.write_text("namespace: org.example.t\nrules:\n" + rules, encoding="utf-8")
    return load_policies([path], ENGINE)


def _evaluate(library, command):
    event = {"type": "tool.before", "tool": {"name": "Bash", "input": {"command": command}}}
    values = {"event": event, "method": "", "protocolVersion": "", "capabilities": {}, "principal": {}, "headers": {}}
    return library.evaluate("tool.before", ENGINE.activation(values), {"effects": ["deny", "message"]})


RULES = """
  - {id: note, events: [tool.before], when: "event.tool.input.command.contains('git')", message: {text: git}}
  - {id: deny-rm, events: [tool.before], when: "event.tool.input.command.startsWith('rm')", deny: {reason: rm}}
  - {id: broken, events: [tool.before], when: "event.tool.input.nope == 'x'", message: {text: never}}
  - {id: late, events: [tool.before], when: "true", message: {text: late}}
"""


def test_batch_keeps_rule_order_first_deny_and_error_attribution(tmp_path):
    library = _library(tmp_path, RULES)
    assert library.batches["tool.before"].slots == (0, 1, 2, 3)
    denied = _evaluate(library, "rm -rf build")
    assert [e["type"] for e in denied.effects] == ["deny"] and denied.error is None  # stops before `broken`
    failed = _evaluate(library, "git status")
    assert failed.error is not None and failed.error.rule == "broken"
    assert [e["text"] for e in failed.effects] == ["git"]  # what came before the failing rule


def test_batch_reports_non_bool_results_like_single_rules(tmp_path):
    library = _library(
        tmp_path,
        "  - {id: a, events: [tool.before], when: 'false', message: {text: a}}\n"
        "  - {id: dyn, events: [tool.before], when: 'event.tool.input.command', message: {text: b}}\n",
    )
    result = _evaluate(library, "ls")
    assert result.error is not None and result.error.rule == "dyn" and "not bool" in str(result.error.result)
    assert _evaluate(library, True).effects == [{"type": "message", "text": "b"}]


def test_exists_rules_run_alone_next_to_bind_rules(tmp_path):
    """AHP gateway CEL note: cel.bind after an early-exit exists/all reads a stale value in the
    pinned engine, so a batch never puts both in one expression."""
    library = _library(
        tmp_path,
        "  - {id: ex, events: [tool.before], when: \"['a', 'b'].exists(x, x == 'a')\", message: {text: ex}}\n"
        "  - {id: b1, events: [tool.before], when: \"cel.bind(c, event.tool.input.command, c == 'ls')\", "
        "message: {text: b1}}\n"
        "  - {id: b2, events: [tool.before], when: \"event.tool.input.command == 'ls'\", message: {text: b2}}\n",
    )
    assert library.batches["tool.before"].slots == (-1, 0, 1)
    assert [e["text"] for e in _evaluate(library, "ls").effects] == ["ex", "b1", "b2"]


def test_shipped_library_batches_and_guards_its_rules():
    library = load_policies([ROOT / "policies"], ENGINE)
    slots = library.batches["tool.before"].slots
    assert sum(s >= 0 for s in slots) >= len(slots) - 1
    assert any(r.program.compiled != r.program.source for r in library.rules)


def test_batches_of_many_rules_keep_every_result_in_place(tmp_path):
    """More rules than fit in one engine call: each result still lands on its own rule."""
    from gateway.routing.cel import BATCH_SIZE

    count = 2 * BATCH_SIZE + 3
    rules = "".join(
        f"  - {{id: r{i}, events: [tool.before], when: \"event.tool.input.command.contains('w{i}')\", "
        f"message: {{text: m{i}}}}}\n"
        for i in range(count)
    )
    library = _library(tmp_path, rules)
    assert library.batches["tool.before"].slots == tuple(range(count))
    for chosen in ([], [0], [BATCH_SIZE - 1, BATCH_SIZE], [count - 1, 3]):
        command = " ".join(f"w{i}" for i in chosen) or "ls"
        texts = [e["text"] for e in _evaluate(library, command).effects]
        # `w1` is also part of `w10`..`w19`: compute the reference the slow way
        expected = [f"m{i}" for i in range(count) if f"w{i}" in command]
        assert texts == expected
