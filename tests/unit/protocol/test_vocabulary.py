"""One vocabulary: AHP method names, JSON-RPC envelopes and the effect-type list are spelled only
in ``gateway/protocol/``, and no module uses another package's underscore names.

Each check reads the source with :mod:`ast` and fails with the offending ``file:line``; each is
also run on a small bad sample, so a check that stopped finding anything fails too.
"""

from __future__ import annotations

import ast
import json
from collections.abc import Iterator

import pytest

from gateway.protocol.events import EFFECT_TYPES
from gateway.protocol.schemas import locate_schema_file
from tests.support.paths import ROOT

GATEWAY = ROOT / "gateway"

ALLOWED_ENVELOPES: dict[str, str] = {}
"""Files still allowed to spell a JSON-RPC envelope, each with the reason."""


def _sources() -> Iterator[tuple[str, ast.Module]]:
    for path in sorted(GATEWAY.rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if not rel.startswith("gateway/protocol/"):
            yield rel, ast.parse(path.read_text(encoding="utf-8"), rel)


def spelled_vocabulary(rel: str, tree: ast.Module) -> list[str]:
    """``file:line`` of method names (``"hooks/…"``) and of the ``"jsonrpc"`` member written as
    literals (strings, the literal parts of f-strings, bytes)."""
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Constant):
            continue
        value = node.value
        if isinstance(value, str) and (value.startswith("hooks/") or value == "jsonrpc"):
            if value == "jsonrpc" and rel in ALLOWED_ENVELOPES:
                continue
            found.append(f"{rel}:{node.lineno}: {value!r}")
        elif isinstance(value, bytes) and (b"hooks/" in value or b'"jsonrpc"' in value):
            found.append(f"{rel}:{node.lineno}: {value!r}")
    return found


def effect_type_lists(rel: str, tree: ast.Module) -> list[str]:
    """``file:line`` of a literal tuple, list or set naming most of the AHP effect types: a copy
    of :data:`gateway.protocol.events.EFFECT_TYPES`."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Tuple | ast.List | ast.Set):
            names = {e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)}
            if len(names & set(EFFECT_TYPES)) >= len(EFFECT_TYPES) - 2:
                found.append(f"{rel}:{node.lineno}: {sorted(names)}")
    return found


def _unit(module: str) -> str:
    """The package a module belongs to for these rules: ``gateway.<package>``, or a top-level
    module of ``gateway`` by itself."""
    parts = module.split(".")
    if len(parts) >= 2 and (GATEWAY / parts[1]).is_dir():
        return ".".join(parts[:2])
    return module


def _module_of(rel: str) -> str:
    return rel.removesuffix(".py").removesuffix("/__init__").replace("/", ".")


def _is_module(name: str) -> bool:
    path = ROOT / name.replace(".", "/")
    return path.is_dir() or path.with_suffix(".py").is_file()


def private_imports(rel: str, tree: ast.Module) -> list[str]:
    """``file:line`` of an underscore name taken from another package: ``from gateway.x import
    _name`` or ``module._name`` on a module imported from another package."""
    here = _unit(_module_of(rel))
    found = []
    modules: dict[str, str] = {}  # local name -> imported gateway module
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("gateway"):
            for alias in node.names:
                target = f"{node.module}.{alias.name}"
                source = target if _is_module(target) else node.module
                if _is_module(target):
                    modules[alias.asname or alias.name] = target
                private = alias.name.startswith("_") and not alias.name.startswith("__")
                if private and _unit(source) != here:
                    found.append(f"{rel}:{node.lineno}: from {node.module} import {alias.name}")
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("gateway") and alias.asname:
                    modules[alias.asname] = alias.name
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id in modules
            and node.attr.startswith("_")
            and not node.attr.startswith("__")
            and _unit(modules[node.value.id]) != here
        ):
            found.append(f"{rel}:{node.lineno}: {node.value.id}.{node.attr}")
    return found


CHECKS = (spelled_vocabulary, effect_type_lists, private_imports)


@pytest.mark.parametrize("check", CHECKS, ids=[c.__name__ for c in CHECKS])
def test_gateway_outside_protocol_keeps_one_vocabulary(check: object) -> None:
    assert callable(check)
    found = [hit for rel, tree in _sources() for hit in sorted(check(rel, tree), key=lambda h: int(h.split(":")[1]))]
    assert not found, "spelled outside gateway/protocol/ (use its constants and helpers):\n" + "\n".join(found)


BAD = """
from gateway.config.load import _read
from gateway.routing import reads as wire
from gateway import tasks
METHOD = "hooks/intercept"
HELP = f"hooks/{METHOD} notifications"
NEEDLE = b"hooks/observe"
BODY = {"jsonrpc": "2.0", "id": 1}
KINDS = ("deny", "allow", "ask", "modify", "message", "return", "flow", "inject")
FIELDS = wire._fields(b"")
SPAWN = tasks._live
"""


def test_each_check_finds_what_it_is_for() -> None:
    """The checks on a sample that breaks every rule once (``tasks`` is a top-level module of
    ``gateway``, a unit of its own, so its ``_live`` counts too)."""
    tree = ast.parse(BAD)
    rel = "gateway/policy/sample.py"
    lines = sorted(int(h.split(":")[1]) for h in spelled_vocabulary(rel, tree))
    assert lines == [5, 6, 7, 8]
    assert [h.split(": ", 1)[0] for h in effect_type_lists(rel, tree)] == [f"{rel}:9"]
    assert sorted(h.split(": ", 1)[1] for h in private_imports(rel, tree)) == [
        "from gateway.config.load import _read",
        "tasks._live",
        "wire._fields",
    ]
    assert private_imports("gateway/config/sample.py", ast.parse("from gateway.config.load import _read\n")) == []


def test_effect_types_are_the_schemas() -> None:
    """The one list, in the schema's order (the capability ``effects`` enum)."""
    documents = {d["$id"].rsplit("/", 1)[1]: d for d in json.loads(locate_schema_file().read_text())}
    items = documents["capabilities.schema.json"]["properties"]["effects"]["items"]["anyOf"]
    assert tuple(next(i["enum"] for i in items if "enum" in i)) == EFFECT_TYPES
