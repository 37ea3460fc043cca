"""Producer and consumer performance tools, in the style of Kafka's perf-test scripts.

``odradek perf produce`` mirrors ``kafka-producer-perf-test`` (periodic "N records sent,
X records/sec (Y MB/sec), A ms avg latency, M ms max latency." lines and a final line
with percentiles); ``odradek perf consume`` mirrors ``kafka-consumer-perf-test``'s CSV.
Both drive confluent-kafka (librdkafka), the client most users measure with.

Latency is librdkafka's own per-message figure (``Message.latency()``: time from
``produce()`` to the delivery report), i.e. delivery callback time minus send time,
without a Python closure per record.

The maths (percentiles, windows, summaries) is pure and unit-tested; the client loops
are thin.
"""

from __future__ import annotations

import json
import math
import os
import re
import time
from array import array
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any, TextIO

__all__ = [
    "percentile",
    "parse_props",
    "parse_mock_bootstrap",
    "LatencyStats",
    "ProduceSummary",
    "ConsumeSummary",
    "run_produce",
    "run_consume",
    "format_consume_csv",
    "CONSUME_CSV_HEADER",
    "MB",
]

MB = 1024 * 1024  # Kafka's perf tools divide by 1024*1024 for "MB"
PERCENTILES = (0.5, 0.95, 0.99, 0.999)

_MOCK_LINE = re.compile(r"Mock cluster enabled.*?replaced with\s+(\S+)")


def parse_mock_bootstrap(log_line: str) -> str | None:
    """Bootstrap address of librdkafka's mock cluster from its log line (docs/platform-notes.md):
    "Mock cluster enabled: original bootstrap.servers and security.protocol ignored
    and replaced with 127.0.0.1:44503"."""
    m = _MOCK_LINE.search(log_line)
    return m.group(1).rstrip(".,;") if m else None


def parse_props(items: Iterable[str] | None) -> dict[str, str]:
    """``["k=v", ...]`` (``--producer-props``) → dict; the value may contain '='."""
    out: dict[str, str] = {}
    for item in items or ():
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"Invalid property {item!r}: expected key=value")
        out[key.strip()] = value.strip()
    return out


def percentile(sorted_values: Sequence[float], p: float) -> float:
    """Kafka's perf-test percentile: element ``int(p * n)`` of the sorted sample."""
    if not sorted_values:
        return 0.0
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"percentile must be in [0, 1], got {p}")
    return float(sorted_values[min(int(p * len(sorted_values)), len(sorted_values) - 1)])


@dataclass
class Window:
    """One reporting window of the producer (Kafka's Stats.printWindow)."""

    start: float
    count: int = 0
    bytes: int = 0
    latency_sum_ms: float = 0.0
    latency_max_ms: float = 0.0

    def line(self, now: float) -> str:
        elapsed = max(now - self.start, 1e-9)
        rps = self.count / elapsed
        mbps = self.bytes / elapsed / MB
        avg = self.latency_sum_ms / self.count if self.count else 0.0
        return (
            f"{self.count} records sent, {rps:.1f} records/sec ({mbps:.2f} MB/sec), "
            f"{avg:.1f} ms avg latency, {self.latency_max_ms:.1f} ms max latency."
        )


