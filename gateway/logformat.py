"""The gateway's own log lines (stderr): the classic text format, or one JSON object per line
(``log.format: json``) for log collectors. Never carries request content: callers log ids and
reasons only, as before."""

from __future__ import annotations

import json
import logging
import sys
import time
from typing import Any

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
_STANDARD = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime"}


class JsonFormatter(logging.Formatter):
    """``{"time", "level", "logger", "message", ...extra fields, "exception"?}`` per line."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in _STANDARD and not key.startswith("_"):
                entry[key] = value if isinstance(value, str | int | float | bool | type(None)) else repr(value)
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False)


_installed: list[logging.Handler] = []


def configure(level: str, fmt: str = "text") -> None:
    """(Re)configure the root logger with one stderr handler in the chosen format; only a handler
    installed here is replaced (handlers of an embedding program or a test runner are kept)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else logging.Formatter(TEXT_FORMAT))
    root = logging.getLogger()
    while _installed:
        root.removeHandler(_installed.pop())
    root.addHandler(handler)
    _installed.append(handler)
    root.setLevel(level)
