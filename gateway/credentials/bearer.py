"""Bearer tokens resolved at call time (AHP-SEC-001: never literal in configuration)."""

from __future__ import annotations

import os
import time
from pathlib import Path


class CredentialUnavailable(Exception):
    """The secret could not be resolved; the call must not be sent unauthenticated."""


class BearerToken:
    """``tokenEnv`` / ``tokenRef: env:NAME`` read the environment on every call (cheap);
    ``tokenRef: file:/path`` is re-read when the file's mtime or size changes, checked at most
    once per ``recheck`` seconds (Kubernetes Secret volumes rotate by symlink swap)."""

    __slots__ = ("_cached", "_checked", "_env", "_file", "_recheck", "_stamp")

    def __init__(self, *, env: str | None = None, file: Path | None = None, recheck: float = 1.0) -> None:
        self._env = env
        self._file = file
        self._recheck = recheck
        self._cached: str | None = None
        self._stamp: tuple[int, int] | None = None
        self._checked = -1e18

    @classmethod
    def from_config(cls, token_env: str | None, token_ref: str | None, base: Path) -> BearerToken:
        if token_env:
            return cls(env=token_env)
        assert token_ref is not None
        scheme, _, rest = token_ref.partition(":")
        if scheme == "env":
            return cls(env=rest)
        return cls(file=Path(os.path.abspath(base / rest)))

    def describe(self) -> str:
        """Where the token comes from: safe for logs and ``check`` output."""
        return f"env:{self._env}" if self._env else f"file:{self._file}"

    async def authorization(self) -> str:
        return "Bearer " + self.token()

    def unresolved(self) -> str | None:
        """Why the token cannot be read now (naming the variable or file, never a value), or
        None: ``/readyz`` asks, as the next call would."""
        try:
            self.token()
        except CredentialUnavailable as exc:
            return str(exc)
        return None

    def token(self) -> str:
        if self._env is not None:
            value = os.environ.get(self._env, "").strip()
            if not value:
                raise CredentialUnavailable(f"environment variable {self._env} is not set")
            return value
        return self._from_file()

    def _from_file(self) -> str:
        now = time.monotonic()
        if self._cached is not None and now - self._checked < self._recheck:
            return self._cached
        self._checked = now
        assert self._file is not None
        try:
            stat = self._file.stat()
            stamp = (stat.st_mtime_ns, stat.st_size)
            if stamp != self._stamp or self._cached is None:
                value = self._file.read_text(encoding="utf-8").strip()
                self._cached, self._stamp = value or None, stamp
        except OSError as exc:
            self._cached, self._stamp = None, None
            raise CredentialUnavailable(f"token file {self._file} is unreadable") from exc
        if not self._cached:
            raise CredentialUnavailable(f"token file {self._file} is empty")
        return self._cached
