"""aiokafka 0.14 (asyncio) against a real Odradek broker (issue "Broker core").

aiokafka picks each request's version from the broker's ApiVersions answer. Proves the
byte-exact ordered round trip (REQ-R7, R8), every codec (R23), acks 0/1/all, ListOffsets
by timestamp, the admin APIs and the opt-in idempotent producer; a transactional
producer commits and aborts (issue 18).
"""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewPartitions, NewTopic
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from aiokafka.errors import InvalidPartitionsError
from clientutil import (
    CODECS,
    Got,
    Rec,
    assert_contiguous,
    assert_round_trip,
    by_partition,
    make_records,
    timestamped,
)

from odradek.cluster.local import LocalCluster

pytestmark = pytest.mark.integration

PARTITIONS = 3
TOPIC_ALREADY_EXISTS, INVALID_TOPIC, UNKNOWN_TOPIC = 36, 17, 3
INVALID_REPLICATION_FACTOR, INVALID_CONFIG = 38, 40
SOURCE_DYNAMIC_TOPIC, SOURCE_DEFAULT = 1, 5


def run(coro: Any, timeout: float = 150.0) -> Any:
    return asyncio.run(asyncio.wait_for(coro, timeout))


async def create(b: str, name: str, partitions: int, configs: dict[str, str] | None = None) -> None:
    a = AIOKafkaAdminClient(bootstrap_servers=b)
    await a.start()
    try:
        r = await a.create_topics(
            [NewTopic(name, partitions, 1, topic_configs=configs or {})], timeout_ms=20000
        )
        assert [e["error_code"] for e in r.to_object()["topic_errors"]] == [0]
    finally:
        await a.close()


async def produce_all(b: str, topic: str, recs: list[Rec], **conf: Any) -> dict[int, list[int]]:
    p = AIOKafkaProducer(
        bootstrap_servers=b,
        linger_ms=5,
        max_batch_size=256 * 1024,
        max_request_size=4 * 1024 * 1024,
        **conf,
    )
    await p.start()
    try:
        futs = [
            await p.send(
                topic,
                value=r.value,
                key=r.key,
                partition=r.partition,
                headers=list(r.headers),
                timestamp_ms=r.timestamp_ms,
            )
            for r in recs
        ]
        offsets: dict[int, list[int]] = defaultdict(list)
        for r, md in zip(recs, await asyncio.gather(*futs)):
            # acks=0: aiokafka resolves the future with None (no response, no offset).
            offsets[r.partition].append(-1 if md is None else md.offset)
        return offsets
    finally:
        await p.stop()


async def consume_all(
    b: str, topic: str, partitions: int, expect: int, timeout: float = 90.0
) -> list[Got]:
    c = AIOKafkaConsumer(
        bootstrap_servers=b, group_id=None, enable_auto_commit=False, auto_offset_reset="earliest"
    )
    await c.start()
    out: list[Got] = []
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        c.assign(tps)
        await c.seek_to_beginning(*tps)
        deadline = time.monotonic() + timeout
        while len(out) < expect and time.monotonic() < deadline:
            for msgs in (await c.getmany(timeout_ms=500, max_records=20000)).values():
                out.extend(
                    Got(m.partition, m.offset, m.key, m.value, tuple(m.headers or ()), m.timestamp)
                    for m in msgs
                )
    finally:
        await c.stop()
    assert len(out) == expect, f"consumed {len(out)} of {expect} in {timeout}s"
    return out


async def round_trip(
    b: str, topic: str, partitions: int, recs: list[Rec], **conf: Any
) -> dict[int, list[int]]:
    await create(b, topic, partitions)
    offsets = await produce_all(b, topic, recs, **conf)
    assert_round_trip(recs, await consume_all(b, topic, partitions, len(recs)))
    return offsets


def test_round_trip_100k_zstd(cluster: LocalCluster, topic_name: str) -> None:
    recs = make_records(100_000, PARTITIONS, seed=31, null_value=False)
    offsets = run(
        round_trip(cluster.bootstrap_servers, topic_name, PARTITIONS, recs, compression_type="zstd")
    )
    assert_contiguous(offsets, {p: len(rs) for p, rs in by_partition(recs).items()})


@pytest.mark.parametrize("codec", CODECS)
def test_codec(cluster: LocalCluster, topic_name: str, codec: str) -> None:
    recs = make_records(20_000, PARTITIONS, seed=300 + CODECS.index(codec))
    run(
        round_trip(
            cluster.bootstrap_servers,
            topic_name,
            PARTITIONS,
            recs,
            compression_type=None if codec == "none" else codec,
        )
    )


@pytest.mark.parametrize("acks", [0, 1, "all"])
def test_acks(cluster: LocalCluster, topic_name: str, acks: int | str) -> None:
    recs = make_records(2_000, 1, seed=37)
    offsets = run(round_trip(cluster.bootstrap_servers, topic_name, 1, recs, acks=acks))
    if acks == 0:
        assert set(offsets[0]) == {-1}  # no response, no offsets (None from aiokafka)
    else:
        assert_contiguous(offsets, {0: len(recs)})


