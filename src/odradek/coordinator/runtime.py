"""The coordinator runtime: partition ownership and log replay, for a coordinator of any kind.

Kafka's coordinators (GroupMetadataManager, TransactionStateManager, and KIP-848's
CoordinatorRuntime that replaced both) share one shape, and so do ours: a key (group id,
transactional id) belongs to partition ``abs(java_hashCode(key)) % partitions`` of an
internal, compacted topic (``__consumer_offsets``, ``__transaction_state``); the broker
leading that partition is the key's coordinator, and the partition's log is the
coordinator's state. ``CoordinatorRuntime`` is that shape, once:

* **ownership by leader epoch** -- becoming leader of a partition at epoch E starts a load;
  resigning, or a newer epoch, unloads it (and cancels a load still running); a load that
  finishes for an epoch we no longer hold is discarded, never installed;
* **replay off the request path** -- a partition's log is read a bounded chunk at a time
  (``storage.log_chunks.read_chunks``) and the task yields to the event loop after each,
  so a big partition no longer stalls every other request while it loads. Meanwhile the
  partition answers COORDINATOR_LOAD_IN_PROGRESS (``check``), as Kafka's coordinators do,
  and clients retry. The replay reads to the log end offset, not the HW: as leader, our
  log is the one followers converge to, and a write the previous leader acknowledged is in
  our log (we were in its ISR) even if our HW has not caught up. Records appended while
  the load runs (transaction markers) are read too: the load ends only at the log end it
  finds right before it installs, with no await in between.

What a coordinator gives the runtime: a fresh ``ShardLoader`` per load (it folds batches
into a private state), ``install`` (the loaded state becomes the coordinator's, on the
loop, atomically) and ``unload`` (forget the partition's keys, answer parked requests).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Coroutine, Iterable
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

from odradek.errors import ErrorCode, KafkaError
from odradek.replication.partition import Partition, Role
from odradek.storage.log_chunks import read_chunks
from odradek.zk.admin import create_topic, plan_new_topic

if TYPE_CHECKING:
    from kazoo.client import KazooClient

    from odradek.metadata.image import BrokerInfo, MetadataImage
    from odradek.replication.replica_manager import ReplicaManager
    from odradek.storage.batch import BatchHeader

__all__ = [
    "APPEND_ERRORS",
    "ClusterView",
    "CoordinatorRuntime",
    "CoordinatorTopic",
    "LOAD_CHUNK_BYTES",
    "LoadStats",
    "ShardLoader",
    "create_internal_topic",
    "java_string_hashcode",
    "partition_for",
]

logger = logging.getLogger(__name__)

# One slice of a load: read this much of the log, fold it, yield to the loop. Small enough
# that a slice blocks the loop for milliseconds, not seconds (see LoadStats.longest_slice_s).
LOAD_CHUNK_BYTES = 64 * 1024


# Both coordinators (Kafka's GroupMetadataManager and TransactionStateManager) turn the
# errors of appending to their partition into coordinator errors, which send the client
# to find the coordinator again or to retry.
APPEND_ERRORS: dict[ErrorCode, ErrorCode] = {
    ErrorCode.unknown_topic_or_partition: ErrorCode.coordinator_not_available,
    ErrorCode.not_enough_replicas: ErrorCode.coordinator_not_available,
    ErrorCode.not_enough_replicas_after_append: ErrorCode.coordinator_not_available,
    ErrorCode.request_timed_out: ErrorCode.coordinator_not_available,
    ErrorCode.not_leader_or_follower: ErrorCode.not_coordinator,
    ErrorCode.kafka_storage_error: ErrorCode.not_coordinator,
    ErrorCode.fenced_leader_epoch: ErrorCode.not_coordinator,
}


def java_string_hashcode(s: str) -> int:
    """Java's ``String.hashCode`` (over UTF-16 code units, 32-bit overflow)."""
    h = 0
    data = s.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def partition_for(key: str, num_partitions: int) -> int:
    """Kafka's ``Utils.abs(key.hashCode) % partitions`` (groups and transactional ids)."""
    h = java_string_hashcode(key)
    return (0 if h == -(1 << 31) else abs(h)) % num_partitions


