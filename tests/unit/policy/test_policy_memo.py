"""The rule-result memo (gateway/policy/memo.py) must never change a result: what a rule reads
comes from the engine's checked AST (gateway/routing/reads.py), and an event answered from the
memo gets exactly the effects, trace and errors a fresh evaluation gives. Each test attacks one
way a key could be too coarse (a read path cut short, shadowing, missing vs null vs non-map,
number types, NaN, facts inputs, capabilities, a deny that stopped evaluation early)."""

from __future__ import annotations

import copy
import dataclasses
import itertools
import math
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.policy import memo as memomod
from gateway.policy.facts import INPUTS, for_event, with_facts
from gateway.policy.library import Library, load_policies
from gateway.routing.cel import VARIABLES, Activation, Engine
from gateway.routing.context import DERIVED
from gateway.routing.reads import paths_read
from tests.support.paths import ROOT

ENGINE = Engine()
POLICIES = ROOT / "policies"
CAPS = {"effects": ["deny", "ask", "message"]}


def _reads(source: str) -> list[tuple[str, ...]] | None:
    found = ENGINE.compile(source, "t").reads()
    return None if found is None else sorted(found)


@pytest.mark.parametrize(
    ("source", "paths"),
    [
        ("event.tool.name == 'x'", [("event", "tool", "name")]),
        ("has(event.tool.input.cwd)", [("event", "tool", "input", "cwd")]),
        ("event.tool['name'] == 'x'", [("event", "tool")]),  # an index reads the whole map
        ("event.?tool.orValue({}).size() > 0", [("event",)]),
        ("event.tool.input.command.matches('rm')", [("event", "tool", "input", "command")]),
        ("dyn(event).tool.name == 1", [("event",)]),
        ("[event.a, event.a.b].size() > 0", [("event", "a")]),  # the shorter path covers the longer
        ("'event.tool' == 'x' && headers['x-a'] == 'b'", [("headers",)]),  # text is not a read
        ("size(capabilities) > 0 && method == 'x'", [("capabilities",), ("method",)]),
        ("[{'y': 1}].exists(event, event.y == 1)", []),  # the macro's variable shadows event
        ("cel.bind(event, 1, event + 1 > 0)", []),
        ("cel.bind(x, event.a, x.b == 1)", [("event", "a")]),
        ("[1].exists(event, .event.y == 1)", [("event", "y")]),  # a leading dot is the global
        ("[1].all(event, [2].exists(y, event == y)) && event.b == 1", [("event", "b")]),
        ("facts.commands.exists(c, c.program == 'rm') || principal.name == 'z'",
         [("facts", "commands"), ("principal", "name")]),
        ("type(event.z) == string", [("event", "z")]),
        ("{'k': event.q}.k == 1", [("event", "q")]),
        ("event.tool.input.all(k, k != 'x')", [("event", "tool", "input")]),
    ],
)  # fmt: skip
def test_reads_come_from_the_checked_ast(source, paths):
    assert _reads(source) == paths


@pytest.mark.parametrize("garbage", [b"", b"\x0a\x00", b"\xff\xff\xff", b"\x12\x05abc", b"\x12\x02\x22\x00"])
def test_unreadable_bytes_read_everything(garbage):
    """Bytes the reader does not understand give None (the caller remembers nothing), never a
    partial answer."""
    assert paths_read(garbage, VARIABLES) is None


def _library(tmp_path: Path, rules: str) -> Library:
    path = tmp_path / "rules.yaml"
    path.write_text("namespace: org.example.t\nrules:\n" + rules, encoding="utf-8")
    return load_policies([path], ENGINE)


def _values(event: dict[str, Any], **extra: Any) -> dict[str, Any]:
    base = {"event": event, "method": "hooks/intercept", "protocolVersion": "draft", "capabilities": CAPS,
            "principal": {}, "headers": {}}  # fmt: skip
    return {**base, **extra}


def _both(library: Library, values: dict[str, Any], caps: dict[str, Any] = CAPS, trace: bool = False):
    """(memoised, fresh) evaluations of the same values, each on its own activation."""
    fresh = dataclasses.replace(library, memo=None)
    got = library.evaluate("tool.before", _activation(library, values), caps, trace=trace)
    want = fresh.evaluate("tool.before", _activation(library, values), caps, trace=trace)
    return got, want


def _activation(library: Library, values: dict[str, Any]) -> Activation:
    return with_facts(ENGINE, ENGINE.activation(copy.deepcopy(values)), library.uses_facts)


