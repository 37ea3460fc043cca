"""Replica fetchers: followers pull from their leaders (SPEC R3, R16, R17, R19–R21).

One fetcher per leader broker, as in Kafka: a single asyncio task that sends one Fetch
request at a time covering every partition this broker follows from that leader
(``replica_id`` = our broker id, long-polling up to ``replica.fetch.wait.max.ms``).

A partition enters a fetcher in the *truncating* state: before fetching, the follower
asks the leader with OffsetsForLeaderEpoch where its latest epoch ends and truncates to
that point, never blindly to its HW (SPEC R19, R20). Then it appends what it fetches,
keeping the leader's offsets and epochs, and takes ``min(leader HW, own LEO)`` as its HW.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from odradek.replication.broker_connection import BrokerConnection, BrokerConnectionError
from odradek.errors import ErrorCode, error_name
from odradek.protocol.client_codec import nested_request, request_entity

if TYPE_CHECKING:
    from odradek.replication.partition import Partition
    from odradek.storage.log import Log

log = logging.getLogger(__name__)

FETCH_VERSION = 12
EPOCH_VERSION = 4
FETCH_BACKOFF_S = 1.0  # replica.fetch.backoff.ms


@dataclass(slots=True)
class FetchState:
    partition: Partition
    truncating: bool = True
    backoff_until: float = 0.0


class ReplicaFetcher:
    def __init__(self, broker_id: int, leader_id: int, host: str, port: int,
                 source_ip: str | None, config: Any,
                 on_progress: Callable[[Partition], None]) -> None:
        self.broker_id = broker_id
        self.leader_id = leader_id
        self.config = config
        self.states: dict[tuple[str, int], FetchState] = {}
        self._conn = BrokerConnection(host, port, source_ip, f"replica-fetcher-{broker_id}",
                                      timeout_s=config.replica_socket_timeout_ms / 1000)
        self._on_progress = on_progress
        self._wakeup = asyncio.Event()
        self._rotation = 0
        self._task: asyncio.Task[None] | None = None
        # odradek.ack.fsync: set by the replica manager to the flusher's wait_durable, so
        # the next fetch offset we report (our LEO) is durable.
        self.wait_durable: Callable[[list[tuple[Log, int]]], Awaitable[None]] | None = None

    @property
    def address(self) -> tuple[str, int]:
        return self._conn.host, self._conn.port

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except (asyncio.CancelledError, Exception):
                pass
        self._conn.close()

    def add(self, part: Partition) -> None:
        self.states[(part.topic, part.index)] = FetchState(part)
        self._wakeup.set()

    def remove(self, tp: tuple[str, int]) -> None:
        self.states.pop(tp, None)

    # ------------------------------------------------------------------ loop
    async def _run(self) -> None:
        while True:
            if not self.states:
                self._wakeup.clear()
                await self._wakeup.wait()
                continue
            try:
                if any(s.truncating for s in self.states.values()):
                    await self._truncate()
                did = await self._fetch_once()
                if not did:
                    await asyncio.sleep(0.05)
            except BrokerConnectionError as e:
                log.info("fetcher %d→%d: %s; retrying", self.broker_id, self.leader_id, e)
                await asyncio.sleep(FETCH_BACKOFF_S)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("fetcher %d→%d failed; retrying", self.broker_id, self.leader_id)
                await asyncio.sleep(FETCH_BACKOFF_S)

    async def _truncate(self) -> None:
        """SPEC R19: OffsetsForLeaderEpoch, then truncate to where our epoch ends."""
        pending = []
        for s in self.states.values():
            if not s.truncating:
                continue
            if s.partition.epochs.latest_epoch < 0:
                # No epoch history (an empty log): nothing can have diverged; a LEO past
                # the leader's shows up as OFFSET_OUT_OF_RANGE on fetch.
                s.truncating = False
                continue
            pending.append(s)
        if not pending:
            return
        by_topic: dict[str, list[Any]] = {}
        for s in pending:
            p = s.partition
            by_topic.setdefault(p.topic, []).append(nested_request(
                23, EPOCH_VERSION, "OffsetForLeaderPartition", partition=p.index,
                current_leader_epoch=p.leader_epoch, leader_epoch=p.epochs.latest_epoch))
        req = request_entity(23, EPOCH_VERSION, replica_id=self.broker_id, topics=tuple(
            nested_request(23, EPOCH_VERSION, "OffsetForLeaderTopic", topic=t,
                           partitions=tuple(ps)) for t, ps in by_topic.items()))
        resp = await self._conn.request(req)
        for t in resp.topics:
            for r in t.partitions:
                st = self.states.get((t.topic, r.partition))
                if st is None:
                    continue
                p = st.partition
                code = int(r.error_code)
                if code != 0:
                    self._backoff(st, code, "OffsetsForLeaderEpoch")
                    continue
                if r.leader_epoch < 0 or r.end_offset < 0:
                    # The leader knows no epoch this old: Kafka's fallback is the HW.
                    target = p.high_watermark
                    why = (f"truncate to the high watermark {target}: leader {self.leader_id} "
                           f"(epoch {p.leader_epoch}) knows no epoch <= {p.epochs.latest_epoch}")
                else:
                    _, own_end = p.epochs.end_offset_for(int(r.leader_epoch), p.log_end_offset)
                    target = min(int(r.end_offset),
                                 own_end if own_end >= 0 else p.high_watermark)
                    why = (f"truncate after OffsetsForLeaderEpoch to {target} (leader "
                           f"{self.leader_id} epoch {p.leader_epoch}: epoch "
                           f"{r.leader_epoch} ends at {r.end_offset} there)")
                if target < p.log_end_offset:
                    log.info("%s: truncating from %d to %d (leader %d epoch %d ends at %d)",
                             p.name, p.log_end_offset, target, self.leader_id, r.leader_epoch,
                             r.end_offset)
                    # The removed suffix goes to the lost-records ledger first (issue 6/5).
                    p.truncate_to(target, reason=why, leader_id=self.leader_id,
                                  leader_epoch=p.leader_epoch)
                st.truncating = False

    async def _fetch_once(self) -> bool:
        now = time.monotonic()
        ready = [s for s in self.states.values() if not s.truncating and s.backoff_until <= now]
        if not ready:
            return False
        # Rotate the order: only the first partition of a response may exceed the byte
        # limits (KIP-74), so a fixed order could starve partitions with large batches.
        self._rotation = (self._rotation + 1) % len(ready)
        ready = ready[self._rotation:] + ready[:self._rotation]
        cfg = self.config
        by_topic: dict[str, list[Any]] = {}
        for s in ready:
            p = s.partition
            by_topic.setdefault(p.topic, []).append(nested_request(
                1, FETCH_VERSION, "FetchPartition", partition=p.index,
                current_leader_epoch=p.leader_epoch, fetch_offset=p.log_end_offset,
                last_fetched_epoch=p.epochs.latest_epoch,
                log_start_offset=p.log.log_start_offset,
                partition_max_bytes=cfg.replica_fetch_max_bytes))
        req = request_entity(
            1, FETCH_VERSION, replica_id=self.broker_id, max_wait=cfg.replica_fetch_wait_max_ms,
            min_bytes=cfg.replica_fetch_min_bytes,
            max_bytes=cfg.get("replica.fetch.response.max.bytes"),  # Kafka's follower cap
            isolation_level=0, session_id=0, session_epoch=-1,
            topics=tuple(nested_request(1, FETCH_VERSION, "FetchTopic", topic=t,
                                        partitions=tuple(ps)) for t, ps in by_topic.items()),
            forgotten_topics_data=(), rack_id="")
        wait_s = cfg.replica_fetch_wait_max_ms / 1000
        resp = await self._conn.request(req, timeout_s=wait_s + cfg.replica_socket_timeout_ms / 1000)
        now_ms = time.time_ns() // 1_000_000
        durable: list[tuple[Log, int]] = []
        for t in resp.responses:
            for r in t.partitions:
                st = self.states.get((t.topic, r.partition_index))
                if st is None or st.truncating:
                    continue
                p = st.partition
                code = int(r.error_code)
                if code == ErrorCode.offset_out_of_range:
                    leader_start = int(r.log_start_offset)
                    if 0 <= p.log_end_offset < leader_start:
                        # Below the leader's log start (retention / DeleteRecords while
                        # we were away): Kafka's handleOffsetOutOfRange restarts the log
                        # at the leader's log start offset.
                        log.info("%s: LEO %d below leader %d's log start %d; restarting "
                                 "the log there", p.name, p.log_end_offset, self.leader_id,
                                 leader_start)
                        p.truncate_fully_and_start_at(leader_start)
                        self._on_progress(p)
                        continue
                    # Our LEO is past the leader's (e.g. after an unclean election):
                    # find the divergence point again.
                    st.truncating = True
                    continue
                if code != 0:
                    self._backoff(st, code, "Fetch")
                    continue
                try:
                    p.append_as_follower(r.records or b"", int(r.high_watermark), now_ms,
                                         int(r.log_start_offset))
                except Exception as e:  # noqa: BLE001
                    log.warning("%s: follower append failed (%s); re-truncating", p.name, e)
                    st.truncating = True
                    continue
                if r.records and p.log.config.ack_fsync:
                    durable.append((p.log, p.log.log_end_offset))
                self._on_progress(p)
        if durable and self.wait_durable is not None:
            # The leader counts our fetch offset toward its HW (SPEC R16): under
            # odradek.ack.fsync it must be durable. One group-commit fsync per fetch round
            # covers every batch this response brought, for all partitions.
            await self.wait_durable(durable)
        return True

    def _backoff(self, st: FetchState, code: int, what: str) -> None:
        # NOT_LEADER / FENCED / UNKNOWN epoch: our metadata and the leader's disagree;
        # wait for the state znode watch to bring the new leader, retrying meanwhile.
        st.backoff_until = time.monotonic() + FETCH_BACKOFF_S
        if code in (ErrorCode.fenced_leader_epoch, ErrorCode.unknown_leader_epoch):
            st.truncating = True
        log.info("%s: %s from leader %d: %s", st.partition.name, what, self.leader_id,
                 error_name(code))
