"""The canonical AHP schemas, loaded once from the pinned SDK distribution and compiled with
jsonschema-rs. The SDK package is located through package metadata and never imported."""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
from collections.abc import Callable, Mapping
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
    """All canonical validators, compiled once per process (schemas never change on reload)."""

    def __init__(self, documents: list[dict[str, Any]]) -> None:
        self.documents: Mapping[str, dict[str, Any]] = {d["$id"]: d for d in documents}
        self._registry = jsonschema_rs.Registry([(d["$id"], d) for d in documents])
        compile_: Callable[[str], Check] = self._compile
        self.intercept_request = compile_("intercept-request.schema.json")
        self.observe_notification = compile_("observe-notification.schema.json")
        self.capabilities_request = compile_("capabilities-request.schema.json")
        self.configuration_request = compile_("configuration-request.schema.json")
        self.capabilities_response = compile_("capabilities-response.schema.json")
        self.configuration_response = compile_("configuration-response.schema.json")
        self.intercept_response = compile_("intercept-response.schema.json")
        self.registration = compile_("registration.schema.json")
        self.json_rpc_message = compile_("json-rpc-message.schema.json")
        self.aggregate = compile_("schema.json")
        self.response_for: Mapping[str, Check] = {
            event: compile_(f"intercept-response.schema.json#/$defs/{_type_pascal(event)}InterceptResponse")
            for event in INTERCEPTABLE
        }
        self.event_for: Mapping[str, Check] = {
            _event_name(self.documents, ref["$ref"]): compile_(ref["$ref"])
            for ref in self.documents[BASE + "event.schema.json"]["oneOf"]
        }

    def _compile(self, ref: str) -> Check:
        return Check(jsonschema_rs.validator_for({"$ref": BASE + ref}, registry=self._registry, validate_formats=True))


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
