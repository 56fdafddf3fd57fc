"""HTTP header syntax for the HTTP binding (AHP-HTTP-001), one definition for the configuration
check and the client that writes the headers: a name is an RFC 9110 token; a value may not hold
CR, LF or NUL (each would end or split the header line)."""

from __future__ import annotations

import re

NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
"""Use with ``fullmatch`` (``$`` would let a trailing newline through)."""
BAD_VALUE = re.compile(r"[\r\n\x00]")


class HeaderLines(dict[str, str]):
    """Headers whose ``Name: value`` lines are already built and checked, because the gateway
    wrote them itself from validated parts (trace context): the HTTP client sends ``block`` as it
    is instead of checking and formatting the mapping again."""

    __slots__ = ("block",)
    block: bytes