class ClusterView(Protocol):
    """What a coordinator reads of the cluster: the metadata image (where its partitions
    are led) and the ZooKeeper client that creates its topic."""

    @property
    def image(self) -> MetadataImage: ...

    @property
    def zk(self) -> KazooClient | None: ...


class ShardLoader(Protocol):
    """Folds one partition's log, batch by batch, into a state private to the load."""

    def replay(self, header: BatchHeader, batch: memoryview) -> int:
        """Apply one batch (control batches included); the number of records it held."""
        ...


L = TypeVar("L", bound=ShardLoader)


class LoadStats:
    """What one load did: records, time, and the longest time it held the event loop."""

    __slots__ = ("records", "elapsed_s", "longest_slice_s", "slices")

    def __init__(self) -> None:
        self.records = 0
        self.elapsed_s = 0.0
        self.longest_slice_s = 0.0
        self.slices = 0


class CoordinatorRuntime(Generic[L]):
    """Which partitions of ``topic`` this broker coordinates, and their loads (``L``: the
    coordinator's ShardLoader)."""

    def __init__(
        self,
        topic: str,
        replicas: ReplicaManager,
        *,
        new_loader: Callable[[int], L],
        install: Callable[[int, int, L, LoadStats], None],
        unload: Callable[[int], None],
        chunk_bytes: int = LOAD_CHUNK_BYTES,
    ) -> None:
        self.topic = topic
        self.replicas = replicas
        self._new_loader = new_loader
        self._install = install
        self._unload_cb = unload
        self.chunk_bytes = chunk_bytes
        self.loaded: dict[int, int] = {}  # partition -> leader epoch its state was loaded at
        self._loading: dict[int, tuple[int, asyncio.Task[None]]] = {}
        self.last_load: LoadStats | None = None  # for logs and tests

    # ------------------------------------------------------------ queries
    def num_partitions(self, image: MetadataImage) -> int | None:
        """Partitions of our topic in ``image``; None while it does not exist."""
        info = image.topics.get(self.topic)
        return len(info.partitions) if info is not None and info.partitions else None

    def epoch(self, idx: int) -> int | None:
        """The leader epoch partition ``idx`` is loaded at; None: not loaded (here)."""
        return self.loaded.get(idx)

    def check(self, idx: int) -> int:
        """The epoch ``idx`` is loaded at, or raise Kafka's error for a request about it:
        COORDINATOR_LOAD_IN_PROGRESS while it loads, NOT_COORDINATOR if we do not lead it."""
        epoch = self.loaded.get(idx)
        if epoch is not None:
            return epoch
        if idx in self._loading:
            raise KafkaError(
                ErrorCode.coordinator_load_in_progress, f"{self.topic}-{idx} is loading"
            )
        raise KafkaError(
            ErrorCode.not_coordinator, f"{self.topic}-{idx}: this broker is not its coordinator"
        )

    def loading(self) -> set[int]:
        return set(self._loading)

    # ------------------------------------------------------------ ownership
    def on_metadata(self, image: MetadataImage | None = None) -> None:
        """After each metadata image: load the partitions we now lead (at a new epoch),
        unload the others.

        Only our topic decides that, so an image that did not change it costs nothing, and
        one that did looks at its partitions only: walking every local partition after
        every image was 13 % of a restarting broker's time at 3,000 partitions (issue 13).
        ``image`` None (start), or one that may have changed anything: look at every local
        partition."""
        parts = self.replicas.partitions
        changed = image.changed_topics if image is not None else None
        if changed is not None and self.topic not in changed:
            return
        indexes: Iterable[int]
        if changed is None or image is None:
            indexes = [idx for topic, idx in parts if topic == self.topic]
        else:
            info = image.topics.get(self.topic)
            indexes = info.partitions.keys() if info is not None else ()
        for idx in list(indexes):
            part = parts.get((self.topic, idx))
            if part is None:
                continue
            if part.role is Role.LEADER:
                if self._held_epoch(idx) != part.leader_epoch:
                    self._resign(idx)
                    self._start_load(idx, part)
            else:
                self._resign(idx)
        for idx in {*self.loaded, *self._loading}:
            if (self.topic, idx) not in parts:
                self._resign(idx)

    def stop(self) -> None:
        for idx in {*self.loaded, *self._loading}:
            self._resign(idx)

    def _loading_epoch(self, idx: int) -> int | None:
        loading = self._loading.get(idx)
        return loading[0] if loading is not None else None

    def _held_epoch(self, idx: int) -> int | None:
        loading = self._loading.get(idx)
        return loading[0] if loading is not None else self.loaded.get(idx)

    def _resign(self, idx: int) -> None:
        """Stop coordinating ``idx``: cancel its load, or unload its state."""
        loading = self._loading.pop(idx, None)
        if loading is not None:
            loading[1].cancel()
            logger.info("load of %s-%d (epoch %d) cancelled", self.topic, idx, loading[0])
        if self.loaded.pop(idx, None) is not None:
            try:
                self._unload_cb(idx)
            finally:
                logger.info("no longer coordinator for %s-%d", self.topic, idx)

    def _start_load(self, idx: int, part: Partition) -> None:
        epoch = part.leader_epoch
        task = asyncio.get_running_loop().create_task(
            self._load(idx, epoch, part), name=f"load-{self.topic}-{idx}-{epoch}"
        )
        self._loading[idx] = (epoch, task)

    async def _load(self, idx: int, epoch: int, part: Partition) -> None:
        loader = self._new_loader(idx)
        stats = LoadStats()
        t0 = time.perf_counter()
        lg = part.log
        offset = lg.log_start_offset
        try:
            while offset < lg.log_end_offset:
                # One pass to the log end as it is now; appends meanwhile (markers) are
                # read by the next pass. A pass that makes no progress (a batch cut
                # short, a read below a log start that moved) ends the load.
                start = offset
                slice_t = time.perf_counter()
                for chunk in read_chunks(lg, offset, chunk_bytes=self.chunk_bytes):
                    for h in chunk.headers:
                        offset = h.last_offset + 1
                        stats.records += loader.replay(h, chunk.batch(h))
                    stats.longest_slice_s = max(
                        stats.longest_slice_s, time.perf_counter() - slice_t
                    )
                    stats.slices += 1
                    await asyncio.sleep(0)  # let requests in between chunks
                    if self._loading_epoch(idx) != epoch:
                        return  # resigned meanwhile (a cancel arrives at the next await)
                    slice_t = time.perf_counter()
                if offset == start:
                    break
        except asyncio.CancelledError:
            raise
        except Exception:
            logger.exception(
                "loading %s-%d failed at offset %d; loaded what was read", self.topic, idx, offset
            )
        current = self._loading.get(idx)
        if current is None or current[0] != epoch or current[1] is not asyncio.current_task():
            return  # a stale load: we resigned (or moved to a newer epoch) meanwhile
        del self._loading[idx]
        stats.elapsed_s = time.perf_counter() - t0
        self.last_load = stats
        self.loaded[idx] = epoch
        try:
            self._install(idx, epoch, loader, stats)
        except Exception:
            logger.exception("installing %s-%d failed", self.topic, idx)

    async def wait_loaded(self) -> None:
        """Until no load is running (tests; a shutdown that wants loads finished)."""
        while self._loading:
            tasks = [t for _, t in self._loading.values()]
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.wait(tasks)


