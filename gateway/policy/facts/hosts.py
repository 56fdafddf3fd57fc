"""Host names and addresses, canonical: one spelling per address, whatever notation was used.

``canonical`` lower-cases names and drops a trailing dot and brackets; a numeric host in any
notation the C resolver (``inet_aton``) or a URL parser accepts becomes the ``ipaddress`` text
form: ``0251.254.169.254``, ``0xa9.0xfe.0xa9.0xfe``, ``169.254.43518``, ``2852039166`` and
``[::ffff:169.254.169.254]`` are all ``169.254.169.254`` (IPv4-mapped, IPv4-compatible and
NAT64 ``64:ff9b::/96`` IPv6 addresses are reduced to their IPv4 address).
"""

from __future__ import annotations

import ipaddress
import re

_URL = re.compile(r"(?i)\b([a-z][a-z0-9+.-]{0,15})://([^\s/?#'\"`<>\\|;,)($]*)")
_NAME = re.compile(r"^[a-z0-9_]([a-z0-9_-]*[a-z0-9_])?(\.[a-z0-9_]([a-z0-9_-]*[a-z0-9_])?)*$")


def _ipv4_part(text: str) -> int | None:
    t = text.lower()
    try:
        if t.startswith("0x"):
            return int(t[2:] or "0", 16)
        if len(t) > 1 and t.startswith("0"):
            return int(t, 8)
        return int(t, 10) if t.isdigit() else None
    except ValueError:
        return None


def ipv4_any(text: str) -> ipaddress.IPv4Address | None:
    """``inet_aton`` semantics: 1 to 4 parts, each decimal, octal (leading 0) or hex (0x); the
    last part fills the remaining bytes."""
    parts = text.split(".")
    if not 1 <= len(parts) <= 4 or any(p == "" for p in parts):
        return None
    values = [_ipv4_part(p) for p in parts]
    if any(v is None for v in values):
        return None
    nums = [v for v in values if v is not None]
    *front, last = nums
    if any(v > 255 for v in front) or last >= 256 ** (4 - len(front)):
        return None
    value = 0
    for v in front:
        value = value * 256 + v
    value = value * 256 ** (4 - len(front)) + last
    return ipaddress.IPv4Address(value)


def canonical(host: str) -> str:
    """The canonical form of one host (see the module docstring); '' for nothing usable."""
    h = host.strip().lower().replace("\u3002", ".").replace("\uff0e", ".").replace("\uff61", ".")
    if h.startswith("[") and "]" in h:
        h = h[1 : h.index("]")]
    h = h.rstrip(".")
    if "%" in h:  # IPv6 zone id
        h = h.split("%", 1)[0]
    if h == "":
        return ""
    if ":" in h:
        try:
            v6 = ipaddress.IPv6Address(h)
        except ValueError:
            return h
        if v6.ipv4_mapped is not None:
            return str(v6.ipv4_mapped)
        packed = int(v6)
        if packed >> 32 == 0 and packed > 1:  # IPv4-compatible ::a.b.c.d
            return str(ipaddress.IPv4Address(packed))
        if v6 in ipaddress.IPv6Network("64:ff9b::/96"):
            return str(ipaddress.IPv4Address(packed & 0xFFFFFFFF))
        return str(v6)
    v4 = ipv4_any(h)
    return str(v4) if v4 is not None else h


def _netloc_host(netloc: str) -> str:
    loc = netloc.rsplit("@", 1)[-1]
    if loc.startswith("["):
        return loc[: loc.find("]") + 1] if "]" in loc else loc
    if loc.count(":") == 1:
        loc = loc.split(":", 1)[0]
    return loc


def _is_ip(h: str) -> bool:
    try:
        ipaddress.ip_address(h)
    except ValueError:
        return False
    return True


def in_text(text: str) -> list[str]:
    """Canonical hosts of every ``scheme://`` URL in ``text``."""
    out = []
    for m in _URL.finditer(text):
        h = canonical(_netloc_host(m.group(2)))
        if h:
            out.append(h)
    return out


def of_argument(arg: str) -> list[str]:
    """Hosts in one argument of a network program: URLs, a bare ``host[:port][/path]``, and
    numeric addresses inside ``host:port:addr`` forms (``curl --resolve``, ``socat TCP:...``)."""
    found = in_text(arg)
    if found:
        return found
    if arg.startswith("-"):
        return []
    arg = arg.removeprefix("//")  # protocol-relative
    out: list[str] = []
    first = arg.split("/", 1)[0]
    if first.isdigit() and int(first) <= 65535:
        return []  # a port (`nc host 4444`), not the address 0.0.x.y
    h = canonical(_netloc_host(first))
    if (h and _NAME.match(h) and ("." in h or h in ("metadata", "instance-data", "localhost"))) or _is_ip(h):
        out.append(h)
    for piece in re.split(r"[:,=@/]", arg):
        if (
            piece
            and piece[0].isdigit()
            and ("." in piece or len(piece) > 5)
            and (v4 := ipv4_any(piece.lower())) is not None
            and str(v4) not in out
        ):
            out.append(str(v4))
    return out
