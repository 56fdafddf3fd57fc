"""The YAML reader for every configuration file (gateway configs, registration documents, policy
files; JSON is read as the YAML subset it is).

Two departures from PyYAML's ``SafeLoader``, both closing silent misreadings:

- a mapping with the same key twice is an error naming the line of the second occurrence (PyYAML
  keeps the last one, so ``failurePolicy: fail-closed`` followed by ``fail-open`` would quietly
  open the gate);
- booleans are YAML 1.2's: only ``true`` / ``false`` (any case as YAML 1.2 spells them). YAML 1.1
  also reads ``on``, ``off``, ``yes`` and ``no`` as booleans, which breaks string fields such as
  ``log.decisions: off``; they stay strings, and boolean fields still accept them (pydantic reads
  ``"off"`` as false).
"""

from __future__ import annotations

import re
from typing import Any

import yaml
from yaml.constructor import ConstructorError
from yaml.nodes import MappingNode, Node, SequenceNode

_MERGE = "tag:yaml.org,2002:merge"
_BOOL = "tag:yaml.org,2002:bool"


class DuplicateKeyError(ConstructorError):
    """The second occurrence of a key in one mapping; ``problem_mark`` is where it is."""

    def __init__(self, key: Any, first: yaml.Mark, second: yaml.Mark) -> None:
        super().__init__(
            "while constructing a mapping",
            None,
            f"duplicate key {key!r} (first at line {first.line + 1})",
            second,
        )
        self.key = key


class StrictLoader(yaml.SafeLoader):
    """``SafeLoader`` that refuses duplicate keys and reads booleans as YAML 1.2 does."""

    def construct_mapping(self, node: MappingNode, deep: bool = False) -> dict[Any, Any]:
        if isinstance(node, MappingNode):
            seen: dict[Any, yaml.Mark] = {}
            for key_node, _ in node.value:
                if key_node.tag == _MERGE:  # ``<<: *base`` then overriding a key is the point of merges
                    continue
                key = self.construct_object(key_node, deep=True)
                try:
                    first = seen.get(key)
                except TypeError:  # an unhashable key: the base constructor reports it
                    continue
                if first is not None:
                    raise DuplicateKeyError(key, first, key_node.start_mark)
                seen[key] = key_node.start_mark
        return super().construct_mapping(node, deep=deep)


StrictLoader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != _BOOL]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
StrictLoader.add_implicit_resolver(_BOOL, re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF"))


def parse(text: str) -> Any:
    """The document in ``text`` (raises ``yaml.YAMLError``, :class:`DuplicateKeyError` included)."""
    return yaml.load(text, Loader=StrictLoader)


def path_to(text: str, mark: yaml.Mark) -> list[str | int] | None:
    """The key path of the mapping key at ``mark`` (for a duplicate-key error), if found."""
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError:
        return None

    seen: set[int] = set()

    def walk(node: Node | None, path: list[str | int]) -> list[str | int] | None:
        if node is None or id(node) in seen:  # an alias: its anchor was walked once (no billion laughs)
            return None
        seen.add(id(node))
        if isinstance(node, MappingNode):
            for key_node, value in node.value:
                step: str | int = str(key_node.value)
                if key_node.start_mark.index == mark.index:
                    return [*path, step]
                found = walk(value, [*path, step])
                if found is not None:
                    return found
        elif isinstance(node, SequenceNode):
            for index, item in enumerate(node.value):
                found = walk(item, [*path, index])
                if found is not None:
                    return found
        return None

    return walk(root, [])
