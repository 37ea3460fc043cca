"""Replication throttles (KIP-73): Kafka's ReplicationQuotaManager, sans-IO.

Two per broker, as in Kafka: the *leader* quota limits what this broker serves to
followers and the *follower* quota what it fetches as a follower. Each has

* a rate, ``leader.replication.throttled.rate`` / ``follower.replication.throttled.rate``
  (bytes/s; dynamic broker configs, ``/config/brokers/<id>`` over ``<default>``; unset =
  unlimited), and
* the throttled replicas, from the topic configs ``leader.replication.throttled.replicas``
  / ``follower.replication.throttled.replicas``: ``partition:broker`` pairs, of which a
  broker keeps the partitions paired with its own id (``*`` = every partition).

Only replicas outside the ISR are throttled (Kafka's ``shouldLeaderThrottle`` /
``shouldFollowerThrottle``): a move's catch-up is limited, the ordinary replication that
acks=all producers wait for is not.

The rate is Kafka's ``Rate`` over ``replication.quota.window.num`` samples of
``replication.quota.window.size.seconds``: bytes in the retained windows divided by
their span, counting at least ``num - 1`` full windows, so a short burst at start-up
is averaged over the whole span instead of looking infinitely fast.
"""

from __future__ import annotations

import logging
import math
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

from odradek.config import dynamic_broker_value, topic_override
from odradek.configdefs import LONG_MAX, broker_default

if TYPE_CHECKING:
    from odradek.metadata.image import MetadataImage

logger = logging.getLogger(__name__)

UNLIMITED = math.inf
WILDCARD = "*"


def throttled_partitions(value: Sequence[str] | None, broker_id: int) -> frozenset[int] | str:
    """Kafka's ``parseThrottledPartitions``: the partitions of a ``p:b,p:b`` list (the
    typed LIST value of ``*.replication.throttled.replicas``) paired with ``broker_id``,
    or ``"*"`` for every partition."""
    if not value:
        return frozenset()
    items = [x.strip() for x in value if x.strip()]
    if items == [WILDCARD]:
        return WILDCARD
    out: set[int] = set()
    for item in items:
        p, sep, b = item.partition(":")
        try:
            if sep and int(b) == broker_id:
                out.add(int(p))
        except ValueError:
            logger.warning("ignoring malformed throttled replica %r", item)
    return frozenset(out)


class ReplicationQuota:
    """One direction's throttle: the rate and which partitions it applies to."""

    # replication.quota.window.size.seconds / .num; defaults from the table.
    def __init__(
        self,
        window_s: float = broker_default("replication.quota.window.size.seconds"),
        num_windows: int = broker_default("replication.quota.window.num"),
    ) -> None:
        self.window_s = window_s
        self.num_windows = max(2, num_windows)
        self.rate_limit = UNLIMITED
        self._topics: dict[str, frozenset[int] | str] = {}
        self._samples: deque[list[float]] = deque()  # [window start, bytes]

    # ------------------------------------------------------------------ configuration
    def set_rate(self, bytes_per_s: float | None) -> None:
        self.rate_limit = (
            UNLIMITED if bytes_per_s is None or bytes_per_s < 0 else float(bytes_per_s)
        )

    def set_throttled(self, topic: str, partitions: frozenset[int] | str) -> None:
        if partitions:
            self._topics[topic] = partitions
        else:
            self._topics.pop(topic, None)

    def retain_topics(self, topics: Iterable[str]) -> None:
        keep = set(topics)
        for t in [t for t in self._topics if t not in keep]:
            del self._topics[t]

    def update_topics(
        self, configs: Mapping[str, Mapping[str, str]], key: str, broker_id: int
    ) -> None:
        """Re-read the throttled replicas of ``configs`` (topic -> topic overrides)."""
        for topic, cfg in configs.items():
            self.set_throttled(topic, throttled_partitions(topic_override(cfg, key), broker_id))

    # ------------------------------------------------------------------ decisions
    def is_throttled(self, topic: str, partition: int) -> bool:
        if self.rate_limit == UNLIMITED:
            return False
        parts = self._topics.get(topic)
        return parts is not None and (parts == WILDCARD or partition in parts)

    def record(self, nbytes: int, now_s: float) -> None:
        if nbytes <= 0:
            return
        self._expire(now_s)
        if not self._samples or now_s - self._samples[-1][0] >= self.window_s:
            self._samples.append([now_s, 0.0])
        self._samples[-1][1] += nbytes

    def rate(self, now_s: float) -> float:
        """Bytes/s over the retained windows (Kafka's ``Rate.measure``)."""
        self._expire(now_s)
        if not self._samples:
            return 0.0
        total = sum(b for _, b in self._samples)
        elapsed = now_s - self._samples[0][0]
        return total / max(elapsed, (self.num_windows - 1) * self.window_s)

    def is_exceeded(self, now_s: float) -> bool:
        return self.rate_limit != UNLIMITED and self.rate(now_s) > self.rate_limit

    def _expire(self, now_s: float) -> None:
        horizon = now_s - self.num_windows * self.window_s
        while self._samples and self._samples[0][0] < horizon:
            self._samples.popleft()


def apply_throttle_rates(
    leader: ReplicationQuota, follower: ReplicationQuota, image: MetadataImage
) -> None:
    """The two rates from the image's dynamic broker configs (set or changed by
    kafka-configs --alter --entity-type brokers); a full image also drops the topics
    that are gone."""
    for quota, key in (
        (leader, "leader.replication.throttled.rate"),
        (follower, "follower.replication.throttled.rate"),
    ):
        rate = dynamic_broker_value(key, image.dynamic_broker_config(key))
        if rate is not None and rate >= LONG_MAX:
            rate = None  # Kafka's default: unthrottled
        if (None if quota.rate_limit == math.inf else quota.rate_limit) != rate:
            logger.info("%s is now %s", key, "unlimited" if rate is None else f"{rate} B/s")
            quota.set_rate(rate)
    if image.changed_topics is None:
        leader.retain_topics(image.topics)
        follower.retain_topics(image.topics)


def apply_throttled_replicas(
    leader: ReplicationQuota,
    follower: ReplicationQuota,
    topic: str,
    configs: dict[str, str],
    broker_id: int,
) -> None:
    """A topic's throttled replicas (its two topic configs) on this broker."""
    for quota, key in (
        (leader, "leader.replication.throttled.replicas"),
        (follower, "follower.replication.throttled.replicas"),
    ):
        quota.set_throttled(topic, throttled_partitions(topic_override(configs, key), broker_id))
