"""PowerShell expressions that run code, read with the tree-sitter PowerShell grammar.

PowerShell commands are read as command lines (the program table's case-insensitive rows: which
parameters of ``Remove-Item`` or ``Get-Content`` are paths); what that reading cannot see is an
*expression* whose value is run as code: ``iex (iwr URL)``,
``IEX (New-Object Net.WebClient).DownloadString(URL)``, ``[ScriptBlock]::Create($s).Invoke()``,
``(iwr URL).Content | iex``. Those are parsed here with tree-sitter-powershell (loaded on first
use, only for PowerShell text) and become ``exec`` effects: ``download`` when the expression
fetches (a web cmdlet, ``curl``/``wget``, a ``WebClient`` download method), else ``unknown``.
"""

from __future__ import annotations

import functools
import importlib
from typing import Any

import tree_sitter

from gateway.policy.facts.effects import Effect, effect

EVALUATORS = frozenset({"iex", "invoke-expression"})
"""Cmdlets that run their argument, or their pipeline input, as PowerShell code."""
FETCHERS = frozenset(
    {"iwr", "irm", "invoke-webrequest", "invoke-restmethod", "curl", "wget", "start-bitstransfer", "downloadstring",
     "downloaddata", "downloadfile", "openread", "getstringasync", "getasync", "net.webclient", "system.net.webclient"}
)  # fmt: skip
"""Command names, members and types whose value comes from the network."""
FILE_READERS = frozenset({"get-content", "gc", "cat", "type"})
_LITERALS = frozenset({"string_literal", "expandable_string_literal", "verbatim_string_characters"})


@functools.cache
def _parser() -> tree_sitter.Parser:
    grammar = importlib.import_module("tree_sitter_powershell")
    return tree_sitter.Parser(tree_sitter.Language(grammar.language()))


def expression_effects(text: str, program: str, via: list[str]) -> list[Effect]:
    """``exec`` effects of the PowerShell expressions in ``text`` whose value runs as code."""
    low = text.lower()
    if "iex" not in low and "invoke-expression" not in low and "scriptblock" not in low:
        return []  # the cheap test: nothing here evaluates code
    tree = _parser().parse(text.encode("utf-8", "surrogatepass"))
    out: list[Effect] = []
    _walk(tree.root_node, program, via, out)
    return out


def _walk(n: tree_sitter.Node, program: str, via: list[str], out: list[Effect]) -> None:
    stack = [n]
    while stack:
        node = stack.pop()
        if node.type == "pipeline_chain":
            _pipeline(node, program, via, out)
        elif node.type == "invokation_expression" and "scriptblock" in _text(node).lower():
            # `[ScriptBlock]::Create($s)`: a script block made from a string, to be run
            out.append(_exec(node, program, via))
        stack.extend(node.children)


def _pipeline(chain: tree_sitter.Node, program: str, via: list[str], out: list[Effect]) -> None:
    """``iex <expression>`` and ``<expression> | iex``: the expression's value is the code."""
    elements = [c for c in chain.children if c.is_named]
    for k, element in enumerate(elements):
        if element.type != "command" or _name(element) not in EVALUATORS:
            continue
        arguments = [c for c in _elements(element) if c.type not in ("command_argument_sep", "command_parameter")]
        out.extend(_exec(a, program, via) for a in arguments if not _literal(a))
        if not arguments and k > 0:  # fed by the pipeline
            out.append(_exec(elements[k - 1], program, via))


def _exec(source: tree_sitter.Node, program: str, via: list[str]) -> Effect:
    words = _words(source)
    if words & FETCHERS:
        kind = "download"
    elif words and words <= FILE_READERS | {"-raw", "-path", "-literalpath"} | {w for w in words if "." in w}:
        kind = "file"  # `iex (Get-Content a.ps1 -Raw)`: a script file's text, as `. ./a.ps1`
    else:
        kind = "unknown"
    return effect("exec", program, via, source=kind, certainty="unknown")


def _elements(command: tree_sitter.Node) -> list[tree_sitter.Node]:
    found = next((c for c in command.children if c.type == "command_elements"), None)
    return list(found.children) if found is not None else []


def _name(command: tree_sitter.Node) -> str:
    found = next((c for c in command.children if c.type == "command_name"), None)
    return _text(found).lower() if found is not None else ""


def _literal(n: tree_sitter.Node) -> bool:
    """A string literal argument (``iex 'Get-Date'``): code the bash reading already parsed."""
    leaves = [c for c in _descend(n) if c.child_count == 0 and c.is_named]
    return bool(leaves) and all(
        c.type in _LITERALS or (c.parent is not None and c.parent.type in _LITERALS) for c in leaves
    )


def _words(n: tree_sitter.Node) -> set[str]:
    """Lower-case names in ``n``: command names, members, type names (``[Net.WebClient]``)."""
    out: set[str] = set()
    for c in _descend(n):
        if c.type in ("command_name", "simple_name", "generic_token", "type_name", "type_literal"):
            out.add(_text(c).lower().strip("[]"))
    return out


def _descend(n: tree_sitter.Node) -> list[tree_sitter.Node]:
    out, stack = [], [n]
    while stack:
        node = stack.pop()
        out.append(node)
        stack.extend(node.children)
    return out


def _text(n: Any) -> str:
    return n.text.decode("utf-8", "replace") if n is not None and n.text else ""
