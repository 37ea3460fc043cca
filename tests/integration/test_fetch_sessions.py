"""KIP-227 fetch sessions against a real broker process, over TCP with Fetch v12: a full
fetch opens a session, incremental fetches answer only partitions with news (and wait
for them across the whole session), forgotten partitions leave it, and stale or unknown
sessions get Kafka's errors. Real consumers that use sessions (kafka-python, aiokafka)
are covered by the client tests."""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any

import pytest
from hostile_util import create_topic, produce
from rawclient import RawClient, _module

from odradek.errors import ErrorCode
from odradek.storage.records import encode_batch

pytestmark = pytest.mark.integration


def session_fetch(
    rc: RawClient,
    topic: str,
    offsets: dict[int, int],
    session_id: int,
    epoch: int,
    *,
    forgotten: tuple[int, ...] = (),
    max_wait_ms: int = 0,
    replica_id: int = -1,
) -> Any:
    m = _module(1, 12)
    parts = tuple(
        m.FetchPartition(
            partition=p,
            current_leader_epoch=-1,
            fetch_offset=o,
            last_fetched_epoch=-1,
            log_start_offset=-1,
            partition_max_bytes=1 << 20,
        )
        for p, o in offsets.items()
    )
    return rc.request(
        m.FetchRequest(
            replica_id=replica_id,
            max_wait=timedelta(milliseconds=max_wait_ms),
            min_bytes=1,
            max_bytes=1 << 20,
            isolation_level=0,
            session_id=session_id,
            session_epoch=epoch,
            topics=(m.FetchTopic(topic=topic, partitions=parts),) if parts else (),
            forgotten_topics_data=(m.ForgottenTopic(topic=topic, partitions=forgotten),)
            if forgotten
            else (),
            rack_id="",
        )
    )


def answered(resp: Any) -> dict[int, Any]:
    return {p.partition_index: p for t in resp.responses for p in t.partitions}


def test_incremental_fetch_session_over_tcp(cluster: Any, topic_name: str) -> None:
    with RawClient.to(cluster.bootstrap_servers) as rc:
        create_topic(rc, topic_name, 3)
        for p in range(3):
            assert (
                produce(rc, topic_name, p, encode_batch([(None, b"a"), (None, b"b")])).error_code
                == ErrorCode.none
            )
        full = session_fetch(rc, topic_name, {0: 0, 1: 0, 2: 0}, 0, 0)
        assert full.error_code == ErrorCode.none and full.session_id != 0
        assert sorted(answered(full)) == [0, 1, 2]
        sid = full.session_id
        # Offsets move to 2 everywhere: no news anywhere, an empty answer after max_wait.
        inc = session_fetch(rc, topic_name, {0: 2, 1: 2, 2: 2}, sid, 1, max_wait_ms=50)
        assert (inc.error_code, inc.session_id, answered(inc)) == (ErrorCode.none, sid, {})
        # A fetch naming nothing waits on the whole session: a produce to partition 1 from
        # another connection answers it well before its 20 s max_wait.
        m = _module(1, 12)
        with RawClient.to(cluster.bootstrap_servers) as other:
            cid = rc.send(
                m.FetchRequest(
                    replica_id=-1,
                    max_wait=timedelta(seconds=20),
                    min_bytes=1,
                    max_bytes=1 << 20,
                    isolation_level=0,
                    session_id=sid,
                    session_epoch=2,
                    topics=(),
                    forgotten_topics_data=(),
                    rack_id="",
                )
            )
            t0 = time.monotonic()
            assert produce(other, topic_name, 1, encode_batch([(None, b"c")])).error_code == 0
            waited = rc.receive(1, 12, cid)
        assert time.monotonic() - t0 < 10
        got = answered(waited)
        assert list(got) == [1] and got[1].high_watermark == 3 and got[1].records
        # Forget partition 0; the next answer still tells partition 1's consumer nothing
        # new until it moves on, and partition 0 is gone from the session.
        inc = session_fetch(rc, topic_name, {1: 3}, sid, 3, forgotten=(0,))
        assert answered(inc) == {}
        assert produce(rc, topic_name, 0, encode_batch([(None, b"d")])).error_code == 0
        assert answered(session_fetch(rc, topic_name, {}, sid, 4)) == {}
        # Errors: a replayed epoch, an unknown id.
        assert (
            session_fetch(rc, topic_name, {}, sid, 4).error_code
            == ErrorCode.invalid_fetch_session_epoch
        )
        assert (
            session_fetch(rc, topic_name, {}, sid ^ 0x5A5A, 1).error_code
            == ErrorCode.fetch_session_id_not_found
        )
        # Epoch -1 closes the session; a later incremental fetch finds nothing.
        closed = session_fetch(rc, topic_name, {0: 0}, sid, -1)
        assert closed.session_id == 0 and list(answered(closed)) == [0]
        assert (
            session_fetch(rc, topic_name, {}, sid, 5).error_code
            == ErrorCode.fetch_session_id_not_found
        )


def test_a_follower_session_skips_idle_partitions_and_still_waits(
    cluster: Any, topic_name: str
) -> None:
    """Issue 13 over TCP: a follower's (replica_id >= 0) incremental fetch naming nothing,
    with every partition idle, reads none of them -- and still long-polls: it is answered
    after max_wait with nothing (an idle follower must not spin), or at once when a
    partition it did not name gets data."""
    with RawClient.to(cluster.bootstrap_servers) as rc:
        create_topic(rc, topic_name, 3)
        for p in range(3):
            assert (
                produce(rc, topic_name, p, encode_batch([(None, b"a")])).error_code
                == ErrorCode.none
            )
        # A follower at the log end everywhere (replica id 7: no such broker, so the ISR
        # is untouched; the session is a follower's all the same).
        full = session_fetch(rc, topic_name, {0: 1, 1: 1, 2: 1}, 0, 0, replica_id=7)
        assert full.error_code == ErrorCode.none and full.session_id != 0
        sid = full.session_id
        t0 = time.monotonic()
        inc = session_fetch(rc, topic_name, {}, sid, 1, max_wait_ms=400, replica_id=7)
        waited = time.monotonic() - t0
        assert (inc.error_code, answered(inc)) == (ErrorCode.none, {})
        assert waited >= 0.35, f"answered after {waited:.3f} s: the idle fetch did not wait"
        m = _module(1, 12)
        with RawClient.to(cluster.bootstrap_servers) as other:
            cid = rc.send(
                m.FetchRequest(
                    replica_id=7,
                    max_wait=timedelta(seconds=20),
                    min_bytes=1,
                    max_bytes=1 << 20,
                    isolation_level=0,
                    session_id=sid,
                    session_epoch=2,
                    topics=(),
                    forgotten_topics_data=(),
                    rack_id="",
                )
            )
            t0 = time.monotonic()
            assert produce(other, topic_name, 2, encode_batch([(None, b"b")])).error_code == 0
            got = answered(rc.receive(1, 12, cid))
        assert time.monotonic() - t0 < 10
        assert list(got) == [2] and got[2].records  # a follower reads past the HW
