"""Quote removal of shell words (gateway/policy/facts/words.py) against a character-by-character
statement of the bash rules: the segment-at-a-time implementation must give the same characters
and the same quoted/unquoted mask for every input, backslashes and newlines included, and the
fast paths of field splitting and brace expansion must not change a result."""

from __future__ import annotations

import itertools

from hypothesis import given
from hypothesis import strategies as st

from gateway.policy.facts.words import Word, brace_expand, double_quoted, field_split, unquoted

SHELLISH = st.text(alphabet="\\\n\t $`\"'{},.1ab*?[]", max_size=40)


def _reference(raw: str, escapable: str | None, quoted: bool) -> tuple[str, str]:
    """Bash: outside quotes a backslash quotes any next character; inside double quotes only
    ``$ ` " \\`` and newline; ``\\<newline>`` vanishes; a trailing lone backslash stays."""
    text, mask, i = "", "", 0
    while i < len(raw):
        c = raw[i]
        if c == "\\" and i + 1 < len(raw) and (escapable is None or raw[i + 1] in escapable):
            if raw[i + 1] != "\n":
                text, mask = text + raw[i + 1], mask + "1"
            i += 2
            continue
        text, mask = text + c, mask + ("1" if quoted else "0")
        i += 1
    return text, mask


def _after(fill, raw: str, prefix: Word) -> tuple[str, str]:
    word = Word(prefix.text, prefix.mask)
    fill(raw, word)
    return word.text, word.mask


@given(SHELLISH, st.sampled_from([Word(), Word("x", "0"), Word("q", "1")]))
def test_unquoted_text_follows_the_bash_backslash_rule(raw: str, prefix: Word) -> None:
    text, mask = _reference(raw, None, quoted=False)
    assert _after(unquoted, raw, prefix) == (prefix.text + text, prefix.mask + mask)


@given(SHELLISH, st.sampled_from([Word(), Word("x", "0")]))
def test_double_quoted_text_follows_the_bash_backslash_rule(raw: str, prefix: Word) -> None:
    text, mask = _reference(raw, '$`"\\\n', quoted=True)
    assert _after(double_quoted, raw, prefix) == (prefix.text + text, prefix.mask + mask)


def test_the_backslash_cases_spelled_out() -> None:
    assert _after(unquoted, "r\\m -rf", Word()) == ("rm -rf", "010000")
    assert _after(unquoted, "a\\\nb", Word()) == ("ab", "00")
    assert _after(unquoted, "end\\", Word()) == ("end\\", "0000")
    assert _after(double_quoted, "\\a\\$\\\\", Word()) == ("\\a$\\", "1111")


def _split_reference(text: str, mask: str) -> list[tuple[str, str]]:
    """The maximal runs of characters that are not unquoted blanks."""
    out = []
    pairs = zip(text, mask, strict=True)
    for blank, run in itertools.groupby(pairs, key=lambda cm: cm[1] == "0" and cm[0] in " \t\n"):
        if not blank:
            chars = list(run)
            out.append(("".join(c for c, _ in chars), "".join(m for _, m in chars)))
    return out


@given(st.lists(st.tuples(st.sampled_from("ab \t\n{},.1"), st.sampled_from("01")), max_size=30))
def test_field_splitting_and_brace_expansion_agree_with_the_slow_path(chars: list[tuple[str, str]]) -> None:
    text, mask = "".join(c for c, _ in chars), "".join(m for _, m in chars)
    assert field_split(text, mask) == _split_reference(text, mask)
    if "{" not in text:
        assert brace_expand(text, mask) == [(text, mask)]