RULES = """
  - {id: name, events: [tool.before], when: "event.tool.name == 'x'", message: {text: name}}
  - {id: present, events: [tool.before], when: "has(event.tool.input.cwd)", message: {text: present}}
  - {id: typed, events: [tool.before], when: "has(event.tool.input.n) && type(event.tool.input.n) == int",
     message: {text: int}}
  - {id: shadow, events: [tool.before], message: {text: shadow},
     when: "[{'y': 1}].exists(event, event.y == 1 && has(.event.tool.input.flag) && .event.tool.input.flag == true)"}
  - {id: who, events: [tool.before], when: "has(principal.level) && principal.level > 2.5", message: {text: who}}
  - {id: deny, events: [tool.before], when: "has(event.tool.input.stop) && event.tool.input.stop == true",
     deny: {reason: stop}, fallback: {message: {text: would stop}}}
  - {id: after, events: [tool.before], when: "event.tool.name.startsWith('x')", message: {text: after}}
  - {id: fragile, events: [tool.before], when: "event.tool.input.needed == 'yes'", message: {text: fragile}}
"""
"""Rules that read fields of ``event.tool.input`` one by one, through ``has()``, ``type()``, a
shadowing macro and the global ``.event``; ``who`` fails on a boolean level and ``fragile`` on a
missing field (errors are never remembered)."""


def _event(**tool: Any) -> dict[str, Any]:
    return {"id": "e", "type": "tool.before", "tool": tool}


JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 3) | st.sampled_from([0.0, 1.0, 2.5, 3.0]) | st.sampled_from(["x", "k", "yes", ""]),
    lambda inner: st.lists(inner, max_size=2) | st.dictionaries(st.sampled_from(["n", "cwd", "y"]), inner, max_size=2),
    max_leaves=4,
)  # fmt: skip
INPUTS_ST = st.fixed_dictionaries(
    {},
    optional={
        "cwd": JSON, "n": JSON, "flag": JSON, "stop": JSON, "needed": JSON,
        "noise": st.text(max_size=3),  # read by no rule: must not matter
    },
)  # fmt: skip
TOOLS = st.fixed_dictionaries(
    {"name": st.sampled_from(["x", "xy", "y"])},
    optional={"input": INPUTS_ST | JSON},
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(tools=st.lists(TOOLS, min_size=1, max_size=8), level=st.sampled_from([None, 1, 2.5, 3, 3.0, True]))
def test_a_memoised_evaluation_equals_a_fresh_one(tmp_path, tools, level):
    """Sequences of events that share, or differ in, what the rules read: every answer (effects,
    trace, error) equals a fresh evaluation's, hit or miss. Values of every JSON type, missing
    fields, non-map inputs, int vs float vs bool, rules that fail on some inputs."""
    library = _library(tmp_path, RULES)
    assert library.memo is not None
    principal = {} if level is None else {"level": level}
    for tool in tools + tools:  # the second pass hits what the first remembered
        for caps in (CAPS, {"effects": ["message"]}):
            got, want = _both(library, _values(_event(**tool), principal=principal), caps, trace=True)
            assert got == want
            got, want = _both(library, _values(_event(**tool), principal=principal), caps)
            assert got == want


VALUES: tuple[Any, ...] = (None, True, 1, 1.0, "yes", {}, [], "x")
ABSENT = object()


def test_keys_tell_apart_every_difference_in_what_is_read(tmp_path):
    """Exhaustive over five read fields, each absent or one of six values of different JSON types,
    and over non-map inputs (7,783 events): no two of them share a key, so no event can be
    answered with another's results; an event that differs only in what no rule reads is answered
    from the memo, and equals its fresh evaluation."""
    library = _library(tmp_path, RULES)
    fresh = dataclasses.replace(library, memo=None)
    memo = library.memo
    assert memo is not None
    names = ("cwd", "n", "flag", "stop", "needed")
    inputs: list[Any] = [
        {k: v for k, v in zip(names, combo, strict=True) if v is not ABSENT}
        for combo in itertools.product((ABSENT, *VALUES[:5]), repeat=len(names))
    ]
    inputs += [ABSENT, *(v for v in VALUES if v != {})]
    seen: dict[bytes, bytes] = {}
    for sample in inputs:
        spelled = b"absent" if sample is ABSENT else orjson.dumps(sample)  # 1, 1.0 and true apart
        tool = {"name": "x"} if sample is ABSENT else {"name": "x", "input": sample}
        key = memo.key("tool.before", _values(_event(**tool)))
        assert key is not None
        assert seen.setdefault(key, spelled) == spelled, (spelled, seen[key])
        first = library.evaluate("tool.before", ENGINE.activation(_values(_event(**tool))), CAPS)
        again = _values({**_event(**tool), "id": "another", "session": {"cwd": "/elsewhere"}})
        activation = ENGINE.activation(again)
        got = library.evaluate("tool.before", activation, CAPS)
        assert got == first == fresh.evaluate("tool.before", ENGINE.activation(again), CAPS)
        # private: reading activation.native would build the engine activation this checks was never built
        assert (activation._native is None) == (first.error is None)  # a hit unless it failed


def test_an_event_that_agrees_on_what_is_read_is_a_hit(tmp_path):
    library = _library(tmp_path, RULES)
    memo = library.memo
    assert memo is not None
    read = {"n": 1, "flag": False, "stop": False, "needed": "no"}
    first = _values(_event(name="x", input=read))
    second = _values({**_event(name="x", input={**read, "noise": 1}), "id": "other", "time": "t"})
    library.evaluate("tool.before", ENGINE.activation(first), CAPS)
    assert len(memo) == 1
    activation = ENGINE.activation(second)
    library.evaluate("tool.before", activation, CAPS)
    assert len(memo) == 1
    # private: reading activation.native would build the engine activation this checks was never built
    assert activation._native is None  # answered without the engine


def test_an_index_keys_by_the_whole_map(tmp_path):
    """``input['kind']`` reads all of ``input`` (the reader does not follow an index), so any
    difference in ``input`` is another key: never too coarse, only less often a hit."""
    library = _library(
        tmp_path, "  - {id: i, events: [tool.before], when: \"event.tool.input['k'] == 1\", message: {text: i}}\n"
    )
    assert library.memo is not None
    keys = {library.memo.key("tool.before", _values(_event(name="x", input={"k": 1, "other": o}))) for o in (1, 2)}
    assert len(keys) == 2


@pytest.mark.parametrize(
    ("one", "other"),
    [
        ({"n": 1}, {"n": 1.0}),  # int vs double: type(...) == int differs
        ({"n": 1}, {"n": True}),
        ({"cwd": None}, {}),  # null vs missing: has() differs
        ({"flag": True}, {"flag": "true"}),
    ],
)
def test_values_that_differ_only_in_type_are_different_keys(tmp_path, one, other):
    library = _library(tmp_path, RULES)
    assert library.memo is not None
    keys = {library.memo.key("tool.before", _values(_event(name="x", input=i))) for i in (one, other)}
    assert len(keys) == 2 and None not in keys


def test_a_non_map_where_a_map_is_read_is_its_own_key(tmp_path):
    library = _library(tmp_path, RULES)
    assert library.memo is not None
    keys = [library.memo.key("tool.before", _values(_event(name="x", input=i))) for i in ({}, "text", [], None)]
    assert len(set(keys)) == 4


@pytest.mark.parametrize("level", [math.nan, math.inf, -math.inf, 2**70])
def test_what_the_key_cannot_encode_exactly_is_not_remembered(tmp_path, level):
    """orjson writes NaN and infinities as null, and refuses integers beyond 64 bits: such a
    principal claim (JSON from a token) is evaluated every time, never confused with null."""
    library = _library(tmp_path, RULES)
    assert library.memo is not None
    assert library.memo.key("tool.before", _values(_event(name="x"), principal={"level": level})) is None
    got, want = _both(library, _values(_event(name="x"), principal={"level": level}))
    assert got == want
    assert len(library.memo) == 0


def test_a_deny_that_stopped_evaluation_leaves_later_rules_to_evaluate(tmp_path):
    """Remembered after a deny ended the evaluation; a harness without deny and ask gets the same
    answer as without the memo: the deny is unenforceable (never its message fallback, issue 28
    item 2), and the later rules stay unevaluated."""
    library = _library(tmp_path, RULES)
    values = _values(_event(name="x", input={"n": 1, "flag": False, "stop": True, "needed": "no"}))
    first = library.evaluate("tool.before", ENGINE.activation(values), CAPS)
    assert [e["type"] for e in first.effects] == ["message", "message", "deny"]
    got, want = _both(library, values, {"effects": ["message"]})
    assert got == want
    assert got.unenforceable is not None and got.unenforceable.rule == "deny"
    got, want = _both(library, values, {"effects": ["message", "ask"]})
    assert got == want
    assert [e.get("text", e["type"]) for e in got.effects] == [
        "name",
        "int",
        "ask",
        "stop",
    ]  # the deny, asked, says why


def test_an_evaluation_error_is_never_remembered(tmp_path):
    library = _library(tmp_path, RULES)
    assert library.memo is not None
    values = _values(_event(name="x", input="not a map"))
    for _ in range(2):
        got, want = _both(library, values)
        assert got == want and got.error is not None
    assert len(library.memo) == 0


def test_capabilities_read_by_a_rule_are_part_of_the_key(tmp_path):
    library = _library(
        tmp_path,
        "  - {id: c, events: [tool.before], when: \"'ask' in capabilities.effects\", message: {text: c}}\n",
    )
    for caps in (CAPS, {"effects": ["message"]}, CAPS):
        got, want = _both(library, _values(_event(name="x"), capabilities=caps), caps)
        assert got == want


def test_an_unreadable_rule_turns_the_memo_off_for_its_events(tmp_path, monkeypatch):
    monkeypatch.setattr("gateway.routing.cel.paths_read", lambda *a: None)
    library = _library(tmp_path, RULES)
    assert library.memo is None


def test_the_memo_is_bounded(tmp_path, monkeypatch):
    """An attacker's stream of distinct commands keeps at most MAX_ENTRIES results and
    MAX_KEY_BYTES of keys; a key over MAX_KEY is not remembered."""
    monkeypatch.setattr(memomod, "MAX_ENTRIES", 16)
    monkeypatch.setattr(memomod, "MAX_KEY_BYTES", 16 * 100)
    library = _library(
        tmp_path, "  - {id: a, events: [tool.before], when: \"event.tool.c == 'x'\", message: {text: a}}\n"
    )
    memo = library.memo
    assert memo is not None
    for i in range(100):
        library.evaluate("tool.before", ENGINE.activation(_values(_event(c=str(i)))), CAPS)
        # private: the memo's key bytes and entries are the bound under test; it has no public view of them
        assert len(memo) <= 16 and memo._bytes <= 16 * 100
    assert memo.key("tool.before", _values(_event(c="99"))) in memo._entries  # the most recent stays
    assert memo.key("tool.before", _values(_event(c="0"))) not in memo._entries
    assert memo.key("tool.before", _values(_event(c="z" * memomod.MAX_KEY))) is None


PATHS = st.sampled_from(["/home/dev/w", "/home/dev", "/", "/tmp", "relative", "C:\\w", ""])
SHELL_EVENTS = st.fixed_dictionaries(
    {
        "id": st.text(max_size=4), "type": st.just("tool.before"), "time": st.text(max_size=4),
        "tool": st.fixed_dictionaries(
            {"name": st.sampled_from(["Bash", "shell", "run_shell_command", "Read", "mcp__s__t"])},
            optional={"input": st.fixed_dictionaries(
                {},
                optional={"command": st.sampled_from(["rm -rf *", "rm -rf ~", "ls", "cd / && rm -r x", "git push -f"]),
                          "cwd": PATHS, "dir_path": PATHS, "file_path": PATHS},
            )},
        ),
        "session": st.fixed_dictionaries(
            {}, optional={"cwd": PATHS, "workspaceRoots": st.lists(PATHS, max_size=2), "model": st.text(max_size=3)}
        ),
        "turn": st.just({"id": "t"}),
    },
)  # fmt: skip


def _project(event: dict[str, Any]) -> dict[str, Any]:
    """``event`` cut down to the facts' INPUTS."""
    out: dict[str, Any] = {}
    for path in INPUTS:
        node: Any = event
        target = out
        for name in path[1:-1]:
            node = node.get(name)
            if not isinstance(node, dict):
                break
            target = target.setdefault(name, {})
        else:
            if path[-1] in node:
                target[path[-1]] = node[path[-1]]
    return out


@settings(max_examples=200, deadline=None)
@given(event=SHELL_EVENTS)
def test_facts_are_computed_from_their_inputs_alone(event):
    """The memo keys a facts rule by INPUTS: an event cut down to them has the same facts."""
    assert for_event(_project(event)) == for_event(event)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(events=st.lists(SHELL_EVENTS, min_size=1, max_size=6))
def test_the_bundled_policies_answer_the_same_from_the_memo(events):
    """The bundled rules on shell events that share or differ in command, directories and roots."""
    library = _BUNDLED
    for event in events + events:
        for caps in (CAPS, {"effects": ["deny"]}, {"effects": ["message"]}):
            got, want = _both(library, _values(event, capabilities=caps), caps, trace=True)
            assert got == want


_BUNDLED = load_policies([POLICIES], ENGINE)


def test_the_bundled_policies_are_memoised():
    """Every bundled rule is readable, so every event type with rules has a memo key."""
    assert _BUNDLED.memo is not None
    for event_type, rules in _BUNDLED.by_event.items():
        if rules:
            assert _BUNDLED.memo.key(event_type, _values(_event(name="x"))) is not None, event_type


def test_facts_are_the_only_derived_variable():
    """The memo keys a rule that reads ``facts`` by the facts' INPUTS; a new derived variable
    would be absent from the values a key is built from (every event would share its key), so it
    must declare its inputs to the memo before it is added here."""
    assert DERIVED == frozenset({"facts"})