class CoordinatorTopic:
    """A coordinator's internal topic as its clients meet it, for either coordinator: which
    partition a key belongs to, whether this broker coordinates it now (Kafka's errors when
    not), and the key's coordinator for FindCoordinator, which creates the topic on first
    use as Kafka's does (one creation at a time)."""

    def __init__(
        self,
        runtime: CoordinatorRuntime[Any],
        cluster: ClusterView,
        *,
        configured_partitions: int,
        create: Callable[[], Coroutine[Any, Any, None]],
    ) -> None:
        self.runtime = runtime
        self.topic = runtime.topic
        self.cluster = cluster
        # Before the topic exists a key still maps somewhere: to what it will be created with.
        self.configured_partitions = configured_partitions
        self._create = create
        self._creating: asyncio.Task[None] | None = None

    def num_partitions(self) -> int | None:
        return self.runtime.num_partitions(self.cluster.image)

    def partition_of(self, key: str) -> int:
        return partition_for(key, self.num_partitions() or self.configured_partitions)

    def owner_of(self, key: str) -> int:
        """The partition of ``key`` if this broker coordinates it now; else Kafka's error:
        COORDINATOR_NOT_AVAILABLE before the topic exists, NOT_COORDINATOR, or
        COORDINATOR_LOAD_IN_PROGRESS while its partition loads."""
        n = self.num_partitions()
        if n is None:
            raise KafkaError(ErrorCode.coordinator_not_available, f"{self.topic} not ready")
        idx = partition_for(key, n)
        self.runtime.check(idx)
        return idx

    def coordinator_node(self, key: str) -> BrokerInfo | None:
        """The registered broker leading ``key``'s partition, if any (no side effect)."""
        return coordinator_node(self.cluster.image, self.topic, key)

    def coordinator_for(self, key: str) -> tuple[int, str, int]:
        """(node id, host, port) of ``key``'s coordinator (FindCoordinator); creates the
        topic if it does not exist, answering COORDINATOR_NOT_AVAILABLE meanwhile."""
        info = self.cluster.image.topics.get(self.topic)
        if info is None or not info.partitions:
            self.ensure_created()
            raise KafkaError(ErrorCode.coordinator_not_available, f"{self.topic} is being created")
        node = self.coordinator_node(key)
        if node is None:
            raise KafkaError(
                ErrorCode.coordinator_not_available,
                f"{self.topic}-{self.partition_of(key)} has no leader",
            )
        return node.broker_id, node.host, node.port

    def ensure_created(self) -> None:
        if self._creating is not None and not self._creating.done():
            return
        self._creating = asyncio.get_running_loop().create_task(self._create())


