"""AHP over stdio toward one upstream (AHP-STDIO-001): one UTF-8 JSON object per line.

``persistent``: one long-lived child, at most one outstanding intercept at a time (the spec's
serial rule), restarted after it exits; on a timeout or malformed output the child is killed so
a stale line can never answer a later request. ``per_event``: one child per message, stdin closed
after the line, at most one line read; exit status 0 completes the exchange. Children run the
command directly (never a shell) with a minimal environment plus the transport's ``env``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from gateway import _tasks
from gateway.protocol import wire
from gateway.settle.outcome import Failure, FailureClass, Reply

log = logging.getLogger("ahp_gateway.stdio")
BASE_ENV = ("PATH", "LANG", "LC_ALL", "TZ", "TMPDIR")


class StdioUpstream:
    kind = "stdio"

    def __init__(
        self,
        *,
        hook_id: str,
        command: str,
        args: list[str],
        lifecycle: str,
        cwd: Path | None,
        env: Mapping[str, str],
        max_line_bytes: int,
    ) -> None:
        self.hook_id = hook_id
        self._argv = [command, *args]
        self._persistent = lifecycle == "persistent"
        self._cwd = str(cwd) if cwd else None
        self._env = {k: os.environ[k] for k in BASE_ENV if k in os.environ} | dict(env)
        self._limit = max_line_bytes
        self._proc: asyncio.subprocess.Process | None = None
        self._lock = asyncio.Lock()
        self._pending: set[asyncio.Task[Any]] = set()
        """Reapers and stderr readers; awaited on close so no child outlives the upstream."""

    def _track(self, coro: Any, name: str) -> None:
        task = _tasks.spawn(coro, name=f"{name}-{self.hook_id}")
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)

    async def _spawn(self) -> asyncio.subprocess.Process:
        proc = await asyncio.create_subprocess_exec(
            *self._argv,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            cwd=self._cwd,
            env=self._env,
            limit=self._limit,
        )
        assert proc.stderr is not None
        self._track(self._drain_stderr(proc.stderr), "stdio-stderr")
        return proc

    async def _drain_stderr(self, stream: asyncio.StreamReader) -> None:
        """Diagnostics belong on stderr; log them, never let the pipe fill up."""
        with contextlib.suppress(Exception):
            while line := await stream.readline():
                log.debug("%s stderr: %s", self.hook_id, line[:500].decode(errors="replace").rstrip())

    async def _persistent_proc(self) -> asyncio.subprocess.Process:
        if self._proc is None or self._proc.returncode is not None:
            self._proc = await self._spawn()
        return self._proc

    def _kill(self, proc: asyncio.subprocess.Process | None) -> None:
        if proc is not None and proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            self._track(proc.wait(), "stdio-reap")
        if proc is self._proc:
            self._proc = None

    async def intercept(
        self, request: dict[str, Any], timeout: float, headers: Mapping[str, str] | None = None
    ) -> Reply | Failure:
        line = wire.dumps(request) + b"\n"
        proc: asyncio.subprocess.Process | None = None
        try:
            async with asyncio.timeout(timeout):
                if self._persistent:
                    async with self._lock:
                        proc = await self._persistent_proc()
                        return await self._exchange(proc, line, request["id"], close=False)
                proc = await self._spawn()
                reply = await self._exchange(proc, line, request["id"], close=True)
                code = await proc.wait()
                if code != 0:
                    return Failure(FailureClass.CONNECT, f"backend exited with status {code}")
                return reply
        except TimeoutError:
            self._kill(proc)
            return Failure(FailureClass.TIMEOUT, f"no answer within {timeout * 1000:.0f} ms")
        except (OSError, ValueError) as exc:  # launch failure, broken pipe, over-long line
            self._kill(proc)
            return Failure(FailureClass.CONNECT, exc.__class__.__name__)
        except asyncio.CancelledError:
            self._kill(proc)
            raise

    async def _exchange(
        self, proc: asyncio.subprocess.Process, line: bytes, rid: Any, *, close: bool
    ) -> Reply | Failure:
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(line)
        await proc.stdin.drain()
        if close:
            proc.stdin.close()
        answer = await proc.stdout.readline()
        if not answer.endswith(b"\n") and not close:
            self._kill(proc)
            return Failure(FailureClass.CONNECT, "backend closed stdout")
        if not answer.strip():
            self._kill(proc)
            return Failure(FailureClass.INVALID_RESPONSE, "no response line")
        try:
            message = wire.loads(answer)
        except wire.JSONDecodeError:
            self._kill(proc)  # malformed output: never let a stale line answer a later request
            return Failure(FailureClass.INVALID_RESPONSE, "malformed JSON line")
        if not isinstance(message, dict) or message.get("id") != rid:
            self._kill(proc)
        return Reply(message=message)

    async def observe(
        self, message: dict[str, Any], timeout: float, headers: Mapping[str, str] | None = None
    ) -> Failure | None:
        line = wire.dumps(message) + b"\n"
        try:
            async with asyncio.timeout(timeout):
                if self._persistent:
                    async with self._lock:
                        proc = await self._persistent_proc()
                        assert proc.stdin is not None
                        proc.stdin.write(line)
                        await proc.stdin.drain()
                    return None
                proc = await self._spawn()
                assert proc.stdin is not None
                proc.stdin.write(line)
                await proc.stdin.drain()
                proc.stdin.close()
                self._track(proc.wait(), "stdio-reap")
                return None
        except TimeoutError:
            return Failure(FailureClass.TIMEOUT, "observe delivery timed out")
        except (OSError, ValueError) as exc:
            return Failure(FailureClass.CONNECT, exc.__class__.__name__)

    async def aclose(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None and proc.returncode is None:
            if proc.stdin is not None:
                proc.stdin.close()
            try:
                await asyncio.wait_for(proc.wait(), 2)
            except TimeoutError:
                self._kill(proc)
        if self._pending:
            await asyncio.wait(self._pending, timeout=5)
