"""The group coordinator: asyncio around the pure ``group_state`` machine.

What lives here (and nowhere else): timers (one ticker fires session, rebalance and sync
deadlines), parked JoinGroup/SyncGroup requests (futures answered by the machine's
effects), the committed-offsets cache, and the ``__consumer_offsets`` topic.

Ownership (Kafka's design): group G belongs to partition
``abs(java_hashCode(G)) % partitions`` of ``__consumer_offsets``; the broker leading that
partition is G's coordinator. Commits and group metadata are records in that partition
(``group_codec``, Kafka's formats), appended with acks=all: an OffsetCommit is answered
only once the HW has passed it, so a committed offset survives the coordinator's failure
(reliability levers in docs/requirements.md: durable consumer acknowledgement; REQ-R7, R16). When this broker becomes
leader of an offsets partition it replays the partition into memory (groups, offsets);
when it stops leading it drops them and answers parked requests NOT_COORDINATOR. Which
partitions we own, at which leader epoch, and the chunked replay (COORDINATOR_LOAD_IN_PROGRESS
meanwhile) are ``coordinator.runtime``'s; this module folds the records (``_GroupLoader``).
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from odradek.configdefs import setting
from odradek.coordinator.group_codec import (
    GroupKey,
    GroupValue,
    OffsetKey,
    OffsetValue,
    decode_group_value,
    decode_key,
    decode_offset_value,
    encode_group_key,
    encode_group_value,
    encode_offset_key,
    encode_offset_value,
)
from odradek.coordinator.group_state import (
    Effect,
    Group,
    GroupConfig,
    GroupState,
    JoinRequest,
    JoinResult,
    Persist,
    SyncResult,
)
from odradek.coordinator.runtime import (
    APPEND_ERRORS,
    ClusterView,
    CoordinatorRuntime,
    CoordinatorTopic,
    LoadStats,
    create_internal_topic,
)
from odradek.errors import ErrorCode, KafkaError
from odradek.replication.replica_manager import now_ms
from odradek.storage.batch import CONTROL_BIT
from odradek.storage.producer_state import CONTROL_TYPE_COMMIT, control_type
from odradek.storage.records import decode_batch_records, encode_batch

if TYPE_CHECKING:
    from odradek.config import BrokerConfig
    from odradek.metadata.image import MetadataImage
    from odradek.replication.replica_manager import ReplicaManager
    from odradek.replication.txn_verification import PartitionVerifier
    from odradek.storage.batch import BatchHeader

logger = logging.getLogger(__name__)

OFFSETS_TOPIC = "__consumer_offsets"
OFFSET_METADATA_MAX_BYTES = 4096  # offset.metadata.max.bytes
TICK_S = 0.05

TopicPartition = tuple[str, int]
CommitEntry = tuple[str, int, int, int, str | None]  # topic, partition, offset, epoch, metadata


_APPEND_ERRORS = {
    **APPEND_ERRORS,
    # Only offset commits can be too large (Kafka's GroupMetadataManager).
    ErrorCode.message_too_large: ErrorCode.invalid_commit_offset_size,
    ErrorCode.record_list_too_large: ErrorCode.invalid_commit_offset_size,
}


def _commit_error(code: ErrorCode) -> ErrorCode:
    """Kafka's GroupMetadataManager.maybeConvertOffsetCommitError: append errors become
    coordinator errors; a verification that could not reach the transaction coordinator
    (NETWORK_EXCEPTION, which older clients do not retry) becomes
    COORDINATOR_LOAD_IN_PROGRESS, which they retry without a new coordinator lookup.
    Any other error is answered as it is, as Kafka does: the verification's
    INVALID_PRODUCER_ID_MAPPING (a producer the transaction coordinator does not know)
    or INVALID_REQUEST (an empty transactional id) used to become UNKNOWN_SERVER_ERROR."""
    if code is ErrorCode.network_exception:
        return ErrorCode.coordinator_load_in_progress
    return _APPEND_ERRORS.get(code, code)


@dataclass(frozen=True, slots=True)
class OffsetsSettings:
    """The broker settings of the offsets topic and its writes (names and defaults: the
    table; the transaction coordinator shares the commit timeout, as in Kafka)."""

    topic_num_partitions: int = setting("offsets.topic.num.partitions")
    topic_replication_factor: int = setting("offsets.topic.replication.factor")
    topic_segment_bytes: int = setting("offsets.topic.segment.bytes")
    commit_timeout_ms: int = setting("offsets.commit.timeout.ms")


class GroupCoordinator:
    def __init__(
        self, broker_id: int, config: BrokerConfig, replicas: ReplicaManager, cluster: ClusterView
    ) -> None:
        self.broker_id = broker_id
        self.broker_config = config
        self.replicas = replicas
        self.cluster = cluster
        self.config = config.settings(GroupConfig)
        self.settings = config.settings(OffsetsSettings)
        self.commit_timeout_s = self.settings.commit_timeout_ms / 1000
        self.groups: dict[str, Group] = {}
        # group -> (topic, partition) -> (value, offset of its record in the log)
        self.offsets: dict[str, dict[TopicPartition, tuple[OffsetValue, int]]] = {}
        # Which offsets partitions we coordinate, at which leader epoch, and their loads.
        self.runtime: CoordinatorRuntime[_GroupLoader] = CoordinatorRuntime(
            OFFSETS_TOPIC,
            replicas,
            new_loader=_GroupLoader,
            install=self._install,
            unload=self._unload,
        )
        self.topic = CoordinatorTopic(
            self.runtime,
            cluster,
            configured_partitions=self.settings.topic_num_partitions,
            create=self._create_offsets_topic,
        )
        # TxnOffsetCommit (KIP-98): offsets written inside a transaction, per producer id,
        # invisible until the transaction's COMMIT marker reaches the offsets partition.
        self.pending_txn: dict[int, dict[str, dict[TopicPartition, tuple[OffsetValue, int]]]] = {}
        self._join_waiters: dict[tuple[str, str], asyncio.Future[JoinResult]] = {}
        self._sync_waiters: dict[tuple[str, str], asyncio.Future[SyncResult]] = {}
        self._ticker: asyncio.Task[None] | None = None
        # Set while this coordinator has groups: without any, the timer loop sleeps
        # instead of waking 20 times a second for nothing (an idle broker's CPU, issue 13).
        self._has_groups = asyncio.Event()

    # ================================================================= lifecycle
    def start(self) -> None:
        self._ticker = asyncio.get_running_loop().create_task(self._tick_loop())
        self.on_metadata()

    def stop(self) -> None:
        if self._ticker is not None:
            self._ticker.cancel()
        self.runtime.stop()

    def _add_group(self, group: Group) -> Group:
        self.groups[group.group_id] = group
        self._has_groups.set()  # the timer loop watches it from now on
        return group

    async def _tick_loop(self) -> None:
        delay = TICK_S
        while True:
            if not self.groups:
                self._has_groups.clear()
                await self._has_groups.wait()
            await asyncio.sleep(delay)
            delay = TICK_S
            try:
                t = now_ms()
                nearest: int | None = None
                for gid, g in list(self.groups.items()):
                    d = g.next_deadline_ms()
                    if d is not None and d <= t:
                        self._dispatch(gid, g.expire(t))
                        d = g.next_deadline_ms()
                    if d is not None and (nearest is None or d < nearest):
                        nearest = d
                # Sleep to the nearest deadline when it comes before the next tick: a
                # session then expires when it is due, as Kafka's heartbeat purgatory does,
                # not up to a tick later (librdkafka's 0081_admin deletes its groups the
                # session timeout after a static member's last commit). New deadlines are
                # at least a tick away, so the next tick still sees them in time.
                if nearest is not None:
                    delay = min(TICK_S, max(0.001, (nearest - now_ms()) / 1000))
            except Exception:
                logger.exception("group timer failed")

    # ================================================================= ownership
    def num_partitions(self) -> int | None:
        return self.topic.num_partitions()

    def on_metadata(self, image: MetadataImage | None = None) -> None:
        """After each metadata image: load the offsets partitions we now lead, unload the
        others (``CoordinatorRuntime.on_metadata``)."""
        self.runtime.on_metadata(image)

    def _install(self, idx: int, epoch: int, loader: _GroupLoader, stats: LoadStats) -> None:
        """A load of offsets partition ``idx`` finished: its groups and offsets become ours."""
        t = now_ms()
        offsets = loader.offsets
        for gid, gv in loader.group_values.items():
            if gv is None:
                self.groups.pop(gid, None)
                offsets.pop(gid, None)
            else:
                self._add_group(Group.restore(gid, gv, self.config, t))
        for gid, per in offsets.items():
            if per:
                self.offsets[gid] = per
                if gid not in self.groups:
                    self._add_group(Group(gid, self.config))
        for pid, txn in loader.pending.items():
            self.pending_txn.setdefault(pid, {}).update(txn)
        logger.info(
            "coordinator for %s-%d (epoch %d): loaded %d records, %d groups in %d ms "
            "(longest hold of the event loop %.1f ms, %d slices)",
            OFFSETS_TOPIC,
            idx,
            epoch,
            stats.records,
            sum(1 for g in self.groups if self._partition_of(g) == idx),
            stats.elapsed_s * 1000,
            stats.longest_slice_s * 1000,
            stats.slices,
        )

    def _unload(self, idx: int) -> None:
        t = now_ms()
        for gid in [g for g in self.groups if self._partition_of(g) == idx]:
            self._dispatch(gid, self.groups[gid].mark_dead(t))
            del self.groups[gid]
            self.offsets.pop(gid, None)
        for per_pid in self.pending_txn.values():
            for gid in [g for g in per_pid if self._partition_of(g) == idx]:
                del per_pid[gid]
        for key in [k for k in self._join_waiters if self._partition_of(k[0]) == idx]:
            self._resolve(self._join_waiters, key, JoinResult(key[1], ErrorCode.not_coordinator))
        for key in [k for k in self._sync_waiters if self._partition_of(k[0]) == idx]:
            self._resolve(self._sync_waiters, key, SyncResult(key[1], ErrorCode.not_coordinator))

    def _partition_of(self, group_id: str) -> int:
        return self.topic.partition_of(group_id)

    def check(self, group_id: str, *, membership: bool = False) -> int:
        """The offsets partition of ``group_id`` if we coordinate it, else raise.

        ``membership``: Join/Sync/Heartbeat/Leave, for which Kafka refuses an empty id."""
        if membership and not group_id:
            raise KafkaError(ErrorCode.invalid_group_id, "the group id must not be empty")
        return self.topic.owner_of(group_id)

    # ================================================================= FindCoordinator
    def coordinator_for(self, group_id: str) -> tuple[int, str, int]:
        """(node id, host, port) of the group's coordinator, creating the topic if needed."""
        return self.topic.coordinator_for(group_id)

    async def _create_offsets_topic(self) -> None:
        cfg = self.settings
        await create_internal_topic(
            self.cluster,
            OFFSETS_TOPIC,
            cfg.topic_num_partitions,
            cfg.topic_replication_factor,
            {"cleanup.policy": "compact", "segment.bytes": str(cfg.topic_segment_bytes)},
        )

    # ================================================================= group protocol
    async def join(self, group_id: str, r: JoinRequest) -> JoinResult:
        self.check(group_id, membership=True)
        g = self.groups.get(group_id)
        if g is None or g.state is GroupState.DEAD:
            if r.member_id:
                return JoinResult(r.member_id, ErrorCode.unknown_member_id)
            g = self._add_group(Group(group_id, self.config))
        if r.member_id:
            # A retry of a join still parked replaces it.
            self._resolve(
                self._join_waiters,
                (group_id, r.member_id),
                JoinResult(r.member_id, ErrorCode.rebalance_in_progress),
            )
        fresh = f"{r.group_instance_id or r.client_id}-{uuid.uuid4()}"
        mid, effects = g.join(r, now_ms(), fresh)
        fut: asyncio.Future[JoinResult] = asyncio.get_running_loop().create_future()
        self._join_waiters[(group_id, mid)] = fut
        self._dispatch(group_id, effects)
        try:
            return await fut
        finally:
            if self._join_waiters.get((group_id, mid)) is fut:
                del self._join_waiters[(group_id, mid)]

    async def sync(
        self,
        group_id: str,
        member_id: str,
        instance_id: str | None,
        generation: int,
        protocol_type: str | None,
        protocol_name: str | None,
        assignments: dict[str, bytes],
    ) -> SyncResult:
        self.check(group_id, membership=True)
        g = self.groups.get(group_id)
        if g is None:
            return SyncResult(member_id, ErrorCode.unknown_member_id)
        self._resolve(
            self._sync_waiters,
            (group_id, member_id),
            SyncResult(member_id, ErrorCode.rebalance_in_progress),
        )
        fut: asyncio.Future[SyncResult] = asyncio.get_running_loop().create_future()
        self._sync_waiters[(group_id, member_id)] = fut
        self._dispatch(
            group_id,
            g.sync(
                member_id,
                instance_id,
                generation,
                protocol_type,
                protocol_name,
                assignments,
                now_ms(),
            ),
        )
        try:
            return await fut
        finally:
            if self._sync_waiters.get((group_id, member_id)) is fut:
                del self._sync_waiters[(group_id, member_id)]

    def heartbeat(
        self, group_id: str, member_id: str, instance_id: str | None, generation: int
    ) -> ErrorCode:
        self.check(group_id, membership=True)
        g = self.groups.get(group_id)
        if g is None:
            return ErrorCode.unknown_member_id
        return g.heartbeat(member_id, instance_id, generation, now_ms())

    def leave(self, group_id: str, who: list[tuple[str, str | None]]) -> list[ErrorCode]:
        self.check(group_id, membership=True)
        g = self.groups.get(group_id)
        if g is None:
            return [ErrorCode.unknown_member_id] * len(who)
        errors, effects = g.leave(who, now_ms())
        self._dispatch(group_id, effects)
        return errors

    # ================================================================= effects
    @staticmethod
    def _resolve(waiters: dict[tuple[str, str], Any], key: tuple[str, str], result: Any) -> None:
        fut = waiters.pop(key, None)
        if fut is not None and not fut.done():
            fut.set_result(result)

    def _dispatch(self, group_id: str, effects: Iterable[Effect]) -> None:
        for e in effects:
            if isinstance(e, JoinResult):
                self._resolve(self._join_waiters, (group_id, e.member_id), e)
            elif isinstance(e, SyncResult):
                self._resolve(self._sync_waiters, (group_id, e.member_id), e)
            elif isinstance(e, Persist):
                self._persist_group(group_id)

    def _persist_group(self, group_id: str) -> None:
        g = self.groups.get(group_id)
        value = (
            None if g is None or g.state is GroupState.DEAD else encode_group_value(g.to_value())
        )
        try:
            idx = self.check(group_id)
        except KafkaError:
            return
        # Written like Kafka (acks=all) but not awaited: group metadata is advisory — a
        # coordinator that loses it makes members rejoin; committed offsets are what must
        # never be lost, and those are awaited (commit below).
        asyncio.get_running_loop().create_task(
            self._append(idx, [(encode_group_key(group_id), value)])
        )

    async def _append(
        self, idx: int, records: list[tuple[bytes, bytes | None]]
    ) -> tuple[ErrorCode, int]:
        """Append to our offsets partition and wait until it is replicated (HW past it)."""
        tp = (OFFSETS_TOPIC, idx)
        if tp not in self.replicas.partitions or self.runtime.epoch(idx) is None:
            return ErrorCode.not_coordinator, -1
        code, first = await self.replicas.append_and_wait(
            tp, encode_batch(records), self.commit_timeout_s
        )
        if code != ErrorCode.none:
            logger.info("append to %s-%d not acknowledged: %s", *tp, code.name)
            return _APPEND_ERRORS.get(code, ErrorCode.unknown_server_error), -1
        return ErrorCode.none, first

    # ================================================================= offsets
    async def commit(
        self,
        group_id: str,
        member_id: str,
        instance_id: str | None,
        generation: int,
        entries: list[CommitEntry],
    ) -> dict[TopicPartition, ErrorCode]:
        """OffsetCommit: answered once the records are replicated (reliability levers, REQ-R7)."""
        idx = self.check(group_id)
        epoch = self.runtime.epoch(idx)
        t = now_ms()
        g = self.groups.get(group_id)
        if g is None:
            if generation < 0 and member_id == "":
                g = self._add_group(Group(group_id, self.config))
            else:
                return {(e[0], e[1]): ErrorCode.illegal_generation for e in entries}
        err = g.validate_commit(member_id, instance_id, generation, t)
        if err is not ErrorCode.none:
            return {(e[0], e[1]): err for e in entries}
        results, records, values = self._offset_records(group_id, entries, t)
        if records:
            code, first = await self._append(idx, records)
            if code is ErrorCode.none and self.runtime.epoch(idx) == epoch:
                per = self.offsets.setdefault(group_id, {})
                for i, (tp, v) in enumerate(values):
                    old = per.get(tp)
                    if old is None or old[1] < first + i:
                        per[tp] = (v, first + i)
            elif code is ErrorCode.none:
                code = ErrorCode.not_coordinator  # lost the partition while waiting
            for tp, _ in values:
                results[tp] = code
        return results

    def _offset_records(
        self, group_id: str, entries: list[CommitEntry], t: int
    ) -> tuple[
        dict[TopicPartition, ErrorCode],
        list[tuple[bytes, bytes | None]],
        list[tuple[TopicPartition, OffsetValue]],
    ]:
        """OffsetCommit and TxnOffsetCommit alike: the entries refused at once (metadata
        too large, unknown partition) with their errors, and the offset records (key,
        value) to append for the others, with the values they carry."""
        results: dict[TopicPartition, ErrorCode] = {}
        records: list[tuple[bytes, bytes | None]] = []
        values: list[tuple[TopicPartition, OffsetValue]] = []
        image = self.cluster.image
        for topic, partition, offset, leader_epoch, metadata in entries:
            tp = (topic, partition)
            if metadata is not None and len(metadata.encode()) > OFFSET_METADATA_MAX_BYTES:
                results[tp] = ErrorCode.offset_metadata_too_large
            elif image.partition(topic, partition) is None:
                results[tp] = ErrorCode.unknown_topic_or_partition
            else:
                v = OffsetValue(offset, leader_epoch, metadata or "", t)
                records.append(
                    (encode_offset_key(group_id, topic, partition), encode_offset_value(v))
                )
                values.append((tp, v))
        return results, records, values

    async def txn_commit(
        self,
        group_id: str,
        producer_id: int,
        epoch: int,
        member_id: str,
        instance_id: str | None,
        generation: int,
        entries: list[CommitEntry],
        *,
        transactional_id: str | None,
        verifier: PartitionVerifier,
    ) -> dict[TopicPartition, ErrorCode]:
        """TxnOffsetCommit (KIP-98, KIP-447): the offsets are written as a transactional
        batch of the producer and stay pending until its marker arrives
        (``complete_txn_offsets``). Generation checks apply only when the client sent
        them (KIP-447; a -1 generation is an old client). ``verifier``: asked when
        KIP-890 verification is on (``_verify_txn``)."""
        idx = self.check(group_id)
        epoch_loaded = self.runtime.epoch(idx)
        t = now_ms()
        g = self.groups.get(group_id)
        if g is not None and generation >= 0:
            err = g.validate_commit(member_id, instance_id, generation, t)
            if err is not ErrorCode.none:
                return {(e[0], e[1]): err for e in entries}
        results, records, values = self._offset_records(group_id, entries, t)
        if records:
            tpo = (OFFSETS_TOPIC, idx)
            first = -1
            if tpo not in self.replicas.partitions:
                code = ErrorCode.not_coordinator
            else:
                code, guard = await self._verify_txn(
                    tpo, transactional_id, producer_id, epoch, verifier
                )
                if code is ErrorCode.none:
                    code, first = await self.replicas.append_and_wait(
                        tpo,
                        encode_batch(
                            records,
                            producer_id=producer_id,
                            producer_epoch=epoch,
                            base_sequence=-1,
                            transactional=True,
                        ),
                        self.commit_timeout_s,
                        verification_guard=guard,
                    )
                if code is not ErrorCode.none:
                    code = _commit_error(code)
            if code is ErrorCode.none and self.runtime.epoch(idx) == epoch_loaded:
                per = self.pending_txn.setdefault(producer_id, {}).setdefault(group_id, {})
                for i, (tp, v) in enumerate(values):
                    per[tp] = (v, first + i)
                self.groups.setdefault(group_id, Group(group_id, self.config))
            elif code is ErrorCode.none:
                code = ErrorCode.not_coordinator
            for tp, _ in values:
                results[tp] = code
        return results

    async def _verify_txn(
        self,
        tp: TopicPartition,
        tid: str | None,
        producer_id: int,
        epoch: int,
        verifier: PartitionVerifier,
    ) -> tuple[ErrorCode, object | None]:
        """KIP-890 for TxnOffsetCommit, as Kafka's GroupCoordinator: a transaction's first
        offsets in the group's ``__consumer_offsets`` partition are written only once its
        coordinator confirms the partition is in the transaction (AddOffsetsToTxn put it
        there). A commit arriving after the abort would otherwise leave pending offsets
        that no marker resolves: OffsetFetch with require_stable would answer
        UNSTABLE_OFFSET_COMMIT for the group's partitions for good. The replica manager
        gives the guard (``start_txn_verification``) and its append checks it."""
        if not self.replicas.txn_verification_enabled:
            return ErrorCode.none, None
        if not tid:
            # Kafka's transaction coordinator refuses to verify an empty id
            # (INVALID_REQUEST). Skipping the verification instead let a commit without
            # an id open a transaction on the offsets partition that nothing closes.
            return ErrorCode.invalid_request, None
        verifications = self.replicas.start_txn_verification([(tp, producer_id, epoch)])
        if not verifications:
            return ErrorCode.none, None  # not led here: the append answers
        v = verifications[0]
        failed = await v.verify(verifier, tid, self.commit_timeout_s)
        code = failed.get(tp)
        if code is not None:
            return code, None
        return ErrorCode.none, v.guards.get(tp)

    def pending_txn_partitions(self, group_id: str) -> set[TopicPartition]:
        """Partitions with an offset of ``group_id`` in an open transaction."""
        return {tp for per_pid in self.pending_txn.values() for tp in per_pid.get(group_id, {})}

    def complete_txn_offsets(self, idx: int, producer_id: int, commit: bool) -> None:
        """The transaction's marker is in offsets partition ``idx``: its pending offsets
        for groups of that partition become committed (or are dropped on abort)."""
        per_pid = self.pending_txn.get(producer_id)
        if not per_pid:
            return
        for gid in [g for g in per_pid if self._partition_of(g) == idx]:
            txn = per_pid.pop(gid)
            if commit:
                per = self.offsets.setdefault(gid, {})
                for tp, (v, off) in txn.items():
                    old = per.get(tp)
                    if old is None or old[1] < off:
                        per[tp] = (v, off)
        if not per_pid:
            del self.pending_txn[producer_id]

    def fetch_offsets(
        self, group_id: str, topics: list[tuple[str, list[int]]] | None
    ) -> list[tuple[str, list[tuple[int, OffsetValue | None]]]]:
        """Committed offsets (the next offset to read); None where nothing is committed."""
        self.check(group_id)
        per = self.offsets.get(group_id, {})
        if topics is None:
            by_topic: dict[str, list[tuple[int, OffsetValue | None]]] = {}
            for (topic, p), (v, _) in sorted(per.items()):
                by_topic.setdefault(topic, []).append((p, v))
            return list(by_topic.items())
        out = []
        for topic, parts in topics:
            out.append(
                (topic, [(p, per[(topic, p)][0] if (topic, p) in per else None) for p in parts])
            )
        return out

    # ================================================================= admin
    def describe(self, group_id: str) -> Group | None:
        self.check(group_id)
        return self.groups.get(group_id)

    def list_groups(self, states: set[str] | None) -> tuple[ErrorCode, list[Group]]:
        """ListGroups: the groups of the partitions we coordinate; while one of ours still
        loads, COORDINATOR_LOAD_IN_PROGRESS with them (Kafka's handleListGroups), so that
        a client does not take the missing groups for absent ones."""
        code = ErrorCode.coordinator_load_in_progress if self.runtime.loading() else ErrorCode.none
        return code, [
            g
            for gid, g in self.groups.items()
            if self.runtime.epoch(self._partition_of(gid)) is not None
            and g.state is not GroupState.DEAD
            and (not states or g.state.value.lower() in states)
        ]

    async def delete_offsets(
        self, group_id: str, partitions: list[TopicPartition]
    ) -> tuple[ErrorCode, dict[TopicPartition, ErrorCode]]:
        """OffsetDelete (KIP-496): tombstone the group's committed offsets of
        ``partitions``. An empty group loses any of them; an active consumer group keeps
        those of topics its members subscribe to (GROUP_SUBSCRIBED_TO_TOPIC); an active
        group of another protocol refuses (NON_EMPTY_GROUP), as Kafka's coordinator does."""
        try:
            idx = self.check(group_id)
        except KafkaError as e:
            return e.code, {}
        g = self.groups.get(group_id)
        committed = self.offsets.get(group_id, {})
        if (g is None and not committed) or (g is not None and g.state is GroupState.DEAD):
            return ErrorCode.group_id_not_found, {}
        subscribed: set[str] = set()
        if g is not None and g.state is not GroupState.EMPTY:
            if g.protocol_type != "consumer":
                return ErrorCode.non_empty_group, {}
            subscribed = g.subscribed_topics()
        results = {
            tp: (ErrorCode.group_subscribed_to_topic if tp[0] in subscribed else ErrorCode.none)
            for tp in partitions
        }
        gone = [tp for tp, code in results.items() if code is ErrorCode.none and tp in committed]
        if gone:
            for tp in gone:
                committed.pop(tp, None)
            code, _ = await self._append(
                idx, [(encode_offset_key(group_id, *tp), None) for tp in gone]
            )
            if code is not ErrorCode.none:
                results.update({tp: code for tp in gone})
        return ErrorCode.none, results

    async def delete(self, group_id: str) -> ErrorCode:
        try:
            idx = self.check(group_id)
        except KafkaError as e:
            return e.code
        g = self.groups.get(group_id)
        if g is None:
            return ErrorCode.group_id_not_found
        err = g.delete_error()
        if err is not ErrorCode.none:
            return err
        records: list[tuple[bytes, bytes | None]] = [
            (encode_offset_key(group_id, t, p), None) for t, p in self.offsets.get(group_id, {})
        ]
        records.append((encode_group_key(group_id), None))
        self._dispatch(group_id, g.mark_dead(now_ms()))
        del self.groups[group_id]
        self.offsets.pop(group_id, None)
        code, _ = await self._append(idx, records)
        return code


