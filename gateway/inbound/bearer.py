"""Inbound bearer tokens: a file of SHA-256 hashes, each mapped to a principal.

The file (YAML or JSON; a key of a mounted Kubernetes Secret works) is a list of
``{sha256: <64 lowercase hex>, principal: {name, attributes}}``. It is re-read when it changes
(checked at most once per ``recheck`` seconds; Secret volumes rotate by symlink swap). A broken
file keeps the last good table and is logged; the tokens themselves are never stored, logged or
compared except as digests, and every comparison is constant-time over the whole table.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import re
import time
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

import yaml

from gateway.inbound.principal import Principal, Refusal

log = logging.getLogger("ahp_gateway")
SHA256_HEX = re.compile(r"[0-9a-f]{64}")
TOKEN68 = re.compile(r"[A-Za-z0-9\-._~+/]+=*")


class TokenFileError(Exception):
    """The tokens file is unreadable or malformed (the message never contains a token)."""


def parse_tokens(text: str, where: str) -> tuple[tuple[bytes, Principal], ...]:
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise TokenFileError(f"{where}: not YAML/JSON ({exc.__class__.__name__})") from None
    if not isinstance(data, list):
        raise TokenFileError(f"{where}: must be a list of {{sha256, principal}} entries")
    seen: set[str] = set()
    table: list[tuple[bytes, Principal]] = []
    for index, entry in enumerate(data):
        at = f"{where}: [{index}]"
        if not isinstance(entry, dict) or set(entry) - {"sha256", "principal"}:
            raise TokenFileError(f"{at}: an entry has exactly the keys sha256 and principal")
        digest = entry.get("sha256")
        if not isinstance(digest, str) or not SHA256_HEX.fullmatch(digest):
            raise TokenFileError(f"{at}.sha256: must be 64 lowercase hex characters (the token's SHA-256)")
        if digest in seen:
            raise TokenFileError(f"{at}.sha256: duplicate hash")
        seen.add(digest)
        principal = entry.get("principal")
        if not isinstance(principal, dict) or not isinstance(principal.get("name"), str) or not principal["name"]:
            raise TokenFileError(f"{at}.principal.name: a non-empty string is required")
        attributes = principal.get("attributes", {})
        if not isinstance(attributes, dict) or not all(isinstance(k, str) for k in attributes):
            raise TokenFileError(f"{at}.principal.attributes: must be a map with string keys")
        table.append(
            (bytes.fromhex(digest), Principal(principal["name"], MappingProxyType(dict(attributes)), "bearer"))
        )
    return tuple(table)


def bearer_credential(headers: Mapping[str, str] | Any) -> str | Refusal | None:
    """The token of the one ``Authorization: Bearer`` header; None when absent."""
    getall = getattr(headers, "getall", None)
    values: list[Any] = list(getall("Authorization", [])) if getall is not None else [headers.get("Authorization")]
    values = [v for v in values if isinstance(v, str)]
    if not values:
        return None
    if len(values) > 1:
        return Refusal(401, "malformed", 'Bearer error="invalid_request"')
    value: str = values[0]
    scheme, _, token = value.partition(" ")
    token = token.strip(" ")
    if scheme.lower() != "bearer" or not TOKEN68.fullmatch(token):
        return Refusal(401, "malformed", 'Bearer error="invalid_request"')
    return token


class TokenTable:
    def __init__(self, path: Path, *, recheck: float = 1.0) -> None:
        self.path = path
        self._recheck = recheck
        self._checked = -1e18
        self._stamp: tuple[int, int, int] | None = None
        self._table: tuple[tuple[bytes, Principal], ...] = ()
        self._load(initial=True)

    def __len__(self) -> int:
        return len(self._table)

    def _load(self, *, initial: bool = False) -> None:
        try:
            stat = self.path.stat()
            stamp = (stat.st_ino, stat.st_mtime_ns, stat.st_size)
            if stamp == self._stamp:
                return
            table = parse_tokens(self.path.read_text(encoding="utf-8"), str(self.path))
        except (OSError, UnicodeDecodeError, TokenFileError) as exc:
            message = str(exc) if isinstance(exc, TokenFileError) else f"{self.path}: unreadable"
            if initial:
                raise TokenFileError(message) from None
            if self._stamp is not None:
                log.error("inbound tokens file rejected, keeping the last good one: %s", message)
                self._stamp = None  # report once per change, retry on the next check
            return
        if not initial:
            log.info("inbound tokens file reloaded (%d token(s))", len(table))
        self._table, self._stamp = table, stamp

    def refresh(self) -> None:
        now = time.monotonic()
        if now - self._checked >= self._recheck:
            self._checked = now
            self._load()

    def lookup(self, token: str) -> Principal | None:
        """Constant-time over the table: every digest is compared, no early exit."""
        self.refresh()
        presented = hashlib.sha256(token.encode("utf-8")).digest()
        found: Principal | None = None
        for digest, principal in self._table:
            if hmac.compare_digest(digest, presented):
                found = principal
        return found


class BearerAuthenticator:
    scheme = "bearer"

    def __init__(self, table: TokenTable) -> None:
        self.table = table

    async def authenticate(self, headers: Mapping[str, str]) -> Principal | Refusal:
        token = bearer_credential(headers)
        if token is None:
            return Refusal(401, "missing", "Bearer")
        if isinstance(token, Refusal):
            return token
        principal = self.table.lookup(token)
        if principal is None:
            return Refusal(401, "unknown_token", 'Bearer error="invalid_token"')
        return principal
