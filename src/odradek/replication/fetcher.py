"""Replica fetchers: followers pull from their leaders (REQ-R3, R16, R17, R19–R21).

One fetcher per leader broker, as in Kafka: a single asyncio task that sends one Fetch at
a time covering every partition this broker follows from that leader (``replica_id`` =
our broker id, long-polling up to ``replica.fetch.wait.max.ms``), through a
``LeaderEndpoint`` (TCP in a broker, memory in the replication harness).

A partition enters a fetcher in the *truncating* state: the follower first asks the
leader with OffsetsForLeaderEpoch where its latest epoch ends and truncates to the point
``truncation.decide_truncation`` picks, never blindly to its HW (REQ-R19, R20). Then it
appends what it fetches, keeping the leader's offsets and epochs, takes
``min(leader HW, own LEO)`` as its HW, and sends its next fetch at once: that fetch's
offset is the new LEO, which is what lets the leader advance the HW (REQ-R16, R17) --
one round trip after the data left the leader.

``ReplicaFetcherManager`` keeps the fetchers in step with the metadata: partitions to
follow are collected while an image is applied and handed to their leader's fetcher
once for the whole batch (``apply``); a fetcher whose leader moved to another address is
replaced.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from odradek.configdefs import setting
from odradek.errors import ErrorCode, error_name
from odradek.replication.fetch_session_handler import FetchRequestData, FetchSessionHandler
from odradek.replication.leader_endpoint import (
    EndpointError,
    EndpointFactory,
    EpochRequest,
    FetchRequestPartition,
    LeaderEndpoint,
    RemoteLeaderEndpoint,
)
from odradek.replication.quota import ReplicationQuota
from odradek.replication.trace import RecordTracer
from odradek.replication.truncation import decide_truncation
from odradek.runtime import clock
from odradek.security.client_security import PLAINTEXT, ClientSecurity

if TYPE_CHECKING:
    from odradek.config import BrokerConfig
    from odradek.metadata.image import MetadataImage
    from odradek.replication.partition import Partition
    from odradek.storage.log import Log

logger = logging.getLogger(__name__)

__all__ = ["FetchState", "ReplicaFetcher", "ReplicaFetcherManager"]

TopicPartition = tuple[str, int]
_THROTTLE_RECHECK_S = 0.1  # how often a throttled follower looks at its quota again
DurableWait = Callable[[list[tuple["Log", int]]], Awaitable[None]]
# A fetch session the leader no longer knows (evicted, leader restarted) or a lost
# response: the next fetch is full, sent at once (no backoff, KIP-227).
_SESSION_ERRORS = frozenset(
    {ErrorCode.fetch_session_id_not_found, ErrorCode.invalid_fetch_session_epoch}
)


@dataclass(frozen=True, slots=True)
class FetcherSettings:
    """The broker settings a replica fetcher uses (names and defaults: the table)."""

    wait_max_ms: int = setting("replica.fetch.wait.max.ms")
    min_bytes: int = setting("replica.fetch.min.bytes")
    max_bytes: int = setting("replica.fetch.max.bytes")  # per partition
    response_max_bytes: int = setting("replica.fetch.response.max.bytes")
    backoff_ms: int = setting("replica.fetch.backoff.ms")
    socket_timeout_ms: int = setting("replica.socket.timeout.ms")

    @classmethod
    def from_config(cls, config: BrokerConfig) -> FetcherSettings:
        return config.settings(cls)


@dataclass(slots=True)
class FetchState:
    partition: Partition
    truncating: bool = True
    backoff_until: float = 0.0
    # The partition's fetch state as last computed: (fetch offset = LEO, current leader
    # epoch, last fetched epoch, log start offset, partition max bytes). Only this
    # fetcher moves them (appends and truncations) -- and retention the log start
    # (``ReplicaFetcherManager.touch``) -- so each of those clears it, and an idle
    # partition costs a fetch one lookup instead of four property reads (issue 13).
    fetch_state: tuple[int, int, int, int, int] | None = None

    def current_state(self, max_bytes: int) -> tuple[int, int, int, int, int]:
        state = self.fetch_state
        if state is None:
            p = self.partition
            state = self.fetch_state = (
                p.log_end_offset,
                p.leader_epoch,
                p.epochs.latest_epoch,
                p.log.log_start_offset,
                max_bytes,
            )
        return state


class ReplicaFetcher:
    def __init__(
        self,
        broker_id: int,
        leader_id: int,
        endpoint: LeaderEndpoint,
        settings: FetcherSettings,
        on_progress: Callable[[Partition], None],
        tracer: RecordTracer | None = None,
        wait_durable: DurableWait | None = None,
    ) -> None:
        self.broker_id = broker_id
        self.leader_id = leader_id
        self.endpoint = endpoint
        self.settings = settings
        self.states: dict[TopicPartition, FetchState] = {}
        self._on_progress = on_progress
        self._tracer = tracer or RecordTracer(0)
        self._wakeup = asyncio.Event()
        self._rotation = 0
        self._task: asyncio.Task[None] | None = None
        # odradek.ack.fsync: the next fetch offset we report (our LEO) must be durable.
        self.wait_durable = wait_durable
        self._traced: list[tuple[TopicPartition, int]] = []  # appended, not yet reported
        self.session = FetchSessionHandler(f"fetcher {broker_id}→{leader_id}")
        self.quota: ReplicationQuota | None = None  # follower throttle (KIP-73)
        # The partitions whose fetch state may have changed since the last fetch was
        # built: the next incremental fetch looks at these only (issue 29). A follower
        # of thousands of partitions built every fetch from all of them: at 10,000
        # partitions and 1,000 records/s that pass was 46 % of the brokers' CPU (and an
        # idle follower paid it twice a second). Anything that can change a fetch state
        # adds its partition: add, remove, touch, a truncation, any partition in an
        # answer (also while a fetch is in flight: it goes into the next one).
        # ``_look_at_all``: the next fetch is built from every partition -- the first
        # one, after an error, while a partition backs off or is truncating (its return
        # is a matter of time, not of an event), and under a follower quota.
        # Dicts, not sets: their order is the request's, and a set's order of (topic,
        # partition) keys is PYTHONHASHSEED's (the simulator replays a seed exactly).
        self._changed: dict[TopicPartition, None] = {}
        self._look_at_all = True
        self._to_truncate: dict[TopicPartition, None] = {}  # FetchState.truncating

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                task = asyncio.current_task()
                if task is not None and task.cancelling():
                    raise  # our caller is being cancelled, not just the fetcher
            except Exception:  # noqa: BLE001 (stopping: its error was logged)
                pass
        self.endpoint.close()

    def add(self, part: Partition) -> None:
        tp = (part.topic, part.index)
        self.states[tp] = FetchState(part)  # truncating first (REQ-R19)
        self._changed[tp] = None
        self._to_truncate[tp] = None
        self._wakeup.set()

    def remove(self, tp: TopicPartition) -> None:
        self.states.pop(tp, None)
        self._changed[tp] = None  # forgotten in the next fetch
        self._to_truncate.pop(tp, None)

    def touch(self, tp: TopicPartition) -> None:
        """The partition's log changed outside this fetcher (retention moved its log
        start): recompute its fetch state for the next fetch."""
        st = self.states.get(tp)
        if st is not None:
            st.fetch_state = None
            self._changed[tp] = None

    def _truncate_first(self, tp: TopicPartition, st: FetchState) -> None:
        """``tp`` leaves the fetch until OffsetsForLeaderEpoch says where to truncate."""
        st.truncating = True
        st.fetch_state = None
        self._to_truncate[tp] = None
        self._changed[tp] = None

    def _truncated(self, tp: TopicPartition, st: FetchState) -> None:
        st.truncating = False
        self._to_truncate.pop(tp, None)
        self._changed[tp] = None  # back in the next fetch

    @property
    def _quiet(self) -> bool:
        """Nothing to look at: the next fetch is built without visiting any partition
        (an idle follower's fetches name nothing)."""
        return not (self._look_at_all or self._changed or self._to_truncate)

    # ------------------------------------------------------------------ loop
    async def _run(self) -> None:
        backoff_s = self.settings.backoff_ms / 1000
        while True:
            if not self.states:
                self._wakeup.clear()
                await self._wakeup.wait()
                continue
            try:
                if self._to_truncate:
                    await self._truncate()
                wait_s = await self._fetch_once()
                if wait_s > 0:
                    # Every partition is backing off: sleep until the first one may fetch
                    # again, or until a partition is added.
                    self._wakeup.clear()
                    # asyncio.timeout, not wait_for: on Python 3.11 wait_for swallows a
                    # cancel that arrives as the wakeup fires, and the fetcher then lived
                    # on after stop() (a shutdown waited out its 5 s bound; a stopped
                    # fetcher kept fetching).
                    try:
                        async with asyncio.timeout(wait_s):
                            await self._wakeup.wait()
                    except TimeoutError:
                        pass
            except EndpointError as e:
                self._look_at_all = True
                logger.info("fetcher %d→%d: %s; retrying", self.broker_id, self.leader_id, e)
                await asyncio.sleep(backoff_s)
            except asyncio.CancelledError:
                raise
            except Exception:
                self._look_at_all = True
                logger.exception("fetcher %d→%d failed; retrying", self.broker_id, self.leader_id)
                await asyncio.sleep(backoff_s)

    async def _truncate(self) -> None:
        """REQ-R19: OffsetsForLeaderEpoch, then truncate to where our epoch ends."""
        pending = []
        for tp in list(self._to_truncate):
            s = self.states.get(tp)
            if s is None or not s.truncating:
                self._to_truncate.pop(tp, None)
                continue
            if s.partition.epochs.latest_epoch < 0:
                # No epoch history (an empty log): nothing can have diverged; a LEO past
                # the leader's shows up as OFFSET_OUT_OF_RANGE on fetch.
                self._truncated(tp, s)
                continue
            pending.append(s)
        if not pending:
            return
        asked = {
            (s.partition.topic, s.partition.index): s.partition.epochs.latest_epoch for s in pending
        }
        results = await self.endpoint.offsets_for_leader_epoch(
            [
                EpochRequest(
                    s.partition.topic,
                    s.partition.index,
                    s.partition.leader_epoch,
                    s.partition.epochs.latest_epoch,
                )
                for s in pending
            ]
        )
        for r in results:
            tp = (r.topic, r.partition)
            st = self.states.get(tp)
            if st is None or not st.truncating:
                continue
            if r.error_code != 0:
                self._backoff(st, r.error_code, "OffsetsForLeaderEpoch")
                continue
            p = st.partition
            _, own_end = p.epochs.end_offset_for(r.leader_epoch, p.log_end_offset)
            decision = decide_truncation(
                leader_id=self.leader_id,
                current_leader_epoch=p.leader_epoch,
                asked_epoch=asked.get(tp, -1),
                leader_epoch=r.leader_epoch,
                leader_end_offset=r.end_offset,
                own_end_offset=own_end if r.leader_epoch >= 0 else -1,
                log_end_offset=p.log_end_offset,
                high_watermark=p.high_watermark,
            )
            if decision.removes_from(p.log_end_offset):
                logger.info(
                    "%s: truncating from %d to %d (leader %d epoch %d ends at %d)",
                    p.name,
                    p.log_end_offset,
                    decision.offset,
                    self.leader_id,
                    r.leader_epoch,
                    r.end_offset,
                )
                # The removed suffix goes to the lost-records ledger first.
                st.fetch_state = None
                p.truncate_to(
                    decision.offset,
                    reason=decision.reason,
                    leader_id=self.leader_id,
                    leader_epoch=p.leader_epoch,
                )
                self._on_progress(p)
            self._truncated(tp, st)

    async def _fetch_once(self) -> float:
        """One fetch round; returns how long to wait before the next (0: at once)."""
        quota = self.quota
        fetch = None
        if not self._look_at_all and (quota is None or quota.rate_limit == float("inf")):
            fetch = self._build_changes()
        if fetch is None:
            built = self._build_fetch()
            if isinstance(built, float):
                return built
            fetch, all_named, throttled = built
            # A partition left out (backing off, truncating) or throttled returns with
            # time: the next fetch looks at every partition again.
            self._look_at_all = not all_named or bool(throttled)
        else:
            throttled = set()
        if self._traced:
            for tp, off in self._traced:
                self._tracer.hop(tp, off, "next.fetch")
            self._traced.clear()
        await self._send_fetch(fetch, throttled)
        return 0.0

    def _build_changes(self) -> FetchRequestData | None:
        """The next incremental fetch from the partitions that changed since the last
        one was built (``_changed``); the leader's session holds the others as they
        were sent. None when the session needs a full fetch (``_build_fetch`` then)."""
        changed, self._changed = self._changed, {}
        states: dict[TopicPartition, tuple[int, int, int, int, int]] = {}
        gone: list[TopicPartition] = []
        max_bytes = self.settings.max_bytes
        for tp in changed:
            st = self.states.get(tp)
            if st is None or st.truncating:
                gone.append(tp)
            else:
                states[tp] = st.current_state(max_bytes)
        fetch = self.session.build_changes(states, gone, self._make_partition(states))
        if fetch is None:
            self._changed.update(changed)  # the full build looks at every partition anyway
        return fetch

    @staticmethod
    def _make_partition(
        states: dict[TopicPartition, tuple[int, int, int, int, int]],
    ) -> Callable[[TopicPartition], FetchRequestPartition]:
        def make(tp: TopicPartition) -> FetchRequestPartition:
            offset, epoch, last_epoch, start, limit = states[tp]
            return FetchRequestPartition(
                topic=tp[0],
                partition=tp[1],
                fetch_offset=offset,
                current_leader_epoch=epoch,
                last_fetched_epoch=last_epoch,
                log_start_offset=start,
                partition_max_bytes=limit,
            )

        return make

    def _build_fetch(self) -> tuple[FetchRequestData, bool, set[TopicPartition]] | float:
        """The next fetch from every partition's state: (fetch, whether it covers every
        partition, the throttled ones), or how long to wait when none may fetch now."""
        now = clock.monotonic()
        ready = []
        next_ready = float("inf")
        for s in self.states.values():
            if s.truncating:
                continue
            if s.backoff_until <= now:
                ready.append(s)
            else:
                next_ready = min(next_ready, s.backoff_until)
        throttled: set[TopicPartition] = set()
        quota = self.quota
        if quota is not None and quota.rate_limit != float("inf"):
            # KIP-73 (Kafka's shouldFollowerThrottle): a throttled replica outside the ISR
            # is left out of the fetch while the follower quota is exceeded.
            kept = []
            for s in ready:
                p = s.partition
                if quota.is_throttled(p.topic, p.index) and self.broker_id not in p.isr:
                    if quota.is_exceeded(now):
                        next_ready = min(next_ready, now + _THROTTLE_RECHECK_S)
                        continue
                    throttled.add((p.topic, p.index))
                kept.append(s)
            ready = kept
        if not ready:
            return max(min(next_ready - now, 1.0), 0.001) if next_ready < float("inf") else 0.05
        all_named = len(ready) == len(self.states)
        # Rotate the order: only the first partition of a response may exceed the byte
        # limits (KIP-74), so a fixed order could starve partitions with large batches.
        self._rotation = (self._rotation + 1) % len(ready)
        ready = ready[self._rotation :] + ready[: self._rotation]
        cfg = self.settings
        max_bytes = cfg.max_bytes
        # Each partition's fetch state as a plain tuple: the request entry is built only
        # for the partitions the fetch names (issue 13: thousands of idle partitions).
        states = {(s.partition.topic, s.partition.index): s.current_state(max_bytes) for s in ready}
        self._changed.clear()  # every partition is looked at now
        # KIP-227: after the first (full) fetch, name only the partitions whose fetch
        # state changed; the leader remembers the others.
        fetch = self.session.build_from_states(states, self._make_partition(states))
        return fetch, all_named, throttled

    async def _send_fetch(self, fetch: FetchRequestData, throttled: set[TopicPartition]) -> None:
        """Send ``fetch`` and append what the answer brings."""
        cfg = self.settings
        quota = self.quota
        try:
            response = await self.endpoint.fetch(
                fetch,
                max_wait_ms=cfg.wait_max_ms,
                min_bytes=cfg.min_bytes,
                max_bytes=cfg.response_max_bytes,
            )
        except BaseException:
            self.session.handle_error()
            raise
        if not self.session.handle_response(fetch, response.error_code, response.session_id):
            if response.error_code in _SESSION_ERRORS:
                return  # start over at once with a full fetch
            raise EndpointError(f"fetch failed: {error_name(response.error_code)}")
        results = response.partitions
        tracing = self._tracer.enabled
        now_ns = clock.time_ns()
        now_ms = now_ns // 1_000_000
        received_us = now_ns // 1000
        durable: list[tuple[Log, int]] = []
        changed = self._changed
        for r in results:
            tp = (r.topic, r.partition)
            changed[tp] = None  # its fetch state may move: looked at in the next fetch
            st = self.states.get(tp)
            if st is None or st.truncating:
                # Removed, or re-added (a new leader epoch) while the fetch was in flight:
                # the leader's session counts this answer's HW as delivered (not an
                # error's: after one, the leader sends the HW again).
                if r.error_code == 0:
                    self.session.answer_dropped(tp)
                continue
            p = st.partition
            code = r.error_code
            if code == ErrorCode.offset_out_of_range:
                self._out_of_range(st, r.log_start_offset)
                continue
            if code != 0:
                self._backoff(st, code, "Fetch")
                continue
            leo_before = p.log_end_offset
            st.fetch_state = None  # the append may move the LEO, epochs and log start
            try:
                p.append_as_follower(r.records or b"", r.high_watermark, now_ms, r.log_start_offset)
            except Exception as e:  # noqa: BLE001
                logger.warning("%s: follower append failed (%s); re-truncating", p.name, e)
                self._truncate_first(tp, st)
                self.session.answer_dropped(tp)  # its HW was not taken either
                continue
            if r.records:
                if tp in throttled:
                    assert quota is not None
                    quota.record(len(r.records), clock.monotonic())
                if tracing:
                    sampled = self._tracer.sampled(leo_before, p.log_end_offset - 1)
                    if sampled is not None:
                        self._tracer.hop(tp, sampled, "received", t_us=received_us)
                        self._tracer.hop(tp, sampled, "appended")
                        self._traced.append((tp, sampled))
                if p.log.config.ack_fsync:
                    durable.append((p.log, p.log.log_end_offset))
            self._on_progress(p)
        if durable and self.wait_durable is not None:
            # The leader counts our fetch offset toward its HW (REQ-R16): under
            # odradek.ack.fsync it must be durable. One group-commit fsync per fetch round
            # covers every batch this response brought, for all partitions.
            await self.wait_durable(durable)

    def _out_of_range(self, st: FetchState, leader_start: int) -> None:
        p = st.partition
        st.fetch_state = None
        if 0 <= p.log_end_offset < leader_start:
            # Below the leader's log start (retention / DeleteRecords while we were away):
            # Kafka's handleOffsetOutOfRange restarts the log at the leader's log start.
            logger.info(
                "%s: LEO %d below leader %d's log start %d; restarting the log there",
                p.name,
                p.log_end_offset,
                self.leader_id,
                leader_start,
            )
            p.truncate_fully_and_start_at(leader_start)
            self._on_progress(p)
            return
        # Our LEO is past the leader's (e.g. after an unclean election): find the
        # divergence point again.
        self._truncate_first((p.topic, p.index), st)

    def _backoff(self, st: FetchState, code: int, what: str) -> None:
        # NOT_LEADER / FENCED / UNKNOWN epoch: our metadata and the leader's disagree;
        # wait for the state znode watch to bring the new leader, retrying meanwhile.
        st.backoff_until = clock.monotonic() + self.settings.backoff_ms / 1000
        tp = (st.partition.topic, st.partition.index)
        self._changed[tp] = None
        self._look_at_all = True  # out of the fetch until its back-off ends
        if code in (ErrorCode.fenced_leader_epoch, ErrorCode.unknown_leader_epoch):
            self._truncate_first(tp, st)
        logger.info(
            "%s: %s from leader %d: %s", st.partition.name, what, self.leader_id, error_name(code)
        )


class ReplicaFetcherManager:
    """The follower side of the replica manager: which partitions each leader's fetcher
    carries (Kafka's ReplicaFetcherManager)."""

    def __init__(
        self,
        broker_id: int,
        settings: FetcherSettings,
        endpoint_factory: EndpointFactory | None,
        *,
        on_progress: Callable[[Partition], None],
        tracer: RecordTracer | None = None,
        source_ip: str | None = None,
    ) -> None:
        self.broker_id = broker_id
        self.settings = settings
        # False from controlled shutdown on (quiesce_fetchers): start no fetcher.
        self.enabled = True
        self._endpoint_factory = endpoint_factory
        self._source_ip = source_ip
        self._on_progress = on_progress
        self._tracer = tracer
        self.wait_durable: DurableWait | None = None
        self.quota: ReplicationQuota | None = None  # follower throttle (KIP-73)
        self.fetchers: dict[int, ReplicaFetcher] = {}
        self._addresses: dict[int, tuple[str, int]] = {}
        self._pending: dict[TopicPartition, Partition] = {}
        self._stopped = False
        # The inter-broker listener (issue 14): followers connect to the leader's
        # endpoint of this listener, speaking its protocol (None: the registered host:port,
        # plaintext -- the harness and old registrations).
        self.listener: str | None = None
        self.security: ClientSecurity = PLAINTEXT

    def set_source_ip(self, source_ip: str | None) -> None:
        self._source_ip = source_ip

    def add(self, part: Partition) -> None:
        """Follow ``part`` from its leader (applied for the whole batch by ``apply``)."""
        self._pending[(part.topic, part.index)] = part

    def ensure(self, part: Partition) -> None:
        tp = (part.topic, part.index)
        f = self.fetchers.get(part.leader_id)
        if f is None or tp not in f.states:
            self._pending.setdefault(tp, part)

    def remove(self, tp: TopicPartition) -> None:
        self._pending.pop(tp, None)
        for f in self.fetchers.values():
            f.remove(tp)

    def fetching(self, tp: TopicPartition) -> bool:
        return any(tp in f.states for f in self.fetchers.values())

    def touch(self, tp: TopicPartition) -> None:
        """``tp``'s log start moved outside the fetcher (retention): see FetchState."""
        for f in self.fetchers.values():
            f.touch(tp)

    def apply(self, image: MetadataImage) -> None:
        """Hand the collected partitions to their leaders' fetchers: one pass per batch,
        fetchers (re)started once per leader broker."""
        if not self._pending or self._stopped or not self.enabled:
            return
        by_leader: dict[int, list[Partition]] = {}
        for tp, part in list(self._pending.items()):
            leader = part.leader_id
            if leader < 0 or leader == self.broker_id:
                del self._pending[tp]
                continue
            if leader not in image.brokers:
                continue  # not registered (yet): stays pending for the next image
            if self.address_of(image.brokers[leader]) is None:
                continue  # no inter-broker listener registered: stays pending
            by_leader.setdefault(leader, []).append(part)
            del self._pending[tp]
        for leader, parts in by_leader.items():
            address = self.address_of(image.brokers[leader])
            assert address is not None
            fetcher = self._fetcher_for(leader, address)
            for part in parts:
                for other_id, other in self.fetchers.items():
                    if other_id != leader:
                        other.remove((part.topic, part.index))
                fetcher.add(part)

    def address_of(self, node: Any) -> tuple[str, int] | None:
        """A broker's endpoint on the inter-broker listener (also the coordinators'
        requests to other brokers)."""
        if self.listener is None:
            return node.host, node.port
        return node.endpoint(self.listener)

    def _fetcher_for(self, leader: int, address: tuple[str, int]) -> ReplicaFetcher:
        fetcher = self.fetchers.get(leader)
        moved: list[Partition] = []
        if fetcher is not None and self._addresses.get(leader) != address:
            # The leader re-registered elsewhere: its partitions move to a new fetcher.
            moved = [st.partition for st in fetcher.states.values()]
            asyncio.get_running_loop().create_task(fetcher.stop())
            fetcher = None
        if fetcher is None:
            factory = self._endpoint_factory or self._remote_endpoint
            fetcher = ReplicaFetcher(
                self.broker_id,
                leader,
                factory(leader, *address),
                self.settings,
                self._on_progress,
                self._tracer,
                self.wait_durable,
            )
            fetcher.quota = self.quota
            self.fetchers[leader] = fetcher
            self._addresses[leader] = address
            fetcher.start()
            for part in moved:
                fetcher.add(part)
        return fetcher

    def _remote_endpoint(self, leader: int, host: str, port: int) -> LeaderEndpoint:
        return RemoteLeaderEndpoint(
            self.broker_id,
            host,
            port,
            self._source_ip,
            self.settings.socket_timeout_ms,
            self.security,
        )

    async def stop_all(self) -> None:
        """Shutdown: stop every fetcher; no new one starts afterwards (a metadata image
        applied during controlled shutdown must not start fetchers)."""
        self._stopped = True
        self._pending.clear()
        for f in list(self.fetchers.values()):
            await f.stop()
        self.fetchers.clear()
