"""Give freed heap memory back to the operating system after a configuration is compiled.

Compiling CEL allocates many short-lived C++ objects (a policy library's one-call batch of 68
rules: about 11 MB). glibc keeps those freed pages in the process, so without a trim every
worker would carry them as resident memory for its whole life. Elsewhere (musl, macOS) this is a
no-op.
"""

from __future__ import annotations

import ctypes
import ctypes.util
from collections.abc import Callable
from functools import cache


@cache
def _malloc_trim() -> Callable[[int], int] | None:
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        function: Callable[[int], int] = ctypes.CDLL(name).malloc_trim
    except (OSError, AttributeError):
        return None
    return function


def trim() -> None:
    """Release free heap pages (glibc ``malloc_trim``)."""
    function = _malloc_trim()
    if function is not None:
        function(0)
