"""What a configuration needs from the machine it runs on, resolved as ``serve`` would: every
file it names (TLS certificates and keys, CA bundles, the inbound tokens file, the decision log
and capture targets, the upload spool directory) and every credential reference (``tokenEnv``, ``tokenRef``,
``clientSecretRef``, ``privateKeyRef``: an unset or empty variable, a missing, unreadable or
empty file, a private key that is not one).

``check`` reports these as issues (file, line, JSON path, reason), ``serve`` refuses to start on
them with the same lines, and a reload that introduces one is refused. Reasons name the variable
or file, never a value read from it. ``check --no-resolve`` skips this step where the secrets are
not mounted (CI, the chart's ``helm test`` pod)."""

from __future__ import annotations

import os
import ssl
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gateway.config.issues import ConfigError, Issue, PathItem, json_path
from gateway.config.load import LoadedConfig, Source, line_of
from gateway.config.models import GatewayBackend
from gateway.credentials.bearer import BearerToken, CredentialUnavailable
from gateway.credentials.oauth import check_private_key
from gateway.inbound.bearer import TokenFileError, parse_tokens


def _reason(exc: OSError) -> str:
    if isinstance(exc, FileNotFoundError):
        return "file not found"
    if isinstance(exc, PermissionError):
        return "permission denied"
    if isinstance(exc, IsADirectoryError):
        return "is a directory"
    return f"cannot read ({exc.strerror or exc.__class__.__name__})".lower()


def _readable(path: Path) -> str | None:
    """Why ``path`` cannot be read as a file, or None."""
    try:
        with path.open("rb") as handle:
            handle.read(1)
    except OSError as exc:
        return _reason(exc)
    return None


def _ca_bundle(path: Path) -> str | None:
    problem = _readable(path)
    if problem is not None:
        return problem
    try:
        ssl.create_default_context(cafile=str(path))
    except (ssl.SSLError, ValueError):
        return "holds no PEM certificate"
    except OSError as exc:
        return _reason(exc)
    return None


def _secret(ref: str, base: Path) -> BearerToken:
    scheme, _, rest = ref.partition(":")
    return BearerToken(env=rest) if scheme == "env" else BearerToken(file=Path(os.path.abspath(base / rest)))


def _writable(path: Path) -> str | None:
    """Why ``serve`` could not append to ``path`` (creating it and its directories), or None."""
    if path.exists():
        if path.is_dir():
            return "is a directory"
        return None if os.access(path, os.W_OK) else "permission denied"
    parent = path.parent
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir():
        return f"{parent} is not a directory"
    return None if os.access(parent, os.W_OK | os.X_OK) else f"directory {parent} is not writable"


def _directory(path: Path) -> str | None:
    """Why files could not be created in the directory ``path`` (made when missing), or None."""
    if path.exists():
        if not path.is_dir():
            return "is not a directory"
        return None if os.access(path, os.W_OK | os.X_OK) else "permission denied"
    return _writable(path)


def require_resolved(loaded: LoadedConfig, *, secrets: bool = True, text: str | None = None) -> None:
    """Raise :class:`ConfigError` with :func:`unresolved`'s issues, if any."""
    issues = unresolved(loaded, secrets=secrets, text=text)
    if issues:
        raise ConfigError(issues, list(loaded.warnings))


