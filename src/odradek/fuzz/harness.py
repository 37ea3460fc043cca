"""The fuzzing harness: mutated requests against a live broker, and proof it survives them.

Workers (asyncio, one TCP connection each) send mutated corpus requests one at a time and
wait up to ``reply_timeout_s`` for either a response frame (its correlation id must be
the request's) or the broker closing the connection; a closed or silent connection is
replaced by a new one. Now and then a worker lies in the frame's size prefix instead
(negative, tiny, larger than the payload, larger than socket.request.max.bytes).

After every ``check_every_s`` the workers pause and the harness checks, in order:

1. the broker process is alive (no crash, no abort);
2. a fresh connection gets an answer to ApiVersions within ``probe_timeout_s`` (no hang:
   a request that never completes is fine -- a delayed operation may wait -- but the
   event loop must keep serving);
3. the broker's resident memory (VmRSS) is under ``rss_ceiling_mb``;
4. a real client round trip works: confluent-kafka (librdkafka) produces one record with
   acks=all to a topic the corpus never names, and a consumer reads it back by offset.

Any failed check is recorded with the last requests sent (hex) and ends the run. The
broker log, when given, is scanned for the tracebacks of unexpected handler failures
(answered UNKNOWN_SERVER_ERROR): they are not failures of the harness's checks, but each
distinct one is a bug worth reading, so the report lists them.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import os
import random
import socket
import struct
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from odradek.fuzz.corpus import FUZZ_TOPICS, CorpusEntry, build_corpus, encode_request
from odradek.fuzz.mutator import Mutator
from odradek.protocol.versions import SERVED, api_name

logger = logging.getLogger(__name__)

__all__ = ["FuzzConfig", "FuzzReport", "run_fuzz"]

CANARY_TOPIC = "zz-liveness-canary"
_I32 = struct.Struct(">i")


@dataclass
class FuzzConfig:
    bootstrap: str  # host:port of the broker under test
    broker_pid: int | None = None  # for liveness and RSS (None: only the network checks)
    broker_log: str | None = None  # scanned for unexpected handler failures
    duration_s: float = 60.0
    max_requests: int | None = None
    seed: int = 1
    workers: int = 8
    reply_timeout_s: float = 1.0
    check_every_s: float = 10.0
    probe_timeout_s: float = 5.0
    rss_ceiling_mb: float = 600.0
    frame_lie_ratio: float = 0.01
    unmutated_ratio: float = 0.2
    keep_last: int = 50  # requests kept for a failure report


@dataclass
class FuzzReport:
    requests: int = 0
    answered: int = 0
    closed: int = 0
    unanswered: int = 0  # neither answer nor close within reply_timeout_s
    frame_lies: int = 0
    wrong_correlation: int = 0
    connections: int = 0
    checks: int = 0
    round_trips: int = 0
    rss_start_mb: float = 0.0
    rss_max_mb: float = 0.0
    rss_end_mb: float = 0.0
    elapsed_s: float = 0.0
    per_api: dict[str, dict[str, int]] = field(default_factory=dict)
    mutations: dict[str, int] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)
    handler_failures: dict[str, int] = field(default_factory=dict)
    last_requests_hex: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.failures and self.wrong_correlation == 0

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["ok"] = self.ok
        return d


# ------------------------------------------------------------------------ probes
def process_rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise ProcessLookupError(pid)


def process_alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, IndexError):
        return False
    return state not in ("Z", "X")


def _split(address: str) -> tuple[str, int]:
    host, port = address.rsplit(":", 1)
    return host, int(port)


def probe_api_versions(address: str, timeout_s: float) -> str | None:
    """None if a fresh connection gets a valid ApiVersions v3 answer, else why not."""
    from kio.index import load_request_schema  # noqa: PLC0415

    req: Any = load_request_schema(18, 3)(  # type: ignore[call-arg]
        client_software_name="fuzz-probe", client_software_version="1"
    )
    payload = encode_request(req, correlation_id=7)
    try:
        with socket.create_connection(_split(address), timeout=timeout_s) as s:
            s.sendall(_I32.pack(len(payload)) + payload)
            head = _recv_exact(s, 4)
            body = _recv_exact(s, _I32.unpack(head)[0])
    except OSError as e:
        return f"ApiVersions probe failed: {e!r}"
    cid, error = struct.unpack_from(">ih", body, 0)
    if cid != 7 or error != 0:
        return f"ApiVersions probe: correlation id {cid}, error {error}"
    return None


def _recv_exact(s: socket.socket, n: int) -> bytes:
    out = bytearray()
    while len(out) < n:
        chunk = s.recv(n - len(out))
        if not chunk:
            raise ConnectionError("closed")
        out += chunk
    return bytes(out)


class RoundTrip:
    """A real client's produce (acks=all) and consume of one record (librdkafka)."""

    def __init__(self, bootstrap: str) -> None:
        from confluent_kafka import Consumer, Producer  # noqa: PLC0415
        from confluent_kafka.admin import AdminClient, NewTopic  # noqa: PLC0415

        self.bootstrap = bootstrap
        self._new_topic = NewTopic
        self.admin = AdminClient({"bootstrap.servers": bootstrap})
        self.producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "acks": "all",
                "message.timeout.ms": 25000,
                "linger.ms": 0,
            }
        )
        self.consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": "fuzz-canary",
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
            }
        )
        self.seq = 0

    def ensure_topics(self, names: tuple[str, ...], timeout_s: float = 30.0) -> None:
        meta = self.admin.list_topics(timeout=timeout_s)
        missing = [n for n in names if n not in meta.topics]
        if missing:
            futures = self.admin.create_topics(
                [self._new_topic(n, num_partitions=2, replication_factor=1) for n in missing]
            )
            for fut in futures.values():
                try:
                    fut.result(timeout_s)
                except Exception as e:
                    if "already exists" not in str(e).lower():
                        raise

    def check(self, timeout_s: float = 30.0) -> str | None:
        """None if a record produced now is read back at its offset, else why not."""
        from confluent_kafka import TopicPartition  # noqa: PLC0415

        self.seq += 1
        value = f"canary-{self.seq}-{random.random()}".encode()
        delivered: list[Any] = []
        self.producer.produce(
            CANARY_TOPIC,
            value,
            partition=0,
            on_delivery=lambda err, msg: delivered.append((err, msg)),
        )
        deadline = time.monotonic() + timeout_s
        while not delivered and time.monotonic() < deadline:
            self.producer.poll(0.1)
        if not delivered:
            return "round trip: no delivery report"
        err, msg = delivered[0]
        if err is not None:
            return f"round trip: produce failed: {err}"
        self.consumer.assign([TopicPartition(CANARY_TOPIC, 0, msg.offset())])
        while time.monotonic() < deadline:
            m = self.consumer.poll(0.2)
            if m is None:
                continue
            if m.error():
                continue
            if m.offset() == msg.offset():
                return None if m.value() == value else "round trip: wrong record read back"
        return "round trip: the record was not read back in time"

    def close(self) -> None:
        self.producer.flush(5)
        self.consumer.close()


