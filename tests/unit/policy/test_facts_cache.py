"""The bounded cache of the facts' pure helpers (gateway.policy.facts.cache): answers equal the
helper's, short inputs are asked once, long ones never stored, and the entries stay bounded."""

from __future__ import annotations

from collections.abc import Callable

from gateway.policy.facts import cache
from gateway.policy.facts.shell.command import program_name


def _counting() -> tuple[list[str], Callable[[str], str]]:
    calls: list[str] = []

    def upper(text: str) -> str:
        calls.append(text)
        return text.upper()

    return calls, cache.short_inputs(upper)


def test_short_input_is_computed_once_and_answers_alike() -> None:
    calls, upper = _counting()
    assert [upper("git"), upper("git"), upper("rm")] == ["GIT", "GIT", "RM"]
    assert calls == ["git", "rm"]


def test_long_input_is_computed_every_time_and_never_stored() -> None:
    calls, upper = _counting()
    long = "x" * (cache.LONGEST + 1)
    assert upper(long) == long.upper() and upper(long) == long.upper()
    assert calls == [long, long]


def test_entries_stay_bounded_under_a_flood_of_distinct_inputs() -> None:
    calls, upper = _counting()
    for k in range(cache.ENTRIES + 10):
        upper(f"p{k}")
    calls.clear()
    upper("p0")  # the oldest answer was evicted: computed again
    upper(f"p{cache.ENTRIES + 9}")  # the newest is still held
    assert calls == ["p0"]


def test_cached_helper_keeps_its_answers() -> None:
    assert program_name("/usr/bin/Rm") == "rm" == program_name("/usr/bin/Rm")
    assert program_name("C:\\Tools\\curl.exe") == "curl"
    long = "/opt/" + "d" * cache.LONGEST + "/Python3.EXE"
    assert program_name(long) == "python3"
