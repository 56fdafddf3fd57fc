"""``ahp-gateway schema``: JSON Schemas of gateway.yaml, policy files and registration documents,
generated from the same pydantic models that validate them, so editors (yaml-language-server,
VS Code, JetBrains) complete and check what the gateway accepts.

The schemas are stricter than the loader in one way: unknown keys are errors (the loader accepts
and warns about them, ``check --strict`` fails on them), because an editor should flag a misspelt
key. The Helm chart's ``values.schema.json`` embeds the configuration schema for ``config:``
(:func:`chart_config_schema`, written by ``python -m gateway.schema_cmd <values.schema.json>``).
"""

from __future__ import annotations

import copy
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from gateway import __version__
from gateway.config.models import GatewayConfig, RegistrationDocument
from gateway.policy.spec import RULE_EFFECTS, EffectSpec, PolicyFileSpec, RuleSpec
from gateway.protocol.events import ALL_EVENTS, INTERCEPTABLE, WILDCARD

DRAFT = "https://json-schema.org/draft/2020-12/schema"
KINDS = ("config", "policy", "registration")
OPEN_OBJECTS = frozenset({"ContentSelection"})
"""Models whose extra keys are data (content categories), not misspellings."""


def _events(names: tuple[str, ...] | list[str], what: str) -> dict[str, Any]:
    return {
        "type": "array",
        "minItems": 1,
        "uniqueItems": True,
        "description": f"{what}: exact event types, '*' or 'family.*'.",
        "items": {"anyOf": [{"enum": sorted(names)}, {"type": "string", "pattern": WILDCARD.pattern}]},
    }


def _tidy(node: Any) -> Any:
    """Drop pydantic's generated property titles ("Onerror") and the OpenAPI-only discriminator."""
    if isinstance(node, dict):
        out = {}
        for key, value in node.items():
            if key == "discriminator":
                continue
            if key == "properties" and isinstance(value, dict):
                out[key] = {name: _drop_title(_tidy(prop)) for name, prop in value.items()}
            else:
                out[key] = _tidy(value)
        return out
    if isinstance(node, list):
        return [_tidy(item) for item in node]
    return node


def _drop_title(prop: Any) -> Any:
    if isinstance(prop, dict):
        prop = {k: v for k, v in prop.items() if k != "title"}
    return prop


def _close(defs: dict[str, Any]) -> None:
    for name, definition in defs.items():
        if definition.get("type") == "object":
            if name in OPEN_OBJECTS:
                definition["additionalProperties"] = {"enum": ["body", "metadata", "omit"]}
            else:
                definition["additionalProperties"] = False


def _model_schema(model: type[BaseModel]) -> dict[str, Any]:
    schema = model.model_json_schema(mode="validation")
    defs: dict[str, Any] = schema.pop("$defs", {})
    defs[model.__name__] = schema
    return defs


def _document(root: str, defs: dict[str, Any], title: str, description: str) -> dict[str, Any]:
    _close(defs)
    top = defs.pop(root)
    document = {
        "$schema": DRAFT,
        "$id": f"urn:ahp-gateway:schema:{root}:{__version__}",
        "title": title,
        "description": description,
        **{k: v for k, v in top.items() if k not in ("title", "description")},
        "$defs": dict(sorted(defs.items())),
    }
    return dict(_tidy(document))


def _with_events(model: Any) -> dict[str, Any]:
    """The model's definitions with subscription ``events`` enumerated (exact names and wildcards)."""
    defs = _model_schema(model)
    defs["InterceptSubscription"]["properties"]["events"] = _events(INTERCEPTABLE, "Interceptable events")
    defs["ObserveSubscription"]["properties"]["events"] = _events(ALL_EVENTS, "Events")
    return defs


def config_schema() -> dict[str, Any]:
    defs = _with_events(GatewayConfig)
    return _document(
        "GatewayConfig",
        defs,
        "AHP Gateway configuration (gateway.yaml)",
        "Validated by `ahp-gateway check`; set exactly one of hooks or registration. Secrets are "
        "referenced (tokenEnv, tokenRef, clientSecretRef), never literal.",
    )


def registration_schema() -> dict[str, Any]:
    defs = _with_events(RegistrationDocument)
    return _document(
        "RegistrationDocument",
        defs,
        "AHP registration document (as read by `registration:` in gateway.yaml)",
        "The portable hooks[] entries of an AHP registration; gateway extensions are not allowed here.",
    )


