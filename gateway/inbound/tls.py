"""Optional TLS termination for the harness listener, reloaded when the files change.

The listening context hands every handshake to the current inner context (``sni_callback``
swaps it), so a renewed certificate, key or client CA applies to new connections without a
restart; a broken set of files keeps the last good context and is logged. With ``clientCaFile``
a client certificate is required and verified (mTLS); its identity may become the principal.
A certificate copied into an HTTP header is never an identity (protocol §12).
"""

from __future__ import annotations

import logging
import os
import ssl
import time
from pathlib import Path
from types import MappingProxyType
from typing import Any

from gateway.config.models import InboundTls
from gateway.inbound.principal import Principal

log = logging.getLogger("ahp_gateway")


def _context(cert: Path, key: Path, client_ca: Path | None) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(str(cert), str(key))
    if client_ca is not None:
        context.load_verify_locations(cafile=str(client_ca))
        context.verify_mode = ssl.CERT_REQUIRED
    return context


class TlsTerminator:
    def __init__(self, cfg: InboundTls, base: Path, *, recheck: float = 1.0) -> None:
        def resolve(name: str) -> Path:
            return Path(os.path.abspath(base / name))

        self.cert, self.key = resolve(cfg.certFile), resolve(cfg.keyFile)
        self.client_ca = resolve(cfg.clientCaFile) if cfg.clientCaFile else None
        self._recheck = recheck
        self._checked = time.monotonic()
        self._stamp = self._signature()
        self._inner = _context(self.cert, self.key, self.client_ca)  # errors surface at start
        self.reloads = 0
        outer = _context(self.cert, self.key, self.client_ca)
        outer.sni_callback = self._pick
        self.context = outer

    @property
    def mutual(self) -> bool:
        return self.client_ca is not None

    def _signature(self) -> tuple[Any, ...]:
        out: list[Any] = []
        for path in (self.cert, self.key, self.client_ca):
            if path is None:
                continue
            try:
                st = path.stat()
                out.append((st.st_ino, st.st_mtime_ns, st.st_size))
            except OSError:
                out.append(None)
        return tuple(out)

    def _pick(self, sslobj: Any, server_name: str | None, context: ssl.SSLContext) -> None:
        self.maybe_reload()
        sslobj.context = self._inner

    def maybe_reload(self, *, force: bool = False) -> bool:
        now = time.monotonic()
        if not force and now - self._checked < self._recheck:
            return False
        self._checked = now
        stamp = self._signature()
        if stamp == self._stamp:
            return False
        try:
            inner = _context(self.cert, self.key, self.client_ca)
        except (OSError, ssl.SSLError, ValueError) as exc:
            log.error("TLS files rejected, keeping the last good certificate (%s)", exc.__class__.__name__)
            self._stamp = stamp
            return False
        self._inner, self._stamp = inner, stamp
        self.reloads += 1
        log.info("TLS certificate reloaded")
        return True


def certificate_principal(peercert: dict[str, Any] | None) -> Principal | None:
    """A verified client certificate as a principal: the subject CN (else the first URI or DNS
    subject alternative name) and the subject and SANs as attributes."""
    if not peercert:
        return None
    subject: dict[str, str] = {key: value for rdn in peercert.get("subject", ()) for key, value in rdn}
    sans = peercert.get("subjectAltName", ())
    uris = [v for k, v in sans if k == "URI"]
    dns = [v for k, v in sans if k == "DNS"]
    name = subject.get("commonName") or (uris[0] if uris else None) or (dns[0] if dns else None)
    if not name:
        return None
    attributes = {"subject": ",".join(f"{k}={v}" for k, v in subject.items()), "uris": uris, "dnsNames": dns}
    return Principal(name, MappingProxyType(attributes), "mtls")
