"""The decision log: one JSON line per settled intercept, written by a background thread so the
event loop never blocks on I/O. Tool inputs, reasons and message texts are only included with
``log.includeContent: true``; credentials never appear (they are not in the records at all)."""

from __future__ import annotations

import asyncio
import os
import queue
import random
import sys
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

from gateway.protocol import wire
from gateway.settle.ledger import Decision, Outcome

_STOP = object()
_IOV_MAX = 512
"""Lines per ``writev`` (Linux allows 1024 buffers)."""


_stamp: list[Any] = [None, "", None, ""]
"""[second, its text, millisecond, its text]: the per-second part is formatted once per second
and the whole stamp once per millisecond (several decisions share one at load)."""


def _timestamp(wall: float) -> str:
    """RFC 3339 UTC with milliseconds."""
    milli = int(wall * 1000)
    if _stamp[2] != milli:
        whole = milli // 1000
        if _stamp[0] != whole:
            _stamp[0] = whole
            _stamp[1] = datetime.fromtimestamp(whole, UTC).strftime("%Y-%m-%dT%H:%M:%S")
        _stamp[2] = milli
        _stamp[3] = f"{_stamp[1]}.{milli - whole * 1000:03d}Z"
    text: str = _stamp[3]
    return text


def record(decision: Decision, *, include_content: bool) -> dict[str, Any]:
    """One decision-log line (enum members serialise as their values). Durations are
    milliseconds to the microsecond, rounded half up (they are never negative)."""
    total = decision.total
    line: dict[str, Any] = {
        "time": _timestamp(decision.wall_time),
        "event": {"id": decision.event_id, "type": decision.event_type, "source": decision.source},
        "tool": decision.tool,
        "principal": decision.principal,
        "traceId": decision.trace_id,
        "outcome": decision.outcome,
        "decidedBy": decision.decided_by,
        "kind": decision.kind,
        "code": decision.code,
        "effects": decision.effects,
        "upstreams": [
            {
                "id": s.hook_id,
                "subscription": s.key,
                "transport": s.kind,
                "outcome": s.outcome,
                "failure": s.failure,
                "latencyMs": int(s.latency * 1e6 + 0.5) / 1000,
            }
            for s in decision.steps
        ],
        "totalMs": int(total * 1e6 + 0.5) / 1000,
        "overheadMs": int(max(0.0, total - decision.upstream_wait) * 1e6 + 0.5) / 1000,
        "parallel": decision.parallel,
    }
    if decision.rpc_error is not None:
        line["rpcError"] = decision.rpc_error
    if include_content:
        event = decision.event or {}
        tool = event.get("tool")
        line["input"] = tool.get("input") if isinstance(tool, dict) else None
        line["answer"] = decision.response_effects
    return line


def _write_lines(fd: int, lines: list[bytes]) -> None:
    """One ``writev`` per batch: no copy into one buffer and one system call, with the GIL let
    go for it. A short write (a nearly full pipe, a signal) is completed from where it stopped."""
    for start in range(0, len(lines), _IOV_MAX):
        chunk = lines[start : start + _IOV_MAX]
        written = os.writev(fd, chunk)
        if written < sum(map(len, chunk)):
            rest = memoryview(b"".join(chunk))[written:]
            while rest:
                rest = rest[os.write(fd, rest) :]


class DecisionLog:
    """Lines are encoded on the event loop into a batch; full batches (or, at the latest, one
    every ``flush_interval`` seconds) go to a writer thread in a single hand-over, so the loop
    never blocks on the stream and pays no thread wake-up per decision. When the writer falls
    ``max_batches`` behind, whole batches are dropped and counted."""

    def __init__(
        self,
        target: str,
        *,
        include_content: bool = False,
        sample_no_effect: float = 1.0,
        on_drop: Callable[[int], None] | None = None,
        batch_size: int = 256,
        max_batches: int = 64,
        flush_interval: float = 0.1,
    ) -> None:
        self.include_content = include_content
        self.sample_no_effect = sample_no_effect
        self._on_drop = on_drop
        self._batch: list[bytes] = []
        self._batch_size = batch_size
        self._flush_interval = flush_interval
        self._direct = False
        self._queue: queue.Queue[object] = queue.Queue(max_batches)
        self._stream: IO[bytes]
        self._owned = False
        if target == "stdout":
            self._stream = sys.stdout.buffer
        elif target == "stderr":
            self._stream = sys.stderr.buffer
        else:
            path = Path(target)
            path.parent.mkdir(parents=True, exist_ok=True)
            self._stream = path.open("ab", buffering=0)
            self._owned = True
        self._thread = threading.Thread(target=self._run, name="decision-log", daemon=True)
        self._thread.start()

    def write(self, decision: Decision) -> None:
        if (
            self.sample_no_effect < 1.0
            and decision.outcome is Outcome.NO_EFFECT
            and random.random() >= self.sample_no_effect
        ):
            return
        batch = self._batch
        if not batch:
            self._schedule_flush()
        batch.append(wire.dumps_line(record(decision, include_content=self.include_content)))
        if len(batch) >= self._batch_size or self._direct:
            self.flush()

    def _schedule_flush(self) -> None:
        """A partial batch leaves within ``flush_interval`` even if traffic stops."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # not on an event loop (tools, tests): write through
            self._direct = True
            return
        loop.call_later(self._flush_interval, self.flush)

    def flush(self) -> None:
        """Hand the current batch to the writer (also called by a periodic timer)."""
        batch, self._batch = self._batch, []
        if not batch:
            return
        try:
            self._queue.put_nowait(batch)
        except queue.Full:
            if self._on_drop is not None:
                self._on_drop(len(batch))

    def _run(self) -> None:
        try:
            fd: int | None = self._stream.fileno()
            self._stream.flush()  # what the stream buffered before goes first
        except (OSError, ValueError):  # a stream without a descriptor (tests, wrappers)
            fd = None
        while True:
            item = self._queue.get()
            if item is _STOP:
                break
            try:
                assert isinstance(item, list)
                if fd is None:
                    self._stream.write(b"".join(item))
                    self._stream.flush()
                else:
                    _write_lines(fd, item)
            except (OSError, ValueError):  # a closed or full stream must not kill the writer
                continue

    def close(self, timeout: float = 5.0) -> None:
        self.flush()
        deadline = time.monotonic() + timeout
        try:
            self._queue.put(_STOP, timeout=max(0.0, deadline - time.monotonic()))
        except queue.Full:
            return
        self._thread.join(timeout=max(0.1, deadline - time.monotonic()))
        if self._owned:
            self._stream.close()