# ------------------------------------------------------------------------ the run
class _Run:
    def __init__(self, cfg: FuzzConfig, corpus: list[CorpusEntry], report: FuzzReport) -> None:
        self.cfg = cfg
        self.corpus = corpus
        self.report = report
        variants = {k: list(range(lo, hi + 1)) for k, (lo, hi) in SERVED.items()}
        self.mutator = Mutator([e.payload for e in corpus], cfg.seed, variants)
        self.rnd = random.Random(cfg.seed + 1)
        self.host, self.port = _split(cfg.bootstrap)
        self.gate = asyncio.Event()
        self.gate.set()
        self.stopped = asyncio.Event()
        self.stop = False
        self.in_flight = 0
        self.last: collections.deque[str] = collections.deque(maxlen=cfg.keep_last)
        self.next_cid = 1
        self.mutation_counts: collections.Counter[str] = collections.Counter()

    def _api_stats(self, key: int) -> dict[str, int]:
        return self.report.per_api.setdefault(
            api_name(key), {"sent": 0, "answered": 0, "closed": 0, "unanswered": 0}
        )

    def _next_request(self) -> tuple[int, bytes, bool]:
        """(api_key, framed bytes, honest frame?)"""
        entry = self.corpus[self.rnd.randrange(len(self.corpus))]
        if self.rnd.random() < self.cfg.unmutated_ratio:
            # Well-formed requests too (boundary values for the extreme entries): they
            # get past decoding into the handlers.
            payload = entry.payload
            self.mutation_counts["none" if not entry.extreme else "none-extreme"] += 1
        else:
            payload, applied = self.mutator.mutate(entry.payload)
            self.mutation_counts.update(applied)
        cid = self.next_cid = (self.next_cid + 1) & 0x7FFFFFFF
        if len(payload) >= 8:
            payload = payload[:4] + _I32.pack(cid) + payload[8:]
        if self.rnd.random() < self.cfg.frame_lie_ratio:
            size = self.rnd.choice((-1, 0, 3, len(payload) // 2, len(payload) + 7, 0x7FFFFFFF))
            return entry.api_key, _I32.pack(size) + payload, False
        return entry.api_key, _I32.pack(len(payload)) + payload, True

    async def _connect(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        self.report.connections += 1
        return await asyncio.open_connection(self.host, self.port)

    async def worker(self) -> None:
        conn: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None
        rpt = self.report
        try:
            while not self.stop:
                await self.gate.wait()
                if self.stop:
                    break
                if self.cfg.max_requests is not None and rpt.requests >= self.cfg.max_requests:
                    self.halt()
                    break
                if conn is None:
                    try:
                        conn = await self._connect()
                    except OSError as e:
                        pid = self.cfg.broker_pid
                        if self.stop:
                            break  # another worker already reported it
                        if pid is not None and not process_alive(pid):
                            rpt.failures.append(f"broker process {pid} died")
                        else:
                            rpt.failures.append(f"cannot connect: {e!r}")
                        rpt.last_requests_hex = list(self.last)
                        self.halt()
                        break
                reader, writer = conn
                api_key, data, honest = self._next_request()
                rpt.requests += 1
                stats = self._api_stats(api_key)
                stats["sent"] += 1
                if not honest:
                    rpt.frame_lies += 1
                self.last.append(data[:4096].hex())
                self.in_flight += 1
                try:
                    outcome = await self._exchange(reader, writer, data)
                finally:
                    self.in_flight -= 1
                stats[outcome] += 1
                setattr(rpt, outcome, getattr(rpt, outcome) + 1)
                if outcome != "answered":
                    writer.close()
                    conn = None
        finally:
            if conn is not None:
                conn[1].close()

    async def _exchange(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, data: bytes
    ) -> str:
        expected_cid = _I32.unpack_from(data, 8)[0] if len(data) >= 12 else None
        try:
            writer.write(data)
            await writer.drain()
            head = await asyncio.wait_for(reader.readexactly(4), self.cfg.reply_timeout_s)
            size = _I32.unpack(head)[0]
            body = await asyncio.wait_for(reader.readexactly(size), self.cfg.reply_timeout_s)
        except (asyncio.IncompleteReadError, ConnectionError, OSError):
            return "closed"
        except TimeoutError:
            return "unanswered"
        cid = _I32.unpack_from(body, 0)[0] if len(body) >= 4 else None
        if cid != expected_cid:
            self.report.wrong_correlation += 1
            self.report.failures.append(
                f"response correlation id {cid}, expected {expected_cid}: {data[:256].hex()}"
            )
            self.halt()
        return "answered"

    def halt(self) -> None:
        self.stop = True
        self.stopped.set()
        self.gate.set()

    async def checker(self, round_trip: RoundTrip) -> None:
        cfg, rpt = self.cfg, self.report
        deadline = time.monotonic() + cfg.duration_s
        while True:
            wait = min(cfg.check_every_s, max(deadline - time.monotonic(), 0.0))
            try:
                async with asyncio.timeout(wait):  # not wait_for: see fetcher._run
                    await self.stopped.wait()
            except TimeoutError:
                pass
            if self.stop:
                return
            if time.monotonic() >= deadline:
                self.halt()  # the final check runs after the workers are done
                return
            self.gate.clear()  # pause the workers: check between batches
            while self.in_flight:
                await asyncio.sleep(0.01)
            why = await asyncio.to_thread(self.check, round_trip)
            if why:
                rpt.failures.append(why)
                rpt.last_requests_hex = list(self.last)
                self.halt()
                return
            self.gate.set()

    def check(self, round_trip: RoundTrip) -> str | None:
        cfg, rpt = self.cfg, self.report
        rpt.checks += 1
        if cfg.broker_pid is not None and not process_alive(cfg.broker_pid):
            return f"broker process {cfg.broker_pid} died"
        why = probe_api_versions(cfg.bootstrap, cfg.probe_timeout_s)
        if why:
            return why
        if cfg.broker_pid is not None:
            rss = process_rss_mb(cfg.broker_pid)
            rpt.rss_max_mb = max(rpt.rss_max_mb, rss)
            rpt.rss_end_mb = rss
            if rss > cfg.rss_ceiling_mb:
                return f"broker RSS {rss:.0f} MB above the ceiling {cfg.rss_ceiling_mb:.0f} MB"
        try:
            # Mutated DeleteTopics remove the corpus's topics now and then; putting them
            # back is housekeeping (the control plane may be slow under a flood of topic
            # creations and deletions), not a liveness criterion.
            round_trip.ensure_topics(FUZZ_TOPICS)
        except Exception as e:  # noqa: BLE001
            logger.info("could not recreate %s yet: %r", FUZZ_TOPICS, e)
        why = round_trip.check()
        if why is None:
            rpt.round_trips += 1
        return why


def scan_handler_failures(log_path: str, start: int) -> dict[str, int]:
    """Count the dispatcher's "failed; answering UNKNOWN_SERVER_ERROR" lines per site."""
    out: collections.Counter[str] = collections.Counter()
    try:
        with open(log_path, "rb") as f:
            f.seek(start)
            lines = f.read().decode(errors="replace").splitlines()
    except FileNotFoundError:
        return {}
    for i, line in enumerate(lines):
        if "answering UNKNOWN_SERVER_ERROR" in line:
            # The traceback's last line names the exception; its "File" lines the site.
            tail = [ln for ln in lines[i + 1 : i + 60] if ln.startswith("  File ")]
            exc = next(
                (
                    ln
                    for ln in lines[i + 1 : i + 60]
                    if ln and not ln.startswith((" ", "Traceback"))
                ),
                "",
            )
            site = tail[-1].strip() if tail else "?"
            out[f"{line.split(': ', 1)[-1][:80]} | {site} | {exc[:120]}"] += 1
    return dict(out)


def run_fuzz(cfg: FuzzConfig, progress: Callable[[FuzzReport], None] | None = None) -> FuzzReport:
    """Fuzz the broker at ``cfg.bootstrap`` until ``duration_s`` or ``max_requests``."""
    report = FuzzReport()
    corpus = build_corpus(cfg.seed)
    log_start = (
        os.path.getsize(cfg.broker_log) if cfg.broker_log and Path(cfg.broker_log).exists() else 0
    )
    round_trip = RoundTrip(cfg.bootstrap)
    try:
        round_trip.ensure_topics((CANARY_TOPIC, *FUZZ_TOPICS))
        if cfg.broker_pid is not None:
            report.rss_start_mb = report.rss_max_mb = process_rss_mb(cfg.broker_pid)
        why = round_trip.check()
        if why:
            report.failures.append(f"before fuzzing: {why}")
            return report
        t0 = time.monotonic()

        async def main() -> None:
            run = _Run(cfg, corpus, report)
            workers = [asyncio.create_task(run.worker()) for _ in range(cfg.workers)]
            checker = asyncio.create_task(run.checker(round_trip))
            reporter = asyncio.create_task(_progress(run, progress)) if progress else None
            await asyncio.gather(*workers)
            run.halt()
            await checker
            if reporter is not None:
                reporter.cancel()
            report.mutations = dict(run.mutation_counts)
            if report.failures and not report.last_requests_hex:
                report.last_requests_hex = list(run.last)

        asyncio.run(main())
        report.elapsed_s = time.monotonic() - t0
        if not report.failures:  # one last full check after the storm
            why = _Run(cfg, corpus, report).check(round_trip)
            if why:
                report.failures.append(f"after fuzzing: {why}")
    finally:
        round_trip.close()
        if cfg.broker_log:
            report.handler_failures = scan_handler_failures(cfg.broker_log, log_start)
    return report


async def _progress(run: _Run, progress: Callable[[FuzzReport], None]) -> None:
    while True:
        await asyncio.sleep(10)
        progress(run.report)
