"""Per-subscription content projection (body / metadata / omit per category, AHP-CONTENT-002).

Only schema-owned content slots are visited (derived once from the canonical schemas), never
opaque native or application JSON. A projection can only lower a selection, never raise it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import urljoin

from gateway.protocol.schemas import BASE, Schemas, find_type_const

_RANK = {"omit": 0, "metadata": 1, "body": 2}
Path = tuple[str, ...]

UPLOAD_GAP_REASON = "attachment bytes are not forwarded by the gateway"


def content_slots(schemas: Schemas) -> dict[str, tuple[Path, ...]]:
    """Event type -> paths ('*' = every list item) of every content part the event can carry."""
    docs = schemas.documents

    def resolve(reference: str, base: str) -> tuple[Any, str, str]:
        uri = urljoin(base, reference)
        document, _, fragment = uri.partition("#")
        node: Any = docs[document]
        for component in fragment.split("/")[1:]:
            key = component.replace("~1", "/").replace("~0", "~")
            node = node[int(key)] if isinstance(node, list) else node[key]
        return node, document, fragment

    root = docs[BASE + "event.schema.json"]
    slots: dict[str, tuple[Path, ...]] = {}
    for entry in root["oneOf"]:
        parts: set[Path] = set()

        def collect(schema: Any, base: str, path: Path, seen: frozenset[str], acc: set[Path] = parts) -> None:
            if not isinstance(schema, dict):
                return
            reference = schema.get("$ref")
            if reference is not None:
                uri = urljoin(base, reference)
                if uri not in seen:
                    child, document, fragment = resolve(reference, base)
                    if document.endswith("/content-item.schema.json"):
                        if fragment in ("", "/$defs/textPart"):
                            acc.add(path)
                            return
                        if fragment == "/$defs/textParts":
                            acc.add((*path, "*"))
                            return
                        if fragment in ("/$defs/message", "/$defs/modelVisibleItem"):
                            acc.add((*path, "parts", "*"))
                            return
                        if fragment == "/$defs/messages":
                            acc.add((*path, "*", "parts", "*"))
                            return
                    collect(child, document, path, seen | {uri})
            for key in ("allOf", "oneOf", "anyOf"):
                for child in schema.get(key, []):
                    collect(child, base, path, seen)
            for key, child in schema.get("properties", {}).items():
                collect(child, base, (*path, key), seen)
            if isinstance(schema.get("items"), dict):
                collect(schema["items"], base, (*path, "*"), seen)

        collect(entry, root["$id"], (), frozenset())
        name = _entry_event(schemas, entry["$ref"])
        slots[name] = tuple(sorted(parts))
    return slots


def _entry_event(schemas: Schemas, ref: str) -> str:
    doc, _, fragment = ref.partition("#")
    if fragment:
        return fragment.rsplit("/", 1)[-1]
    const = find_type_const(schemas.documents[BASE + doc])
    assert const is not None
    return const


def _category(part: Mapping[str, Any]) -> str:
    category = part.get("category")
    if isinstance(category, str):
        return category
    if part.get("kind") == "text":
        return "text"
    media = str(part.get("mediaType", ""))
    for prefix, name in (("image/", "images"), ("audio/", "audio"), ("video/", "video")):
        if media.startswith(prefix):
            return name
    return "files"


Refs = Mapping[str, Mapping[str, Any]]
"""Per upstream: the harness-facing ref -> that upstream's confirmed content reference."""


def _descriptor(part: Any, selection: Mapping[str, str], refs: Refs | None = None) -> Any:
    if not isinstance(part, dict) or "selection" not in part or "kind" not in part:
        return part
    wanted = selection.get(_category(part), selection["default"])
    current = part["selection"] if part["selection"] in _RANK else "omit"
    mode = wanted if _RANK[wanted] < _RANK[current] else current
    if mode != "body":
        item = {k: v for k, v in part.items() if k not in ("text", "body", "gap")}
        item["selection"] = mode
        return item
    if part.get("kind") == "attachment" and "body" in part:
        # A reference is receiver-scoped (protocol §13.2): only a ref this upstream's own
        # receiver confirmed may be sent; anything else becomes a gap.
        body = part["body"]
        ref = body.get("ref") if isinstance(body, dict) else None
        if refs is not None and isinstance(ref, str) and ref in refs:
            return {**part, "body": dict(refs[ref])}
        item = {k: v for k, v in part.items() if k != "body"}
        item["gap"] = {"reason": UPLOAD_GAP_REASON}
        return item
    return part


def _visit(node: Any, path: Path, selection: Mapping[str, str], refs: Refs | None = None) -> Any:
    """A copy of ``node`` with the parts at ``path`` projected; untouched branches are shared."""
    if not path:
        return _descriptor(node, selection, refs)
    head, tail = path[0], path[1:]
    if head == "*":
        if not isinstance(node, list):
            return node
        return [_visit(child, tail, selection, refs) for child in node]
    if not isinstance(node, dict) or head not in node:
        return node
    copy_ = dict(node)
    copy_[head] = _visit(node[head], tail, selection, refs)
    return copy_


def project(
    event: dict[str, Any],
    slots: Mapping[str, tuple[Path, ...]],
    selection: Mapping[str, str],
    include_native: bool,
    *,
    identity: bool,
    refs: Refs | None = None,
) -> dict[str, Any]:
    """The view of ``event`` one subscription may see. ``identity`` marks an all-``body``
    selection, where only ``native`` and attachment references need attention."""
    projected = event
    if not include_native and "native" in event:
        projected = {k: v for k, v in event.items() if k != "native"}
    paths = slots.get(str(event.get("type")), ())
    if identity and (not any(p[0] in projected for p in paths) or not _has_attachment_body(projected, paths)):
        return projected
    for path in paths:
        projected = _visit(projected, path, selection, refs)
    return projected


def attachment_bodies(
    event: dict[str, Any], slots: Mapping[str, tuple[Path, ...]], selection: Mapping[str, str]
) -> list[dict[str, Any]]:
    """The attachment parts with a ``body`` that ``selection`` lets through as body (only
    schema-owned slots; an upstream that may not see a category never gets its bytes)."""
    found: list[dict[str, Any]] = []

    def walk(node: Any, path: Path) -> None:
        if not path:
            if (
                isinstance(node, dict)
                and node.get("kind") == "attachment"
                and node.get("selection") == "body"
                and isinstance(node.get("body"), dict)
                and selection.get(_category(node), selection["default"]) == "body"
            ):
                found.append(node)
            return
        head, tail = path[0], path[1:]
        if head == "*":
            if isinstance(node, list):
                for child in node:
                    walk(child, tail)
        elif isinstance(node, dict) and head in node:
            walk(node[head], tail)

    for path in slots.get(str(event.get("type")), ()):
        walk(event, path)
    return found


def _has_attachment_body(event: dict[str, Any], paths: tuple[Path, ...]) -> bool:
    def walk(node: Any, path: Path) -> bool:
        if not path:
            return isinstance(node, dict) and node.get("kind") == "attachment" and "body" in node
        head, tail = path[0], path[1:]
        if head == "*":
            return isinstance(node, list) and any(walk(c, tail) for c in node)
        return isinstance(node, dict) and head in node and walk(node[head], tail)

    return any(walk(event, p) for p in paths)