class LatencyStats:
    """Per-record latencies (ms) plus windowed progress, as Kafka's producer Stats."""

    def __init__(self, now: float, report_interval_s: float = 5.0) -> None:
        self.start = now
        self.latencies = array("d")
        self.bytes = 0
        self.errors = 0
        self.report_interval_s = report_interval_s
        self.window = Window(now)

    def record(self, latency_ms: float, size: int) -> None:
        self.latencies.append(latency_ms)
        self.bytes += size
        w = self.window
        w.count += 1
        w.bytes += size
        w.latency_sum_ms += latency_ms
        if latency_ms > w.latency_max_ms:
            w.latency_max_ms = latency_ms

    def maybe_report(self, now: float) -> str | None:
        """The progress line when the window is over, else None."""
        if now - self.window.start < self.report_interval_s:
            return None
        line = self.window.line(now)
        self.window = Window(now)
        return line

    def summary(self, end: float, sent: int) -> ProduceSummary:
        lat = sorted(self.latencies)
        n = len(lat)
        elapsed = max(end - self.start, 1e-9)
        return ProduceSummary(
            records=n,
            sent=sent,
            errors=self.errors,
            elapsed_s=elapsed,
            bytes=self.bytes,
            records_per_sec=n / elapsed,
            mb_per_sec=self.bytes / elapsed / MB,
            avg_latency_ms=(sum(lat) / n) if n else 0.0,
            max_latency_ms=lat[-1] if n else 0.0,
            p50_ms=percentile(lat, 0.5),
            p95_ms=percentile(lat, 0.95),
            p99_ms=percentile(lat, 0.99),
            p999_ms=percentile(lat, 0.999),
        )


@dataclass
class ProduceSummary:
    records: int  # acknowledged
    sent: int
    errors: int
    elapsed_s: float
    bytes: int
    records_per_sec: float
    mb_per_sec: float
    avg_latency_ms: float
    max_latency_ms: float
    p50_ms: float
    p95_ms: float
    p99_ms: float
    p999_ms: float

    def line(self) -> str:
        """Kafka's final line (percentiles as whole ms, like the Java tool)."""
        return (
            f"{self.records} records sent, {self.records_per_sec:f} records/sec "
            f"({self.mb_per_sec:.2f} MB/sec), {self.avg_latency_ms:.2f} ms avg latency, "
            f"{self.max_latency_ms:.2f} ms max latency, {int(self.p50_ms)} ms 50th, "
            f"{int(self.p95_ms)} ms 95th, {int(self.p99_ms)} ms 99th, {int(self.p999_ms)} ms 99.9th."
        )

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)


@dataclass
class ConsumeSummary:
    start_ms: int
    end_ms: int
    messages: int
    bytes: int
    fetch_start_ms: int = 0
    partitions: int = 0
    timed_out: bool = False
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def elapsed_s(self) -> float:
        return max(self.end_ms - self.start_ms, 1) / 1000.0

    @property
    def mb(self) -> float:
        return self.bytes / MB

    @property
    def mb_per_sec(self) -> float:
        return self.mb / self.elapsed_s

    @property
    def msgs_per_sec(self) -> float:
        return self.messages / self.elapsed_s

    @property
    def fetch_elapsed_s(self) -> float:
        """From the first records received to the last (no metadata/offset set-up)."""
        return max(self.end_ms - (self.fetch_start_ms or self.start_ms), 1) / 1000.0

    @property
    def fetch_mb_per_sec(self) -> float:
        return self.mb / self.fetch_elapsed_s

    @property
    def fetch_msgs_per_sec(self) -> float:
        return self.messages / self.fetch_elapsed_s

    def to_json(self) -> str:
        d = asdict(self)
        d.update(
            elapsed_s=self.elapsed_s,
            mb=self.mb,
            mb_per_sec=self.mb_per_sec,
            msgs_per_sec=self.msgs_per_sec,
            fetch_mb_per_sec=self.fetch_mb_per_sec,
            fetch_msgs_per_sec=self.fetch_msgs_per_sec,
        )
        return json.dumps(d, sort_keys=True)


CONSUME_CSV_HEADER = (
    "start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec, "
    "rebalance.time.ms, fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec"
)


def _kafka_time(ms: int) -> str:
    """kafka-consumer-perf-test's date format: yyyy-MM-dd HH:mm:ss:SSS."""
    dt = datetime.fromtimestamp(ms / 1000.0)
    return dt.strftime("%Y-%m-%d %H:%M:%S:") + f"{ms % 1000:03d}"


