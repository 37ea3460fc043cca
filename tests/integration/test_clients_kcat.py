"""kcat 1.7.1 (Debian, librdkafka 2.0.2) against a real Odradek broker.

librdkafka 2.0.2 checks exact version overlaps with the ranges it knows, which is why
Produce is advertised from v0 (src/odradek/protocol/versions.py); these tests prove
that old librdkafka produces, consumes, queries offsets by timestamp and lists metadata.
kcat is line-oriented, so records here are printable text (key TAB value).
"""

from __future__ import annotations

import json
import random
import shutil
import subprocess
import time

import pytest
from clientutil import (
    CODECS,
    Got,
    Rec,
    assert_round_trip,
    confluent_create_topic,
    timestamped,
)
from test_clients_confluent import produce_all as confluent_produce

from odradek.cluster.local import LocalCluster

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat is not installed"),
]

FMT = "%p|%o|%T|%h|%k|%s\n"  # partition|offset|timestamp|headers|key|value


def kcat(*args: str, stdin: bytes | None = None, timeout: float = 60.0) -> str:
    proc = subprocess.run(["kcat", *args], input=stdin, capture_output=True, timeout=timeout)
    assert proc.returncode == 0, f"kcat {args} rc={proc.returncode}: {proc.stderr[-2000:]!r}"
    return proc.stdout.decode()


def text_records(n: int, partition: int, seed: int) -> list[Rec]:
    """Printable records (no TAB / newline / '|'), varied sizes, some empty keys/values."""
    rnd = random.Random(seed)
    alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 .,:;-_=+"
    out = []
    for _ in range(n):
        klen = 0 if rnd.random() < 0.05 else rnd.randint(1, 20)
        vlen = (
            0
            if rnd.random() < 0.03
            else rnd.choice((rnd.randint(1, 16), rnd.randint(16, 300), rnd.randint(300, 3000)))
        )
        key = "".join(rnd.choices(alphabet, k=klen)).encode()
        value = "".join(rnd.choices(alphabet, k=vlen)).encode()
        out.append(Rec(key, value, (), partition))
    return out


def kcat_produce(b: str, topic: str, recs: list[Rec], *extra: str) -> None:
    by_part: dict[int, list[Rec]] = {}
    for r in recs:
        by_part.setdefault(r.partition, []).append(r)
    for p, rs in by_part.items():
        data = b"".join((r.key or b"") + b"\t" + (r.value or b"") + b"\n" for r in rs)
        kcat("-b", b, "-P", "-t", topic, "-p", str(p), "-K", "\t", *extra, stdin=data)


def kcat_consume(b: str, topic: str, *extra: str) -> list[Got]:
    """``-e``: exit at the end of every partition, so this is bounded."""
    out = kcat("-b", b, "-C", "-t", topic, "-e", "-q", "-f", FMT, *extra)
    got = []
    for line in out.split("\n")[:-1]:
        p, o, ts, hdrs, key, value = line.split("|")
        headers = (
            tuple((h.split("=", 1)[0], h.split("=", 1)[1].encode()) for h in hdrs.split(","))
            if hdrs
            else ()
        )
        got.append(Got(int(p), int(o), key.encode(), value.encode(), headers, int(ts)))
    return got


def test_produce_consume_multi_partition_with_headers(
    cluster: LocalCluster, topic_name: str
) -> None:
    b = cluster.bootstrap_servers
    confluent_create_topic(b, topic_name, 3)
    recs = [
        Rec(r.key, r.value, (("src", b"kcat"), ("n", b"7")), r.partition)
        for p in range(3)
        for r in text_records(5_000, p, seed=40 + p)
    ]
    kcat_produce(b, topic_name, recs, "-H", "src=kcat", "-H", "n=7")
    # kcat sends an empty key as an empty (not null) key and prints both the same way.
    assert_round_trip(recs, kcat_consume(b, topic_name), null_is_empty=True)


