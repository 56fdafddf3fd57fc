"""The canonical AHP schemas, loaded once from the pinned SDK distribution and compiled with
jsonschema-rs. The SDK package is located through package metadata and never imported."""

from __future__ import annotations

import copy
import functools
import hashlib
import importlib.metadata
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonschema_rs
import orjson

from gateway.protocol.events import INTERCEPTABLE

SCHEMA_DISTRIBUTION = "agenthooksprotocol"
SCHEMA_DISTRIBUTION_VERSION = "0.10.1"
SCHEMA_SHA256 = "2512ed8da09cd40036c1cf40e6e3b0a11f4cdf52613aa459f712c08b76ba3f12"
BASE = "https://agenthooksprotocol.org/schemas/draft/"
PROTOCOL_VERSIONS = ("draft",)
"""Wire versions these schemas describe (exact match only, AHP-VER-001)."""


class SchemaSourceError(RuntimeError):
    """The canonical schema file is missing or is not the pinned, hash-verified one."""


def locate_schema_file() -> Path:
    try:
        dist = importlib.metadata.distribution(SCHEMA_DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError as exc:
        raise SchemaSourceError(f"{SCHEMA_DISTRIBUTION}=={SCHEMA_DISTRIBUTION_VERSION} is not installed") from exc
    path = Path(str(dist.locate_file("agenthooksprotocol/schemas.json")))
    if not path.is_file():
        raise SchemaSourceError(f"{SCHEMA_DISTRIBUTION} has no schemas.json")
    return path


def _type_pascal(event: str) -> str:
    return "".join(p[:1].upper() + p[1:] for p in event.split("."))


@dataclass(frozen=True, slots=True)
class Check:
    """One compiled validator: a cheap boolean check plus an explanation on the slow path."""

    validator: Any

    def ok(self, doc: object) -> bool:
        return bool(self.validator.is_valid(doc))

    def explain(self, doc: object) -> tuple[str, str] | None:
        """(instance path, keyword) of the first error; never the offending values."""
        for err in self.validator.iter_errors(doc):
            path = "/" + "/".join(str(p) for p in err.instance_path)
            keyword = str(err.schema_path[-1]) if err.schema_path else "schema"
            return path, keyword
        return None


class Schemas:
    """Canonical validators, compiled once per process (schemas never change on reload). The
    request validators every request needs are compiled at start; the rest on first use, which
    keeps a worker's memory down (the aggregate wire schema alone costs ~13 MB compiled)."""

    def __init__(self, documents: list[dict[str, Any]]) -> None:
        self.documents: Mapping[str, dict[str, Any]] = {d["$id"]: d for d in documents}
        self._event_refs = {
            _event_name(self.documents, ref["$ref"]): ref["$ref"]
            for ref in self.documents[BASE + "event.schema.json"]["oneOf"]
        }
        specialized = [self._specialize_request(event) for event in INTERCEPTABLE]
        self._registry = jsonschema_rs.Registry([(d["$id"], d) for d in (*documents, *specialized)])
        self.intercept_request = self._compile("intercept-request.schema.json")
        self.observe_notification = self._compile("observe-notification.schema.json")
        self.capabilities_request = self._compile("capabilities-request.schema.json")
        self.configuration_request = self._compile("configuration-request.schema.json")
        self.request_for: Mapping[str, Check] = _Lazy(
            lambda event: self._compile(_specialized_id(event)), INTERCEPTABLE
        )
        """intercept-request validators specialised to one event type: the same constraints for
        that type without evaluating the other branches of the event ``oneOf`` (several times
        cheaper; equivalence is checked in tests/unit/protocol/test_schemas.py)."""
        self.response_for: Mapping[str, Check] = _Lazy(
            lambda event: self._compile(
                f"intercept-response.schema.json#/$defs/{_type_pascal(event)}InterceptResponse"
            ),
            INTERCEPTABLE,
        )
        self.event_for: Mapping[str, Check] = _Lazy(
            lambda event: self._compile(self._event_refs[event]), self._event_refs
        )

    @functools.cached_property
    def capabilities_response(self) -> Check:
        return self._compile("capabilities-response.schema.json")

    @functools.cached_property
    def configuration_response(self) -> Check:
        return self._compile("configuration-response.schema.json")

    @functools.cached_property
    def registration(self) -> Check:
        return self._compile("registration.schema.json")

    @functools.cached_property
    def aggregate(self) -> Check:
        return self._compile("schema.json")

    def _specialize_request(self, event: str) -> dict[str, Any]:
        """A copy of intercept-request.schema.json in which ``params.event`` is the event's own
        schema and the per-event ``if``/``then`` clauses are resolved for ``event``."""
        doc = copy.deepcopy(self.documents[BASE + "intercept-request.schema.json"])
        doc["$id"] = BASE + _specialized_id(event)
        params = doc["allOf"][1]["properties"]["params"]
        params["properties"]["event"] = {"$ref": self._event_refs[event]}
        kept = []
        for clause in params.get("allOf", []):
            const = (
                clause.get("if", {})
                .get("properties", {})
                .get("event", {})
                .get("properties", {})
                .get("type", {})
                .get("const")
            )
            if const is None:
                kept.append(clause)
            elif const == event:
                kept.append(clause["then"])
        params["allOf"] = kept
        return doc

    def _compile(self, ref: str) -> Check:
        return Check(jsonschema_rs.validator_for({"$ref": BASE + ref}, registry=self._registry, validate_formats=True))


class _Lazy(Mapping[str, Check]):
    """A read-only mapping whose values are compiled on first access."""

    def __init__(self, factory: Callable[[str], Check], keys: Iterable[str]) -> None:
        self._factory = factory
        self._keys = tuple(keys)
        self._known = frozenset(self._keys)
        self._cache: dict[str, Check] = {}

    def __getitem__(self, key: str) -> Check:
        if not isinstance(key, str):  # a JSON value used as a key (e.g. a list): absent, not a crash
            raise KeyError(key)
        found = self._cache.get(key)
        if found is None:
            if key not in self._known:
                raise KeyError(key)
            found = self._cache[key] = self._factory(key)
        return found

    def __iter__(self) -> Iterator[str]:
        return iter(self._keys)

    def __len__(self) -> int:
        return len(self._keys)


def _specialized_id(event: str) -> str:
    return f"intercept-request.{event}.specialized.schema.json"


def _event_name(documents: Mapping[str, dict[str, Any]], ref: str) -> str:
    doc, _, fragment = ref.partition("#")
    if fragment:
        return fragment.rsplit("/", 1)[-1]
    schema = documents[BASE + doc]
    const = find_type_const(schema)
    if const is None:  # pragma: no cover - the pinned bundle always names its types
        raise SchemaSourceError(f"cannot find the event type of {ref}")
    return const


def find_type_const(schema: Any) -> str | None:
    if not isinstance(schema, dict):
        return None
    const = schema.get("properties", {}).get("type", {}).get("const")
    if isinstance(const, str):
        return const
    for key in ("allOf", "oneOf", "anyOf"):
        for child in schema.get(key, []):
            found = find_type_const(child)
            if found:
                return found
    return None


@functools.cache
def load() -> Schemas:
    """The process-wide schema set; refuses a bundle whose hash differs from the pinned one."""
    raw = locate_schema_file().read_bytes()
    digest = hashlib.sha256(raw).hexdigest()
    if digest != SCHEMA_SHA256:
        raise SchemaSourceError(f"schemas.json sha256 {digest} differs from the pinned {SCHEMA_SHA256}")
    return Schemas(orjson.loads(raw))