def coordinator_node(image: MetadataImage, topic: str, key: str) -> BrokerInfo | None:
    """The registered broker leading ``key``'s partition of ``topic``, if any."""
    info = image.topics.get(topic)
    if info is None or not info.partitions:
        return None
    pinfo = info.partitions.get(partition_for(key, len(info.partitions)))
    return image.brokers.get(pinfo.leader) if pinfo is not None else None


async def create_internal_topic(
    cluster: ClusterView, topic: str, partitions: int, rf: int, configs: dict[str, str]
) -> None:
    """Create a coordinator's compacted topic in ZooKeeper (FindCoordinator does it, as in
    Kafka), with a replication factor capped by the live brokers; a race with another
    broker creating it too is not an error."""
    live = cluster.image.live_broker_ids()
    zk = cluster.zk
    if not live or zk is None:
        return
    rf = min(rf, len(live))
    try:
        plan = plan_new_topic(topic, partitions, rf, None, configs, live, 1, 1)
        await asyncio.to_thread(create_topic, zk, plan)
        logger.info("created %s (%d partitions, rf %d)", topic, plan.num_partitions, rf)
    except KafkaError as e:
        if e.code != ErrorCode.topic_already_exists:
            logger.warning("creating %s failed: %s", topic, e)
    except Exception:
        logger.exception("creating %s failed", topic)