@pytest.mark.parametrize("codec", CODECS)
def test_codec(cluster: LocalCluster, topic_name: str, codec: str) -> None:
    b = cluster.bootstrap_servers
    confluent_create_topic(b, topic_name, 1)
    recs = text_records(20_000, 0, seed=400 + CODECS.index(codec))
    kcat_produce(b, topic_name, recs, "-z", codec)
    assert_round_trip(recs, kcat_consume(b, topic_name), check_headers=False, null_is_empty=True)


@pytest.mark.parametrize("acks", ["0", "1", "all"])
def test_acks(cluster: LocalCluster, topic_name: str, acks: str) -> None:
    b = cluster.bootstrap_servers
    confluent_create_topic(b, topic_name, 1)
    recs = text_records(2_000, 0, seed=47)
    kcat_produce(b, topic_name, recs, "-X", f"acks={acks}")
    assert_round_trip(recs, kcat_consume(b, topic_name), check_headers=False, null_is_empty=True)


def test_consume_with_key_format_and_auto_create(cluster: LocalCluster, topic_name: str) -> None:
    """The commands from the issue: auto-created topic, `-f '%k %s\\n'`."""
    b = cluster.bootstrap_servers
    lines = b"".join(b"k%d\tv%d\n" % (i, i) for i in range(1000))
    kcat("-b", b, "-P", "-t", topic_name, "-z", "gzip", "-K", "\t", stdin=lines)
    out = kcat("-b", b, "-C", "-t", topic_name, "-e", "-q", "-f", "%k %s\n")
    assert out == "".join(f"k{i} v{i}\n" for i in range(1000))


def test_offsets_by_timestamp(cluster: LocalCluster, topic_name: str) -> None:
    b = cluster.bootstrap_servers
    confluent_create_topic(b, topic_name, 1)
    base = int(time.time() * 1000) - 3_600_000
    recs = timestamped(text_records(100, 0, seed=43), base)
    confluent_produce(b, topic_name, recs)

    def query(ts: int) -> int:
        # kcat -Q prints "<topic> [<partition>] offset <n>"
        out = kcat("-b", b, "-Q", "-t", f"{topic_name}:0:{ts}")
        return int(out.strip().rsplit(" ", 1)[1])

    assert query(base) == 0
    assert query(base + 50_500) == 51
    assert query(base + 99_001) == -1
    assert query(-2) == 0  # earliest
    assert query(-1) == 100  # latest

    # Start consuming at the first record with timestamp >= ts (ListOffsets by time).
    got = kcat_consume(b, topic_name, "-o", f"s@{base + 90_000}")
    assert [(g.offset, g.timestamp_ms) for g in got] == [
        (90 + i, base + (90 + i) * 1000) for i in range(10)
    ]
    # ...and stop before the first record with timestamp >= end.
    got = kcat_consume(b, topic_name, "-o", f"s@{base + 10_000}", "-o", f"e@{base + 12_000}")
    assert [g.offset for g in got] == [10, 11]


def test_metadata_listing(cluster: LocalCluster, topic_name: str) -> None:
    b = cluster.bootstrap_servers
    confluent_create_topic(b, topic_name, 2)
    out = kcat("-b", b, "-L")
    host_port = b.split(",")[0]
    assert "1 brokers:" in out
    assert f"broker 1 at {host_port} (controller)" in out
    assert f'topic "{topic_name}" with 2 partitions:' in out
    assert "partition 1, leader 1, replicas: 1, isrs: 1" in out

    md = json.loads(kcat("-b", b, "-L", "-J", "-t", topic_name))
    assert md["brokers"] == [{"id": 1, "name": host_port}]
    assert md["controllerid"] == 1
    [t] = md["topics"]
    assert t["topic"] == topic_name and "error" not in t
    assert [(p["partition"], p["leader"], p["replicas"], p["isrs"]) for p in t["partitions"]] == [
        (i, 1, [{"id": 1}], [{"id": 1}]) for i in range(2)
    ]
