"""Load and validate ``gateway.yaml`` (or JSON) and any referenced registration document.

Every problem becomes an :class:`Issue` naming the file, the JSON path, the line where known, and
the reason; all of them are collected before failing, so ``ahp-gateway check`` can print them all.
"""

from __future__ import annotations

import difflib
import errno
import importlib.util
import ipaddress
import os
import re
import stat
import types
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal, Union, get_args, get_origin
from urllib.parse import urlsplit

import yaml
from pydantic import BaseModel, ValidationError

from gateway.config import yaml_source
from gateway.config.issues import ConfigError, Issue, PathItem, json_path
from gateway.config.models import Backend, GatewayBackend, GatewayConfig, HttpTransport, RegistrationDocument
from gateway.protocol.events import INTERCEPTABLE, expand

DEFAULT_CONFIG = Path(__file__).resolve().parent.parent / "data" / "gateway.default.yaml"


@dataclass(frozen=True)
class LoadedConfig:
    config: GatewayConfig
    hooks: tuple[Backend, ...]
    path: Path
    warnings: tuple[Issue, ...]
    files: tuple[Path, ...]
    """Every file the configuration was built from (watched for hot reload)."""

    @property
    def base_dir(self) -> Path:
        return self.path.parent

    @property
    def is_default(self) -> bool:
        return self.path == DEFAULT_CONFIG


MAX_FILE_BYTES = 1024 * 1024
"""A configuration or policy file larger than this is refused before it is parsed: the YAML
parser is pure Python, and a hot reload must not stall on a file tens of megabytes long."""
_NATIVE_TARGET = re.compile(r"/native/[^/]+")
"""The paths aiohttp routes to a native hook (``POST /native/{harness}``)."""


class NotARegularFile(OSError):
    """A FIFO, a socket or a device: reading one could block a reload for good."""


class FileTooLarge(OSError):
    pass


class BadSymlink(OSError):
    """A symlink to nothing, or to itself."""


