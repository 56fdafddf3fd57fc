"""Open-loop fixed-rate HTTP load generator (and a closed-loop mode for warm-up and soak runs).

Open loop: request ``i`` is *scheduled* at ``start + i / rate`` regardless of how earlier requests
fare; its latency is measured from that scheduled time, not from when it was actually written, so
a stalled server is charged for the whole queueing delay (no coordinated omission). Requests are
written on a pool of pre-opened keep-alive connections, one request in flight per connection; if
every connection is busy the request waits in a backlog (the wait counts as latency) and more
connections are opened, up to ``--max-connections``.

The client is a bare asyncio protocol (no HTTP library) to keep its own CPU cost per request low:
it runs on the same cores as the processes under test.

    python -m bench.loadgen --port 8080 --body-file body.json --rate 500 --duration 10
    python -m bench.loadgen --port 8080 --body-file body.json --requests 50000 --concurrency 32

The summary is one JSON object on the last stdout line; with ``--progress-every K`` a JSON line
``{"progress": n, ...}`` is printed after every K completed requests.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import sys
import time
from array import array
from collections import Counter, deque
from collections.abc import Callable
from typing import Any

perf = time.perf_counter


class Summary:
    def __init__(self) -> None:
        self.latency = array("d")  # from the scheduled time, seconds
        self.service = array("d")  # from the write, seconds
        self.lag = array("d")  # write - scheduled, seconds
        self.errors: Counter[str] = Counter()
        self.completed = 0
        self.sent = 0
        self.first_sched: float | None = None
        self.last_done = 0.0
        self.effectful = 0  # answers whose effects are not empty (--count-effects)


class Connection(asyncio.Protocol):
    def __init__(self, client: Client) -> None:
        self.client = client
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        self.sched = 0.0
        self.sent = 0.0
        self.busy = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def send(self, sched: float, payload: bytes) -> None:
        assert self.transport is not None
        self.busy = True
        self.sched = sched
        self.sent = perf()
        self.transport.write(payload)

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        end = self.buffer.find(b"\r\n\r\n")
        if end < 0:
            return
        head = bytes(self.buffer[:end]).lower()
        at = head.find(b"\r\ncontent-length:")
        if at < 0:
            self.client.failed(self, "no-content-length")
            return
        stop = head.find(b"\r\n", at + 2)
        length = int(head[at + 17 : stop if stop >= 0 else len(head)])
        total = end + 4 + length
        if len(self.buffer) < total:
            return
        now = perf()
        status = int(head[9:12])
        body = bytes(self.buffer[end + 4 : total])
        del self.buffer[:total]
        self.client.completed(self, now, status, body)

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        self.client.lost(self)


class Client:
    def __init__(
        self,
        host: str,
        port: int,
        next_request: Callable[[], bytes],
        expect_status: int,
        max_connections: int,
        progress_every: int = 0,
        expect_body: bytes | None = None,
    ) -> None:
        self.host = host
        self.port = port
        self.next_request = next_request
        self.expect_status = expect_status
        self.max_connections = max_connections
        self.progress_every = progress_every
        self.expect_body = expect_body
        self.idle: deque[Connection] = deque()
        self.backlog: deque[float] = deque()
        self.connections: set[Connection] = set()
        self.opening = 0
        self.summary = Summary()
        self.remaining_closed = 0  # closed-loop mode: requests still to send
        self._expected = 0
        self.all_done = asyncio.Event()
        self.started = perf()

    async def open(self, count: int) -> None:
        await asyncio.gather(*(self._open_one() for _ in range(count)))

    async def _open_one(self) -> None:
        loop = asyncio.get_running_loop()
        self.opening += 1
        try:
            _, conn = await loop.create_connection(lambda: Connection(self), self.host, self.port)
        except OSError:
            self.summary.errors["connect"] += 1
            return
        finally:
            self.opening -= 1
        self.connections.add(conn)
        self._ready(conn)

    def _ready(self, conn: Connection) -> None:
        if self.backlog:
            conn.send(self.backlog.popleft(), self.next_request())
            self.summary.sent += 1
        elif self.remaining_closed > 0:
            self.remaining_closed -= 1
            conn.send(perf(), self.next_request())
            self.summary.sent += 1
        else:
            conn.busy = False
            self.idle.append(conn)

    def submit(self, sched: float) -> None:
        s = self.summary
        if s.first_sched is None:
            s.first_sched = sched
        if self.idle:
            self.idle.popleft().send(sched, self.next_request())
            s.sent += 1
            return
        self.backlog.append(sched)
        if len(self.connections) + self.opening < self.max_connections:
            asyncio.ensure_future(self._open_one())

    def completed(self, conn: Connection, now: float, status: int, body: bytes) -> None:
        s = self.summary
        if status != self.expect_status:
            s.errors[f"status-{status}"] += 1
        elif status == 200 and b'"error"' in body:
            s.errors["jsonrpc-error"] += 1
        elif self.expect_body is not None and self.expect_body not in body:
            s.errors["unexpected-body"] += 1
        else:
            if self.expect_body is not None and b'"effects":[]' not in body:
                s.effectful += 1
            s.latency.append(now - (conn.sched if conn.sched > conn.sent else conn.sent))
            s.service.append(now - conn.sent)
            s.lag.append(conn.sent - conn.sched)
        s.completed += 1
        s.last_done = now
        if self.progress_every and s.completed % self.progress_every == 0:
            print(json.dumps({"progress": s.completed, "elapsed": round(now - self.started, 3)}), flush=True)
        self._ready(conn)
        self._check_done()

    def failed(self, conn: Connection, reason: str) -> None:
        self.summary.errors[reason] += 1
        if conn.transport is not None:
            conn.transport.close()

    def lost(self, conn: Connection) -> None:
        self.connections.discard(conn)
        if conn in self.idle:
            self.idle.remove(conn)
        if conn.busy:
            conn.busy = False
            self.summary.errors["connection-lost"] += 1
            self.summary.completed += 1
            self._check_done()
        if (self.backlog or self.remaining_closed) and len(self.connections) + self.opening < self.max_connections:
            asyncio.ensure_future(self._open_one())

    def _check_done(self) -> None:
        if self.summary.completed >= self._expected and not self.backlog:
            self.all_done.set()

    def close(self) -> None:
        for conn in list(self.connections):
            if conn.transport is not None:
                conn.transport.close()


def percentiles(values: array[float], scale: float = 1000.0) -> dict[str, float | None]:
    if not values:
        return {"p50": None, "p90": None, "p99": None, "p999": None, "max": None, "mean": None}
    ordered = sorted(values)
    n = len(ordered)

    def rank(q: float) -> float:
        return round(float(ordered[min(n - 1, max(0, math.ceil(q * n) - 1))]) * scale, 4)

    return {
        "p50": rank(0.50),
        "p90": rank(0.90),
        "p99": rank(0.99),
        "p999": rank(0.999),
        "max": round(ordered[-1] * scale, 4),
        "mean": round(sum(ordered) / n * scale, 4),
    }


def request_factory(args: argparse.Namespace) -> Callable[[], bytes]:
    path = args.path
    host_header = f"{args.host}:{args.port}"
    if args.observe_tag:
        from bench.payloads import observe_id, templates

        prefix, suffix = templates(args.template)
        length = len(prefix) + len(suffix) + len(observe_id(args.observe_tag, 0))
        head = (
            f"POST {path} HTTP/1.1\r\nHost: {host_header}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {length}\r\n\r\n"
        ).encode() + prefix
        counter = iter(range(1, 1 << 62))
        tag = args.observe_tag

        def observe() -> bytes:
            return head + observe_id(tag, next(counter)).encode() + suffix

        return observe
    if args.bodies_file:
        with open(args.bodies_file, "rb") as handle:
            payloads = [
                (
                    f"POST {path} HTTP/1.1\r\nHost: {host_header}\r\nContent-Type: application/json\r\n"
                    f"Content-Length: {len(line)}\r\n\r\n"
                ).encode()
                + line
                for line in handle.read().split(b"\n")
                if line
            ]
        if not payloads:
            raise SystemExit(f"{args.bodies_file} holds no body")
        state = {"next": 0, "wraps": 0}

        def cycle() -> bytes:
            at = state["next"]
            if at == len(payloads):
                at, state["wraps"] = 0, state["wraps"] + 1
            state["next"] = at + 1
            return payloads[at]

        args.wraps = state
        return cycle
    with open(args.body_file, "rb") as handle:
        body = handle.read()
    payload = (
        f"POST {path} HTTP/1.1\r\nHost: {host_header}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode() + body
    return lambda: payload


def _expect(args: argparse.Namespace) -> bytes | None:
    return args.expect_body.encode() if args.expect_body else None


def _mix_counts(args: argparse.Namespace, s: Summary) -> dict[str, int]:
    """With --bodies-file: answers with effects, and how often the file was started again."""
    if not args.bodies_file:
        return {}
    return {"effectful": s.effectful, "wraps": args.wraps["wraps"]}


async def run_open(args: argparse.Namespace) -> dict[str, Any]:
    client = Client(
        args.host, args.port, request_factory(args), args.expect_status, args.max_connections, 0, _expect(args)
    )
    await client.open(args.connections)
    if not client.connections:
        raise SystemExit(f"cannot connect to {args.host}:{args.port}")
    total = max(1, round(args.rate * args.duration))
    client._expected = total
    interval = 1.0 / args.rate
    start = perf() + 0.005
    sleep = asyncio.sleep
    for i in range(total):
        due = start + i * interval
        delay = due - perf()
        if delay > 0:
            # One timer wait per request, no spinning: the loop's timers have millisecond
            # granularity, so a request may leave up to about half a millisecond early; its
            # latency is then counted from the actual write (see Client.completed).
            await sleep(delay)
        client.submit(due)
    dispatched = perf()
    try:
        await asyncio.wait_for(client.all_done.wait(), timeout=args.drain_timeout)
    except TimeoutError:
        pass
    s = client.summary
    missing = total - s.completed
    if missing > 0:
        s.errors["timeout"] += missing
    client.close()
    elapsed = (s.last_done or dispatched) - start
    return {
        "mode": "open",
        "target_rps": args.rate,
        "duration_s": args.duration,
        "scheduled": total,
        "sent": s.sent,
        "completed": s.completed,
        "ok": len(s.latency),
        "errors": dict(s.errors),
        "achieved_rps": round(len(s.latency) / elapsed, 1) if elapsed > 0 else None,
        "dispatch_s": round(dispatched - start, 4),
        "connections": len(client.connections),
        "latency_ms": percentiles(s.latency),
        "service_ms": percentiles(s.service),
        "lag_ms": percentiles(s.lag),
        **_mix_counts(args, s),
    }


async def run_closed(args: argparse.Namespace) -> dict[str, Any]:
    client = Client(
        args.host,
        args.port,
        request_factory(args),
        args.expect_status,
        args.concurrency,
        args.progress_every,
        _expect(args),
    )
    client._expected = args.requests
    client.remaining_closed = args.requests
    start = perf()
    client.started = start
    await client.open(min(args.concurrency, args.requests))
    if not client.connections:
        raise SystemExit(f"cannot connect to {args.host}:{args.port}")
    await client.all_done.wait()
    s = client.summary
    client.close()
    elapsed = s.last_done - start
    return {
        "mode": "closed",
        "requests": args.requests,
        "concurrency": args.concurrency,
        "completed": s.completed,
        "ok": len(s.latency),
        "errors": dict(s.errors),
        "achieved_rps": round(len(s.latency) / elapsed, 1) if elapsed > 0 else None,
        "latency_ms": percentiles(s.service),
        **_mix_counts(args, s),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--path", default="/")
    body = parser.add_mutually_exclusive_group(required=True)
    body.add_argument("--body-file", help="the request body (sent unchanged every time)")
    body.add_argument("--observe-tag", help="send hooks/observe notifications with unique ids tag000..N")
    body.add_argument("--bodies-file", help="one body per line, sent in order (from the start again after the last)")
    parser.add_argument(
        "--template", default="observe", choices=("observe", "distinct"), help="the body around --observe-tag's ids"
    )
    parser.add_argument("--expect-status", type=int, default=200)
    parser.add_argument("--expect-body", help="an answer with status 200 must contain this text (else an error)")
    parser.add_argument("--rate", type=float, help="open loop: requests per second")
    parser.add_argument("--duration", type=float, default=10.0, help="open loop: seconds of schedule")
    parser.add_argument("--connections", type=int, default=64, help="open loop: connections opened up front")
    parser.add_argument("--max-connections", type=int, default=512, help="open loop: upper bound")
    parser.add_argument("--drain-timeout", type=float, default=10.0)
    parser.add_argument("--requests", type=int, help="closed loop: total requests")
    parser.add_argument("--concurrency", type=int, default=32, help="closed loop: requests in flight")
    parser.add_argument("--progress-every", type=int, default=0)
    parser.add_argument("--loop", choices=("uvloop", "asyncio"), default="uvloop")
    args = parser.parse_args(argv)
    if (args.rate is None) == (args.requests is None):
        parser.error("give exactly one of --rate (open loop) or --requests (closed loop)")
    if args.loop == "uvloop":
        try:
            import uvloop

            uvloop.install()
        except ImportError:
            pass
    result = asyncio.run(run_open(args) if args.rate is not None else run_closed(args))
    sys.stdout.write(json.dumps(result) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
