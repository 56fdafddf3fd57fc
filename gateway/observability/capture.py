"""``log.capture``: record every ``hooks/intercept`` request the gateway received, with the
headers exposed to CEL and the gateway's answer, as JSON lines for ``ahp-gateway replay``.

SENSITIVE: a capture holds full events (tool inputs, prompts, file contents the harness sent).
It is off by default; treat the file like the data it contains. Credential headers are never
written (only headers listed in ``headers:``, minus Authorization/Cookie/API keys).

Bounded: the file is rotated at ``log.captureMaxBytes`` (``capture.jsonl`` -> ``capture.jsonl.1``
...), keeping ``log.captureFiles`` files in all; a writer that falls behind drops records (counted)
instead of growing memory. Parsing and writing happen on a background thread.
"""

from __future__ import annotations

import contextlib
import logging
import os
import queue
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import IO, Any

import orjson

from gateway.config.load import LoadedConfig
from gateway.config.models import CREDENTIAL_HEADERS
from gateway.protocol.methods import INTERCEPT

log = logging.getLogger("ahp_gateway")
_INTERCEPT = INTERCEPT.encode()
"""The pre-filter: a body without the method name is never an intercept request."""
_STOP = object()
FORMAT = "ahp-gateway.capture/1"
"""Value of every line's ``format`` field (replay refuses lines it does not understand)."""


class Capture:
    def __init__(
        self,
        path: Path,
        *,
        headers: frozenset[str] = frozenset(),
        max_bytes: int = 64 * 1024 * 1024,
        files: int = 3,
        queue_size: int = 1024,
    ) -> None:
        self.path = path
        self.headers = frozenset(h.lower() for h in headers) - CREDENTIAL_HEADERS
        self.max_bytes = max_bytes
        self.files = files
        self.dropped = 0
        self._queue: queue.Queue[object] = queue.Queue(queue_size)
        path.parent.mkdir(parents=True, exist_ok=True)
        self._stream: IO[bytes] = self._open()
        self._thread = threading.Thread(target=self._run, name="capture", daemon=True)
        self._thread.start()

    def record(self, body: bytes, headers: Mapping[str, str] | None, response: bytes | None) -> None:
        """Called on the event loop for every harness request: a cheap pre-filter and a hand-over."""
        if _INTERCEPT not in body:
            return
        kept = {k.lower(): v for k, v in (headers or {}).items() if k.lower() in self.headers}
        try:
            self._queue.put_nowait((time.time(), kept, body, response))
        except queue.Full:
            self.dropped += 1
            if self.dropped % 1000 == 1:
                log.warning("capture: writer behind, %d request(s) not recorded so far", self.dropped)

    def _open(self) -> IO[bytes]:
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)  # owner only: sensitive
        return os.fdopen(fd, "ab")

    def _rotate(self) -> None:
        self._stream.close()
        for index in range(self.files - 1, 0, -1):
            older = Path(f"{self.path}.{index}")
            newer = Path(f"{self.path}.{index - 1}") if index > 1 else self.path
            if index == self.files - 1 and older.exists():
                older.unlink()
            if newer.exists():
                newer.replace(older)
        if self.files == 1:
            self.path.unlink(missing_ok=True)
        self._stream = self._open()

    def _line(self, item: tuple[float, dict[str, str], bytes, bytes | None]) -> bytes | None:
        wall, headers, body, response = item
        try:
            request = orjson.loads(body)
        except orjson.JSONDecodeError:
            return None
        if not isinstance(request, dict) or request.get("method") != INTERCEPT:
            return None
        answer: Any = None
        if response:
            with contextlib.suppress(orjson.JSONDecodeError):
                answer = orjson.loads(response)
        return orjson.dumps(
            {"format": FORMAT, "time": wall, "headers": headers, "request": request, "response": answer}
        )

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is _STOP:
                break
            assert isinstance(item, tuple)
            line = self._line(item)
            if line is None:
                continue
            try:
                if self._stream.tell() + len(line) + 1 > self.max_bytes and self._stream.tell() > 0:
                    self._rotate()
                self._stream.write(line + b"\n")
                if self._queue.empty():
                    self._stream.flush()
            except (OSError, ValueError) as exc:  # a full disk must not kill the writer
                log.warning("capture: cannot write %s: %s", self.path.name, exc.__class__.__name__)
        with contextlib.suppress(OSError, ValueError):
            self._stream.flush()

    def close(self, timeout: float = 5.0) -> None:
        with contextlib.suppress(queue.Full):
            self._queue.put(_STOP, timeout=timeout)
        self._thread.join(timeout=timeout)
        with contextlib.suppress(OSError, ValueError):
            self._stream.close()
        if self.dropped:
            log.warning("capture: %d request(s) not recorded because the writer fell behind", self.dropped)


def capture_for(loaded: LoadedConfig) -> Capture | None:
    """The capture configured by ``log.capture`` (a path relative to the config file), or None."""
    cfg = loaded.config
    if not cfg.log.capture:
        return None
    return Capture(
        loaded.base_dir / cfg.log.capture,
        headers=frozenset(cfg.headers),
        max_bytes=cfg.log.captureMaxBytes,
        files=cfg.log.captureFiles,
    )
