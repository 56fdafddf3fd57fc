"""A real ``redis-server`` (Debian's package) for the tests: on a free loopback port, in its own
process group, no persistence, killed at teardown. Skips with one line when it is not installed."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import ssl
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

MISSING = "redis-server is not installed (Debian package redis-server): the shared-state tests need it"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class RedisServer:
    def __init__(
        self, directory: Path, password: str | None = None, tls: tuple[Path, Path, Path] | None = None
    ) -> None:
        """``tls``: (certificate, key, CA) files: TLS only (``rediss://``), no plain port."""
        binary = shutil.which("redis-server")
        if binary is None:
            pytest.skip(MISSING)
        self.binary = binary
        self.directory = directory
        self.directory.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.password = password
        self.tls = tls
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"{'rediss' if self.tls else 'redis'}://127.0.0.1:{self.port}/0"

    def start(self, timeout: float = 10.0) -> None:
        args = [self.binary, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
        if self.tls:
            cert, key, ca = self.tls
            args += ["--port", "0", "--tls-port", str(self.port), "--tls-cert-file", str(cert)]
            args += ["--tls-key-file", str(key), "--tls-ca-cert-file", str(ca), "--tls-auth-clients", "no"]
        else:
            args += ["--port", str(self.port)]
        args += ["--dir", str(self.directory), "--logfile", str(self.directory / "redis.log")]
        if self.password:
            args += ["--requirepass", self.password]
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + timeout
        while not self._answers():
            if self.proc.poll() is not None:
                raise AssertionError(f"redis-server exited with {self.proc.returncode}")
            if time.monotonic() > deadline:
                self.stop()
                raise AssertionError("redis-server did not answer before the deadline")
            time.sleep(0.02)

    def _connect(self, timeout: float) -> socket.socket:
        sock = socket.create_connection(("127.0.0.1", self.port), timeout=timeout)
        if self.tls:
            context = ssl.create_default_context(cafile=str(self.tls[2]))
            return context.wrap_socket(sock, server_hostname="127.0.0.1")
        return sock

    def _answers(self) -> bool:
        try:
            with self._connect(0.5) as sock:
                sock.sendall(b"PING\r\n")
                reply = sock.recv(64)
        except OSError:
            return False
        return reply.startswith((b"+PONG", b"-NOAUTH"))

    def command(self, *words: str) -> bytes:
        """One command over a raw socket (RESP), for assertions on what the gateway stored."""
        parts = [f"*{len(words)}\r\n".encode()]
        for word in words:
            data = word.encode()
            parts.append(b"$%d\r\n%s\r\n" % (len(data), data))
        with self._connect(2) as sock:
            if self.password:
                sock.sendall(b"*2\r\n$4\r\nAUTH\r\n$%d\r\n%s\r\n" % (len(self.password), self.password.encode()))
                sock.recv(64)
            sock.sendall(b"".join(parts))
            return sock.recv(65536)

    def stop(self) -> None:
        proc = self.proc
        if proc is not None and proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
        self.proc = None


@contextmanager
def redis_server(
    directory: Path, password: str | None = None, tls: tuple[Path, Path, Path] | None = None
) -> Iterator[RedisServer]:
    server = RedisServer(directory, password, tls)
    server.start()
    try:
        yield server
    finally:
        server.stop()


def tls_files(directory: Path) -> tuple[Path, Path, Path]:
    """A certificate for 127.0.0.1 from a fresh private CA (trustme), as the (certificate, key,
    CA) files :class:`RedisServer` takes for ``tls``."""
    import trustme

    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1")
    files = (directory / "redis.crt", directory / "redis.key", directory / "ca.pem")
    cert.cert_chain_pems[0].write_to_path(str(files[0]))
    cert.private_key_pem.write_to_path(str(files[1]))
    ca.cert_pem.write_to_path(str(files[2]))
    return files
