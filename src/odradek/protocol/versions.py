"""The API version table: what Odradek decodes/serves and what ApiVersions advertises.

Adding an API is one line in ``SERVED`` (and, only if clients need a wider advertised
range than we decode, one line in ``_ADVERTISED_ONLY``). Every served (key, version)
must exist in kio 0.6.5, which tests/unit/protocol/test_versions.py checks.

Why ADVERTISED can be wider than SERVED (docs/platform-notes.md, Kafka protocol): librdkafka 2.0.2
(Debian's kcat) requires an exact overlap with its own version ranges and refuses to
produce unless the broker advertises Produce from v0, although it sends v3+ (record batch
v2, the only format we store, REQ-R23). kio cannot decode Produce v0-2 anyway. A
request at an advertised-but-not-served version is rejected by ``codec.decode_request``
with ``UnsupportedVersion``.

ADVERTISED can also be narrower: AddPartitionsToTxn v4-5 are the broker-to-broker form
(KIP-890 verification, CLUSTER_ACTION). Kafka's clients never send them, and kafka-python
reads "AddPartitionsToTxn v4" as "the broker is Kafka 3.6" (and then uses what that
implies), so only our own brokers, which know, use them.

Telemetry (71/72) is deliberately absent: advertising it makes librdkafka 2.16 start a
telemetry exchange we do not implement.
"""

from __future__ import annotations

from typing import Final

from kio.schema.index import api_key_map

__all__ = ["SERVED", "ADVERTISED", "HAND_CODED", "API_NAMES", "api_name", "is_served"]

# api_key -> (min, max) version we decode and handle.
SERVED: Final[dict[int, tuple[int, int]]] = {
    0: (3, 10),  # Produce (v9+ flexible); v0-2 are message-format v0/v1 only
    1: (4, 12),  # Fetch (v12 flexible; v13+ need topic ids)
    2: (1, 7),  # ListOffsets (v0: HAND_CODED)
    3: (0, 12),  # Metadata (v13 would need topic-id-only semantics)
    8: (2, 8),  # OffsetCommit (consumer groups; v9+ is the KIP-848 member epoch)
    9: (1, 7),  # OffsetFetch (v8+ batches groups)
    10: (0, 3),  # FindCoordinator (v4 batches keys); from 0 for librdkafka 2.0.2
    11: (0, 7),  # JoinGroup; from 0 for librdkafka 2.0.2
    12: (0, 4),  # Heartbeat
    13: (0, 4),  # LeaveGroup
    14: (0, 5),  # SyncGroup
    15: (0, 5),  # DescribeGroups
    16: (0, 4),  # ListGroups
    17: (0, 1),  # SaslHandshake (v0: raw tokens follow; v1: SaslAuthenticate)
    18: (0, 4),  # ApiVersions
    19: (2, 5),  # CreateTopics
    20: (1, 4),  # DeleteTopics
    21: (0, 2),  # DeleteRecords (REQ-R24, handlers_records; v2 flexible)
    22: (0, 4),  # InitProducerId (idempotent and transactional producers)
    23: (2, 4),  # OffsetForLeaderEpoch (followers, REQ-R19; consumers, KIP-320)
    # Transactions (KIP-98). AddPartitionsToTxn v4+ is the broker-batched form (KIP-890
    # part 1: leaders verify partitions; CLUSTER_ACTION); EndTxn v4+ (the KIP-890 part 2
    # epoch bump per transaction) is not served.
    24: (0, 5),  # AddPartitionsToTxn
    25: (0, 3),  # AddOffsetsToTxn
    26: (0, 3),  # EndTxn
    27: (1, 1),  # WriteTxnMarkers (coordinator -> leaders); kio has no v0
    28: (0, 3),  # TxnOffsetCommit (v3: KIP-447 group metadata)
    # ACL APIs (SECURITY_DISABLED without an authorizer). kio has no v0. DescribeAcls
    # stops at v2: kafka-python infers the broker version from it and v3 means "3.3".
    29: (1, 2),  # DescribeAcls
    30: (1, 3),  # CreateAcls
    31: (1, 3),  # DeleteAcls
    32: (1, 4),  # DescribeConfigs
    33: (0, 2),  # AlterConfigs (topic overrides, handlers_configs)
    36: (0, 2),  # SaslAuthenticate (v1+: session lifetime, KIP-368 re-authentication)
    37: (0, 3),  # CreatePartitions
    42: (0, 2),  # DeleteGroups
    47: (0, 0),  # OffsetDelete (KIP-496)
    43: (0, 2),  # ElectLeaders (v2 flexible)
    44: (0, 1),  # IncrementalAlterConfigs (v1 flexible)
    48: (0, 1),  # DescribeClientQuotas (KIP-546; v1 flexible)
    49: (0, 1),  # AlterClientQuotas (KIP-546; v1 flexible)
    50: (0, 0),  # DescribeUserScramCredentials (KIP-554)
    51: (0, 0),  # AlterUserScramCredentials (KIP-554)
    45: (0, 1),  # AlterPartitionReassignments (KIP-455; v1: allow_replication_factor_change)
    46: (0, 0),  # ListPartitionReassignments
    60: (0, 1),  # DescribeCluster
    61: (0, 0),  # DescribeProducers (KIP-664: kafka-transactions describe-producers)
    65: (0, 0),  # DescribeTransactions (kafka-transactions --describe)
    66: (0, 0),  # ListTransactions (kafka-transactions --list)
}

# Ranges advertised other than what is served (see module docstring).
_ADVERTISED_ONLY: Final[dict[int, tuple[int, int]]] = {
    0: (0, 10),  # Produce: librdkafka 2.0.2 needs an overlap from v0
    2: (0, 7),  # ListOffsets: v0 is HAND_CODED
    24: (0, 3),  # AddPartitionsToTxn: v4+ between brokers only (module docstring)
}

# (api_key, version) pairs served without kio (it has no schema for them): decoded and
# encoded by hand. ListOffsets v0 (Kafka serves it until 4.0): protocol/list_offsets_v0.
HAND_CODED: Final[frozenset[tuple[int, int]]] = frozenset({(2, 0)})

ADVERTISED: Final[dict[int, tuple[int, int]]] = {
    key: _ADVERTISED_ONLY.get(key, rng) for key, rng in sorted(SERVED.items())
}


def _camel(snake: str) -> str:
    return "".join(part[:1].upper() + part[1:] for part in snake.split("_"))


# Kafka's names ("Produce", "ApiVersions", ...) for every key kio knows; used in logs
# and error messages.
API_NAMES: Final[dict[int, str]] = {key: _camel(name) for key, name in api_key_map.items()}


def api_name(api_key: int) -> str:
    return API_NAMES.get(api_key, f"Unknown({api_key})")


def is_served(api_key: int, api_version: int) -> bool:
    rng = SERVED.get(api_key)
    return (rng is not None and rng[0] <= api_version <= rng[1]) or (
        api_key,
        api_version,
    ) in HAND_CODED
