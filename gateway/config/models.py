"""Configuration models. Field names are the user-facing contract (docs/configuration.md).

Unknown fields are accepted and reported as warnings (AHP-CORE-003: receivers ignore unknown
fields in registration documents); they never enable anything.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, field_validator, model_validator

from gateway.protocol import headers as header_syntax
from gateway.protocol import v01
from gateway.protocol.events import ALL_EVENTS_SET, INTERCEPTABLE_SET, WILDCARD
from gateway.protocol.schemas import PROTOCOL_VERSIONS

REVERSE_DNS = r"^(?:[A-Za-z][A-Za-z0-9_-]*\.)+[A-Za-z][A-Za-z0-9_-]*$"
ENV_NAME = r"^[A-Za-z_][A-Za-z0-9_]*$"
SECRET_FIELDS = frozenset(
    ("token", "bearerToken", "value", "secret", "password", "clientSecret", "accessToken", "apiKey")
)
SELECTION = Literal["body", "metadata", "omit"]
CREDENTIAL_HEADERS = frozenset(("authorization", "proxy-authorization", "cookie", "x-api-key"))
BINDING_HEADERS = frozenset(
    {"host", "content-length", "transfer-encoding", "connection", "keep-alive", "upgrade", "te", "trailer", "expect"}
    | {"content-type", "accept"}
)
"""Headers the HTTP binding itself writes (framing and media type): a configured one would
duplicate or contradict them."""


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
    # field docstrings are the descriptions of `ahp-gateway schema` and docs/reference/configuration.md
    model_config = ConfigDict(extra="allow", frozen=True, populate_by_name=True, use_attribute_docstrings=True)


RETIRED_GRANIAN = (
    "the experimental granian listener was retired: the default listener (aiohttp with the fast lane) serves "
    "that traffic; remove listen.server (docs/configuration.md)"
)


class Listen(Model):
    """The harness-facing AHP listener."""

    # ``server`` stays a key with ``aiohttp`` its only value: configurations that spell out the
    # default keep loading, and one that still names the retired granian listener gets an error
    # that says so instead of an unknown-value message.

    host: str = "127.0.0.1"
    """Address to bind; a non-loopback address needs inbound authentication or inbound.allowUnauthenticated."""
    port: int = Field(8080, ge=0, le=65535)
    """TCP port (0: any free port). serve --port and $AHP_GATEWAY_PORT override it."""
    path: str = Field("/", pattern=r"^/")
    """Path of the AHP endpoint; /native/<harness> and uploads.path are served beside it."""
    server: Literal["aiohttp"] = Field("aiohttp", description="HTTP server of the harness listener (aiohttp only).")
    fastLane: bool = Field(
        True,
        description="aiohttp server: serve plain AHP requests (POST listen.path, JSON, Content-Length) straight "
        "from the socket; every other request is handed to aiohttp. false: aiohttp serves everything.",
    )

    @field_validator("server", mode="before")
    @classmethod
    def _retired(cls, value: Any) -> Any:
        if value == "granian":
            raise ValueError(RETIRED_GRANIAN)
        return value


class Admin(Model):
    host: str = "127.0.0.1"
    """Address of the admin listener."""
    port: int = Field(9464, ge=0, le=65535)
    """TCP port of the admin listener (0: any free port). serve --admin-port and $AHP_GATEWAY_ADMIN_PORT override it."""


class Limits(Model):
    maxBodyBytes: int = Field(1_048_576, ge=1024, description="Largest harness request body; larger gets 413.")
    deadlineMs: int = Field(2000, ge=1, description="Total budget for one intercept, all upstreams included.")
    maxResponseBytes: int = Field(4_194_304, ge=1024, description="Largest upstream answer accepted.")
    maxInflight: int = Field(
        1000, ge=0, description="Intercepts served at once per worker; beyond it -32003 at once (0: unbounded)."
    )
    headerTimeoutMs: int = Field(10_000, ge=10, description="Request line and headers must arrive within this.")
    bodyTimeoutMs: int = Field(30_000, ge=10, description="A request body must arrive within this after its headers.")
    idleTimeoutSeconds: float = Field(75.0, gt=0, description="Idle keep-alive connections close after this.")
    maxConnections: int = Field(4096, ge=1, description="Open connections on the main listener; more get 503.")
    adminMaxConnections: int = Field(64, ge=1, description="Open connections on the admin listener (its own cap).")


class Frontend(Model):
    """How harnesses should register the gateway (used in hooks/configuration answers)."""

    timeoutMs: int | None = Field(None, ge=1)
    """Intercept timeout harnesses should register (default: limits.deadlineMs + 500)."""
    failurePolicy: Literal["fail-open", "fail-closed"] = "fail-closed"
    """Failure policy harnesses should register for the gateway."""


class ObserveOptions(Model):
    queueSize: int = Field(2048, ge=1, description="Queued observations (raw bodies); bounds memory under overload.")
    queueBytes: int = Field(
        64 * 1024 * 1024,
        ge=1024,
        description="Bytes of queued observations (raw bodies, until delivered); beyond, they are dropped and counted.",
    )
    workers: int = Field(8, ge=1, le=256)
    """Concurrent observe deliveries."""
    timeoutMs: int = Field(2000, ge=1)
    """Timeout of one observe delivery."""
    dedupEntries: int = Field(50_000, ge=2, description="(event, subscription) pairs remembered for observe fan-out.")
    dedupTtlSeconds: float = Field(120, gt=0, description="How long a served pair is remembered.")


class LogOptions(Model):
    decisions: str = Field("stdout", description="stdout, stderr, off, or a file path (relative to the config).")
    includeContent: bool = Field(False, description="Also log tool inputs and answer texts (never secrets).")
    sampleNoEffect: float = Field(1.0, ge=0.0, le=1.0, description="Fraction of no_effect decisions logged.")
    format: Literal["text", "json"] = Field("text", description="Format of the gateway's own log lines (stderr).")
    capture: str | None = Field(
        None,
        description="Record every hooks/intercept request and answer as JSON lines for `ahp-gateway replay` "
        "(a path relative to the config). SENSITIVE: full tool inputs. Off by default.",
    )
    captureMaxBytes: int = Field(64 * 1024 * 1024, ge=4096, description="Rotate the capture file at this size.")
    captureFiles: int = Field(3, ge=1, le=100, description="Capture files kept, the current one included.")

    @field_validator("decisions", mode="before")
    @classmethod
    def _off(cls, v: Any) -> Any:
        """``false`` (JSON, or a YAML 1.1 reader's ``off``) and ``Off``/``OFF`` mean off, not a file."""
        return "off" if v is False or (isinstance(v, str) and v.lower() == "off") else v


class MetricsOptions(Model):
    enabled: bool = True
    """Serve /metrics on the admin listener."""


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
    """Fail fast after repeated operational failures of this upstream."""
    failureThreshold: int = Field(5, ge=1, description="Consecutive operational failures that open the circuit.")
    openSeconds: float = Field(5.0, gt=0, description="How long calls fail fast before one probe.")


class ContentSelection(Model):
    default: SELECTION
    """What every content category carries unless named: body (the content), metadata (hash and size) or omit. Other keys name categories."""

    @model_validator(mode="after")
    def _categories(self) -> ContentSelection:
        for key, value in (self.model_extra or {}).items():
            if value not in ("body", "metadata", "omit"):
                raise ValueError(f"content.{key} must be body, metadata or omit")
        return self

    def as_dict(self) -> dict[str, str]:
        return {"default": self.default, **(self.model_extra or {})}


def check_events(events: list[str], allowed: frozenset[str], mode: str) -> list[str]:
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
    """Event types: exact names, '*' or 'family.*'."""
    content: ContentSelection
    """Which content this subscription receives."""
    includeNative: bool = False
    """Also send the harness's raw native payload."""
    upload: UploadBinding | None = None
    """The upstream's own upload receiver, for attachments it needs as refs."""
    filters: dict[str, Any] | None = None
    """AHP subscription filters (portable; evaluated by harnesses)."""
    scope: Literal["managed", "project", "user"] | None = None
    """Registration scope: managed, project or user (managed requires disableable: false)."""
    disableable: bool | None = None
    """Whether a user may disable this subscription."""
    when: str | None = Field(None, description="CEL condition (gateway extension).")
    onError: Literal["match", "skip"] = "match"
    """When `when` fails to evaluate: match (call the upstream) or skip it."""

    @model_validator(mode="after")
    def _managed(self) -> Subscription:
        if self.scope == "managed" and self.disableable is not False:
            raise ValueError("scope: managed requires disableable: false")
        return self


class InterceptSubscription(Subscription):
    mode: Literal["intercept"]
    """intercept: the upstream decides."""
    timeoutMs: int = Field(ge=1)
    """How long this upstream may take for one intercept (bounded by limits.deadlineMs)."""
    failurePolicy: Literal["fail-open", "fail-closed"]
    """What a failure of this upstream settles to: fail-closed denies, fail-open skips it."""

    @field_validator("events")
    @classmethod
    def _events(cls, v: list[str]) -> list[str]:
        return check_events(v, INTERCEPTABLE_SET, "intercept")


class ObserveSubscription(Subscription):
    mode: Literal["observe"]
    """observe: the upstream is notified of the settled event."""

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
        return check_events(v, ALL_EVENTS_SET, "observe")


AnySubscription = Annotated[InterceptSubscription | ObserveSubscription, Field(discriminator="mode")]


class HttpTransport(Model):
    type: Literal["http"]
    """An AHP backend over HTTP."""
    url: str = Field(pattern=r"^https?://[^\s/?#]+")
    """Endpoint URL (https, or http with allowInsecure or to loopback); no credentials in it."""
    headers: dict[str, str] = Field(default_factory=dict)
    """Extra request headers; never credentials (use authentication)."""

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
            if not header_syntax.NAME.fullmatch(name):
                raise ValueError(f"invalid header name {name!r}")
            if name.lower() in CREDENTIAL_HEADERS:
                raise ValueError(f"header {name!r} would carry a literal credential (AHP-SEC-001); use authentication")
            if name.lower() in BINDING_HEADERS:
                raise ValueError(f"header {name!r} is written by the HTTP binding itself")
            if header_syntax.BAD_VALUE.search(value):
                raise ValueError(f"header {name!r} contains CR, LF or NUL")
        return v


class StdioPool(Model):
    size: int = Field(1, ge=1, le=64, description="Children of a persistent upstream, started on demand.")
    minIdle: int = Field(
        0, ge=0, le=64, description="Children started ahead of need, at load and reload (at most size)."
    )
    startTimeoutMs: int = Field(
        5000,
        ge=1,
        le=600_000,
        description="How long a child that has not answered yet may take for its first answer; a request"
        " that times out meanwhile does not kill it (its late answer is dropped).",
    )

    @model_validator(mode="after")
    def _min_idle_within_size(self) -> StdioPool:
        if self.minIdle > self.size:
            raise ValueError(f"minIdle ({self.minIdle}) must not exceed size ({self.size})")
        return self


class StdioTransport(Model):
    type: Literal["stdio"]
    """An AHP backend over stdio: a child process."""
    command: str = Field(min_length=1)
    """Program to start."""
    args: list[str] = Field(default_factory=list)
    """Its arguments."""
    lifecycle: Literal["persistent", "per_event"]
    """persistent: one long-lived child (or a pool); per_event: a child per message."""
    cwd: str | None = None
    """Working directory of the child (default: the gateway's)."""
    env: dict[str, str] = Field(default_factory=dict)
    """Environment variables added for the child."""
    pool: StdioPool | None = Field(None, description="Gateway extension: several persistent children.")

    @model_validator(mode="after")
    def _pool_needs_persistent(self) -> StdioTransport:
        if self.pool is not None and self.lifecycle != "persistent":
            raise ValueError("pool applies to lifecycle: persistent only (per_event starts a child per message)")
        return self


class LocalTransport(Model):
    type: Literal["local"]
    """The built-in CEL policy backend, in process."""
    policies: list[str] = Field(min_length=1, description="Policy files, relative to the config file.")
    allowEmpty: bool = Field(
        False, description="Start (and reload) even when the policy files hold no rule; otherwise that is an error."
    )


AnyTransport = Annotated[HttpTransport | StdioTransport | LocalTransport, Field(discriminator="type")]


class BearerAuth(Model):
    type: Literal["bearer"]
    """A static bearer token."""
    tokenEnv: str | None = Field(None, pattern=ENV_NAME)
    """Environment variable holding the token (or use tokenRef)."""
    tokenRef: str | None = Field(None, min_length=1)
    """env:NAME or file:/path holding the token."""

    @model_validator(mode="after")
    def _exactly_one(self) -> BearerAuth:
        if (self.tokenEnv is None) == (self.tokenRef is None):
            raise ValueError("bearer needs exactly one of tokenEnv or tokenRef")
        if self.tokenRef is not None and not re.match(r"^(env:[A-Za-z_][A-Za-z0-9_]*|file:.+)$", self.tokenRef):
            raise ValueError("tokenRef must be env:NAME or file:/path")
        return self


SECRET_REF = r"^(env:[A-Za-z_][A-Za-z0-9_]*|file:.+)$"
TOKEN_AUTH_METHODS = Literal["client_secret_basic", "client_secret_post", "private_key_jwt"]


class OAuthAuth(Model):
    type: Literal["oauth"]
    """OAuth 2.1 access tokens obtained by the gateway."""
    resource: str = Field(min_length=1)
    """The upstream's resource identifier (RFC 8707)."""
    issuer: str = Field(pattern=r"^https://")
    """The authorization server (https)."""
    clientId: str = Field(min_length=1)
    """The gateway's client id at that server."""
    clientSecretRef: str | None = Field(None, min_length=1)
    """env:NAME or file:/path holding the client secret."""
    flow: Literal["authorization_code_pkce", "client_credentials"]
    """client_credentials for the gateway itself; authorization_code_pkce is refused at load (no user to consent)."""
    scopes: list[str] = Field(default_factory=list)
    """Scopes requested."""
    tokenEndpointAuthMethod: TOKEN_AUTH_METHODS = Field(
        "client_secret_basic", description="Gateway extension: how the client authenticates to the token endpoint."
    )
    privateKeyRef: str | None = Field(
        None, pattern=SECRET_REF, description="Gateway extension: PEM or JWK private key for private_key_jwt."
    )

    @model_validator(mode="after")
    def _key_for_method(self) -> OAuthAuth:
        if self.tokenEndpointAuthMethod == "private_key_jwt" and self.privateKeyRef is None:
            raise ValueError("private_key_jwt needs privateKeyRef (env:NAME or file:/path)")
        return self

    @field_validator("issuer")
    @classmethod
    def _no_userinfo(cls, v: str) -> str:
        if has_userinfo(v):
            raise ValueError(USERINFO_MESSAGE)
        return v


AnyAuth = Annotated[BearerAuth | OAuthAuth, Field(discriminator="type")]


UPLOAD_ENDPOINT = (
    r"^(?:https://|http://(?:localhost|127\.[0-9]{1,3}\.[0-9]{1,3}\.[0-9]{1,3}|\[::1\])(?::[0-9]+)?(?:[/?#]|$))"
)


class UploadBinding(Model):
    """A subscription's ``upload`` (content-upload.schema.json): the upstream's own receiver."""

    endpoint: str = Field(pattern=UPLOAD_ENDPOINT, description="POSTed to exactly; https, or http to loopback.")
    timeoutMs: int = Field(ge=1)
    """Timeout of one upload to this receiver."""
    maxBytes: int = Field(ge=0)
    """Largest attachment uploaded to this receiver."""
    auth: AnyAuth | None = Field(None, description="Independent binding; never inherits the event credentials.")

    @model_validator(mode="before")
    @classmethod
    def _portable(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("auth") is not None:
            _guard_auth(data["auth"])
        return data


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
    """The upstream's identity, reverse-DNS: used in metrics, logs and effect attribution."""
    transport: AnyTransport
    """How the upstream is reached: http, stdio or local."""
    authentication: AnyAuth | None = None
    """Credentials for an http upstream: bearer or oauth, by reference only."""
    subscriptions: list[AnySubscription] = Field(min_length=1)
    """Which events this upstream intercepts or observes, with timeout and failure policy."""

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
    """When the entry's `when` fails to evaluate: match (call the upstream) or skip it."""
    mode: Literal["enforce", "shadow"] = "enforce"
    """enforce: its answers count; shadow: called beside the chain, answers logged and never enforced."""
    allowInsecure: bool = Field(False, description="Permit plain http to a non-loopback host.")
    circuitBreaker: CircuitBreakerOptions = Field(default_factory=CircuitBreakerOptions)  # type: ignore[arg-type]
    """Failing fast after repeated operational failures of this upstream."""
    caFile: str | None = Field(None, description="PEM bundle that replaces platform trust for this upstream.")
    protocolVersion: Literal["draft", "0.1"] = Field("draft", description="The wire version this upstream speaks.")

    @model_validator(mode="after")
    def _v01_scope(self) -> GatewayBackend:
        """A 0.1 backend can intercept tool.before and nothing else (0.1 observation is not bridged)."""
        if self.protocolVersion != v01.VERSION:
            return self
        if self.transport.type == "local":
            raise ValueError('protocolVersion "0.1" applies to http and stdio upstreams only')
        for sub in self.subscriptions:
            if sub.mode != "intercept" or sub.events != ["tool.before"]:
                raise ValueError(
                    'a protocolVersion "0.1" upstream supports exactly one kind of subscription: '
                    "mode intercept, events [tool.before]"
                )
        return self


class RegistrationDocument(Model):
    protocolVersion: str
    """The document's AHP version."""
    hooks: list[Backend] = Field(min_length=1)
    """The hooks[] entries."""


class InboundBearer(Model):
    """Harness tokens as SHA-256 hashes in a YAML/JSON file (a mounted Secret works), re-read on change."""

    type: Literal["bearer"]
    """Bearer tokens, checked against hashes in tokensFile."""
    tokensFile: str = Field(min_length=1, description="List of {sha256, principal: {name, attributes}}.")


class InboundOAuth(Model):
    """The gateway as an OAuth protected resource: JWT access tokens from one issuer."""

    type: Literal["oauth"]
    """JWT access tokens from one OAuth issuer."""
    issuer: str = Field(pattern=r"^https://")
    """The issuer (https); its metadata gives the JWKS."""
    audience: str = Field(pattern=r"^https://[^#\s]+$", description="The gateway's resource identifier (RFC 9728).")
    requiredScopes: list[str] = Field(default_factory=list)
    """Scopes every token must carry."""
    jwksUri: str | None = Field(None, pattern=r"^https://", description="Default: the issuer metadata's jwks_uri.")
    clockSkewSeconds: float = Field(30.0, ge=0, le=300)
    """Tolerance for exp, nbf and iat."""
    jwksRefetchSeconds: float = Field(30.0, ge=0, description="Least time between JWKS fetches for unknown kids.")
    jwksCacheSeconds: float = Field(3600.0, ge=0, description="JWKS older than this is fetched again (key removal).")
    algorithms: list[str] = Field(default_factory=lambda: ["RS256", "PS256", "ES256", "EdDSA"], min_length=1)
    """Accepted signature algorithms (asymmetric only)."""
    caFile: str | None = Field(None, description="PEM bundle that replaces platform trust for the issuer.")
    requireAccessTokenTyp: StrictBool = Field(
        True,
        description="Only tokens whose JOSE typ is at+jwt (RFC 9068 §4); false also accepts typ JWT or none.",
    )

    @field_validator("algorithms")
    @classmethod
    def _asymmetric(cls, v: list[str]) -> list[str]:
        for alg in v:
            if alg.startswith("HS") or alg.lower() == "none":
                raise ValueError(f"algorithm {alg!r} is not allowed for access tokens (asymmetric only)")
        return v


class InboundNone(Model):
    type: Literal["none"]
    """No authentication: loopback callers only, unless allowUnauthenticated."""


InboundAuth = Annotated[InboundBearer | InboundOAuth | InboundNone, Field(discriminator="type")]


class InboundTls(Model):
    certFile: str = Field(min_length=1)
    """PEM certificate chain of the harness listener."""
    keyFile: str = Field(min_length=1)
    """PEM private key of the harness listener."""
    clientCaFile: str | None = Field(None, description="Require client certificates signed by this CA (mTLS).")


class Inbound(Model):
    """Who may call the gateway (harness side)."""

    auth: InboundAuth = Field(default_factory=lambda: InboundNone(type="none"))
    """How harnesses authenticate: none, bearer or oauth."""
    allowUnauthenticated: bool = Field(False, description="Serve type none off loopback (a mesh authenticates).")
    tls: InboundTls | None = None
    """TLS on the harness listener (absent: plain HTTP, e.g. behind a mesh)."""


class UploadStorage(Model):
    type: Literal["memory", "spool", "redis"] = Field(
        "memory",
        description="memory: this process (spoolDir, when set, takes what exceeds memoryBytes); spool: memory then "
        "spoolDir (required); redis: state.redis, shared by every worker and replica.",
    )
    memoryBytes: int = Field(
        16 * 1024 * 1024,
        ge=0,
        description="Uploads held in memory, in total (type redis: being received by one process; 0: totalBytes).",
    )
    spoolDir: str | None = Field(None, description="Directory for uploads beyond memoryBytes (none: refuse them).")
    totalBytes: int = Field(256 * 1024 * 1024, ge=0, description="Memory and spool together.")
    ttlSeconds: float = Field(600.0, gt=0, description="How long an upload stays referable.")

    @model_validator(mode="after")
    def _spool_needs_dir(self) -> UploadStorage:
        if self.type == "spool" and not self.spoolDir:
            raise ValueError("type: spool needs spoolDir")
        return self


class Uploads(Model):
    """The gateway as an AHP upload receiver (protocol §13.2)."""

    path: str = Field("/uploads", pattern=r"^/")
    """Path of the upload receiver on the harness listener."""
    maxBytes: int = Field(10 * 1024 * 1024, ge=0)
    """Largest upload accepted."""
    reuseSeconds: float = Field(
        300.0,
        ge=0,
        description="How long a ref confirmed by an upstream's receiver is reused for the same bytes (0: never); "
        "keep it below that receiver's retention.",
    )
    storage: UploadStorage = Field(default_factory=UploadStorage)  # type: ignore[arg-type]
    """Where uploads are held, and for how long."""


class RedisState(Model):
    """The Redis every worker and replica shares (``uploads.storage.type: redis``, shared rate
    limits). The password is never in the file: ``passwordEnv`` or ``passwordFile``."""

    url: str = Field(pattern=r"^rediss?://[^\s]+$", description="redis://host:port/db, or rediss:// for TLS.")
    keyPrefix: str = Field("ahp-gateway:", min_length=1, description="Prefix of every key the gateway writes.")
    timeoutMs: int = Field(
        50, ge=1, le=10_000, description="Per operation, and never beyond what is left of the request's deadline."
    )
    passwordEnv: str | None = Field(None, pattern=ENV_NAME, description="Environment variable holding the password.")
    passwordFile: str | None = Field(None, min_length=1, description="Relative to the config file (a mounted Secret).")
    username: str | None = Field(None, min_length=1, description="Redis ACL user (with a password).")
    caFile: str | None = Field(None, description="PEM bundle that replaces platform trust (rediss:// only).")
    maxConnections: int = Field(32, ge=1, le=10_000, description="Connection pool size per process.")

    @field_validator("url")
    @classmethod
    def _no_userinfo(cls, v: str) -> str:
        if has_userinfo(v):
            raise ValueError(USERINFO_MESSAGE.replace("use authentication", "use passwordEnv or passwordFile"))
        return v

    @model_validator(mode="after")
    def _one_password(self) -> RedisState:
        if self.passwordEnv is not None and self.passwordFile is not None:
            raise ValueError("set at most one of passwordEnv or passwordFile")
        if self.caFile is not None and not self.url.startswith("rediss://"):
            raise ValueError("caFile applies to rediss:// URLs only")
        return self


class State(Model):
    """State shared between processes."""

    redis: RedisState | None = None
    """The Redis shared by every worker and replica; absent: nothing is shared."""


class RateLimit(Model):
    """A token bucket per key (docs/operations/rate-limits.md), checked before the chain."""

    id: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$", description="Names the limit (metric label, error).")
    key: str = Field(min_length=1, description="CEL over the routing activation; must produce a string.")
    requestsPerSecond: float = Field(gt=0, le=1_000_000, description="Refill rate of the bucket.")
    burst: int = Field(ge=1, le=10_000_000, description="Bucket size: requests allowed at once after a quiet spell.")
    scope: Literal["shared", "local"] = Field("shared", description="shared: state.redis; local: per process.")
    onStateError: Literal["fail-open", "fail-closed"] = Field(
        "fail-open", description="When Redis cannot answer within state.redis.timeoutMs."
    )
    onError: Literal["match", "skip"] = Field(
        "match", description="Key evaluation error: match counts it under one shared error key; skip lets it pass."
    )
    maxInflight: int | None = Field(
        None, ge=1, le=1_000_000, description="Intercepts of one key served at once by one process; more get -32003."
    )


class TrustedIssuer(Model):
    """An authorization server the gateway may use for upstreams discovered via RFC 9728."""

    issuer: str = Field(pattern=r"^https://")
    """The authorization server (https)."""
    clientId: str = Field(min_length=1)
    """The gateway's client id there."""
    clientSecretRef: str | None = Field(None, pattern=SECRET_REF)
    """env:NAME or file:/path holding the client secret."""
    scopes: list[str] = Field(default_factory=list, description="The only scopes ever requested from this issuer.")
    tokenEndpointAuthMethod: TOKEN_AUTH_METHODS = "client_secret_basic"
    """How the gateway authenticates to the token endpoint."""
    privateKeyRef: str | None = Field(None, pattern=SECRET_REF)
    """env:NAME or file:/path holding the private key for private_key_jwt."""
    caFile: str | None = Field(None, description="PEM bundle that replaces platform trust for this issuer.")

    @model_validator(mode="after")
    def _credential(self) -> TrustedIssuer:
        if self.tokenEndpointAuthMethod == "private_key_jwt":
            if self.privateKeyRef is None:
                raise ValueError("private_key_jwt needs privateKeyRef")
        elif self.clientSecretRef is None:
            raise ValueError(f"{self.tokenEndpointAuthMethod} needs clientSecretRef")
        return self


class DiscoveryPolicy(Model):
    """Destination policy for URLs learnt from upstreams (resource metadata, authorization servers)."""

    allowAddresses: list[str] = Field(
        default_factory=list, description="IPs/CIDRs allowed although loopback, private or link-local."
    )

    @field_validator("allowAddresses")
    @classmethod
    def _networks(cls, v: list[str]) -> list[str]:
        import ipaddress

        for item in v:
            try:
                ipaddress.ip_network(item, strict=False)
            except ValueError:
                raise ValueError(f"{item!r} is not an IP address or CIDR") from None
        return v


class GatewayConfig(Model):
    id: str = Field(pattern=REVERSE_DNS)
    """This gateway's identity, reverse-DNS (org.example.gateway): the default deny code prefix and the extension key of its own effects."""
    protocolVersions: list[str] = Field(default_factory=lambda: ["draft"], min_length=1)
    """AHP versions served to harnesses: draft, and 0.1 bridged through the draft pipeline (list draft too)."""
    listen: Listen = Field(default_factory=Listen)  # type: ignore[arg-type]
    """The harness-facing AHP listener."""
    admin: Admin = Field(default_factory=Admin)  # type: ignore[arg-type]
    """The admin listener: /healthz, /readyz and /metrics."""
    limits: Limits = Field(default_factory=Limits)  # type: ignore[arg-type]
    """Sizes, deadlines and connection caps of the harness listener."""
    fanout: Literal["serial", "parallel"] = "serial"
    """serial: upstreams of a chain are called in order and a deny ends the chain; parallel: all start at once, answers still settle in chain order."""
    frontend: Frontend = Field(default_factory=Frontend)  # type: ignore[arg-type]
    """How harnesses should register the gateway (the hooks/configuration answer)."""
    observe: ObserveOptions = Field(default_factory=ObserveOptions)  # type: ignore[arg-type]
    """Delivery of hooks/observe notifications to observing upstreams."""
    hooks: list[GatewayBackend] | None = None
    """The upstream chain: ordered hooks[] entries (set this or registration)."""
    registration: str | None = None
    """Path of an AHP registration document whose hooks[] are the chain, relative to this file (set this or hooks)."""
    headers: list[str] = Field(default_factory=list, description="Request headers exposed to CEL.")
    log: LogOptions = Field(default_factory=LogOptions)  # type: ignore[arg-type]
    """The decision log, the capture file for replay, and the gateway's own log format."""
    metrics: MetricsOptions = Field(default_factory=MetricsOptions)
    """Prometheus metrics on the admin listener."""
    tracing: TracingOptions = Field(default_factory=TracingOptions)  # type: ignore[arg-type]
    """W3C trace context and OpenTelemetry spans."""
    shutdown: ShutdownOptions = Field(default_factory=ShutdownOptions)  # type: ignore[arg-type]
    """Graceful drain on SIGTERM."""
    reload: ReloadOptions = Field(default_factory=ReloadOptions)  # type: ignore[arg-type]
    """Reloading the configuration and policy files while serving."""
    inbound: Inbound = Field(default_factory=Inbound)  # type: ignore[arg-type]
    """Who may call the gateway: authentication and TLS of the harness listener."""
    uploads: Uploads | None = Field(None, description="Absent: no upload receiver; attachments become gaps.")
    trustedIssuers: list[TrustedIssuer] = Field(default_factory=list)
    """Authorization servers the gateway may use for upstreams discovered via RFC 9728."""
    discovery: DiscoveryPolicy = Field(default_factory=DiscoveryPolicy)
    """Which addresses URLs learnt from upstreams may point to."""
    state: State = Field(default_factory=State)
    """State shared by every worker and replica (Redis): shared uploads and shared rate limits."""
    rateLimits: list[RateLimit] = Field(default_factory=list, description="Checked before the chain, in order.")

    @field_validator("rateLimits")
    @classmethod
    def _unique_limits(cls, v: list[RateLimit]) -> list[RateLimit]:
        ids = [limit.id for limit in v]
        for ident in ids:
            if ids.count(ident) > 1:
                raise ValueError(f"duplicate rate limit id {ident!r}")
        return v

    @field_validator("protocolVersions")
    @classmethod
    def _versions(cls, v: list[str]) -> list[str]:
        known = [*PROTOCOL_VERSIONS, v01.VERSION]
        for version in v:
            if version not in known:
                raise ValueError(f"protocol version {version!r} is not implemented (supported: {known})")
        if v01.VERSION in v and v01.DRAFT not in v:
            raise ValueError('protocolVersions: "0.1" is bridged through the draft pipeline; list "draft" too')
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