def policy_schema() -> dict[str, Any]:
    defs = _model_schema(PolicyFileSpec)
    for name, definition in _model_schema(RuleSpec).items():
        defs.setdefault(name, definition)
    one_effect = [{"required": [key]} for key in RULE_EFFECTS]
    defs["RuleSpec"]["oneOf"] = one_effect
    defs["RuleSpec"]["properties"]["events"] = _events(ALL_EVENTS, "Events the rule applies to")
    defs["EffectSpec"]["oneOf"] = copy.deepcopy(one_effect)
    defs["PolicyFileSpec"]["properties"]["rules"] = {
        "type": "array",
        "description": "Ordered rules; the first deny ends evaluation.",
        "items": {"$ref": "#/$defs/RuleSpec"},
    }
    assert EffectSpec.__name__ in defs
    return _document(
        "PolicyFileSpec",
        defs,
        "AHP Gateway policy file",
        "CEL rules with one effect each (deny, ask, message or inject), an optional fallback, and "
        "tests run by `ahp-gateway policy test`.",
    )


SCHEMAS: dict[str, Callable[[], dict[str, Any]]] = {
    "config": config_schema,
    "policy": policy_schema,
    "registration": registration_schema,
}


def render(kind: str) -> str:
    return json.dumps(SCHEMAS[kind](), indent=2, ensure_ascii=False) + "\n"


# ------------------------------------------------------------------------------------------------
# The Helm chart's values.schema.json


CHART_PREFIX = "config."
CLUSTER_HOSTS = {"enum": ["0.0.0.0", "::"], "description": "Must listen on all interfaces in a cluster."}


def _rename_refs(node: Any, prefix: str) -> Any:
    if isinstance(node, dict):
        return {
            k: (v.replace("#/$defs/", f"#/definitions/{prefix}") if k == "$ref" else _rename_refs(v, prefix))
            for k, v in node.items()
        }
    if isinstance(node, list):
        return [_rename_refs(item, prefix) for item in node]
    return node


def chart_config_schema() -> tuple[dict[str, Any], dict[str, Any]]:
    """(the ``config`` property, the definitions it references) for the chart's values schema:
    the configuration schema plus what the chart itself decides (listeners on all interfaces,
    `shutdown` and `reload.watch` from other values)."""
    schema = config_schema()
    defs = schema.pop("$defs")
    for name in ("Listen", "Admin"):
        defs[name]["properties"]["host"] = dict(CLUSTER_HOSTS)
        defs[name]["properties"]["port"] = {"type": "integer", "minimum": 1, "maximum": 65535}
    defs["ReloadOptions"]["properties"]["watch"] = {"not": {}, "description": "Set by the chart from reloadStrategy."}
    root = {k: v for k, v in schema.items() if not k.startswith("$")}
    root["description"] = (
        "gateway.yaml, merged over the chart defaults; generated from the gateway's configuration "
        "models (`ahp-gateway schema --kind config`). Validated in full by `ahp-gateway check`."
    )
    root["properties"]["shutdown"] = {
        "not": {},
        "description": "Set by the chart from the top-level `shutdown` values.",
    }
    root.pop("title", None)
    return _rename_refs(root, CHART_PREFIX), {
        CHART_PREFIX + name: _rename_refs(d, CHART_PREFIX) for name, d in sorted(defs.items())
    }


def chart_values_schema(current: dict[str, Any]) -> dict[str, Any]:
    """``current`` (the chart's values.schema.json) with ``config`` and its definitions regenerated."""
    config, definitions = chart_config_schema()
    out = dict(current)
    out["properties"] = {**current["properties"], "config": config}
    kept = {k: v for k, v in current.get("definitions", {}).items() if not k.startswith(CHART_PREFIX)}
    out["definitions"] = {**kept, **definitions}
    return out


def main(argv: list[str]) -> int:
    """``python -m gateway.schema_cmd charts/ahp-gateway/values.schema.json``: regenerate in place."""
    if len(argv) != 1:
        sys.stderr.write("usage: python -m gateway.schema_cmd PATH/TO/values.schema.json\n")
        return 2
    path = Path(argv[0])
    updated = chart_values_schema(json.loads(path.read_text(encoding="utf-8")))
    path.write_text(json.dumps(updated, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
