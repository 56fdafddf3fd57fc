"""Where an interpreter's or a shell's code is on its command line: inline (``-c``, ``-e``), a
script operand, or stdin."""

from __future__ import annotations

import re

from gateway.policy.facts import code as codemod
from gateway.policy.facts.shell.command import SHELLS
from gateway.policy.facts.words import (
    Word,
)


def option_value(words: list[Word], names: tuple[str, ...]) -> Word | None:
    for k, w in enumerate(words):
        if (w.text in names or re.fullmatch(r"-[A-Za-z]*c", w.text)) and k + 1 < len(words):
            return words[k + 1]
        for n in names:
            if n.startswith("--") and w.text.startswith(n + "="):
                v = w.text[len(n) + 1 :]
                return Word(v, "1" * len(v), w.dynamic, w.sources)
    return None


def shell_payload(args: list[Word]) -> Word | None:
    """The script of ``sh -c 'script'`` (``-c`` anywhere in an option cluster: ``-lc``, ``-ec``)."""
    has_c = False
    for w in args:
        t = w.text
        if t == "--":
            continue
        if t.startswith("-") and len(t) > 1 and not t.startswith("--"):
            if "c" in t[1:]:
                has_c = True
            continue
        if (t.startswith("+") and len(t) > 1) or t.startswith("--"):
            continue
        return w if has_c else None
    return None


CODE_LETTERS: dict[str, str] = {
    "shell": "c", "python": "c", "perl": "eE", "ruby": "eE", "php": "r", "lua": "e", "tcl": "c", "r": "e",
    "applescript": "e", "jvm": "e", "julia": "e",
}  # fmt: skip
"""Per language, the one-letter options whose value (or the rest of their cluster: ``-lc``,
``perl -lne``) is inline code."""
CODE_WORDS: dict[str, tuple[str, ...]] = {
    "javascript": ("-e", "--eval", "-p", "--print", "-pe"),
    "powershell": ("-Command", "-command", "-EncodedCommand", "-enc", "-c"),
    "elisp": ("--eval", "-eval"),
}
"""Per language, whole option words whose value is inline code."""
OTHER_INPUT = frozenset({"-m", "-f", "-File", "-file"})
"""Options that run a module or a file: the program then reads no code from stdin."""
INLINE_FLAGS = frozenset(
    {"-" + letter for letters in CODE_LETTERS.values() for letter in letters}
    | {word for words in CODE_WORDS.values() for word in words}
)
"""Every option that gives inline code, whatever the language (whose value's sources become the
command's ``code_from``)."""
_FLAG_ONLY = frozenset("lnpaswWtTuUvXSBbdEiIOqRsV")
"""Single-letter interpreter options that take no value, so a cluster (``perl -lne``,
``python -Bc``) goes on to the code flag."""


def language(program: str) -> str:
    """The key of :data:`CODE_LETTERS`/:data:`CODE_WORDS` for ``program`` ("" when none)."""
    if program in SHELLS:
        return "shell"
    if program in ("pwsh", "powershell"):
        return "powershell"
    return codemod.language_of(program) or ""


def inline_code(language: str, args: list[Word]) -> Word | None:
    """The inline code word of an interpreter's arguments (``python -c``, ``node -e``, ``perl -e``,
    ``php -r``, an awk program), or None when it runs a file or stdin."""
    k = 0
    while k < len(args):
        t = args[k].text
        if t == "--":
            break
        nxt = args[k + 1] if k + 1 < len(args) else None
        if language == "awk":
            if t in ("-f", "--file") or t.startswith("-f"):
                return None
            if t in ("-F", "-v", "--assign", "--field-separator"):
                k += 2
                continue
            if t.startswith("-"):
                k += 1
                continue
            return args[k]
        if language in ("javascript", "elisp"):
            if t in CODE_WORDS[language] or (k == 0 and t == "eval" and language == "javascript"):
                return nxt  # `deno eval CODE` too
            if t.startswith(("--eval=", "--print=")):
                value = t.split("=", 1)[1]
                return Word(value, "1" * len(value))
            if language == "elisp" and not t.startswith("-"):
                return None  # a file to edit
        elif t.startswith("-") and not t.startswith("--") and len(t) > 1:
            flag = CODE_LETTERS.get(language, "")
            body = t[1:]
            hit = None
            for j, ch in enumerate(body):
                if ch in flag:
                    hit = j
                    break
                if ch not in _FLAG_ONLY:  # `-MFile::Path=rmtree`: the rest is this option's value
                    break
            if hit is not None:
                rest = body[hit + 1 :]
                found = Word(rest, "1" * len(rest)) if rest else nxt
                if language in _EVERY_E and found is not None and not found.dynamic:
                    more = inline_code(language, args[k + (1 if rest else 2) :])  # `perl -e a -e b`
                    if more is not None:
                        text = found.text + "\n" + more.text
                        return Word(text, "1" * len(text), more.dynamic, more.sources)
                return found
        elif not t.startswith("-"):
            return None  # a script file
        k += 1
    return None


_EVERY_E = frozenset({"perl", "ruby", "lua", "applescript", "r"})
"""Languages that run every ``-e`` given, in order (``perl -le 'print 1' -e 'system(...)'``)."""


def has_inline_code(program: str, args: list[str]) -> bool:
    """``program`` is given its code by an option (inline, a module or a file), not on stdin."""
    lang = language(program)
    letters = CODE_LETTERS.get(lang, "")
    for a in args:
        if a in INLINE_FLAGS or a in OTHER_INPUT:
            return True
        if letters and a.startswith("-") and not a.startswith("--") and any(ch in letters for ch in a[1:]):
            return True
    return False


def script_operand(program: str, args: list[str]) -> int | None:
    """Index of the script file operand, if any (the first non-option argument)."""
    k = 0
    while k < len(args):
        a = args[k]
        if a == "--":
            return k + 1 if k + 1 < len(args) else None
        if a == "-":
            return k
        if a.startswith(("-", "+")):
            if program in SHELLS and a in ("-o", "+o", "-O", "+O", "--rcfile", "--init-file"):
                k += 1
            if program.startswith("python") and a in ("-W", "-X", "-Q"):
                k += 1
            k += 1
            continue
        return k
    return None