def format_consume_csv(s: ConsumeSummary) -> str:
    # assign() means no group join: rebalance time is the setup before the first fetch.
    fetch_start = s.fetch_start_ms or s.start_ms
    return (
        f"{_kafka_time(s.start_ms)}, {_kafka_time(s.end_ms)}, {s.mb:.4f}, {s.mb_per_sec:.4f}, "
        f"{s.messages}, {s.msgs_per_sec:.4f}, {fetch_start - s.start_ms}, {s.end_ms - fetch_start}, "
        f"{s.fetch_mb_per_sec:.4f}, {s.fetch_msgs_per_sec:.4f}"
    )


def make_payload(size: int, seed: int = 0) -> bytes:
    """Kafka's perf test sends random upper-case letters; a fixed payload is enough."""
    rnd = (seed * 1103515245 + 12345) & 0x7FFFFFFF
    out = bytearray(size)
    for i in range(size):
        rnd = (rnd * 1103515245 + 12345) & 0x7FFFFFFF
        out[i] = 65 + (rnd >> 16) % 26
    return bytes(out)


def _now_ms() -> int:
    return int(time.time() * 1000)


def run_produce(
    bootstrap: str,
    topic: str,
    num_records: int,
    record_size: int,
    *,
    throughput: float = -1,
    producer_props: dict[str, str] | None = None,
    report_interval_s: float = 5.0,
    out: TextIO | None = None,
    flush_timeout_s: float = 120.0,
    stall_timeout_s: float = 60.0,
    clock: Callable[[], float] = time.monotonic,
) -> ProduceSummary:
    """Send ``num_records`` values of ``record_size`` bytes; ``throughput`` > 0 caps
    records/s (Kafka's ThroughputThrottler), -1 means as fast as possible.

    Raises RuntimeError when no delivery report arrives for ``stall_timeout_s`` while
    the client queue is full (a broken broker must not hang a benchmark until
    librdkafka's 5-minute message.timeout.ms)."""
    from confluent_kafka import KafkaException, Producer

    conf: dict[str, Any] = {"bootstrap.servers": bootstrap, "acks": "1", "linger.ms": 5}
    conf.update(producer_props or {})
    payload = make_payload(record_size)
    stats = LatencyStats(clock(), report_interval_s)

    last_report = [clock()]

    def on_delivery(err: Any, msg: Any) -> None:
        last_report[0] = clock()
        if err is not None:
            stats.errors += 1
            return
        lat = msg.latency()
        stats.record((lat or 0.0) * 1000.0, record_size)

    conf["on_delivery"] = on_delivery
    producer = Producer(conf)
    start = clock()
    stats.start = start
    stats.window = Window(start)
    sent = 0
    try:
        for i in range(num_records):
            if throughput > 0:
                ahead = start + i / throughput - clock()
                if ahead > 0:
                    producer.poll(min(ahead, 0.1))
            while True:
                try:
                    producer.produce(topic, payload)
                    break
                except BufferError:
                    producer.poll(0.005)  # queue full: serve delivery reports
                    if clock() - last_report[0] > stall_timeout_s:
                        raise RuntimeError(
                            f"no delivery report for {stall_timeout_s:.0f} s with the "
                            f"producer queue full ({sent} sent, {len(stats.latencies)} acked)"
                        ) from None
            sent += 1
            if i & 1023 == 0:
                producer.poll(0)
                line = stats.maybe_report(clock())
                if line and out is not None:
                    print(line, file=out, flush=True)
        last_report[0] = clock()
        remaining = producer.flush(flush_timeout_s)
        if remaining:
            stats.errors += remaining
    except KafkaException as e:
        raise RuntimeError(f"produce failed: {e}") from e
    return stats.summary(clock(), sent)


