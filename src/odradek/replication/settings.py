"""The broker settings the replica manager uses, typed (names and defaults: the table).

The replica manager always runs with one: a broker builds it from its BrokerConfig
(``from_config``), the simulator and tests from theirs or from the table's defaults
(``defaults``). It used to take ``config=None`` and then quietly behave differently:
defaults read from the table one by one, no periodic ISR check, no fetchers.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from odradek.configdefs import setting
from odradek.replication.fetcher import FetcherSettings
from odradek.storage.truncation_ledger import RETENTION_CONFIG

if TYPE_CHECKING:
    from odradek.config import BrokerConfig

__all__ = ["ReplicaManagerSettings"]


@dataclass(frozen=True, slots=True)
class ReplicaManagerSettings:
    """What ``ReplicaManager`` reads of the broker's configuration."""

    fetch_session_cache_slots: int = setting("max.incremental.fetch.session.cache.slots")
    fetch_session_eviction_ms: int = setting("min.incremental.fetch.session.eviction.ms")
    max_partitions: int = setting("odradek.max.partitions")
    quota_window_size_seconds: int = setting("replication.quota.window.size.seconds")
    quota_window_num: int = setting("replication.quota.window.num")
    lost_records_retention_bytes: int = setting(RETENTION_CONFIG)
    recovery_threads: int = setting("num.recovery.threads.per.data.dir")
    min_insync_replicas: int = setting("min.insync.replicas")
    replica_lag_time_max_ms: int = setting("replica.lag.time.max.ms")
    # KIP-890; the dynamic value, when set, comes with the metadata image.
    txn_verification_enable: bool = setting("transaction.partition.verification.enable")
    # The follower side (not a table key itself: its own typed settings).
    fetcher: FetcherSettings = field(default_factory=FetcherSettings)

    @classmethod
    def defaults(cls) -> ReplicaManagerSettings:
        """Every setting at the table's default (tools and tests)."""
        return cls()

    @classmethod
    def from_config(cls, config: BrokerConfig) -> ReplicaManagerSettings:
        """A broker's effective values."""
        return replace(config.settings(cls), fetcher=FetcherSettings.from_config(config))
