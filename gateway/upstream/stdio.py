"""AHP over stdio toward one upstream (AHP-STDIO-001): one UTF-8 JSON object per line.

``persistent``: a pool of up to ``pool.size`` long-lived children, started on demand. Each child
has at most one outstanding message at a time (the spec allows no more), so concurrent intercepts
run on different children instead of queueing behind one. A child that times out, writes
malformed output (a banner, a partial or over-long line, a stale id) or exits is killed and
replaced, so a stale line can never answer a later request; restarts of a slot that keeps failing
back off exponentially (:func:`restart_delay`), and one good exchange resets it.

A child that has not answered yet is *starting*: when its first request times out it is not
killed (a backend that needs longer than ``timeoutMs`` to start would otherwise never become
ready, each request starting a new child). It keeps its slot until its late answer arrives (read
and dropped by id) or ``pool.startTimeoutMs`` after its start. ``pool.minIdle`` children start
ahead of need, when a snapshot with the upstream goes live (:meth:`StdioUpstream.warm`). A pool
whose children end without ever answering is reported (``stdio_unready`` to :data:`WATCHERS`).

``per_event``: one child per message, stdin closed after the line, at most one line read; exit
status 0 completes the exchange.

Children run the command directly (never a shell) with a minimal environment plus the
transport's ``env``, each in its own process group: a wrapper (``sh -c``, ``npx``, ``uv run``)
starts the real backend as a grandchild, so killing only the direct child would orphan it. A
child is ended by signalling its whole group, SIGTERM and SIGKILL after
:data:`KILL_GRACE_SECONDS` (:func:`terminate_group`), on a timeout, a discarded child and close.

Their stderr is logged line by line, each line cut to :data:`STDERR_LINE_CHARS` characters and at
most :data:`STDERR_BURST` lines at once (refilled at :data:`STDERR_RATE` per second); the rest is
dropped unparsed (counted, not split into lines) and the number dropped is logged. Reading is
bounded too, to :data:`STDERR_READ_BYTES` per :data:`STDERR_WINDOW_SECONDS`: a child flooding
stderr is slowed by its own full pipe instead of keeping the gateway's event loop busy (the rate
is far above what diagnostics need).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import time
import weakref
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gateway import tasks
from gateway.protocol import wire
from gateway.settle.reply import Failure, FailureClass, Reply
from gateway.upstream.base import Call

log = logging.getLogger("ahp_gateway.stdio")
BASE_ENV = ("PATH", "LANG", "LC_ALL", "TZ", "TMPDIR")
RESTART_BASE_SECONDS = 0.05
RESTART_MAX_SECONDS = 5.0
STDERR_LINE_CHARS = 500
STDERR_BURST = 50
STDERR_RATE = 10.0
KILL_GRACE_SECONDS = 1.0
STDERR_CHUNK = 64 * 1024
STDERR_WINDOW_SECONDS = 0.1
STDERR_READ_BYTES = 128 * 1024
"""At most this much stderr is read per window (1.25 MiB/s per child); beyond it the pipe fills."""

WATCHERS: weakref.WeakSet[Any] = weakref.WeakSet()
"""Metrics sinks (:class:`gateway.observability.metrics.Metrics` registers itself): they get
``stdio_stderr_dropped(hook_id, nbytes)`` and ``stdio_unready(hook_id, unready)``. A transport
never holds a metrics object, so this is the one way its events reach the metrics."""


def _notify(event: str, *args: Any) -> None:
    for watcher in list(WATCHERS):
        with contextlib.suppress(Exception):
            getattr(watcher, event)(*args)


def restart_delay(failures: int) -> float:
    """Seconds before a slot's child may start again after ``failures`` consecutive failures:
    0.05, 0.1, 0.2 ... capped at 5 s; nothing before the first failure."""
    if failures <= 0:
        return 0.0
    return float(min(RESTART_BASE_SECONDS * 2 ** (failures - 1), RESTART_MAX_SECONDS))


@dataclass(eq=False)
class _Slot:
    """One pool position: its current child, and how often it failed in a row."""

    index: int
    proc: asyncio.subprocess.Process | None = None
    failures: int = 0
    not_before: float = 0.0
    started: float = 0.0
    """Loop time the current child started."""
    answered: bool = False
    """Whether the current child has answered once (until then it is starting)."""


def _signal_group(pgid: int, sig: int) -> bool:
    """Send ``sig`` to the process group; False when no member is left."""
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        return False
    except PermissionError:  # the group id was reused by someone else's process: not ours to kill
        return False
    return True


async def terminate_group(proc: asyncio.subprocess.Process, grace: float = KILL_GRACE_SECONDS) -> None:
    """End the child's process group (the child and everything it started): SIGTERM, then
    SIGKILL for whatever is still there after ``grace`` seconds, then reap the child."""
    pgid = proc.pid  # the child leads its own group (start_new_session)
    if _signal_group(pgid, signal.SIGTERM):
        loop = asyncio.get_running_loop()
        deadline = loop.time() + grace
        while loop.time() < deadline:
            if proc.returncode is not None:
                if not _signal_group(pgid, 0):
                    break  # the child is reaped and no grandchild is left
                await asyncio.sleep(0.02)  # grandchildren still there: poll, never spin
                continue
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(proc.wait()), 0.02)
        _signal_group(pgid, signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError):
        proc.kill()  # the group is gone but the child is not reaped yet (or not a leader)
    with contextlib.suppress(TimeoutError):  # wait() also waits for the pipes, which a process
        await asyncio.wait_for(proc.wait(), 5)  # that left the group (setsid) may still hold


async def exit_status(proc: asyncio.subprocess.Process) -> int:
    """The child's exit status as soon as it exits. ``proc.wait()`` also waits for its pipes to
    close, which never happens while a grandchild (a wrapper's backend) still holds them."""
    while proc.returncode is None:
        await asyncio.sleep(0.002)
    return proc.returncode


class _Restarting(Exception):
    """The slot's restart back-off does not end before the deadline."""


class StderrBudget:
    """A token bucket for one child's stderr lines (diagnostics must not flood the log)."""

    def __init__(self, burst: int = STDERR_BURST, rate: float = STDERR_RATE, clock: Any = time.monotonic) -> None:
        self.burst, self.rate, self.clock = burst, rate, clock
        self.tokens = float(burst)
        self.last = clock()
        self.dropped = 0

    def available(self) -> bool:
        """Whether a line may be logged now (refills; takes nothing)."""
        now = self.clock()
        self.tokens = min(self.burst, self.tokens + (now - self.last) * self.rate)
        self.last = now
        return self.tokens >= 1

    def take(self) -> bool:
        now = self.clock()
        self.tokens = min(self.burst, self.tokens + (now - self.last) * self.rate)
        self.last = now
        if self.tokens >= 1:
            self.tokens -= 1
            return True
        self.dropped += 1
        return False


class StdioUpstream:
    kind = "stdio"
    policy = None

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
        pool_size: int = 1,
        min_idle: int = 0,
        start_timeout: float = 5.0,
    ) -> None:
        self.hook_id = hook_id
        self._argv = [command, *args]
        self._persistent = lifecycle == "persistent"
        self._cwd = str(cwd) if cwd else None
        self._env = {k: os.environ[k] for k in BASE_ENV if k in os.environ} | dict(env)
        self._limit = max_line_bytes
        self.pool_size = pool_size if self._persistent else 1
        self.min_idle = min(min_idle, self.pool_size) if self._persistent else 0
        self.start_timeout = start_timeout
        self.unready = False
        """The last child that ended had never answered, and none has answered since."""
        self._closed = False
        self._running: set[asyncio.subprocess.Process] = set()
        """Every child not known to have exited (per-event ones too): close ends their groups."""
        self._slots = [_Slot(i) for i in range(self.pool_size)]
        self._idle: asyncio.LifoQueue[_Slot] = asyncio.LifoQueue()
        for slot in reversed(self._slots):
            self._idle.put_nowait(slot)  # LIFO: a hot child is reused, extra ones start on demand
        self.starts = 0
        """Children started so far (a restart counts too)."""
        self._pending: set[asyncio.Task[Any]] = set()
        """Reapers and stderr readers; awaited on close so no child outlives the upstream."""
        self.identity: tuple[Any, ...] = (
            hook_id,
            tuple(self._argv),
            lifecycle,
            self._cwd,
            tuple(sorted(env.items())),
            max_line_bytes,
            self.pool_size,
            self.min_idle,
            start_timeout,
        )
        """What the children depend on: a reload that leaves it unchanged keeps this pool (and its
        warm children) instead of starting cold ones (:class:`gateway.runtime.LiveState`)."""

    def _track(self, coro: Any, name: str) -> None:
        task = tasks.spawn(coro, name=f"{name}-{self.hook_id}")
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)

    async def _spawn_process(self) -> asyncio.subprocess.Process:
        proc = await asyncio.create_subprocess_exec(
            *self._argv,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            cwd=self._cwd,
            env=self._env,
            limit=self._limit,
            start_new_session=True,
        )
        self.starts += 1
        self._running = {p for p in self._running if p.returncode is None}
        self._running.add(proc)
        assert proc.stderr is not None
        self._track(self._drain_stderr(proc.stderr, proc), "stdio-stderr")
        return proc

    def warm(self) -> None:
        """Start ``minIdle`` children ahead of need (at load and reload), in the background; a
        no-op for children already running. Needs a running event loop (else nothing starts)."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return
        _notify("stdio_unready", self.hook_id, self.unready)
        if self.min_idle:
            self._track(self._warm(), "stdio-warm")

    async def _warm(self) -> None:
        taken: list[_Slot] = []
        try:
            while len(taken) < self.min_idle and not self._idle.empty():
                taken.append(self._idle.get_nowait())  # out of the pool while its child starts
            loop = asyncio.get_running_loop()
            for slot in taken:
                if self._closed or (slot.proc is not None and slot.proc.returncode is None):
                    continue
                if slot.not_before > loop.time():
                    continue  # backing off: it starts on demand
                with contextlib.suppress(OSError):
                    slot.proc = await self._start()
                    slot.started, slot.answered = loop.time(), False
                self._drop_if_closed(slot)
        finally:
            for slot in reversed(taken):
                self._idle.put_nowait(slot)

    def _drop_if_closed(self, slot: _Slot) -> None:
        """A child whose start finished after close is killed at once (nothing may outlive close)."""
        if self._closed:
            self._discard(slot, failed=False)

    def _set_unready(self, unready: bool) -> None:
        if unready != self.unready and not self._closed:
            self.unready = unready
            if unready:
                log.warning("%s: a child ended without ever answering; the pool is not ready", self.hook_id)
            _notify("stdio_unready", self.hook_id, unready)

    async def _start(self) -> asyncio.subprocess.Process:
        """``_spawn_process``, but a child whose start is cancelled (a deadline) is killed once it exists
        instead of being left running unowned."""
        spawning = asyncio.ensure_future(self._spawn_process())
        try:
            return await asyncio.shield(spawning)
        except asyncio.CancelledError:
            spawning.add_done_callback(self._kill_started)
            raise

    def _kill_started(self, task: asyncio.Future[asyncio.subprocess.Process]) -> None:
        if not task.cancelled() and task.exception() is None:
            self._kill(task.result())

    async def _drain_stderr(self, stream: asyncio.StreamReader, proc: asyncio.subprocess.Process) -> None:
        """Diagnostics belong on stderr: log them bounded, drop the excess without parsing it,
        and read at a bounded rate (a flood must not cost the gateway a core) while the child
        runs; what is left after it exited is drained at once (close must not wait on it)."""
        pid = proc.pid
        budget = StderrBudget()
        loop = asyncio.get_running_loop()
        window_end, window_bytes = loop.time() + STDERR_WINDOW_SECONDS, 0
        pending = b""
        dropped_bytes = 0
        with contextlib.suppress(Exception):
            while chunk := await stream.read(STDERR_CHUNK):
                if not budget.available():  # nothing could be logged: count, never split
                    budget.dropped += chunk.count(b"\n")
                    dropped_bytes += len(chunk) + len(pending)
                    _notify("stdio_stderr_dropped", self.hook_id, len(chunk) + len(pending))
                    pending = b""
                else:
                    pending += chunk
                    *lines, pending = pending.split(b"\n")
                    if len(pending) > STDERR_LINE_CHARS:  # an endless line: log its start, drop the rest
                        lines.append(pending)
                        pending = b""
                    for line in lines:
                        if budget.take():
                            text = line[:STDERR_LINE_CHARS].decode(errors="replace").rstrip()
                            log.info("%s[%d] stderr: %s", self.hook_id, pid, text)
                window_bytes += len(chunk)
                now = loop.time()
                if now >= window_end:
                    window_end, window_bytes = now + STDERR_WINDOW_SECONDS, 0
                elif window_bytes >= STDERR_READ_BYTES and proc.returncode is None:  # let the pipe fill
                    await asyncio.sleep(window_end - now)
                    window_end, window_bytes = loop.time() + STDERR_WINDOW_SECONDS, 0
            if pending and budget.take():
                log.info("%s[%d] stderr: %s", self.hook_id, pid, pending[:STDERR_LINE_CHARS].decode(errors="replace"))
        if budget.dropped or dropped_bytes:
            log.warning(
                "%s[%d]: %d stderr lines dropped (rate limit, %d bytes unparsed)",
                self.hook_id,
                pid,
                budget.dropped,
                dropped_bytes,
            )

    # ------------------------------------------------------------------ the persistent pool
    async def _ready(self, slot: _Slot, deadline: float) -> asyncio.subprocess.Process:
        proc = slot.proc
        if proc is not None and proc.returncode is None:
            return proc
        loop = asyncio.get_running_loop()
        if proc is not None:
            log.warning("%s: child %d exited with status %s; restarting", self.hook_id, proc.pid, proc.returncode)
            self._failed(slot)
        wait = slot.not_before - loop.time()
        if wait > 0:
            if loop.time() + wait >= deadline:
                raise _Restarting
            await asyncio.sleep(wait)
        slot.proc = await self._start()
        slot.started, slot.answered = loop.time(), False
        return slot.proc

    def _failed(self, slot: _Slot) -> None:
        if not slot.answered:
            self._set_unready(True)
        slot.proc = None
        slot.failures += 1
        slot.not_before = asyncio.get_running_loop().time() + restart_delay(slot.failures)

    def _kill(self, proc: asyncio.subprocess.Process | None) -> None:
        """End the child's whole process group in the background (never only the wrapper)."""
        if proc is not None:
            self._track(terminate_group(proc), "stdio-reap")

    def _discard(self, slot: _Slot, *, failed: bool = True) -> None:
        """Kill the slot's child; a failure (not a cancellation) feeds the restart back-off."""
        self._kill(slot.proc)
        if failed:
            self._failed(slot)
        else:
            slot.proc = None

    def _keep(self, slot: _Slot, rid: Any, *, starting: bool) -> None:
        """Keep the slot's child while it finishes the request it was given: its late answer is
        read and dropped by id, then the child serves the pool again. A starting child has until
        the end of its start allowance and a failure there counts toward the restart back-off; a
        child whose request the caller cut short (a budget its own earlier work used up, or a
        disconnect) has ``startTimeoutMs`` from now and is not charged: one caller must not make
        every caller wait for cold children, nor put the pool into back-off."""
        assert slot.proc is not None
        loop = asyncio.get_running_loop()
        until = slot.started + self.start_timeout if starting else loop.time() + self.start_timeout
        self._track(self._late_answer(slot, slot.proc, rid, until, charged=starting), "stdio-late")

    async def _on_slot(
        self, line: bytes, rid: Any, timeout: float, *, answer: bool, cut_short: bool = False
    ) -> Reply | Failure | None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        slot: _Slot | None = None
        written = False
        try:
            async with asyncio.timeout(timeout):
                slot = await self._idle.get()
                proc = await self._ready(slot, deadline)
                assert proc.stdin is not None
                proc.stdin.write(line)
                await proc.stdin.drain()
                written = True
                if not answer:
                    return None
                outcome, correlated = await self._read_answer(proc, rid, close=False)
            if not correlated:
                self._discard(slot)  # malformed output or a stale id: never reuse this child
            else:
                self._answered(slot)
            return outcome
        except _Restarting:
            return Failure(FailureClass.CONNECT, "backend restarting after repeated failures (back-off)")
        except TimeoutError:
            if slot is not None and answer and written and (self._starting(slot) or cut_short) and self._alive(slot):
                self._keep(slot, rid, starting=self._starting(slot))
                slot = None  # the late-answer reader gives the slot back
            elif slot is not None:
                self._discard(slot)
            return Failure(FailureClass.TIMEOUT, f"no answer within {timeout * 1000:.0f} ms")
        except ValueError:  # a line above the limit
            if slot is not None:
                self._discard(slot)
            return Failure(FailureClass.TOO_LARGE, f"line exceeds {self._limit} bytes")
        except OSError as exc:  # launch failure, broken pipe
            if slot is not None:
                self._discard(slot)
            return Failure(FailureClass.CONNECT, exc.__class__.__name__)
        except asyncio.CancelledError:
            if slot is not None and answer and written and self._alive(slot):
                self._keep(slot, rid, starting=self._starting(slot))  # the caller went away
                slot = None
            elif slot is not None:
                self._discard(slot, failed=False)
            raise
        finally:
            if slot is not None:
                self._idle.put_nowait(slot)

    @staticmethod
    def _alive(slot: _Slot) -> bool:
        return slot.proc is not None and slot.proc.returncode is None

    def _answered(self, slot: _Slot) -> None:
        slot.failures = 0
        slot.answered = True
        self._set_unready(False)

    def _starting(self, slot: _Slot) -> bool:
        """A running child that has not answered yet and is still inside its start allowance."""
        proc = slot.proc
        return (
            proc is not None
            and proc.returncode is None
            and not slot.answered
            and asyncio.get_running_loop().time() < slot.started + self.start_timeout
        )

    async def _late_answer(
        self, slot: _Slot, proc: asyncio.subprocess.Process, rid: Any, until: float, *, charged: bool = True
    ) -> None:
        """Keep a child whose request timed out (see :meth:`_keep`): read that request's late
        answer and drop it (matched by id), then the child serves the pool; no answer by
        ``until``, or any other line, and it is killed (a failure when ``charged``)."""
        try:
            async with asyncio.timeout_at(until):
                _, correlated = await self._read_answer(proc, rid, close=False)
            if correlated and slot.proc is proc and proc.returncode is None:
                self._answered(slot)
                log.info("%s: child %d answered late; the answer was dropped", self.hook_id, proc.pid)
            elif slot.proc is proc:
                self._discard(slot, failed=charged)
        except (TimeoutError, ValueError, OSError):
            if slot.proc is proc:
                log.warning("%s: child %d did not answer its request in time", self.hook_id, proc.pid)
                self._discard(slot, failed=charged)
        except asyncio.CancelledError:
            if slot.proc is proc:
                self._discard(slot, failed=False)
            raise
        finally:
            self._idle.put_nowait(slot)

    async def _read_answer(
        self, proc: asyncio.subprocess.Process, rid: Any, *, close: bool
    ) -> tuple[Reply | Failure, bool]:
        """One answer line, and whether it is a JSON object carrying ``rid`` (else the child
        is never reused: its next line could answer the wrong request)."""
        assert proc.stdout is not None
        answer = await proc.stdout.readline()
        if not answer.endswith(b"\n") and not close:
            return Failure(FailureClass.CONNECT, "backend closed stdout"), False
        if not answer.strip():
            return Failure(FailureClass.INVALID_RESPONSE, "no response line"), False
        try:
            message = wire.loads(answer)
        except wire.JSONDecodeError:
            return Failure(FailureClass.INVALID_RESPONSE, "malformed JSON line"), False
        return Reply(answer), isinstance(message, dict) and message.get("id") == rid

    # ------------------------------------------------------------------ the Upstream interface
    async def intercept(self, call: Call) -> Reply | Failure:
        request, timeout = call.request, call.timeout
        line = wire.dumps(request) + b"\n"
        if self._persistent:
            outcome = await self._on_slot(line, request["id"], timeout, answer=True, cut_short=call.cut_short)
            assert outcome is not None
            return outcome
        proc: asyncio.subprocess.Process | None = None
        try:
            async with asyncio.timeout(timeout):
                proc = await self._start()
                assert proc.stdin is not None
                proc.stdin.write(line)
                await proc.stdin.drain()
                proc.stdin.close()
                reply, _ = await self._read_answer(proc, request["id"], close=True)
                if isinstance(reply, Failure):
                    self._kill(proc)
                    return reply
                code = await exit_status(proc)
                self._kill(proc)  # whatever the child left behind in its group goes with it
                if code != 0:
                    return Failure(FailureClass.CONNECT, f"backend exited with status {code}")
                return reply
        except TimeoutError:
            self._kill(proc)
            return Failure(FailureClass.TIMEOUT, f"no answer within {timeout * 1000:.0f} ms")
        except ValueError:
            self._kill(proc)
            return Failure(FailureClass.TOO_LARGE, f"line exceeds {self._limit} bytes")
        except OSError as exc:
            self._kill(proc)
            return Failure(FailureClass.CONNECT, exc.__class__.__name__)
        except asyncio.CancelledError:
            self._kill(proc)
            raise

    async def observe(
        self, message: dict[str, Any], timeout: float, headers: Mapping[str, str] | None = None
    ) -> Failure | None:
        line = wire.dumps(message) + b"\n"
        if self._persistent:
            outcome = await self._on_slot(line, None, timeout, answer=False)
            return outcome if isinstance(outcome, Failure) else None
        try:
            async with asyncio.timeout(timeout):
                proc = await self._start()
                assert proc.stdin is not None
                proc.stdin.write(line)
                await proc.stdin.drain()
                proc.stdin.close()
                self._track(self._reap_group(proc), "stdio-reap")
                return None
        except TimeoutError:
            return Failure(FailureClass.TIMEOUT, "observe delivery timed out")
        except (OSError, ValueError) as exc:
            return Failure(FailureClass.CONNECT, exc.__class__.__name__)

    async def _reap_group(self, proc: asyncio.subprocess.Process) -> None:
        """A per-event child ends on its own; what it left behind in its group does not outlive it."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(exit_status(proc), 60)
        await terminate_group(proc)

    async def aclose(self) -> None:
        """Ask every child to stop (stdin closed), then end each process group, so neither the
        children nor anything they started outlives the upstream."""
        self._closed = True
        procs = [slot.proc for slot in self._slots if slot.proc is not None]
        procs += [p for p in self._running if p.returncode is None and p not in procs]  # per-event, starting
        for slot in self._slots:
            slot.proc = None
        for proc in procs:
            if proc.stdin is not None and proc.returncode is None:
                proc.stdin.close()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 2
        while any(p.returncode is None for p in procs) and loop.time() < deadline:
            await asyncio.sleep(0.02)  # returncode, not wait(): a grandchild may hold the pipes open
        for proc in procs:
            self._kill(proc)
        if self._pending:
            await asyncio.wait(self._pending, timeout=5)