def run_consume(
    bootstrap: str,
    topic: str,
    messages: int,
    *,
    consumer_props: dict[str, str] | None = None,
    timeout_s: float = 10.0,
    drain_idle_s: float = 1.0,
    batch: int = 10000,
) -> ConsumeSummary:
    """Read up to ``messages`` records from the beginning of every partition of ``topic``
    with ``assign`` (no consumer group). Stops early when at least the records present
    at start (sum of high - low watermarks) are read and nothing more arrives for
    ``drain_idle_s`` (brokers that retain less than was produced, like librdkafka's mock,
    end there; watermarks are not trusted further since Tansu's are off), or when
    nothing arrives for ``timeout_s`` (``timed_out``). ``end_ms`` is the time of the
    last record received, so idle waits do not dilute the rates."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, Message, TopicPartition

    conf: dict[str, Any] = {
        "bootstrap.servers": bootstrap,
        "group.id": "odradek-perf",  # required by the client; unused with assign()
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "auto.offset.reset": "earliest",
        "enable.partition.eof": False,
        "fetch.max.bytes": 52428800,
        "max.partition.fetch.bytes": 1048576,
        # librdkafka's default (100000) starves the pre-fetch queue on small records:
        # measured 0.21 M -> 1.26 M records/s at 100 B against Tansu.
        "queued.min.messages": 1000000,
    }
    conf.update(consumer_props or {})
    start_ms = _now_ms()
    consumer = Consumer(conf)
    try:
        md = consumer.list_topics(topic, timeout=timeout_s)
        tmd = md.topics.get(topic)
        if tmd is None or tmd.error is not None or not tmd.partitions:
            err = tmd.error if tmd is not None else "no such topic"
            raise RuntimeError(f"topic {topic!r} unavailable: {err}")
        available = 0
        tps = []
        for p in sorted(tmd.partitions):
            tp = TopicPartition(topic, p)
            low, high = consumer.get_watermark_offsets(tp, timeout=timeout_s)
            available += max(high - low, 0)
            tps.append(TopicPartition(topic, p, OFFSET_BEGINNING))
        _msg_error, _msg_value, _msg_key = Message.error, Message.value, Message.key
        consumer.assign(tps)
        count = 0
        nbytes = 0
        fetch_start_ms = 0
        last_progress = time.monotonic()
        end_ms = _now_ms()
        timed_out = False
        while count < messages:
            msgs = consumer.consume(num_messages=batch, timeout=0.2)
            if not msgs:
                idle = time.monotonic() - last_progress
                if count >= available and idle > drain_idle_s:
                    break  # read all that was there at start (the mock keeps only ~5 MB)
                if idle > timeout_s:
                    timed_out = True
                    break
                continue
            if not fetch_start_ms:
                fetch_start_ms = _now_ms()
            # The client, not the broker, limits small-record consumption: stay in C-level
            # map() calls instead of a Python loop per record.
            if list(map(_msg_error, msgs)).count(None) != len(msgs):
                msgs = [m for m in msgs if m.error() is None]  # rare: error events
            count += len(msgs)
            nbytes += sum(map(len, filter(None, map(_msg_value, msgs))))
            nbytes += sum(map(len, filter(None, map(_msg_key, msgs))))
            last_progress = time.monotonic()
            # the end is the last record, not the idle wait after it
            end_ms = _now_ms()
    except KafkaException as e:
        raise RuntimeError(f"consume failed: {e}") from e
    finally:
        consumer.close()
    return ConsumeSummary(
        start_ms=start_ms,
        end_ms=end_ms,
        messages=count,
        bytes=nbytes,
        fetch_start_ms=fetch_start_ms,
        partitions=len(tps),
        timed_out=timed_out,
        extra={"available_at_start": available, "requested": messages},
    )


def proc_cpu_seconds(pid: int) -> float:
    """CPU seconds (user + system, all threads) of a live process, from /proc/<pid>/stat."""
    with open(f"/proc/{pid}/stat", "rb") as f:
        data = f.read().decode()
    # the command name (field 2) may contain spaces and parentheses: split after the last ')'
    fields = data[data.rindex(")") + 2 :].split()
    utime, stime = int(fields[11]), int(fields[12])  # fields 14 and 15 of proc(5)
    return (utime + stime) / os.sysconf("SC_CLK_TCK")


def cpu_seconds_per_gb(cpu_s: float, nbytes: int) -> float:
    """Broker CPU cost of moving 1 GB (10^9 bytes) of record values."""
    if nbytes <= 0:
        return math.nan
    return cpu_s / (nbytes / 1e9)