def test_offsets_by_timestamp(cluster: LocalCluster, topic_name: str) -> None:
    b = cluster.bootstrap_servers
    base = int(time.time() * 1000) - 3_600_000
    recs = timestamped(make_records(100, 1, seed=33), base)

    async def go() -> None:
        await create(b, topic_name, 1)
        await produce_all(b, topic_name, recs)
        assert_round_trip(
            recs, await consume_all(b, topic_name, 1, len(recs)), check_timestamps=True
        )
        c = AIOKafkaConsumer(bootstrap_servers=b, group_id=None, enable_auto_commit=False)
        await c.start()
        tp = TopicPartition(topic_name, 0)
        try:

            async def at(ts: int) -> int | None:
                found = (await c.offsets_for_times({tp: ts}))[tp]
                return None if found is None else found.offset

            assert await at(base) == 0
            assert await at(base + 50_500) == 51
            assert await at(base + 99_000) == 99
            assert await at(base + 99_001) is None
            assert await c.beginning_offsets([tp]) == {tp: 0}
            assert await c.end_offsets([tp]) == {tp: 100}
        finally:
            await c.stop()

    run(go())


def test_admin(cluster: LocalCluster, topic_name: str) -> None:
    async def go() -> None:
        a = AIOKafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers)
        await a.start()
        try:
            r = await a.create_topics(
                [NewTopic(topic_name, 2, 1, topic_configs={"retention.ms": "123456"})],
                timeout_ms=20000,
            )
            assert r.to_object()["topic_errors"][0]["error_code"] == 0
            assert topic_name in await a.list_topics()
            [t] = await a.describe_topics([topic_name])
            assert [(p["partition"], p["leader"], p["replicas"]) for p in t["partitions"]] == [
                (0, 1, [1]),
                (1, 1, [1]),
            ]

            [r] = await a.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic_name)])
            [res] = r.to_object()["resources"]
            cfg = {e["config_names"]: e for e in res["config_entries"]}
            assert (cfg["retention.ms"]["config_value"], cfg["retention.ms"]["config_source"]) == (
                "123456",
                SOURCE_DYNAMIC_TOPIC,
            )
            assert (
                cfg["segment.bytes"]["config_value"],
                cfg["segment.bytes"]["config_source"],
            ) == ("1073741824", SOURCE_DEFAULT)

            await a.create_partitions({topic_name: NewPartitions(4)}, timeout_ms=20000)
            [t] = await a.describe_topics([topic_name])
            assert len(t["partitions"]) == 4
            with pytest.raises(InvalidPartitionsError):
                await a.create_partitions({topic_name: NewPartitions(2)})

            # Errors come back per topic in one response.
            r = await a.create_topics(
                [
                    NewTopic(topic_name, 1, 1),
                    NewTopic(topic_name + "-rf", 1, 3),
                    NewTopic(topic_name + "-cfg", 1, 1, topic_configs={"retention.ms": "abc"}),
                    NewTopic("bad name!", 1, 1),
                ]
            )
            assert [e["error_code"] for e in r.to_object()["topic_errors"]] == [
                TOPIC_ALREADY_EXISTS,
                INVALID_REPLICATION_FACTOR,
                INVALID_CONFIG,
                INVALID_TOPIC,
            ]

            r = await a.delete_topics([topic_name, topic_name + "-missing"], timeout_ms=20000)
            assert [e["error_code"] for e in r.to_object()["topic_error_codes"]] == [
                0,
                UNKNOWN_TOPIC,
            ]
            assert not [n for n in await a.list_topics() if n.startswith(topic_name)]
        finally:
            await a.close()

    run(go())


def test_idempotent_producer(cluster: LocalCluster, topic_name: str) -> None:
    """aiokafka defaults to enable_idempotence=False (tested above); opting in uses
    InitProducerId and sequenced batches with acks=all."""
    recs = make_records(20_000, PARTITIONS, seed=39)
    offsets = run(
        round_trip(
            cluster.bootstrap_servers,
            topic_name,
            PARTITIONS,
            recs,
            enable_idempotence=True,
            compression_type="gzip",
        )
    )
    assert_contiguous(offsets, {p: len(rs) for p, rs in by_partition(recs).items()})


def test_transactional_producer(cluster: LocalCluster, topic_name: str) -> None:
    """Transactions (issue 18): aiokafka's transactional producer; a read_committed
    consumer sees the committed transaction only."""
    b = cluster.bootstrap_servers

    async def go() -> list[bytes]:
        await create(b, topic_name, 1)
        p = AIOKafkaProducer(bootstrap_servers=b, transactional_id=f"tx-{topic_name}")
        await p.start()
        try:
            await p.begin_transaction()
            await p.send_and_wait(topic_name, b"aborted", partition=0)
            await p.abort_transaction()
            async with p.transaction():
                for i in range(10):
                    await p.send(topic_name, b"v%d" % i, partition=0)
        finally:
            await p.stop()
        c = AIOKafkaConsumer(
            bootstrap_servers=b,
            isolation_level="read_committed",
            auto_offset_reset="earliest",
            enable_auto_commit=False,
        )
        await c.start()
        try:
            c.assign([TopicPartition(topic_name, 0)])
            await c.seek_to_beginning()
            got: list[bytes] = []
            deadline = time.monotonic() + 20
            while len(got) < 10 and time.monotonic() < deadline:
                for msgs in (await c.getmany(timeout_ms=500)).values():
                    got += [m.value for m in msgs]
            return got
        finally:
            await c.stop()

    assert run(go()) == [b"v%d" % i for i in range(10)]
