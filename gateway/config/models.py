"""Configuration models. Field names are the user-facing contract (README, "Configuration").

Unknown fields are accepted and reported as warnings (AHP-CORE-003: receivers ignore unknown
fields in registration documents); they never enable anything.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from gateway.protocol.events import ALL_EVENTS_SET, INTERCEPTABLE_SET, WILDCARD
from gateway.protocol.schemas import PROTOCOL_VERSIONS

REVERSE_DNS = r"^(?:[A-Za-z][A-Za-z0-9_-]*\.)+[A-Za-z][A-Za-z0-9_-]*$"
ENV_NAME = r"^[A-Za-z_][A-Za-z0-9_]*$"
SECRET_FIELDS = frozenset(
    ("token", "bearerToken", "value", "secret", "password", "clientSecret", "accessToken", "apiKey")
)
SELECTION = Literal["body", "metadata", "omit"]
HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
CREDENTIAL_HEADERS = frozenset(("authorization", "proxy-authorization", "cookie", "x-api-key"))


def has_userinfo(url: str) -> bool:
    """Whether ``url`` carries user information (``user:pass@``, ``user@``, even ``@``) in its
    authority: a literal credential that HTTP clients send as Basic auth."""
    rest = url.partition("://")[2] if "://" in url else url
    authority = re.split(r"[/?#\\]", rest, maxsplit=1)[0]
    return "@" in authority or "%40" in authority.lower()


USERINFO_MESSAGE = (
    "the URL carries credentials (user information before '@'), a literal secret (AHP-SEC-001); "
    "remove them and use authentication"
)
"""Never echoes the URL: the credential would land in logs and ``check`` output."""


class Model(BaseModel):
    model_config = ConfigDict(extra="allow", frozen=True, populate_by_name=True)


class Listen(Model):
    host: str = "127.0.0.1"
    port: int = Field(8080, ge=0, le=65535)
    path: str = Field("/", pattern=r"^/")


class Admin(Model):
    host: str = "127.0.0.1"
    port: int = Field(9464, ge=0, le=65535)


class Limits(Model):
    maxBodyBytes: int = Field(1_048_576, ge=1024, description="Largest harness request body; larger gets 413.")
    deadlineMs: int = Field(2000, ge=1, description="Total budget for one intercept, all upstreams included.")
    maxResponseBytes: int = Field(4_194_304, ge=1024, description="Largest upstream answer accepted.")


class Frontend(Model):
    """How harnesses should register the gateway (used in hooks/configuration answers)."""

    timeoutMs: int | None = Field(None, ge=1)
    failurePolicy: Literal["fail-open", "fail-closed"] = "fail-closed"


class ObserveOptions(Model):
    queueSize: int = Field(2048, ge=1, description="Queued observations (raw bodies); bounds memory under overload.")
    workers: int = Field(8, ge=1, le=256)
    timeoutMs: int = Field(2000, ge=1)
    dedupEntries: int = Field(50_000, ge=2, description="(event, subscription) pairs remembered for observe fan-out.")
    dedupTtlSeconds: float = Field(120, gt=0, description="How long a served pair is remembered.")


class LogOptions(Model):
    decisions: str = Field("stdout", description="stdout, stderr, off, or a file path (relative to the config).")
    includeContent: bool = Field(False, description="Also log tool inputs and answer texts (never secrets).")
    sampleNoEffect: float = Field(1.0, ge=0.0, le=1.0, description="Fraction of no_effect decisions logged.")

    @field_validator("decisions", mode="before")
    @classmethod
    def _off(cls, v: Any) -> Any:
        """``false`` (JSON, or a YAML 1.1 reader's ``off``) and ``Off``/``OFF`` mean off, not a file."""
        return "off" if v is False or (isinstance(v, str) and v.lower() == "off") else v


class MetricsOptions(Model):
    enabled: bool = True


class TracingOptions(Model):
    propagate: bool = Field(True, description="Send a child W3C traceparent to every upstream.")
    otel: bool = Field(False, description="Record OpenTelemetry spans (needs an OpenTelemetry SDK to export).")


class ShutdownOptions(Model):
    drainDelaySeconds: float = Field(5.0, ge=0, description="Keep serving after SIGTERM while endpoints are removed.")
    drainTimeoutSeconds: float = Field(20.0, ge=0, description="Bound for finishing in-flight requests.")


class ReloadOptions(Model):
    watch: bool = Field(True, description="Reload when the config or policy files change (SIGHUP always reloads).")
    intervalSeconds: float = Field(2.0, gt=0, description="How often watched files are checked.")


class CircuitBreakerOptions(Model):
    enabled: bool = True
    failureThreshold: int = Field(5, ge=1, description="Consecutive operational failures that open the circuit.")
    openSeconds: float = Field(5.0, gt=0, description="How long calls fail fast before one probe.")


class ContentSelection(Model):
    default: SELECTION

    @model_validator(mode="after")
    def _categories(self) -> ContentSelection:
        for key, value in (self.model_extra or {}).items():
            if value not in ("body", "metadata", "omit"):
                raise ValueError(f"content.{key} must be body, metadata or omit")
        return self

    def as_dict(self) -> dict[str, str]:
        return {"default": self.default, **(self.model_extra or {})}


def _check_events(events: list[str], allowed: frozenset[str], mode: str) -> list[str]:
    if len(set(events)) != len(events):
        raise ValueError("events must be unique")
    for name in events:
        if WILDCARD.match(name):
            continue
        if name not in ALL_EVENTS_SET:
            raise ValueError(f"unknown event {name!r} (exact names, '*' or 'family.*' only)")
        if name not in allowed:
            raise ValueError(f"{name!r} cannot be intercepted; use an observe subscription")
    return events


class Subscription(Model):
    events: list[str] = Field(min_length=1)
    content: ContentSelection
    includeNative: bool = False
    upload: dict[str, Any] | None = None
    filters: dict[str, Any] | None = None
    scope: Literal["managed", "project", "user"] | None = None
    disableable: bool | None = None
    when: str | None = Field(None, description="CEL condition (gateway extension).")
    onError: Literal["match", "skip"] = "match"

    @model_validator(mode="after")
    def _managed(self) -> Subscription:
        if self.scope == "managed" and self.disableable is not False:
            raise ValueError("scope: managed requires disableable: false")
        return self


class InterceptSubscription(Subscription):
    mode: Literal["intercept"]
    timeoutMs: int = Field(ge=1)
    failurePolicy: Literal["fail-open", "fail-closed"]

    @field_validator("events")
    @classmethod
    def _events(cls, v: list[str]) -> list[str]:
        return _check_events(v, INTERCEPTABLE_SET, "intercept")


class ObserveSubscription(Subscription):
    mode: Literal["observe"]

    @model_validator(mode="before")
    @classmethod
    def _no_policy(cls, data: Any) -> Any:
        if isinstance(data, dict):
            for key in ("timeoutMs", "failurePolicy"):
                if key in data:
                    raise ValueError(f"observe subscriptions must not set {key} (AHP-FAIL-001)")
        return data

    @field_validator("events")
    @classmethod
    def _events(cls, v: list[str]) -> list[str]:
        return _check_events(v, ALL_EVENTS_SET, "observe")


AnySubscription = Annotated[InterceptSubscription | ObserveSubscription, Field(discriminator="mode")]


class HttpTransport(Model):
    type: Literal["http"]
    url: str = Field(pattern=r"^https?://[^\s/?#]+")
    headers: dict[str, str] = Field(default_factory=dict)

    @field_validator("url")
    @classmethod
    def _no_userinfo(cls, v: str) -> str:
        if has_userinfo(v):
            raise ValueError(USERINFO_MESSAGE)
        return v

    @field_validator("headers")
    @classmethod
    def _headers(cls, v: dict[str, str]) -> dict[str, str]:
        for name, value in v.items():
            if not HEADER_NAME.match(name):
                raise ValueError(f"invalid header name {name!r}")
            if name.lower() in CREDENTIAL_HEADERS:
                raise ValueError(f"header {name!r} would carry a literal credential (AHP-SEC-001); use authentication")
            if "\r" in value or "\n" in value:
                raise ValueError(f"header {name!r} contains CR/LF")
        return v


class StdioTransport(Model):
    type: Literal["stdio"]
    command: str = Field(min_length=1)
    args: list[str] = Field(default_factory=list)
    lifecycle: Literal["persistent", "per_event"]
    cwd: str | None = None
    env: dict[str, str] = Field(default_factory=dict)


class LocalTransport(Model):
    type: Literal["local"]
    policies: list[str] = Field(min_length=1, description="Policy files, relative to the config file.")
    allowEmpty: bool = Field(
        False, description="Start (and reload) even when the policy files hold no rule; otherwise that is an error."
    )


AnyTransport = Annotated[HttpTransport | StdioTransport | LocalTransport, Field(discriminator="type")]


class BearerAuth(Model):
    type: Literal["bearer"]
    tokenEnv: str | None = Field(None, pattern=ENV_NAME)
    tokenRef: str | None = Field(None, min_length=1)

    @model_validator(mode="after")
    def _exactly_one(self) -> BearerAuth:
        if (self.tokenEnv is None) == (self.tokenRef is None):
            raise ValueError("bearer needs exactly one of tokenEnv or tokenRef")
        if self.tokenRef is not None and not re.match(r"^(env:[A-Za-z_][A-Za-z0-9_]*|file:.+)$", self.tokenRef):
            raise ValueError("tokenRef must be env:NAME or file:/path")
        return self


class OAuthAuth(Model):
    type: Literal["oauth"]
    resource: str = Field(min_length=1)
    issuer: str = Field(pattern=r"^https://")
    clientId: str = Field(min_length=1)
    clientSecretRef: str | None = Field(None, min_length=1)
    flow: Literal["authorization_code_pkce", "client_credentials"]
    scopes: list[str] = Field(default_factory=list)

    @field_validator("issuer")
    @classmethod
    def _no_userinfo(cls, v: str) -> str:
        if has_userinfo(v):
            raise ValueError(USERINFO_MESSAGE)
        return v


AnyAuth = Annotated[BearerAuth | OAuthAuth, Field(discriminator="type")]


def _guard_auth(data: Any) -> Any:
    if isinstance(data, dict):
        literal = sorted(SECRET_FIELDS.intersection(data))
        if literal:
            raise ValueError(
                f"literal secret field {literal[0]!r} is not allowed (AHP-SEC-001); "
                "reference the secret with tokenEnv / tokenRef / clientSecretRef"
            )
        kind = data.get("type")
        if kind not in ("bearer", "oauth"):
            raise ValueError(
                f"authentication type {kind!r} is not a portable binding (AHP-AUTH-001): only bearer and oauth"
            )
    return data


class Backend(Model):
    """One ``hooks[]`` entry of an AHP registration document."""

    id: str = Field(pattern=REVERSE_DNS)
    transport: AnyTransport
    authentication: AnyAuth | None = None
    subscriptions: list[AnySubscription] = Field(min_length=1)

    @model_validator(mode="before")
    @classmethod
    def _portable(cls, data: Any) -> Any:
        if isinstance(data, dict):
            if "contentReceiver" in data:
                raise ValueError("contentReceiver is not supported (no compatibility alias exists)")
            if data.get("authentication") is not None:
                _guard_auth(data["authentication"])
                transport = data.get("transport")
                if isinstance(transport, dict) and transport.get("type") != "http":
                    raise ValueError("authentication applies to http transports only")
        return data


class GatewayBackend(Backend):
    """A ``hooks[]`` entry of ``gateway.yaml``: the portable fields plus gateway extensions."""

    when: str | None = Field(None, description="CEL condition for every subscription of this entry.")
    onError: Literal["match", "skip"] = "match"
    mode: Literal["enforce", "shadow"] = "enforce"
    allowInsecure: bool = Field(False, description="Permit plain http to a non-loopback host.")
    circuitBreaker: CircuitBreakerOptions = Field(default_factory=CircuitBreakerOptions)  # type: ignore[arg-type]
    caFile: str | None = Field(None, description="PEM bundle that replaces platform trust for this upstream.")


class RegistrationDocument(Model):
    protocolVersion: str
    hooks: list[Backend] = Field(min_length=1)


class GatewayConfig(Model):
    id: str = Field(pattern=REVERSE_DNS)
    protocolVersions: list[str] = Field(default_factory=lambda: ["draft"], min_length=1)
    listen: Listen = Field(default_factory=Listen)  # type: ignore[arg-type]
    admin: Admin = Field(default_factory=Admin)  # type: ignore[arg-type]
    limits: Limits = Field(default_factory=Limits)  # type: ignore[arg-type]
    fanout: Literal["serial", "parallel"] = "serial"
    frontend: Frontend = Field(default_factory=Frontend)  # type: ignore[arg-type]
    observe: ObserveOptions = Field(default_factory=ObserveOptions)  # type: ignore[arg-type]
    hooks: list[GatewayBackend] | None = None
    registration: str | None = None
    headers: list[str] = Field(default_factory=list, description="Request headers exposed to CEL.")
    log: LogOptions = Field(default_factory=LogOptions)  # type: ignore[arg-type]
    metrics: MetricsOptions = Field(default_factory=MetricsOptions)
    tracing: TracingOptions = Field(default_factory=TracingOptions)  # type: ignore[arg-type]
    shutdown: ShutdownOptions = Field(default_factory=ShutdownOptions)  # type: ignore[arg-type]
    reload: ReloadOptions = Field(default_factory=ReloadOptions)  # type: ignore[arg-type]

    @field_validator("protocolVersions")
    @classmethod
    def _versions(cls, v: list[str]) -> list[str]:
        for version in v:
            if version not in PROTOCOL_VERSIONS:
                raise ValueError(
                    f"protocol version {version!r} is not implemented (supported: {list(PROTOCOL_VERSIONS)})"
                )
        return v

    @field_validator("hooks")
    @classmethod
    def _non_empty(cls, v: list[GatewayBackend] | None) -> list[GatewayBackend] | None:
        if v is not None and not v:
            raise ValueError("hooks must not be empty (AHP-REG-001)")
        return v

    @model_validator(mode="after")
    def _one_source(self) -> GatewayConfig:
        if (self.hooks is None) == (self.registration is None):
            raise ValueError("set exactly one of hooks or registration")
        return self

    @property
    def frontend_timeout_ms(self) -> int:
        return self.frontend.timeoutMs or self.limits.deadlineMs + 500
