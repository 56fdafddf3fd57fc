"""``ahp-gateway stdio``: the gateway as one stdio backend (AHP-STDIO-001).

A harness starts the gateway as a command and writes one JSON-RPC message per line on its stdin;
the gateway writes exactly one line per request on stdout and nothing else, ever: at start-up
file descriptor 1 is re-pointed at stderr (so a stray print, a library or an inherited child can
only reach stderr) and responses go to a private duplicate of the original stdout. Logs and the
decision log go to stderr (``log.decisions: stdout`` is written to stderr in this mode) or a file.

Requests are processed concurrently but answered in arrival order (§11.2 lets a harness correlate
by id, but it may keep only one intercept outstanding per persistent backend, so order costs
nothing). Framing problems follow :mod:`gateway.server.ndjson`. At EOF (or SIGTERM) in-flight
requests finish, queued observations are delivered, and the process exits 0, which is the
``per_event`` lifecycle too: one message, EOF, one answer, exit 0. ``--per-event`` stops reading
after the first message without waiting for EOF, for harnesses that start a process per message
but keep its stdin open (the SDK's per_event transport does so for notifications).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import signal
import stat
import sys
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web
from prometheus_client import Counter

from gateway.assemble import Assembly
from gateway.config.load import LoadedConfig
from gateway.pipeline.gateway import Handler
from gateway.protocol.errors import RpcCode
from gateway.server.admin import Readiness, build_admin
from gateway.server.ndjson import Answer, Forward, Framer, LineSplitter, Skip, error_line

log = logging.getLogger("ahp_gateway.stdio")
CHUNK = 65_536
NO_HEADERS: dict[str, str] = {}
Write = Callable[[bytes], Awaitable[None]]
Read = Callable[[int], Awaitable[bytes]]


def claim_stdout() -> int:
    """Keep the real stdout as the private protocol channel; fd 1 and ``sys.stdout`` become
    stderr, so nothing but responses can ever reach the harness's pipe."""
    sys.stdout.flush()
    channel = os.dup(1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return channel


def for_stdio(loaded: LoadedConfig) -> LoadedConfig:
    """The configuration as stdio mode runs it: decisions never go to stdout."""
    cfg = loaded.config
    if cfg.log.decisions != "stdout":
        return loaded
    log.warning("log.decisions: stdout is written to stderr in stdio mode (stdout carries only responses)")
    new_cfg = cfg.model_copy(update={"log": cfg.log.model_copy(update={"decisions": "stderr"})})
    return dataclasses.replace(loaded, config=new_cfg)


class SkipCounter:
    """Lines that got no answer (blank, malformed or oversized without an id, ...), by reason;
    exported as ``ahp_gateway_stdio_skipped_lines_total`` when metrics are on."""

    def __init__(self, registry: Any = None) -> None:
        self.counts: dict[str, int] = {}
        self._metric = (
            Counter(
                "ahp_gateway_stdio_skipped_lines",
                "stdin lines of the stdio front end that got no answer, by reason.",
                ["reason"],
                registry=registry,
            )
            if registry is not None
            else None
        )

    def __call__(self, reason: str) -> None:
        self.counts[reason] = self.counts.get(reason, 0) + 1
        if self._metric is not None:
            self._metric.labels(reason).inc()
        log.warning("stdin line skipped without an answer (%s)", reason)


async def serve_lines(
    handler: Handler,
    read: Read,
    write: Write,
    *,
    limit: int,
    skipped: Callable[[str], None],
    stop: asyncio.Event | None = None,
    max_inflight: int = 64,
    max_messages: int | None = None,
) -> None:
    """Serve until EOF (or ``stop``, or ``max_messages`` messages): every line framed, requests
    handled concurrently, answers written in arrival order. Returns once every answer is written."""
    splitter, framer = LineSplitter(limit), Framer(limit)
    order: asyncio.Queue[asyncio.Future[bytes | None] | None] = asyncio.Queue(4 * max_inflight)
    """Answers in arrival order; bounded, so a harness that stops reading stops being read."""
    slots = asyncio.Semaphore(max_inflight)
    loop = asyncio.get_running_loop()

    async def one(frame: Forward) -> bytes | None:
        try:
            payload = (await handler.handle(frame.body, NO_HEADERS)).answer
        except Exception:  # an engine bug must not kill the front end; the harness gets -32603
            log.exception("request failed inside the gateway")
            payload = error_line(frame.rid, RpcCode.INTERNAL_ERROR) if frame.rid is not None else None
        finally:
            slots.release()
        if payload is not None and frame.rid is None:
            skipped("no_id")  # e.g. a batch or an invalid id: the answer has id null
            return None
        return payload

    async def writer() -> None:
        while (item := await order.get()) is not None:
            payload = await item
            if payload is not None:
                try:
                    await write(payload + b"\n")
                except (BrokenPipeError, ConnectionResetError):
                    log.info("the harness closed the gateway's stdout; stopping")
                    return

    messages = 0

    async def enqueue(item: asyncio.Future[bytes | None] | None) -> None:
        """Queue an answer; wait while the queue is full, unless the writer has stopped."""
        if writing.done():
            return  # the harness closed stdout: nothing more can be answered
        if not order.full():
            order.put_nowait(item)
            return
        putting = asyncio.ensure_future(order.put(item))
        await asyncio.wait({putting, writing}, return_when=asyncio.FIRST_COMPLETED)
        if not putting.done():
            putting.cancel()

    async def dispatch(frames: list[Forward | Answer | Skip]) -> None:
        nonlocal messages
        for frame in frames:
            if max_messages is not None and messages >= max_messages:
                return  # per_event: whatever follows the one message is not read
            messages += not isinstance(frame, Skip)
            if isinstance(frame, Skip):
                skipped(frame.reason)
            elif isinstance(frame, Answer):
                done: asyncio.Future[bytes | None] = loop.create_future()
                done.set_result(frame.body)
                await enqueue(done)
            else:
                await slots.acquire()  # backpressure: at most max_inflight requests at once
                await enqueue(asyncio.ensure_future(one(frame)))

    writing = asyncio.ensure_future(writer())
    stopping = asyncio.ensure_future(stop.wait()) if stop is not None else None
    eof = False
    try:
        while True:
            reading = asyncio.ensure_future(read(CHUNK))
            waiting: set[asyncio.Future[Any]] = {reading, writing} | ({stopping} if stopping else set())
            await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
            if not reading.done():
                reading.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await reading
                break
            chunk = reading.result()
            if not chunk:
                eof = True
                break
            for line in splitter.feed(chunk):
                await dispatch(framer.frame(line))
            if max_messages is not None and messages >= max_messages:
                break
        if eof:  # a partial line at SIGTERM is not a message; at EOF it is an unterminated one
            rest = splitter.finish()
            if rest is not None:
                await dispatch(framer.frame(rest))
            await dispatch(framer.close())
        await enqueue(None)
        await writing
    finally:
        if stopping is not None:
            stopping.cancel()
        if not writing.done():
            writing.cancel()


async def open_input(fd: int) -> Read:
    """Non-blocking reads from a pipe or socket; regular files and terminals are read in a thread."""
    loop = asyncio.get_running_loop()
    mode = os.fstat(fd).st_mode
    if stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode):
        reader = asyncio.StreamReader(limit=CHUNK)
        protocol = asyncio.StreamReaderProtocol(reader)
        await loop.connect_read_pipe(lambda: protocol, os.fdopen(fd, "rb", buffering=0, closefd=False))
        return reader.read

    async def read(n: int) -> bytes:
        return await asyncio.to_thread(os.read, fd, n)

    return read


