"""Connection-level pieces of the server, over real loopback sockets where it matters.

* ConnectionQuotas (pure): max.connections and max.connections.per.ip (+ overrides).
* RequestQueue (queued.max.requests): parked connections resume when the queue drains.
* LogLimiter: hostile repetition cannot flood the log.
* KafkaConnection's writer: a response larger than the socket buffers, made of bytes
  and file slices, reaches a slow reader whole and in order, from the files (zero-copy:
  the unsent rest is never read into memory), even when the segment file is closed
  meanwhile; a slice whose file shrank closes the connection; nothing else is handled
  on the connection until the response is written.
* KIP-219: a throttled connection answers at once, then handles nothing until the
  throttle time has passed.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import socket
import tempfile
import time
import tracemalloc
from dataclasses import dataclass
from typing import Any

import pytest

from odradek.log_limiter import LogLimiter
from odradek.server.network import ConnectionLimits, RequestQueue
from odradek.server.socket_server import ConnectionQuotas, SocketServer


# ----------------------------------------------------------------------- quotas
def test_connection_quotas() -> None:
    q = ConnectionQuotas(max_connections=3, max_per_ip=2, overrides={"10.0.0.9": 3})
    assert q.inc("10.0.0.1") and q.inc("10.0.0.1")
    assert not q.inc("10.0.0.1")  # per-ip limit: not counted
    assert q.total == 2 and q.slot_available()
    assert q.inc("10.0.0.9")
    assert not q.slot_available()  # the broker-wide limit blocks accepting
    q.dec("10.0.0.1")
    assert q.slot_available() and q.count("10.0.0.1") == 1
    assert q.limit_for("10.0.0.9") == 3 and q.limit_for("x") == 2
    q.dec("10.0.0.1")
    q.dec("10.0.0.9")
    assert q.total == 0 and q.count("10.0.0.1") == 0


class _Conn:
    def __init__(self) -> None:
        self.resumed = 0

    def maybe_resume_reading(self) -> None:
        self.resumed += 1


def test_request_queue_parks_and_resumes() -> None:
    rq = RequestQueue(max_queued=2)
    a, b = _Conn(), _Conn()
    rq.change(+2)
    assert rq.full
    rq.park(a)  # type: ignore[arg-type]
    rq.park(b)  # type: ignore[arg-type]
    rq.change(+1)
    assert a.resumed == b.resumed == 0
    rq.change(-1)  # still at the limit
    assert a.resumed == 0
    rq.forget(b)  # type: ignore[arg-type]
    rq.change(-1)
    assert (a.resumed, b.resumed) == (1, 0) and not rq.full


def test_log_limiter_budget_and_suppressed_count() -> None:
    lim = LogLimiter(burst=2, interval_s=10)
    assert lim.allow("k", now=0) == (True, 0)
    assert lim.allow("k", now=1) == (True, 0)
    assert [lim.allow("k", now=2)[0] for _ in range(5)] == [False] * 5
    assert lim.allow("k", now=12) == (True, 5)
    assert lim.allow("other", now=12) == (True, 0)


def test_log_limiter_kinds_are_bounded() -> None:
    lim = LogLimiter(burst=1, interval_s=1)
    for i in range(10_000):
        lim.allow(i, now=i * 0.001)
    assert len(lim._kinds) <= 4096


# ----------------------------------------------------------------------- writes
@dataclass(frozen=True)
class _Slice:
    fd: int
    position: int
    size: int


async def _serve(dispatch: Any) -> tuple[SocketServer, tuple[str, int]]:
    srv = SocketServer(
        dispatch, ConnectionLimits(), ConnectionQuotas(100, 100), RequestQueue(500), idle_ms=-1
    )
    addr = srv.bind("127.0.0.1", 0)
    srv.start_serving()
    return srv, addr


def _slow_read(addr: tuple[str, int], request: bytes, n: int, delay_s: float) -> tuple[int, str]:
    """(bytes read, their sha256): hashed as they come, so the reader holds little."""
    digest = hashlib.sha256()
    got = 0
    with socket.create_connection(addr) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16 << 10)
        s.sendall(request)
        time.sleep(delay_s)  # the broker's writes must stall and resume
        s.settimeout(20)
        while got < n:
            chunk = s.recv(65536)
            if not chunk:
                break
            digest.update(chunk)
            got += len(chunk)
    return got, digest.hexdigest()


def _frame(payload: bytes) -> bytes:
    return len(payload).to_bytes(4, "big") + payload


@pytest.mark.parametrize("use_uvloop", [False, True])
def test_large_response_is_sent_whole_in_order_from_files(use_uvloop: bool) -> None:
    data_a = os.urandom(3 << 20)
    data_b = os.urandom(2 << 20)
    with tempfile.TemporaryFile() as fa, tempfile.TemporaryFile() as fb:
        fa.write(data_a)
        fa.flush()
        fb.write(data_b)
        fb.flush()
        fd_b = os.dup(fb.fileno())
        handled: list[bytes] = []

        def dispatch(frame: bytes) -> Any:
            handled.append(bytes(frame))
            if bytes(frame) == b"big-request":
                return [
                    b"head",
                    _Slice(fa.fileno(), 1000, len(data_a) - 1000),
                    b"mid",
                    _Slice(fd_b, 0, len(data_b)),
                    b"tail",
                ]
            return b"small:" + bytes(frame)

        expected = b"head" + data_a[1000:] + b"mid" + data_b + b"tail" + b"small:second-request"

        async def main() -> tuple[int, str]:
            srv, addr = await _serve(dispatch)
            try:
                task = asyncio.create_task(
                    asyncio.to_thread(
                        _slow_read,
                        addr,
                        _frame(b"big-request") + _frame(b"second-request"),
                        len(expected),
                        0.5,
                    )
                )
                await asyncio.sleep(0.25)
                # Written only partly; the second request waits (Kafka mutes the channel).
                assert handled == [b"big-request"]
                # The segment is closed meanwhile (retention): the queued slice holds its
                # own fd, so the rest still comes from the file.
                os.close(fd_b)
                return await task
            finally:
                srv.close()

        tracemalloc.start()
        try:
            if use_uvloop:
                uvloop = pytest.importorskip("uvloop")
                got = uvloop.run(main())
            else:
                got = asyncio.run(main())
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert got == (len(expected), hashlib.sha256(expected).hexdigest())
        assert handled == [b"big-request", b"second-request"]
        # Zero-copy: 5 MB went out without the server reading them into Python memory.
        assert peak < 1 << 20, f"{peak} bytes allocated while sending"


def test_a_slice_whose_file_shrank_closes_the_connection() -> None:
    with tempfile.NamedTemporaryFile() as f:
        f.write(b"x" * (8 << 20))
        f.flush()

        def dispatch(frame: bytes) -> Any:
            return [b"h", _Slice(f.fileno(), 0, 8 << 20)]

        async def main() -> tuple[int, str]:
            srv, addr = await _serve(dispatch)
            try:
                task = asyncio.create_task(
                    asyncio.to_thread(_slow_read, addr, _frame(b"req-1"), 9 << 20, 0.4)
                )
                await asyncio.sleep(0.2)
                os.truncate(f.name, 1 << 20)  # a follower truncated the log meanwhile
                return await task
            finally:
                srv.close()

        got, _ = asyncio.run(main())
        assert got < (8 << 20) + 1  # the peer saw the connection end early


def test_idle_expiry_closes_only_idle_connections() -> None:
    async def main() -> None:
        srv, addr = await _serve(lambda frame: b"ok")
        try:
            a = socket.create_connection(addr)
            b = socket.create_connection(addr)
            deadline = time.monotonic() + 5
            while len(srv.connections) < 2:
                assert time.monotonic() < deadline
                await asyncio.sleep(0.01)
            busy = next(c for c in srv.connections)
            srv.idle_ms = 100
            await asyncio.sleep(0.15)
            busy.last_io = time.monotonic()
            assert srv.expire_idle(time.monotonic()) == 1
            while srv.connections != {busy}:  # connection_lost comes a loop turn later
                assert time.monotonic() < deadline
                await asyncio.sleep(0.01)
            assert srv.quotas.total == 1
            for s in (a, b):
                s.close()
        finally:
            srv.close()

    asyncio.run(main())


def test_connection_counters_for_metrics() -> None:
    """The counters behind kafka_server_socket_server_metrics_connection_* (issue 15):
    accepted, closed and rejected (max.connections.per.ip) connections, over real
    sockets."""

    async def main() -> None:
        srv = SocketServer(
            lambda frame: b"ok",
            ConnectionLimits(),
            ConnectionQuotas(100, 1),
            RequestQueue(500),
            idle_ms=-1,
        )
        addr = srv.bind("127.0.0.1", 0)
        srv.start_serving()
        deadline = time.monotonic() + 5

        async def until(cond: Any) -> None:
            while not cond():
                assert time.monotonic() < deadline
                await asyncio.sleep(0.01)

        try:
            a = socket.create_connection(addr)
            await until(lambda: srv.connections_created == 1)
            b = socket.create_connection(addr)  # over the per-ip limit of 1
            await until(lambda: srv.connections_rejected == 1)
            assert srv.connections_created == 1 and len(srv.connections) == 1
            a.close()
            await until(lambda: srv.connections_closed == 1)
            b.close()
            c = socket.create_connection(addr)  # the slot is free again
            await until(lambda: srv.connections_created == 2)
            assert len(srv.connections) == 1 and srv.connections_rejected == 1
            c.close()
            await until(lambda: srv.connections_closed == 2)
        finally:
            srv.close()

    asyncio.run(main())


def test_a_throttled_connection_answers_at_once_then_reads_nothing_until_the_time_passed() -> None:
    """KIP-219: the handler throttles its session; that response goes out at once and
    the connection's next request is handled only after the throttle time."""
    from odradek.server.session import current_session  # noqa: PLC0415

    handled: dict[bytes, float] = {}

    def dispatch(frame: bytes) -> Any:
        handled[bytes(frame)] = time.monotonic()
        if bytes(frame) == b"over-quota":
            current_session().throttle(400)
        return _frame(b"answer:" + bytes(frame))

    def client(addr: tuple[str, int]) -> list[tuple[bytes, float]]:
        got: list[tuple[bytes, float]] = []
        with socket.create_connection(addr) as s:
            s.settimeout(10)
            s.sendall(_frame(b"over-quota") + _frame(b"the-next-request"))
            buf = b""
            while len(got) < 2:
                chunk = s.recv(65536)
                assert chunk, "connection closed"
                buf += chunk
                while len(buf) >= 4 and len(buf) >= 4 + int.from_bytes(buf[:4], "big"):
                    n = int.from_bytes(buf[:4], "big")
                    got.append((buf[4 : 4 + n], time.monotonic()))
                    buf = buf[4 + n :]
        return got

    async def main() -> list[tuple[bytes, float]]:
        srv, addr = await _serve(dispatch)
        try:
            return await asyncio.to_thread(client, addr)
        finally:
            srv.close()

    (first, t1), (second, t2) = asyncio.run(main())
    assert (first, second) == (b"answer:over-quota", b"answer:the-next-request")
    assert t1 - handled[b"over-quota"] < 0.2  # not held back itself
    assert handled[b"the-next-request"] - handled[b"over-quota"] >= 0.4  # nothing handled meanwhile
    assert t2 - t1 >= 0.35
