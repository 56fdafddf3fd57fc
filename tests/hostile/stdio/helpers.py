"""Helpers of the stdio attacks: exact JSON, messages, and the stdio gateway as a child process."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tests.support.config import gateway_config, hook, stdio_argv
from tests.support.events import intercept, tool_before
from tests.support.paths import ROOT

LIMIT = 65_536
"""``limits.maxBodyBytes`` of every gateway here: the longest stdin line."""

STEP = 20.0
"""Deadline for any single expected event (an answer, an exit) on a loaded machine."""

PROTOCOL = {"protocolVersion": "draft"}

BOM = b"\xef\xbb\xbf"


@dataclass(frozen=True)
class LongInt:
    """An integer too long for ``int()`` from text (CPython refuses more than 4300 digits)."""

    digits: str


def parse_int(text: str) -> int | LongInt:
    return int(text) if len(text) <= 4000 else LongInt(text)


def loads(data: bytes) -> Any:
    return json.loads(data, parse_int=parse_int)


def same_id(a: Any, b: Any) -> bool:
    """JSON-RPC ids are equal only with the same type: 1 and "1" are different ids."""
    return type(a) is type(b) and a == b


def check_response(message: Any) -> None:
    """A JSON-RPC 2.0 response object (AHP-RPC-001): result xor error, an id, a well-formed error."""
    assert isinstance(message, dict) and message.get("jsonrpc") == "2.0", message
    assert "id" in message, message
    assert ("result" in message) != ("error" in message), message
    if "error" in message:
        error = message["error"]
        assert isinstance(error.get("code"), int) and isinstance(error.get("message"), str), message
    else:
        assert isinstance(message["result"], dict), message


def outcome(message: dict[str, Any]) -> str | int:
    return "result" if "result" in message else message["error"]["code"]


def caps(rid: bytes, extra: bytes = b"") -> bytes:
    """A ``hooks/capabilities`` request with ``rid`` as the literal JSON text of its id."""
    return (
        b'{"jsonrpc":"2.0","id":'
        + rid
        + b',"method":"hooks/capabilities","params":{"protocolVersion":"draft"'
        + extra
        + b"}}"
    )


def dumps(message: Any) -> bytes:
    return json.dumps(message, separators=(",", ":")).encode()


def denied(command: str, rid: str | None = None) -> bytes:
    """An intercept the upstream stub denies with ``command`` as the reason (so the content of an
    answer shows which line it belongs to, even when ids repeat)."""
    event = tool_before(command)
    if rid is not None:
        event["id"] = rid
    return dumps(intercept(event))


def observe() -> bytes:
    return dumps(
        {"jsonrpc": "2.0", "method": "hooks/observe", "params": {"protocolVersion": "draft", "event": tool_before()}}
    )


def reason_of(message: dict[str, Any]) -> str:
    return message["result"]["effects"][0]["reason"]


def stub_answer(request: dict[str, Any]) -> Any:
    """Deny with the command as the reason, after a short delay derived from it, so concurrent
    intercepts finish out of arrival order; deterministic."""
    command = request["params"]["event"]["tool"]["input"]["command"]
    reply = {"jsonrpc": "2.0", "id": request["id"], "result": {"protocolVersion": "draft", "effects": []}}
    reply["result"]["effects"] = [{"type": "deny", "reason": command}]
    delay = (sum(command.encode()) % 5) * 0.004
    if not delay:
        return reply

    async def later() -> Any:
        await asyncio.sleep(delay)
        return reply

    return later()


def config_for(url: str, **limits: Any) -> dict[str, Any]:
    return gateway_config(
        [hook("org.example.up", url, timeout=5000)],
        limits={"maxBodyBytes": LIMIT, "deadlineMs": 8000, **limits},
        log={"decisions": "off"},
    )


def write_config(directory: Path, cfg: dict[str, Any]) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    cfg = {k: v for k, v in cfg.items() if k != "listen"}
    cfg.setdefault("reload", {"watch": False})
    path = directory / "gateway.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return path


def child_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU time of a live process (Linux), else None."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def peak_rss_kib(pid: int) -> int | None:
    """VmHWM, the resident-set high-water mark of a live process (Linux), else None."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


@dataclass
class Child:
    proc: asyncio.subprocess.Process
    stdout: asyncio.StreamReader
    stderr_path: Path
    raw: list[bytes] = field(default_factory=list)
    """Every stdout line, as read."""

    @classmethod
    async def start(cls, config: Path, *args: str, stdout: Any = None) -> Child:
        err = config.parent / "stderr.log"
        with err.open("wb") as sink:  # a file: a chatty child never blocks on a full stderr pipe
            proc = await asyncio.create_subprocess_exec(
                *stdio_argv(config, *args),
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE if stdout is None else stdout,
                stderr=sink,
                cwd=ROOT,
                env=child_env(),
                limit=4 * LIMIT,
            )
        reader = proc.stdout
        if reader is None:
            reader = asyncio.StreamReader()  # stdout was redirected by the caller
        return cls(proc, reader, err)

    @property
    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")

    async def send(self, data: bytes) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(data)
        await self.proc.stdin.drain()

    async def close_stdin(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            await self.proc.stdin.wait_closed()

    async def answer(self, timeout: float = STEP) -> dict[str, Any]:
        """The next stdout line: exactly one complete JSON-RPC response, nothing else."""
        try:
            line = await asyncio.wait_for(self.stdout.readline(), timeout)
        except TimeoutError:
            raise AssertionError(f"no answer within {timeout}s; stderr tail: {self.stderr[-2000:]}") from None
        assert line, f"stdout closed early; stderr tail: {self.stderr[-2000:]}"
        self.raw.append(line)
        assert line.endswith(b"\n") and b"\n" not in line[:-1] and b"\r" not in line, line[:300]
        message = loads(line)
        check_response(message)
        return message

    async def answers_until(self, rid: Any, timeout: float = STEP) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        """Answers before the one for ``rid`` (a sentinel request), and that answer."""
        before: list[dict[str, Any]] = []
        while True:
            message = await self.answer(timeout)
            if same_id(message.get("id"), rid):
                return before, message
            before.append(message)

    async def rest(self, timeout: float = STEP) -> list[dict[str, Any]]:
        """Every remaining answer up to stdout EOF."""
        out: list[dict[str, Any]] = []
        deadline = time.monotonic() + timeout
        while True:
            line = await asyncio.wait_for(self.stdout.readline(), max(0.0, deadline - time.monotonic()))
            if not line:
                return out
            self.raw.append(line)
            assert line.endswith(b"\n"), line[:300]
            message = loads(line)
            check_response(message)
            out.append(message)

    async def exit_code(self, timeout: float = STEP) -> int:
        try:
            return await asyncio.wait_for(self.proc.wait(), timeout)
        except TimeoutError:
            raise AssertionError(f"the gateway did not exit within {timeout}s; stderr: {self.stderr[-2000:]}") from None

    async def kill(self) -> None:
        if self.proc.returncode is None:
            self.proc.kill()
            await self.proc.wait()
