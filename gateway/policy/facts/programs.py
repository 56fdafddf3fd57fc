"""The program table (``gateway/data/programs.yaml``): which arguments of which program are paths
read, written or deleted, hosts, commands it runs, or secrets it prints.

Knowledge of programs is data, not code: a policy author adds a program by adding a row
(policies/README.md, "The program table"). The table is loaded and schema-checked once, at
import; a broken row fails the import with the row's line, so a shipped table is always whole.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from gateway.policy.facts import options as opts

TABLE = Path(__file__).resolve().parent.parent.parent / "data" / "programs.yaml"

SELECTORS = frozenset(
    {
        "operands",
        "operands-but-last",
        "last-operand",
        "first-operand",
        "operands-after-first",
        "operands-before-separator",
        "object-paths",
        "at-files",
        "always",
        "always-cwd",
        "none",
        "plus-operands",
    }
)
"""Argument selectors; besides these, ``option:-x`` / ``option:--name`` (an option's value) and
``option:key=`` (the text after ``key=`` in an argument, as ``dd if=...``)."""


class RowSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    names: list[str] = Field(min_length=1)
    sub: list[str] = Field(default_factory=list)
    when: list[str] = Field(default_factory=list)
    unless: list[str] = Field(default_factory=list)
    read: str | list[str] | None = None
    write: str | list[str] | None = None
    delete: str | list[str] | None = None
    runs: str | None = None
    code: list[str] = Field(default_factory=list)
    """Selectors of words that are code in ``language`` (vim ``-c``/``+cmd``, gdb ``-ex``, a sed
    script): read by :func:`code.analyze`; ``first-operand`` counts only when no option gave code."""
    language: str = ""
    network: str | None = None
    direction: Literal["fetch", "send", "listen", "tunnel"] = "fetch"
    recursive: str | list[str] | None = None
    operand: str | None = None
    """A regular expression one operand after ``sub`` must contain (case-insensitive):
    ``npm config get //registry/:_authToken`` prints a token, ``npm config get registry`` does not."""
    credential: bool = False
    persist: bool = False
    valued: list[str] = Field(default_factory=list)
    case_insensitive: bool = Field(default=False, alias="case-insensitive")
    """PowerShell parameters: named in any case, abbreviated to any unambiguous prefix of the row's
    parameters (``valued``, ``flags``, ``positional``, ``rest``, ``when``, ``unless``,
    ``recursive``, ``option:`` selectors), ``-Name:value`` as ``-Name value``."""
    flags: list[str] = Field(default_factory=list)
    """Case-insensitive rows: parameters without a value (switches), so abbreviations resolve."""
    positional: list[str] = Field(default_factory=list)
    """Case-insensitive rows: the parameters operands bind to, in order, when not given by name."""
    aliases: dict[str, str] = Field(default_factory=dict)
    """Case-insensitive rows: parameter aliases (``lp: literalpath``, ``c: command``)."""
    rest: list[str] = Field(default_factory=list)
    """Case-insensitive rows: parameters whose value is every word after them (``-Command``)."""
    command: list[str] = Field(default_factory=list)
    """Case-insensitive rows: selectors whose words, joined, are a PowerShell command line the
    program runs (``-Command``; Start-Process ``-FilePath`` and ``-ArgumentList``)."""
    encoded: list[str] = Field(default_factory=list)
    """Case-insensitive rows: parameters whose value is base64 of UTF-16LE text (``-EncodedCommand``)."""

    @field_validator("language")
    @classmethod
    def _language(cls, value: str) -> str:
        if value and value not in CODE_LANGUAGES:
            raise ValueError(f"unknown language {value!r}; one of {', '.join(sorted(CODE_LANGUAGES))}")
        return value

    @field_validator("read", "write", "delete", "runs", "network", "command", "code")
    @classmethod
    def _selector(cls, value: str | list[str] | None) -> str | list[str] | None:
        for one in [value] if isinstance(value, str) else value or []:
            if one not in SELECTORS and not one.startswith("option:"):
                raise ValueError(f"unknown selector {one!r}; one of {', '.join(sorted(SELECTORS))} or option:<name>")
        return value

    @field_validator("recursive")
    @classmethod
    def _recursive(cls, value: str | list[str] | None) -> str | list[str] | None:
        if isinstance(value, str) and value != "always":
            raise ValueError("recursive is 'always' or a list of options")
        return value


CODE_LANGUAGES = frozenset({"python", "javascript", "perl", "ruby", "php", "awk", "lua", "tcl", "r", "applescript",
                            "elisp", "vim", "less", "gdb", "sed", "jvm", "julia"})  # fmt: skip
"""Languages :func:`gateway.policy.facts.code.analyze` reads."""


class TableSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    programs: list[RowSpec]


@dataclass(frozen=True, slots=True)
class Row:
    spec: RowSpec
    line: int
    parse_spec: opts.Spec
    """How the program's options are split (its own spec where one exists, else the row's
    ``valued`` options)."""


class TableError(ValueError):
    pass


def _ps_name(option: str) -> str:
    return option.lower().lstrip("-")


def _case_insensitive_spec(row: RowSpec) -> opts.Spec:
    """Parameter names (lower case, no dash) of a case-insensitive row: ``valued`` take a value,
    every other one the row names is a switch; prefixes are accepted."""
    valued = {_ps_name(v) for v in [*row.valued, *row.positional, *row.rest, *row.encoded]}
    named = [*row.flags, *row.when, *row.unless, *(row.recursive if isinstance(row.recursive, list) else [])]
    for role in (row.read, row.write, row.delete, row.runs, row.network, row.command):
        for one in [role] if isinstance(role, str) else role or []:
            if one.startswith("option:-"):
                valued.add(_ps_name(one[7:]))
    flags = {_ps_name(f) for f in named if f.startswith("-")} - valued
    return opts.Spec(flags=frozenset(flags), valued=frozenset(valued), prefixes=True)


def _spec(row: RowSpec, program: str) -> opts.Spec:
    if row.case_insensitive:
        return _case_insensitive_spec(row)
    key = program + (" " + row.sub[0] if program == "git" and row.sub else "")
    known = opts.spec_for(program, row.sub[0]) if program == "git" and row.sub else opts.spec_for(program)
    if known is not None and key in opts.SPECS:
        return known
    shorts = "".join(sorted({v[1] for v in row.valued if len(v) == 2 and v[0] == "-"}))
    longs = frozenset(v[2:] for v in row.valued if v.startswith("--"))
    return _SHARED.setdefault((longs, shorts), opts.Spec(valued=longs, short_valued=shorts, prefixes=False))


_SHARED: dict[tuple[frozenset[str], str], opts.Spec] = {}
"""One spec per distinct set of valued options, so rows that parse alike parse once per command."""


def load(text: str, name: str = "programs.yaml") -> dict[str, tuple[Row, ...]]:
    """Rows by program name, in table order; :class:`TableError` names the row's line."""
    nodes = yaml.compose(text)
    data: Any = yaml.safe_load(text)
    try:
        table = TableSpec.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = first["loc"]
        line = _line(nodes, loc)
        raise TableError(
            f"{name}:{line}: {'.'.join(map(str, loc))}: {first['msg'].removeprefix('Value error, ')}"
        ) from None
    rows: dict[str, list[Row]] = {}
    for index, spec in enumerate(table.programs):
        line = _line(nodes, ("programs", index))
        for program in spec.names:
            rows.setdefault(program, []).append(Row(spec, line, _spec(spec, program)))
    return {k: tuple(v) for k, v in rows.items()}


def _line(node: Any, loc: tuple[Any, ...]) -> int:
    for part in loc:
        if isinstance(node, yaml.MappingNode):
            node = next((v for k, v in node.value if k.value == part), node)
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(node.value):
            node = node.value[part]
        else:
            break
    return int(node.start_mark.line) + 1 if node is not None else 0


@functools.cache
def table() -> dict[str, tuple[Row, ...]]:
    """The shipped table, loaded once."""
    return load(TABLE.read_text(encoding="utf-8"))


def row_for(program: str, operands: list[str], options: list[str], args: list[str]) -> Row | None:
    """The first row of ``program`` whose ``sub``, ``when`` and ``unless`` hold."""
    for row in table().get(program, ()):
        spec = row.spec
        if spec.sub and [o.lower() for o in operands[: len(spec.sub)]] != spec.sub:
            continue
        present = set(options) | set(args)
        if spec.when and not any(w in present for w in spec.when):
            continue
        if spec.unless and any(w in present for w in spec.unless):
            continue
        return row
    return None
