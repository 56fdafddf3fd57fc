"""One shell word from its syntax node: quotes and escapes removed, substitutions and expansions
resolved as far as the line shows them, and where its text is fixed or only known at run time."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

import tree_sitter

from gateway.policy.facts import paths as pathmod
from gateway.policy.facts.shell.command import (
    State,
    unique,
)
from gateway.policy.facts.shell.expand import (
    ALL_ITEMS,
    arithmetic,
    fed_text,
    parameter,
    static_output,
)
from gateway.policy.facts.words import (
    Word,
    ansi_c,
    double_quoted,
    unquoted,
)

if TYPE_CHECKING:
    from gateway.policy.facts.shell.walker import Walker


_DEFAULTS = {"SHELL": "/bin/sh", "BASH": "/bin/bash"}
"""Values of variables a rule may rely on when the command line did not set them."""
_DEFAULTED = re.compile(r"^\$\{[A-Z]+:?[-=][^}]*\}$")
_PIDS = frozenset({b"$$", b"$BASHPID", b"$PPID"})


def word(walker: Walker, n: tree_sitter.Node, src: bytes, st: State, depth: int) -> Word:
    t = n.type
    w = Word()
    raw = src[n.start_byte : n.end_byte].decode("utf-8", "replace")
    if t == "word" or t == "number":
        if "\\" in raw:
            unquoted(raw, w)
        else:  # no escape: the text as it is (the usual word)
            w.text, w.mask = raw, "0" * len(raw)
    elif t == "raw_string":
        w.add(raw[1:-1] if len(raw) >= 2 else "", True)
    elif t == "ansi_c_string":
        w.add(ansi_c(raw[2:-1]), True)
    elif t in ("string", "translated_string"):
        pos = n.start_byte + (2 if t == "translated_string" else 1)
        end = n.end_byte - 1
        for c in n.named_children:
            if c.start_byte > pos:
                double_quoted(src[pos : c.start_byte].decode("utf-8", "replace"), w)
            if c.type == "string_content":
                double_quoted(c.text.decode("utf-8", "replace") if c.text else "", w)
            else:
                inner = word(walker, c, src, st, depth)
                if not inner.dynamic and ALL_ITEMS.match(src[c.start_byte : c.end_byte].decode("utf-8", "replace")):
                    w.extend(inner)  # `"${a[@]}"`, `"$@"`: one word per item
                    pos = c.end_byte
                    continue
                w.extend(
                    Word(inner.text, "1" * len(inner.text), inner.dynamic, inner.sources, inner.procsub, inner.fixed)
                )
            pos = c.end_byte
        if end > pos:
            double_quoted(src[pos:end].decode("utf-8", "replace"), w)
    elif t == "simple_expansion" or t == "expansion":
        expansion(walker, n, raw, st, w)
    elif t == "command_substitution":
        body = children_text(walker, n, src)
        if body.lstrip().startswith("<") and not body.lstrip().startswith("<<"):
            body = "cat " + body.lstrip()[1:]  # `$(<file)` is bash for `$(cat file)`
        before = len(walker.commands)
        walker.parse(body, st.copy(), depth + 1, "substitution")
        produced = walker.commands[before:]
        known = static_output(produced, st) if len(produced) == 1 else None
        if known is not None:  # `$(echo rm)`, `$(pwd)`: the output is known
            w.add(known, False)
        else:
            w.add(raw, True)
            w.dynamic = True
            w.fixed = 0
            w.sources = unique(c.program for c in produced if c.program)
    elif t == "process_substitution":
        body = children_text(walker, n, src)
        before = len(walker.commands)
        walker.parse(body, st.copy(), depth + 1, "process-substitution")
        w.add("/dev/fd/63", True)
        w.procsub = True
        produced = [c for c in walker.commands[before:] if c.depth == depth + 1]
        if raw.startswith("<(") and len(produced) == 1:
            w.output = fed_text(produced[0])  # `sh <(echo ...)`: static text
        if raw.startswith(">("):
            w.readers = [c for c in walker.commands[before:] if c.depth == depth + 1]
        w.sources = unique(c.program for c in walker.commands[before:] if c.program)
    elif t == "concatenation" or t == "command_name":
        pos = n.start_byte
        for c in n.children:
            if c.start_byte > pos:
                unquoted(src[pos : c.start_byte].decode("utf-8", "replace"), w)
            if w.text.endswith("/proc/") and (
                (c.type == "simple_expansion" and c.text in _PIDS) or c.type == "command_substitution"
            ):  # `/proc/$(pgrep node)/environ`: some process, as `/proc/self`
                w.add("self", True)  # `/proc/$$/environ`: a process of this session, as `/proc/self`
            else:
                w.extend(word(walker, c, src, st, depth))
            pos = c.end_byte
        if n.end_byte > pos:
            unquoted(src[pos : n.end_byte].decode("utf-8", "replace"), w)
    elif t == "arithmetic_expansion":
        value = arithmetic(raw[3:-2] if raw.startswith("$((") else "", st)
        if value is not None:  # `$((1+2))` with literals and static variables
            w.add(value, False)
        else:
            w.add(raw, True)
            w.dynamic = True
    elif t == "brace_expression":
        w.add(raw, False)
    else:
        unquoted(raw, w)
    if t in ("word", "concatenation") and w.text.startswith("~") and w.mask[:1] == "0":
        head, sep, rest = w.text.partition("/")
        if head == "~" or ("\n" not in head and all(m == "0" for m in w.mask[: len(head)])):
            expanded = pathmod.normalize(head, "", st.home, shell=True) if head != "~" else st.home
            if head == "~" or expanded != head:
                tail_mask = w.mask[len(head) :]
                w.text = expanded + sep + rest
                w.mask = "1" * len(expanded) + tail_mask
    return w


def children_text(walker: Walker, n: tree_sitter.Node, src: bytes) -> str:
    named = n.named_children
    if not named:
        return ""
    return src[named[0].start_byte : named[-1].end_byte].decode("utf-8", "replace")


def expansion(walker: Walker, n: tree_sitter.Node, raw: str, st: State, w: Word) -> None:
    if raw in ("$@", "$*") or (raw.startswith("${") and raw.endswith("}")):
        got = parameter(raw[2:-1] if raw.startswith("${") else raw[1:], st)
        if got is not None:
            w.extend(got)
            return
    name = ""
    for c in n.named_children:
        if c.type in ("variable_name", "special_variable_name"):
            name = c.text.decode() if c.text else ""
            break
    simple = raw in ("$" + name, "${" + name + "}")
    if simple and name == "HOME" and name not in st.vars:
        w.add(st.home, True)
        return
    if name in _DEFAULTS and name not in st.vars and (simple or _DEFAULTED.match(raw)):
        w.add(_DEFAULTS[name], True)  # `${SHELL:-sh}`: set in every session, else a shell anyway
        return
    if simple and name == "IFS" and name not in st.vars:
        w.add(" ", False)  # default IFS: the word is split here
        return
    if simple and name == "PWD" and st.cwd:
        w.add(st.cwd, True)
        return
    value = st.vars.get(name) if simple else None
    if value is not None and not value.dynamic:
        w.add(value.text, False)
        return
    w.dynamic = True
    w.fixed = 0
    if value is not None:
        w.sources = list(value.sources)
    w.add(raw, True)
