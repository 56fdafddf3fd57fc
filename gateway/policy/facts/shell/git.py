"""What git itself runs or remembers in a line: configuration, aliases and the branch, as the
walk meets ``git config``, ``-c``, ``GIT_CONFIG_*`` and ``git checkout``."""

from __future__ import annotations

from gateway.policy.facts import options as opts
from gateway.policy.facts.shell.command import Command, State
from gateway.policy.facts.shell.expand import split_words
from gateway.policy.facts.words import (
    Word,
)


def _config_env(cmd: Command) -> list[str]:
    """``git --config-env=key=ENVVAR`` values."""
    out = []
    words = cmd.words[cmd.start + 1 :]
    for k, w in enumerate(words):
        if w.text.startswith("--config-env="):
            out.append(w.text[len("--config-env=") :])
        elif w.text == "--config-env" and k + 1 < len(words):
            out.append(words[k + 1].text)
        elif not w.text.startswith("-"):
            break
    return out


_CONFIG_VALUED = frozenset({"-f", "--file", "--blob", "--type", "--default", "--comment", "--value"})


def setting(rest: list[str], words: list[Word]) -> tuple[str, Word | None, str]:
    """``git config [--global|--system|--file f|...] KEY VALUE`` (also ``git config set KEY
    VALUE``): the key (lower case, '' when none), the value set (None for a read or an unset) and
    where it is written (``--global``, ``--system``, a ``--file``, or '' for the repository's)."""
    operands: list[Word] = []
    k = 0
    unset = False
    scope = ""
    while k < len(rest):
        t = rest[k]
        if t in _CONFIG_VALUED:
            if t in ("-f", "--file") and k + 1 < len(rest):
                scope = rest[k + 1]
            k += 2
            continue
        if t in ("--global", "--system"):
            scope = t
        if t.startswith("--unset") or t in ("--get", "--get-all", "--get-regexp", "--list", "-l", "--remove-section"):
            unset = True
        if not t.startswith("-") or t == "-":
            operands.append(words[k])
        k += 1
    if operands and operands[0].text in ("set", "unset", "get", "list", "edit", "rename-section", "remove-section"):
        unset = unset or operands[0].text != "set"
        operands = operands[1:]
    if not operands:
        return "", None, scope
    key = operands[0].text.lower()
    if unset or len(operands) < 2:
        return key, None, scope
    return key, operands[1], scope


def _record_config(rest: list[str], words: list[Word], st: State) -> None:
    """The value the rest of the line runs with (:func:`setting`)."""
    key, value, _ = setting(rest, words)
    if not key:
        return
    if value is None:
        if any(t.startswith("--unset") or t in ("unset", "--remove-section") for t in rest):
            st.gitconfig.pop(key, None)
        return
    st.gitconfig[key] = value


def state(cmd: Command, args: list[Word], st: State) -> None:
    texts = [a.text for a in args]
    top = opts.parse(texts, opts.spec_for("git"))
    if not top.operands:
        return
    sub = texts[top.operands[0]]
    rest = texts[top.operands[0] + 1 :]
    if sub == "config":
        _record_config(rest, args[top.operands[0] + 1 :], st)
        return
    if sub in ("checkout", "switch"):
        parsed = opts.parse(rest, opts.spec_for("git", sub))
        for key in ("-b", "-B", "-c", "-C", "--orphan", "--create", "--force-create"):
            if key in parsed.values:
                st.branch = parsed.values[key][-1]
                return
        if parsed.operands and "--detach" not in parsed.options:
            st.branch = rest[parsed.operands[0]]
        elif "--detach" in parsed.options:
            st.branch = ""


def expand(cmd: Command, sub_args: list[Word], configs: list[str]) -> list[Word]:
    """``[sub, *args]`` with a git alias (``-c alias.x=...``, ``git config alias.x ...``
    earlier in the line) expanded; a ``!`` alias stays as it is."""
    if not sub_args:
        return sub_args
    value = config(cmd, configs).get("alias." + sub_args[0].text.lower())
    if value is None or value.dynamic or value.text.startswith("!"):
        return sub_args
    expanded = split_words(value.text)
    if not expanded:
        return sub_args
    return [*(Word(t, "1" * len(t)) for t in expanded), *sub_args[1:]]


def config(cmd: Command, configs: list[str]) -> dict[str, Word]:
    """The configuration a git command runs with, as far as the line shows it: ``git config``
    earlier in the line, ``GIT_CONFIG_PARAMETERS``, ``GIT_CONFIG_COUNT``/``KEY_n``/``VALUE_n``,
    then ``-c key=value`` (later wins)."""
    found: dict[str, Word] = dict(cmd.state.gitconfig)

    def env(name: str) -> Word | None:
        return cmd.env.get(name) or cmd.state.vars.get(name)

    params = env("GIT_CONFIG_PARAMETERS")
    if params is not None and params.dynamic:
        found["(unknown)"] = params
    elif params is not None:
        for item in split_words(params.text):
            key, _, value = item.partition("=")
            found[key.lower()] = Word(value, "1" * len(value))
    count = env("GIT_CONFIG_COUNT")
    if count is not None and count.text.strip().isdigit():
        for n in range(min(int(count.text.strip()), 64)):
            key_w, value_w = env(f"GIT_CONFIG_KEY_{n}"), env(f"GIT_CONFIG_VALUE_{n}")
            if key_w is not None and value_w is not None:
                found["(unknown)" if key_w.dynamic else key_w.text.lower()] = value_w
    elif count is not None and count.dynamic:
        found["(unknown)"] = count
    for config in configs:
        key, _, value = config.partition("=")
        found[key.lower()] = Word(value, "1" * len(value))
    for config in _config_env(cmd):
        key, _, var = config.partition("=")
        value_w = env(var)
        found[key.lower()] = value_w if value_w is not None else Word("$" + var, "1" * (len(var) + 1), True)
    return found