def _read_text(path: Path) -> str:
    """The file's text, if it is a regular file (after symlinks) within :data:`MAX_FILE_BYTES`.
    Opened without blocking and checked on the open descriptor, so a FIFO put in its place
    between a check and the open cannot hang a reload."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        if path.is_symlink() and exc.errno in (errno.ENOENT, errno.ELOOP):
            raise BadSymlink(path) from None
        raise
    with os.fdopen(fd, "rb") as handle:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise NotARegularFile(path)
        raw = handle.read(MAX_FILE_BYTES + 1)
    if len(raw) > MAX_FILE_BYTES:
        raise FileTooLarge(path)
    return raw.decode("utf-8")


class Source:
    """A parsed file and its YAML node tree, to turn JSON paths into line numbers."""

    def __init__(self, path: Path, text: str | None = None) -> None:
        self.path = path
        self.text = _read_text(path) if text is None else text
        self.data: Any = yaml_source.parse(self.text)
        self._node: Any = None

    def line(self, items: tuple[PathItem, ...] | list[PathItem]) -> int | None:
        try:
            node = self._node or yaml.compose(self.text, Loader=yaml.SafeLoader)
        except yaml.YAMLError:  # pragma: no cover - the text parsed once already
            return None
        self._node = node
        found = node
        for item in items:
            if isinstance(found, yaml.MappingNode):
                for key, value in found.value:
                    if key.value == item:
                        found = value
                        break
                else:
                    break
            elif isinstance(found, yaml.SequenceNode) and isinstance(item, int) and item < len(found.value):
                found = found.value[item]
            else:
                break
        return int(found.start_mark.line) + 1 if found is not None else None


def read_source(
    path: Path, issues: list[Issue], text: str | None = None, missing: str = "file not found"
) -> Source | None:
    """The parsed file, or None with the reason appended to ``issues`` (policy files load the same way)."""
    try:
        text = _read_text(path) if text is None else text  # read once: the issues below quote it
        return Source(path, text)
    except FileNotFoundError:
        issues.append(Issue(str(path), "$", missing))
    except NotARegularFile:
        issues.append(Issue(str(path), "$", "not a regular file"))
    except BadSymlink:
        issues.append(Issue(str(path), "$", "a dangling or looping symlink"))
    except FileTooLarge:
        issues.append(Issue(str(path), "$", f"larger than {MAX_FILE_BYTES} bytes"))
    except UnicodeDecodeError as exc:
        line = exc.object[: exc.start].count(b"\n") + 1
        issues.append(Issue(str(path), "$", f"invalid UTF-8 byte 0x{exc.object[exc.start]:02x}", line))
    except OSError as exc:
        issues.append(Issue(str(path), "$", f"cannot read: {exc.__class__.__name__}"))
    except RecursionError:
        issues.append(Issue(str(path), "$", "parse error: nested too deeply"))
    except yaml_source.DuplicateKeyError as exc:
        mark = exc.problem_mark
        assert mark is not None
        assert text is not None
        items = yaml_source.path_to(text, mark) or []
        issues.append(Issue(str(path), json_path(items), str(exc.problem), mark.line + 1))
    except yaml.reader.ReaderError as exc:  # a character YAML does not allow (NUL, most controls)
        assert text is not None
        line = text[: exc.position].count("\n") + 1
        issues.append(Issue(str(path), "$", f"parse error: character #x{exc.character:04x} is not allowed", line))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        problem = getattr(exc, "problem", None) or "invalid YAML/JSON"
        issues.append(Issue(str(path), "$", f"parse error: {problem}", mark.line + 1 if mark else None))
    return None


def _real_path(data: Any, loc: tuple[Any, ...]) -> list[PathItem]:
    """Pydantic locations include union tags; keep only the steps that exist in the data."""
    out: list[PathItem] = []
    node = data
    for item in loc:
        if (isinstance(node, dict) and item in node) or (
            isinstance(node, list) and isinstance(item, int) and 0 <= item < len(node)
        ):
            out.append(item)
            node = node[item]
        elif isinstance(node, dict) and isinstance(item, str) and not item.startswith(("function-", "tagged-")):
            if item in ("http", "stdio", "local", "bearer", "oauth", "intercept", "observe"):
                continue  # discriminator tag
            out.append(item)  # a missing field: name it
            node = None
    return out


def validation_issues(exc: ValidationError, source: Source, prefix: tuple[PathItem, ...] = ()) -> list[Issue]:
    """Pydantic errors as issues with file, JSON path and line (shared with policy files)."""
    issues = []
    for err in exc.errors(include_url=False):
        path = [*prefix, *_real_path(_at(source.data, prefix), err["loc"])]
        message = err["msg"].removeprefix("Value error, ")
        if err["type"] == "missing":
            message = "required field is missing"
            if path and path[-1] == "subscriptions":
                message += " (the gateway does not discover an upstream's subscriptions at run time)"
        elif err["type"] in ("union_tag_invalid", "union_tag_not_found"):
            field = err["ctx"]["discriminator"].strip("'")
            given = err.get("input", {}).get(field) if isinstance(err.get("input"), dict) else None
            message = (
                f"{field} is required"
                if given is None
                else f"unknown {field} {given!r} (expected {err['ctx'].get('expected_tags', '')})"
            )
        issues.append(Issue(str(source.path), json_path(path), message, source.line(path)))
    return issues


def _at(data: Any, prefix: tuple[PathItem, ...]) -> Any:
    for item in prefix:
        data = data[item]
    return data


Unknown = tuple[tuple[PathItem, ...], str]
"""(path of an unknown key or a mistyped value, the message)."""


def unknown_message(key: object, allowed: list[str]) -> str:
    """The unknown-field warning, naming the closest allowed key at that level for a near miss."""
    close = difflib.get_close_matches(str(key), allowed, n=1) if isinstance(key, str) else []
    return "unknown field ignored" + (f" (did you mean `{close[0]}`?)" if close else "")


def _unknown_fields(model: BaseModel, items: tuple[PathItem, ...] = ()) -> Iterator[Unknown]:
    for key in model.model_extra or {}:
        if type(model).__name__ != "ContentSelection":
            yield (*items, key), unknown_message(key, list(type(model).model_fields))
    for name in type(model).model_fields:
        value = getattr(model, name)
        if isinstance(value, BaseModel):
            yield from _unknown_fields(value, (*items, name))
        elif isinstance(value, list):
            for index, child in enumerate(value):
                if isinstance(child, BaseModel):
                    yield from _unknown_fields(child, (*items, name, index))


def _raw_unknown_fields(model: type[BaseModel], data: Any, items: tuple[PathItem, ...] = ()) -> Iterator[Unknown]:
    """Unknown keys in data that failed validation (no model instance to ask), found by walking
    the model classes; a union member is chosen by its discriminator or the keys it knows."""
    for found, message in _walk(model, data, items):
        if message.startswith("unknown field"):
            yield found, message


def _raw_type_errors(model: type[BaseModel], data: Any) -> Iterator[Unknown]:
    """Quoted numbers (``timeoutMs: "100"``) and booleans as numbers: pydantic's lax mode would convert
    them, but the schema says integer, and a harness reading the same file would refuse it."""
    for found, message in _walk(model, data, ()):
        if not message.startswith("unknown field"):
            yield found, message


def _walk(model: type[BaseModel], data: Any, items: tuple[PathItem, ...]) -> Iterator[Unknown]:
    if not isinstance(data, dict):
        return
    fields = model.model_fields
    if model.__name__ != "ContentSelection":
        for key in data:
            if key not in fields:
                yield (*items, key), unknown_message(key, list(fields))
    for name, field in fields.items():
        if name in data:
            kinds = _scalars(field.annotation)
            value = data[name]
            if kinds and isinstance(value, str):
                yield (*items, name), f"must be {_kind_name(kinds)}, not a string (remove the quotes)"
            elif kinds and isinstance(value, bool):
                yield (*items, name), f"must be {_kind_name(kinds)}, not a boolean"
            else:
                yield from _raw_child(field.annotation, value, (*items, name))


def _scalars(annotation: Any) -> set[type]:
    """The number types a field takes (``int | None`` -> {int}); empty for anything else. Booleans
    keep their YAML 1.1 spellings (``watch: Yes``), so only numbers are checked."""
    origin = get_origin(annotation)
    if origin is Annotated:
        return _scalars(get_args(annotation)[0])
    if origin is Union or origin is types.UnionType:
        found = [_scalars(a) for a in get_args(annotation) if a is not type(None)]
        return set().union(*found) if found and all(found) else set()
    return {annotation} if annotation in (int, float) else set()


def _kind_name(kinds: set[type]) -> str:
    return "an integer" if kinds == {int} else "a number"


def _raw_child(annotation: Any, value: Any, items: tuple[PathItem, ...]) -> Iterator[Unknown]:
    origin, args = get_origin(annotation), get_args(annotation)
    if origin is Annotated:
        yield from _raw_child(args[0], value, items)
    elif origin is Union or origin is types.UnionType:
        members = [a for a in args if a is not type(None)]
        lists = [a for a in members if get_origin(a) is list]
        if isinstance(value, list) and lists:
            yield from _raw_child(lists[0], value, items)
        models = [m for m in (_model_of(a) for a in members) if m is not None]
        if isinstance(value, dict) and models:
            yield from _walk(max(models, key=lambda m: _fit(m, value)), value, items)
    elif origin is list and isinstance(value, list) and args:
        for index, child in enumerate(value):
            yield from _raw_child(args[0], child, (*items, index))
    elif (model := _model_of(annotation)) is not None:
        yield from _walk(model, value, items)


def _model_of(annotation: Any) -> type[BaseModel] | None:
    if get_origin(annotation) is Annotated:
        annotation = get_args(annotation)[0]
    return annotation if isinstance(annotation, type) and issubclass(annotation, BaseModel) else None


def _fit(model: type[BaseModel], value: dict[Any, Any]) -> int:
    """How well ``value`` fits ``model``: a matching Literal (a discriminator) wins, then known keys."""
    score = sum(1 for key in value if key in model.model_fields)
    for name, field in model.model_fields.items():
        if get_origin(field.annotation) is Literal and value.get(name) in get_args(field.annotation):
            score += 1000
    return score


def _is_loopback(url: str) -> bool:
    return _is_loopback_host(urlsplit(url).hostname or "")


def _is_loopback_host(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _semantic(
    cfg: GatewayConfig,
    hooks: tuple[Backend, ...],
    source: Source,
    hooks_source: Source,
    hooks_prefix: tuple[PathItem, ...],
) -> tuple[list[Issue], list[Issue]]:
    """Cross-field rules; hook problems are reported against the file the hooks came from."""
    errors: list[Issue] = []
    warnings: list[Issue] = []

    def issue(
        items: tuple[PathItem, ...],
        message: str,
        severity: Literal["error", "warning"] = "error",
        where: Source | None = None,
    ) -> None:
        target = errors if severity == "error" else warnings
        origin = where or hooks_source
        target.append(Issue(str(origin.path), json_path(items), message, origin.line(list(items)), severity))

    seen: dict[str, int] = {}
    for index, hook in enumerate(hooks):
        at = (*hooks_prefix, index)
        if hook.id in seen:
            issue((*at, "id"), f"duplicate hook id {hook.id!r} (first at hooks[{seen[hook.id]}])")
        seen.setdefault(hook.id, index)
        transport = hook.transport
        if isinstance(transport, HttpTransport):
            insecure = isinstance(hook, GatewayBackend) and hook.allowInsecure
            if transport.url.startswith("http://") and not _is_loopback(transport.url) and not insecure:
                issue(
                    (*at, "transport", "url"),
                    "plain http is only allowed to loopback; use https or set allowInsecure: true",
                )
        elif transport.type == "local" and not isinstance(hook, GatewayBackend):
            issue((*at, "transport", "type"), "local transports exist only in gateway.yaml, not in registrations")
        if hook.authentication is not None and hook.authentication.type == "oauth":
            if hook.authentication.flow != "client_credentials":
                issue(
                    (*at, "authentication", "flow"),
                    "authorization_code_pkce needs an interactive user; a gateway supports client_credentials",
                )
            elif (
                not hook.authentication.clientSecretRef
                and hook.authentication.tokenEndpointAuthMethod != "private_key_jwt"
            ):
                issue((*at, "authentication"), "client_credentials requires clientSecretRef")
        for sub_index, sub in enumerate(hook.subscriptions):
            sat = (*at, "subscriptions", sub_index)
            if sub.mode == "intercept":
                for pattern in sub.events:
                    if "*" in pattern and not expand([pattern], INTERCEPTABLE):
                        issue((*sat, "events"), f"{pattern!r} selects no interceptable event", "warning")
                if sub.timeoutMs > cfg.limits.deadlineMs:
                    issue(
                        (*sat, "timeoutMs"),
                        f"timeoutMs {sub.timeoutMs} exceeds limits.deadlineMs {cfg.limits.deadlineMs}; "
                        "the deadline caps it",
                        "warning",
                    )
            if sub.upload is not None:
                if cfg.uploads is None:
                    issue(
                        (*sat, "upload"),
                        "the gateway has no upload receiver (uploads:), so attachment bodies reach this upstream as gaps",
                        "warning",
                    )
                upload_auth = sub.upload.auth
                if upload_auth is not None and upload_auth.type == "oauth" and upload_auth.flow != "client_credentials":
                    issue((*sat, "upload", "auth", "flow"), "a gateway supports client_credentials only")
            if sub.filters is not None:
                issue((*sat, "filters"), "filters are optimisation hints and are not applied", "warning")
    inbound = cfg.inbound
    if (
        inbound.auth.type == "none"
        and not inbound.allowUnauthenticated
        and not (inbound.tls is not None and inbound.tls.clientCaFile)
        and not _is_loopback_host(cfg.listen.host)
    ):
        issue(
            ("inbound", "auth"),
            f"listen.host {cfg.listen.host!r} is not loopback and inbound.auth.type is none: use bearer or oauth, "
            "mTLS (inbound.tls.clientCaFile), or set inbound.allowUnauthenticated: true behind an authenticating mesh",
            where=source,
        )
    if cfg.uploads is not None and cfg.uploads.path == cfg.listen.path:
        # Both are POST routes of one listener: serving would fail registering the second.
        issue(
            ("uploads", "path"), f"uploads.path {cfg.uploads.path!r} is listen.path too: use another path", where=source
        )
    elif cfg.uploads is not None and _NATIVE_TARGET.fullmatch(cfg.uploads.path):
        issue(
            ("uploads", "path"),
            f"uploads.path {cfg.uploads.path!r} is a native hook target (POST /native/<harness>): use another path",
            where=source,
        )
    redis = cfg.state.redis
    if cfg.uploads is not None and cfg.uploads.storage.type == "redis" and redis is None:
        issue(("uploads", "storage", "type"), "type: redis needs state.redis (its url)", where=source)
    for index, limit in enumerate(cfg.rateLimits):
        if limit.scope == "shared" and redis is None:
            issue(
                ("rateLimits", index, "scope"),
                f"rate limit {limit.id!r}: scope shared needs state.redis; configure it or use scope: local",
                where=source,
            )
    if redis is not None and redis.passwordFile is not None:
        secret = source.path.parent / redis.passwordFile
        if not secret.is_file():
            issue(("state", "redis", "passwordFile"), "the password file does not exist (yet)", "warning", source)
    if redis is not None and redis.passwordEnv is not None and redis.passwordEnv not in os.environ:
        issue(
            ("state", "redis", "passwordEnv"), f"environment variable {redis.passwordEnv} is not set", "warning", source
        )
    if cfg.uploads is not None and cfg.uploads.storage.totalBytes < cfg.uploads.maxBytes:
        issue(("uploads", "storage", "totalBytes"), "totalBytes is smaller than uploads.maxBytes", "warning", source)
    if cfg.observe.queueBytes < cfg.limits.maxBodyBytes:
        issue(
            ("observe", "queueBytes"),
            f"queueBytes {cfg.observe.queueBytes} < limits.maxBodyBytes {cfg.limits.maxBodyBytes}: "
            "a notification larger than queueBytes is always dropped",
            "warning",
            source,
        )
    if cfg.tracing.otel and importlib.util.find_spec("opentelemetry") is None:
        issue(("tracing", "otel"), "needs opentelemetry-api: pip install 'ahp-gateway[otel]'", where=source)
    if cfg.limits.deadlineMs >= cfg.frontend_timeout_ms:
        issue(
            ("limits", "deadlineMs"),
            f"deadlineMs {cfg.limits.deadlineMs} >= frontend.timeoutMs {cfg.frontend_timeout_ms}: "
            "the harness may time out before the gateway answers",
            "warning",
            source,
        )
    return errors, warnings


def load(path: Path | None = None, text: str | None = None) -> LoadedConfig:
    """Load, validate and cross-check; raise :class:`ConfigError` with every problem found.
    ``text``: the configuration itself (e.g. read from stdin); ``path`` then only names it and
    anchors its relative paths."""
    # absolute, but symlinks unresolved: a Kubernetes ConfigMap swaps its ..data link on update
    path = Path(os.path.abspath(path or DEFAULT_CONFIG))
    issues: list[Issue] = []
    source = read_source(path, issues, text)
    if source is None:
        raise ConfigError(issues)
    if not isinstance(source.data, dict):
        raise ConfigError([Issue(str(path), "$", "the configuration must be a mapping", 1)])
    mistyped = _type_issues(source, GatewayConfig)
    try:
        cfg = GatewayConfig.model_validate(source.data)
    except ValidationError as exc:
        raise ConfigError(
            _merged(mistyped, validation_issues(exc, source)), _unknown_issues(source, GatewayConfig)
        ) from None
    warnings = _unknown_issues(source, cfg)
    if mistyped:
        raise ConfigError(mistyped, warnings)
    files = [path]
    hooks: tuple[Backend, ...]
    hooks_source, prefix = source, ("hooks",)
    if cfg.registration is not None:
        reg_path = Path(os.path.abspath(path.parent / cfg.registration))
        reg_source = read_source(reg_path, issues)
        if reg_source is None:
            raise ConfigError(issues)
        files.append(reg_path)
        mistyped = _type_issues(reg_source, RegistrationDocument)
        try:
            doc = RegistrationDocument.model_validate(reg_source.data)
        except ValidationError as exc:
            more = _unknown_issues(reg_source, RegistrationDocument)
            raise ConfigError(_merged(mistyped, validation_issues(exc, reg_source)), warnings + more) from None
        if mistyped:
            raise ConfigError(mistyped, warnings + _unknown_issues(reg_source, doc))
        if doc.protocolVersion not in cfg.protocolVersions:
            raise ConfigError(
                [
                    Issue(
                        str(reg_path),
                        "$.protocolVersion",
                        f"{doc.protocolVersion!r} is not in protocolVersions",
                        reg_source.line(["protocolVersion"]),
                    )
                ],
                warnings + _unknown_issues(reg_source, doc),
            )
        warnings += _unknown_issues(reg_source, doc)
        hooks, hooks_source, prefix = tuple(doc.hooks), reg_source, ("hooks",)
    else:
        hooks = tuple(cfg.hooks or ())
    errors, more = _semantic(cfg, hooks, source, hooks_source, prefix)
    if errors:
        raise ConfigError(errors, warnings + more)
    return LoadedConfig(cfg, hooks, path, tuple(warnings + more), tuple(files))


def _unknown_issues(source: Source, model: BaseModel | type[BaseModel]) -> list[Issue]:
    """Unknown-field warnings of a validated model, or of the raw data when validation failed."""
    found = _unknown_fields(model) if isinstance(model, BaseModel) else _raw_unknown_fields(model, source.data)
    return [
        Issue(str(source.path), json_path(items), message, source.line(list(items)), "warning")
        for items, message in found
    ]


def _type_issues(source: Source, model: type[BaseModel]) -> list[Issue]:
    return [
        Issue(str(source.path), json_path(items), message, source.line(list(items)))
        for items, message in _raw_type_errors(model, source.data)
    ]


def _merged(first: list[Issue], then: list[Issue]) -> list[Issue]:
    """``first`` and the issues of ``then`` at other paths (one message per value)."""
    seen = {issue.path for issue in first}
    return first + [issue for issue in then if issue.path not in seen]


def line_of(file: Path | str, items: tuple[PathItem, ...] | list[PathItem]) -> int | None:
    """The line of ``items`` in ``file`` (for errors found after validation, e.g. CEL)."""
    try:
        return Source(Path(file)).line(list(items))
    except (OSError, yaml.YAMLError):
        return None