async def open_output(fd: int) -> Write:
    loop = asyncio.get_running_loop()
    mode = os.fstat(fd).st_mode
    if stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode):
        pipe = os.fdopen(fd, "wb", buffering=0, closefd=False)
        transport, protocol = await loop.connect_write_pipe(asyncio.streams.FlowControlMixin, pipe)
        # drain() then returns only once the pipe took every byte: an answer never waits in the
        # transport's buffer, where the end of the process would lose it (the last answers at EOF)
        transport.set_write_buffer_limits(high=0)
        stream = asyncio.StreamWriter(transport, protocol, None, loop)

        async def write_pipe(data: bytes) -> None:
            stream.write(data)
            await stream.drain()

        return write_pipe

    async def write_file(data: bytes) -> None:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]

    return write_file


async def serve(
    loaded: LoadedConfig, channel: int, *, admin_port: int | None = None, per_event: bool = False, input_fd: int = 0
) -> None:
    """Assemble the same snapshot, engine, telemetry and decision log as ``serve``
    (:mod:`gateway.assemble`; no upload receiver, so no uploads), answer stdin until EOF or
    SIGTERM, then drain and close everything."""
    loaded = for_stdio(loaded)
    cfg = loaded.config
    assembly = Assembly(loaded)
    holder, gateway, telemetry = assembly.holder, assembly.gateway, assembly.observability
    assert telemetry is not None
    assembly.start()
    metrics = telemetry.metrics if cfg.metrics.enabled else None
    skipped = SkipCounter(metrics.registry if metrics is not None and not metrics.multiprocess else None)
    admin: web.AppRunner | None = None
    if admin_port is not None:
        readiness = Readiness(config_loaded=True, listening=True, credentials=assembly.unresolved_credentials)
        app = build_admin(
            readiness,
            telemetry.render if metrics is not None else None,
            extra=lambda: {
                "binding": "stdio",
                "openCircuits": holder.breakers.open(),
                "unreadyStdio": holder.breakers.unready_pools(),
            },
        )
        admin = web.AppRunner(app, access_log=None)
        await admin.setup()
        await web.TCPSite(admin, cfg.admin.host, admin_port).start()
        log.info("admin listener on %s:%s", cfg.admin.host, admin_port)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
    log.info("AHP gateway %s serving AHP over stdio", cfg.id)
    try:
        await serve_lines(
            gateway,
            await open_input(input_fd),
            await open_output(channel),
            limit=cfg.limits.maxBodyBytes,
            skipped=skipped,
            stop=stop,
            max_messages=1 if per_event else None,
        )
    finally:
        await assembly.drain(cfg.shutdown.drainTimeoutSeconds)  # queued observations are delivered
        await assembly.release()
        await assembly.close_uploads()
        if admin is not None:
            await admin.cleanup()
        assembly.close_sinks()


def run(loaded: LoadedConfig, channel: int, *, admin_port: int | None = None, per_event: bool = False) -> int:
    asyncio.run(serve(loaded, channel, admin_port=admin_port, per_event=per_event))
    return 0
