"""The rate limits' own Redis connection (``gateway.state.resp``) against a real redis-server:
it must open exactly the connections redis-py would for the same ``state.redis`` (TLS verified
against ``caFile``, ``AUTH`` with user and password, the URL's database), run the GCRA script the
shared limits use, load it again when the server lost it, and fail as a connection failure (so
``onStateError`` decides) on a wrong password or a closed server, never showing the password."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.ratelimit import GCRA
from gateway.state.resp import Lane, ReplyError, encode
from tests.support.redis_server import redis_server, tls_files

SECRET = "s3cr3t-lane-password"


def test_encode_is_resp2_bulk_strings() -> None:
    assert encode(b"EVALSHA", "ab", 2) == b"*3\r\n$7\r\nEVALSHA\r\n$2\r\nab\r\n$1\r\n2\r\n"
    assert encode(b"SET", b"k\r\nx", b"") == b"*3\r\n$3\r\nSET\r\n$4\r\nk\r\nx\r\n$0\r\n\r\n"


async def _gcra(lane: Lane, key: bytes) -> list[int]:
    (reply,) = await lane.exchange([encode(b"EVALSHA", GCRA.sha_bytes, 1, key, 1_000_000, 1_000_000)])
    if isinstance(reply, ReplyError) and str(reply).startswith("NOSCRIPT"):
        await lane.exchange([encode(b"SCRIPT", b"LOAD", GCRA.source)])
        (reply,) = await lane.exchange([encode(b"EVALSHA", GCRA.sha_bytes, 1, key, 1_000_000, 1_000_000)])
    assert not isinstance(reply, ReplyError), reply
    return [int(x) for x in reply]


async def test_a_password_a_database_and_the_script(tmp_path: Path) -> None:
    with redis_server(tmp_path / "redis", password=SECRET) as redis:
        lane = Lane(redis.url.replace("/0", "/3"), None, SECRET, None)
        await lane.open()
        try:
            assert (await lane.exchange([encode(b"FLUSHALL")]))[0] == b"OK"
            assert await _gcra(lane, b"k") == [0, 0]  # loaded after NOSCRIPT, then admitted
            assert (await _gcra(lane, b"k"))[0] == 1  # burst 1: the second is refused
            assert (await lane.exchange([encode(b"CLIENT", b"INFO")]))[0].find(b" db=3 ") > 0
        finally:
            lane.close()


async def test_a_wrong_password_is_a_connection_failure_without_the_password(tmp_path: Path) -> None:
    with redis_server(tmp_path / "redis", password=SECRET) as redis:
        lane = Lane(redis.url, None, "wrong-" + SECRET, None)
        with pytest.raises(ConnectionError) as failure:
            await lane.open()
        lane.close()
        assert SECRET not in str(failure.value)


async def test_tls_trusts_exactly_the_ca_file(tmp_path: Path) -> None:
    import ssl

    files = tls_files(tmp_path)
    with redis_server(tmp_path / "redis", tls=files) as redis:
        lane = Lane(redis.url, None, None, str(files[2]))
        await lane.open()
        try:
            assert (await lane.exchange([encode(b"PING")]))[0] == b"PONG"
        finally:
            lane.close()
        untrusted = Lane(redis.url, None, None, None)
        with pytest.raises(ssl.SSLError):
            await untrusted.open()
        untrusted.close()


async def test_a_server_that_goes_away_is_a_connection_failure(tmp_path: Path) -> None:
    with redis_server(tmp_path / "redis") as redis:
        lane = Lane(redis.url, None, None, None)
        await lane.open()
        redis.stop()
        with pytest.raises(ConnectionError):
            await lane.exchange([encode(b"PING")])
        lane.close()