class _GroupLoader:
    """Folds an offsets partition's batches: group metadata (the last value of each group),
    committed offsets, and offsets of transactions still open at the end of the log."""

    def __init__(self, idx: int) -> None:
        self.group_values: dict[str, GroupValue | None] = {}
        self.offsets: dict[str, dict[TopicPartition, tuple[OffsetValue, int]]] = {}
        self.pending: dict[int, dict[str, dict[TopicPartition, tuple[OffsetValue, int]]]] = {}

    def replay(self, h: BatchHeader, batch: memoryview) -> int:
        if h.attributes & CONTROL_BIT:
            # A transaction marker: its offsets become visible or vanish.
            txn = self.pending.pop(h.producer_id, {})
            if control_type(batch) == CONTROL_TYPE_COMMIT:
                for gid, per_txn in txn.items():
                    self.offsets.setdefault(gid, {}).update(per_txn)
            return 0
        n = 0
        for rec in decode_batch_records(batch):
            n += 1
            if rec.key is None:
                continue
            key = decode_key(rec.key)
            if isinstance(key, OffsetKey):
                tp = (key.topic, key.partition)
                per = (
                    self.pending.setdefault(h.producer_id, {}).setdefault(key.group, {})
                    if h.is_transactional
                    else self.offsets.setdefault(key.group, {})
                )
                if rec.value is None:
                    per.pop(tp, None)
                else:
                    per[tp] = (decode_offset_value(rec.value), rec.offset)
            elif isinstance(key, GroupKey):
                self.group_values[key.group] = (
                    None if rec.value is None else decode_group_value(rec.value)
                )
        return n
