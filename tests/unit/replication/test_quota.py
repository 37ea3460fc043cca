"""KIP-73 replication quotas (replication/quota.py): Kafka's windowed rate, throttled sets."""

from __future__ import annotations

from odradek.replication.quota import ReplicationQuota, throttled_partitions


def test_throttled_partitions_keep_this_brokers_pairs() -> None:
    assert throttled_partitions(["0:1", "0:2", "1:3", "2:1"], 1) == frozenset({0, 2})
    assert throttled_partitions(["*"], 7) == "*"
    assert throttled_partitions([], 1) == frozenset()
    assert throttled_partitions(None, 1) == frozenset()
    assert throttled_partitions(["x:1", "0:1"], 1) == frozenset({0})  # malformed pair skipped


def test_unlimited_quota_throttles_nothing() -> None:
    q = ReplicationQuota()
    q.set_throttled("t", frozenset({0}))
    assert not q.is_throttled("t", 0)
    q.set_rate(1000)
    assert q.is_throttled("t", 0) and not q.is_throttled("t", 1) and not q.is_throttled("u", 0)
    q.set_throttled("t", "*")
    assert q.is_throttled("t", 5)
    q.set_throttled("t", frozenset())
    assert not q.is_throttled("t", 0)


def test_rate_counts_at_least_num_minus_one_windows() -> None:
    q = ReplicationQuota(window_s=1.0, num_windows=11)
    q.set_rate(1000)
    assert not q.is_exceeded(0.0)
    q.record(5000, 0.0)
    # One burst is spread over 10 windows: 500 B/s, under the limit.
    assert q.rate(0.5) == 500.0 and not q.is_exceeded(0.5)
    q.record(6000, 1.5)
    assert q.rate(1.5) == 1100.0 and q.is_exceeded(1.5)
    # Samples older than num windows expire: the quota opens again.
    assert not q.is_exceeded(13.0)
    assert q.rate(13.0) == 0.0


def test_retain_topics_forgets_deleted_topics() -> None:
    q = ReplicationQuota()
    q.set_rate(1)
    q.set_throttled("a", "*")
    q.set_throttled("b", "*")
    q.retain_topics(["b"])
    assert not q.is_throttled("a", 0) and q.is_throttled("b", 0)