def unresolved(loaded: LoadedConfig, *, secrets: bool = True, text: str | None = None) -> list[Issue]:
    """Every file or credential of ``loaded`` that ``serve`` could not use, as config issues.
    ``secrets=False``: only the upstreams' CA bundles, which compiling the snapshot reads;
    ``text``: the configuration's own text when it was not read from its path (stdin)."""
    cfg = loaded.config
    base = loaded.base_dir
    issues: list[Issue] = []
    hooks_file = loaded.files[1] if cfg.registration else loaded.path

    def add(file: Path, items: tuple[PathItem, ...], message: str) -> None:
        own = text is not None and file == loaded.path
        line = Source(file, text).line(items) if own else line_of(file, items)
        issues.append(Issue(str(file), json_path(items), message, line))

    def named(name: str) -> Path:
        return Path(os.path.abspath(base / name))

    def check_file(file: Path, items: tuple[PathItem, ...], name: str, test: Callable[[Path], str | None]) -> bool:
        problem = test(named(name))
        if problem is not None:
            add(file, items, f"{named(name)}: {problem}")
        return problem is None

    def credential(file: Path, items: tuple[PathItem, ...], ref: BearerToken, key: bool = False) -> None:
        try:
            value = ref.token()
            if key:
                check_private_key(value)
        except CredentialUnavailable as exc:
            add(file, items, str(exc))

    def auth(file: Path, items: tuple[PathItem, ...], binding: Any) -> None:
        if binding is None:
            return
        if getattr(binding, "type", "oauth") == "bearer":
            field = "tokenEnv" if binding.tokenEnv else "tokenRef"
            credential(file, (*items, field), BearerToken.from_config(binding.tokenEnv, binding.tokenRef, base))
            return
        secret_ref = getattr(binding, "clientSecretRef", None)
        key_ref = getattr(binding, "privateKeyRef", None)
        if secret_ref:
            credential(file, (*items, "clientSecretRef"), _secret(secret_ref, base))
        if key_ref and getattr(binding, "tokenEndpointAuthMethod", None) == "private_key_jwt":
            credential(file, (*items, "privateKeyRef"), _secret(key_ref, base), key=True)

    for index, hook in enumerate(loaded.hooks):
        if isinstance(hook, GatewayBackend) and hook.caFile:
            check_file(hooks_file, ("hooks", index, "caFile"), hook.caFile, _ca_bundle)
    if not secrets:
        return issues
    source = loaded.path
    inbound = cfg.inbound
    if inbound.auth.type == "bearer":
        items: tuple[PathItem, ...] = ("inbound", "auth", "tokensFile")
        path = named(inbound.auth.tokensFile)
        if check_file(source, items, inbound.auth.tokensFile, _readable):
            try:
                parse_tokens(path.read_text(encoding="utf-8"), str(path))
            except (TokenFileError, UnicodeDecodeError, OSError) as exc:
                add(source, items, str(exc) if isinstance(exc, TokenFileError) else f"{path}: unreadable")
    elif inbound.auth.type == "oauth" and inbound.auth.caFile:
        check_file(source, ("inbound", "auth", "caFile"), inbound.auth.caFile, _ca_bundle)
    tls = inbound.tls
    if tls is not None:
        at: tuple[PathItem, ...] = ("inbound", "tls")
        cert_ok = check_file(source, (*at, "certFile"), tls.certFile, _readable)
        key_ok = check_file(source, (*at, "keyFile"), tls.keyFile, _readable)
        if cert_ok and key_ok:
            try:
                ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).load_cert_chain(named(tls.certFile), named(tls.keyFile))
            except (ssl.SSLError, ValueError, OSError) as exc:
                add(source, (*at, "certFile"), f"certificate and key do not load together ({exc.__class__.__name__})")
        if tls.clientCaFile:
            check_file(source, (*at, "clientCaFile"), tls.clientCaFile, _ca_bundle)
    for index, hook in enumerate(loaded.hooks):
        at = ("hooks", index)
        auth(hooks_file, (*at, "authentication"), hook.authentication)
        for s_index, sub in enumerate(hook.subscriptions):
            if sub.upload is not None:
                auth(hooks_file, (*at, "subscriptions", s_index, "upload", "auth"), sub.upload.auth)
    for index, issuer in enumerate(cfg.trustedIssuers):
        at = ("trustedIssuers", index)
        auth(source, at, issuer)
        if issuer.caFile:
            check_file(source, (*at, "caFile"), issuer.caFile, _ca_bundle)
    if cfg.log.decisions not in ("stdout", "stderr", "off"):
        check_file(source, ("log", "decisions"), cfg.log.decisions, _writable)
    if cfg.log.capture:
        check_file(source, ("log", "capture"), cfg.log.capture, _writable)
    if cfg.uploads is not None and cfg.uploads.storage.spoolDir:  # made at the first spooled upload
        check_file(source, ("uploads", "storage", "spoolDir"), cfg.uploads.storage.spoolDir, _directory)
    return issues
