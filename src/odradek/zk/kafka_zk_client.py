"""Every batched znode read and write of the controller and the metadata store (Kafka's
``KafkaZkClient``): one place that knows the request shapes, the chunking and the fencing.

Why batched: a kazoo request costs ~0.2 ms of Python on this machine, so one request per
partition made a controlled shutdown of 1,000 leaders take tens of seconds (issue 13).
Here a batch of N partition states costs O(N / ``MULTI_MAX_OPS``) requests:

* **Reads** go out as ZooKeeper ``multiRead`` requests (``multi_read.py``), several in
  flight at once, so reading 10,000 state znodes is ~20 requests and one wait.
* **Writes** go out as ZooKeeper ``multi`` transactions of up to ``MULTI_MAX_OPS``
  operations, up to ``MAX_IN_FLIGHT`` at once (Kafka pipelines its controller writes the
  same way, ``zookeeper.max.in.flight.requests`` = 10). Each transaction starts with
  ``check(/controller_epoch, version)`` when the caller is the controller, as Kafka's
  ``KafkaZkClient.retryRequestsUntilConnected`` wraps every controller write: a deposed
  controller's writes fail as a whole (REQ-R13, REQ-P8). Each partition write stays
  conditional on the version of its state znode the caller decided from (REQ-R13-R14:
  a leader's concurrent ISR change is never overwritten).
* **Notifications**: each transaction that writes partition states also creates one
  sequential ``/leader_and_isr_notification/leader_and_isr_N`` listing the new states and
  versions (Odradek's LeaderAndIsr, REQ-R13). It commits or fails with the writes, so a
  broker never sees a state change without its notification or the other way round.

A transaction is atomic: when one partition's write fails (its znode changed meanwhile,
or its topic was deleted) ZooKeeper rolls back the whole chunk and names the failing
operation. That partition is reported back (``StateWriteResult.conflicts`` /
``missing``) for the caller to re-read and decide again; the other partitions of the
chunk are sent again in the next round.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import (
    BadVersionError,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    RolledBackError,
    RuntimeInconsistency,
    UnimplementedError,
)

from odradek.zk import znodes
from odradek.zk.multi_read import GET_CHILDREN, GET_DATA, ReadOp, ReadResult, multi_read_async

logger = logging.getLogger(__name__)

MULTI_MAX_OPS = 500
# ZooKeeper refuses a request larger than jute.maxbuffer (1 MiB by default): stay well
# below it, notification included.
MULTI_MAX_BYTES = 512 * 1024
MAX_IN_FLIGHT = 10
REQUEST_TIMEOUT_S = 30.0

TopicPartition = tuple[str, int]


class ControllerMovedError(Exception):
    """The ``/controller_epoch`` check failed: another broker is the controller now."""


@dataclass(slots=True)
class ZkStats:
    """What the client sent: ``requests`` (a multi or multiRead counts once),
    ``round_trips`` (times it waited for replies; pipelined requests share one) and
    ``ops`` (operations inside them). Read by tests and benchmarks."""

    requests: int = 0
    round_trips: int = 0
    ops: int = 0


@dataclass(frozen=True, slots=True)
class StateWrite:
    """One partition state znode to write. ``expected_version`` -1: create it."""

    topic: str
    partition: int
    topic_id: uuid.UUID | None
    state: znodes.PartitionState
    expected_version: int

    @property
    def tp(self) -> TopicPartition:
        return self.topic, self.partition


@dataclass(slots=True)
class StateWriteResult:
    versions: dict[TopicPartition, int] = field(default_factory=dict)  # written: new version
    conflicts: set[TopicPartition] = field(default_factory=set)  # changed meanwhile
    missing: set[TopicPartition] = field(default_factory=set)  # topic (or parent) gone


@dataclass(slots=True)
class _Item:
    """One logical write (a partition, a znode to delete): its operations in order, the
    notification entry it adds (if any) and a byte estimate for chunking."""

    key: Hashable
    ops: list[tuple[Any, ...]]
    note: znodes.PartitionStateChange | None = None
    size: int = 0


_NOTE_BYTES = 120  # a partition's entry in a notification, JSON, upper estimate


def _op_bytes(op: tuple[Any, ...]) -> int:
    """Upper estimate of one operation's size on the wire (path, data, header)."""
    data = op[2] if len(op) > 2 and isinstance(op[2], bytes) else b""
    return len(op[1]) + len(data) + 16


class KafkaZkClient:
    def __init__(
        self, zk: KazooClient, *, max_ops: int = MULTI_MAX_OPS, max_in_flight: int = MAX_IN_FLIGHT
    ) -> None:
        self.zk = zk
        self.max_ops = max(2, max_ops)
        self.max_in_flight = max(1, max_in_flight)
        self.stats = ZkStats()
        self._multi_read = True  # False once the server said it has no multiRead (< 3.6)

    # ================================================================= reads
    def read(
        self,
        ops: Sequence[ReadOp],
        timeout_s: float = REQUEST_TIMEOUT_S,
    ) -> list[ReadResult]:
        """Results of ``ops`` in order: ``(data, stat)``, a list of children, or the
        exception for that slot (``NoNodeError()``). Pipelined multiReads."""
        if not ops:
            return []
        if self._multi_read:
            try:
                return self._read_multi(ops, timeout_s)
            except UnimplementedError:
                logger.warning("ZooKeeper has no multiRead (3.6+); reading znode by znode")
                self._multi_read = False
        return self._read_single(ops, timeout_s)

    def _read_multi(self, ops: Sequence[ReadOp], timeout_s: float) -> list[ReadResult]:
        chunks = [ops[i : i + self.max_ops] for i in range(0, len(ops), self.max_ops)]
        out: list[ReadResult] = []
        for w in range(0, len(chunks), self.max_in_flight):
            window = chunks[w : w + self.max_in_flight]
            futures = [multi_read_async(self.zk, c) for c in window]
            self.stats.requests += len(window)
            self.stats.ops += sum(len(c) for c in window)
            self.stats.round_trips += 1
            for f in futures:
                out.extend(f.get(timeout=timeout_s))
        return out

    def _read_single(self, ops: Sequence[ReadOp], timeout_s: float) -> list[ReadResult]:
        futures = []
        for kind, path in ops:
            if kind == GET_DATA:
                futures.append(self.zk.get_async(path))
            else:
                futures.append(self.zk.get_children_async(path))
        self.stats.requests += len(ops)
        self.stats.ops += len(ops)
        self.stats.round_trips += 1
        out: list[ReadResult] = []
        for f in futures:
            try:
                out.append(f.get(timeout=timeout_s))
            except NoNodeError as e:
                out.append(e)
        return out

    def get_data(
        self,
        path: str,
        watch: Callable[..., Any] | None = None,
    ) -> tuple[bytes, Any] | None:
        """One znode's data and stat (None if absent); ``watch`` is kazoo's one-shot."""
        self._count(1)
        try:
            return self.zk.get(path, watch=watch)
        except NoNodeError:
            return None

    def get_children(self, path: str, watch: Callable[..., Any] | None = None) -> list[str]:
        self._count(1)
        try:
            return self.zk.get_children(path, watch=watch)
        except NoNodeError:
            return []

    def _count(self, requests: int) -> None:
        self.stats.requests += requests
        self.stats.ops += requests
        self.stats.round_trips += 1

    # ----------------------------------------------------------------- typed reads
    def get_partition_states(
        self,
        tps: Iterable[TopicPartition],
        timeout_s: float = REQUEST_TIMEOUT_S,
    ) -> dict[TopicPartition, tuple[znodes.PartitionState, int]]:
        """State and znode version of each partition that has a state znode."""
        return {
            tp: (st, version)
            for tp, (st, version, _) in self.get_partition_states_mzxid(tps, timeout_s).items()
        }

    def get_partition_states_mzxid(
        self,
        tps: Iterable[TopicPartition],
        timeout_s: float = REQUEST_TIMEOUT_S,
    ) -> dict[TopicPartition, tuple[znodes.PartitionState, int, int]]:
        """State, znode version and the zxid of its last write (``mzxid``), for each
        partition that has a state znode."""
        keys = list(tps)
        results = self.read(
            [(GET_DATA, znodes.partition_state_path(t, p)) for t, p in keys], timeout_s
        )
        out: dict[TopicPartition, tuple[znodes.PartitionState, int, int]] = {}
        for tp, r in zip(keys, results):
            if isinstance(r, tuple):
                out[tp] = (znodes.decode_partition_state(r[0]), r[1].version, r[1].mzxid)
        return out

    def get_topic_assignments(self, topics: Iterable[str]) -> dict[str, znodes.TopicAssignment]:
        names = list(topics)
        results = self.read([(GET_DATA, znodes.topic_path(t)) for t in names])
        return {
            t: znodes.decode_topic(t, r[0]) for t, r in zip(names, results) if isinstance(r, tuple)
        }

    def get_topic_configs(self, topics: Iterable[str]) -> dict[str, dict[str, str]]:
        """Each topic's overrides (``{}`` when ``/config/topics/T`` is absent)."""
        names = list(topics)
        results = self.read([(GET_DATA, znodes.topic_config_path(t)) for t in names])
        return {
            t: znodes.decode_topic_config(r[0]) if isinstance(r, tuple) else {}
            for t, r in zip(names, results)
        }

    def get_broker_registrations(self) -> dict[int, znodes.BrokerRegistration]:
        ids = sorted(int(c) for c in self.get_children(znodes.BROKER_IDS) if c.isdigit())
        results = self.read([(GET_DATA, znodes.broker_path(b)) for b in ids])
        return {
            b: znodes.decode_broker(b, r[0]) for b, r in zip(ids, results) if isinstance(r, tuple)
        }

    def get_broker_ids(self) -> set[int]:
        return {int(c) for c in self.get_children(znodes.BROKER_IDS) if c.isdigit()}

    def get_broker_epochs(self) -> dict[int, int]:
        """Each registered broker's epoch: the ``czxid`` of its ``/brokers/ids/N`` (Kafka's
        broker epoch, KIP-380). A broker that re-registered (a new session: restarted, or
        its session expired) has a larger one."""
        ids = sorted(int(c) for c in self.get_children(znodes.BROKER_IDS) if c.isdigit())
        results = self.read([(GET_DATA, znodes.broker_path(b)) for b in ids])
        return {b: r[1].czxid for b, r in zip(ids, results) if isinstance(r, tuple)}

    def get_partition_list(self, path: str) -> list[tuple[str, int]] | None:
        """An admin request znode in Kafka's partition-list JSON; None if absent, [] if
        malformed (garbage in an admin znode is dropped, not retried forever)."""
        got = self.get_data(path)
        if got is None:
            return None
        try:
            return znodes.decode_partition_list(got[0])
        except Exception:  # noqa: BLE001 - any garbage
            logger.warning("ignoring malformed %s: %r", path, got[0][:200])
            return []

    # ----------------------------------------------------------------- notifications
    def list_leader_and_isr_notifications(
        self,
        watch: Callable[..., Any] | None = None,
        after: int = -1,
    ) -> tuple[list[tuple[int, str]], int]:
        """-> ([(sequence, name)] sorted, purged_through), only sequences > ``after``.
        The listing is sent before the read of the purge mark, and ZooKeeper answers a
        session's requests in order, so the mark is at least as new as the listing: a
        reader whose last applied sequence is below it may have missed one."""
        path = znodes.LEADER_AND_ISR_NOTIFICATION
        children_f = self.zk.get_children_async(path, watch=watch)
        data_f = self.zk.get_async(path)
        self.stats.requests += 2
        self.stats.ops += 2
        self.stats.round_trips += 1
        try:
            children = children_f.get(timeout=REQUEST_TIMEOUT_S)
            data, _ = data_f.get(timeout=REQUEST_TIMEOUT_S)
        except NoNodeError:
            return [], -1
        # Names are a common prefix and a zero-padded number: compare them as strings
        # and parse only the new ones (the directory holds thousands after a restart).
        floor = znodes.leader_and_isr_name(after) if after >= 0 else ""
        named = sorted((znodes.leader_and_isr_sequence(c), c) for c in children if c > floor)
        return [(s, c) for s, c in named if s >= 0], znodes.decode_leader_and_isr_purge(data)

    def read_leader_and_isr_notifications(
        self,
        names: Sequence[str],
    ) -> list[list[znodes.PartitionStateChange]] | None:
        """The changes listed by each notification, in the order given; None if one of
        them is gone (purged after it was listed: the caller must re-read everything)."""
        base = znodes.LEADER_AND_ISR_NOTIFICATION
        results = self.read([(GET_DATA, f"{base}/{n}") for n in names])
        if any(not isinstance(r, tuple) for r in results):
            return None
        return [znodes.decode_leader_and_isr(r[0]) for r in results]

    # ================================================================= controller
    def register_controller(self, broker_id: int) -> tuple[int, int] | None:
        """Try to become controller (REQ-R13): create the ephemeral ``/controller`` and
        bump ``/controller_epoch`` in one transaction, as Kafka's
        ``registerControllerAndIncrementControllerEpoch`` does, so whoever sees the new
        ``/controller`` also sees its epoch. -> (our controller epoch, the epoch znode's
        version: every later controller write is fenced by it), or None when another
        broker holds ``/controller``."""
        while True:
            got = self.get_data(znodes.CONTROLLER_EPOCH)
            if got is None:
                self._count(1)
                try:  # Kafka starts the epoch znode at 0 before the first election
                    self.zk.create(znodes.CONTROLLER_EPOCH, znodes.encode_controller_epoch(0))
                except NodeExistsError:
                    pass
                continue
            data, stat = got
            epoch = znodes.decode_controller_epoch(data) + 1
            tx = self.zk.transaction()
            tx.create(
                znodes.CONTROLLER,
                znodes.encode_controller(znodes.ControllerRegistration(broker_id)),
                ephemeral=True,
            )
            tx.set_data(
                znodes.CONTROLLER_EPOCH, znodes.encode_controller_epoch(epoch), version=stat.version
            )
            self._count(1)
            res = tx.commit()
            if not any(isinstance(r, Exception) for r in res):
                return epoch, res[1].version
            if isinstance(res[0], NodeExistsError):
                return None
            if not isinstance(res[1], BadVersionError):  # pragma: no cover - unexpected
                raise next(
                    r
                    for r in res
                    if isinstance(r, Exception)
                    and not isinstance(r, (RolledBackError, RuntimeInconsistency))
                )
            # Another controller bumped the epoch meanwhile: read it again.

    # ================================================================= writes
    def create_partition_states(
        self, writes: Sequence[StateWrite], *, fence: int | None, writer: int
    ) -> StateWriteResult:
        """Create state znodes of new partitions (their parents first, Kafka's
        ``createTopicPartitionStatesRaw``). ``fence``: our ``/controller_epoch`` version."""
        if not writes:
            return StateWriteResult()
        topics = sorted({w.topic for w in writes})
        listing = self.read(
            [(GET_CHILDREN, znodes.topic_path(t)) for t in topics]
            + [(GET_CHILDREN, znodes.topic_partitions_path(t)) for t in topics]
        )
        has_parts_dir = {
            t: isinstance(r, list) and "partitions" in r
            for t, r in zip(topics, listing[: len(topics)])
        }
        existing = {
            t: set(r) if isinstance(r, list) else set()
            for t, r in zip(topics, listing[len(topics) :])
        }
        parents: list[_Item] = []
        for t in topics:
            if not has_parts_dir[t]:
                path = znodes.topic_partitions_path(t)
                parents.append(_Item(path, [("create", path, b"")]))
        for w in writes:
            if str(w.partition) not in existing[w.topic]:
                path = znodes.partition_path(w.topic, w.partition)
                parents.append(_Item(path, [("create", path, b"")]))
        for key, res in self._run(parents, fence=fence, writer=writer).items():
            if isinstance(res, Exception) and not isinstance(res, NodeExistsError):
                logger.debug("creating %s: %r", key, res)  # its state create reports it
        items = []
        for w in writes:
            data = znodes.encode_partition_state(w.state)
            path = znodes.partition_state_path(w.topic, w.partition)
            note = znodes.PartitionStateChange(w.topic, w.topic_id, w.partition, w.state, 0)
            items.append(_Item(w.tp, [("create", path, data)], note))
        return self._state_result(self._run(items, fence=fence, writer=writer))

    def update_partition_states(
        self,
        writes: Sequence[StateWrite],
        *,
        fence: int | None,
        writer: int,
        timeout_s: float = REQUEST_TIMEOUT_S,
    ) -> StateWriteResult:
        """Conditional writes of existing state znodes (Kafka's ``updateLeaderAndIsr``):
        each on its ``expected_version``, each chunk fenced by ``fence`` (None: not the
        controller, e.g. a leader writing its ISR)."""
        items = []
        for w in writes:
            data = znodes.encode_partition_state(w.state)
            path = znodes.partition_state_path(w.topic, w.partition)
            note = znodes.PartitionStateChange(
                w.topic, w.topic_id, w.partition, w.state, w.expected_version + 1
            )
            items.append(_Item(w.tp, [("set_data", path, data, w.expected_version)], note))
        return self._state_result(self._run(items, fence=fence, writer=writer, timeout_s=timeout_s))

    def update_isr(
        self, write: StateWrite, writer: int, timeout_s: float = REQUEST_TIMEOUT_S
    ) -> int:
        """A leader's ISR change (REQ-R6): one conditional write plus its notification,
        not fenced by the controller epoch (Kafka's leaders write the state znode
        themselves). Returns the new znode version; raises ``BadVersionError`` /
        ``NoNodeError`` when the znode is not at ``write.expected_version``."""
        result = self.update_partition_states(
            [write], fence=None, writer=writer, timeout_s=timeout_s
        )
        if write.tp in result.versions:
            return result.versions[write.tp]
        if write.tp in result.conflicts:
            raise BadVersionError()
        raise NoNodeError()

    def update_topic_and_states(
        self,
        topic: str,
        topic_data: bytes,
        topic_version: int,
        writes: Sequence[StateWrite],
        *,
        fence: int,
        writer: int,
    ) -> bool:
        """One fenced transaction: the topic znode (conditional on ``topic_version``),
        the state znodes of ``writes`` (each conditional) and their ``leader_and_isr``
        notification -- a reassignment step (KIP-455) that must land whole. False: some
        znode changed meanwhile (re-read and decide again)."""
        tx = self.zk.transaction()
        tx.check(znodes.CONTROLLER_EPOCH, fence)
        notes = []
        for w in writes:
            tx.set_data(
                znodes.partition_state_path(w.topic, w.partition),
                znodes.encode_partition_state(w.state),
                version=w.expected_version,
            )
            notes.append(
                znodes.PartitionStateChange(
                    w.topic, w.topic_id, w.partition, w.state, w.expected_version + 1
                )
            )
        tx.set_data(znodes.topic_path(topic), topic_data, version=topic_version)
        if notes:
            tx.create(
                znodes.LEADER_AND_ISR_PREFIX,
                znodes.encode_leader_and_isr(notes, writer),
                sequence=True,
            )
        self.stats.ops += len(tx.operations)
        self._count(1)
        res = tx.commit()
        if isinstance(res[0], Exception) and not isinstance(
            res[0], (RolledBackError, RuntimeInconsistency)
        ):
            raise ControllerMovedError()
        return not any(isinstance(r, Exception) for r in res)

    def delete_paths(self, paths: Sequence[str], *, fence: int | None) -> None:
        """Delete znodes in the order given (children before their parents); absent
        ones are skipped."""
        items = [_Item(p, [("delete", p, -1)]) for p in paths]
        for key, res in self._run(items, fence=fence, writer=-1).items():
            if isinstance(res, NotEmptyError):
                # Someone created a child meanwhile: fall back to kazoo's recursion.
                self._count(1)
                try:
                    self.zk.delete(str(key), recursive=True)
                except NoNodeError:
                    pass
            elif isinstance(res, Exception) and not isinstance(res, NoNodeError):
                raise res

    def delete_recursive(self, roots: Sequence[str], *, fence: int | None) -> None:
        """Delete whole subtrees: list them level by level (one multiRead per level),
        then delete deepest first in chunked transactions."""
        levels: list[list[str]] = []
        level = list(roots)
        while level:
            listing = self.read([(GET_CHILDREN, p) for p in level])
            present = [p for p, r in zip(level, listing) if isinstance(r, list)]
            levels.append(present)
            level = [f"{p}/{c}" for p, r in zip(level, listing) if isinstance(r, list) for c in r]
        self.delete_paths([p for lvl in reversed(levels) for p in lvl], fence=fence)

    def purge_leader_and_isr_notifications(
        self, names: Sequence[tuple[int, str]], *, fence: int | None
    ) -> None:
        """Delete the given notifications. The purge mark (the highest sequence deleted)
        is set first, in the first transaction: a reader who has not processed that far
        then knows it may have missed one, before any is actually gone."""
        if not names:
            return
        base = znodes.LEADER_AND_ISR_NOTIFICATION
        through = max(s for s, _ in names)
        mark = _Item(base, [("set_data", base, znodes.encode_leader_and_isr_purge(through), -1)])
        result = self._run([mark], fence=fence, writer=-1)
        if isinstance(result.get(base), Exception):
            raise result[base]
        self.delete_paths([f"{base}/{n}" for _, n in names], fence=fence)

    # ----------------------------------------------------------------- the engine
    @staticmethod
    def _state_result(results: dict[Hashable, Any]) -> StateWriteResult:
        out = StateWriteResult()
        for key, res in results.items():
            tp: TopicPartition = key  # type: ignore[assignment]
            if isinstance(res, (BadVersionError, NodeExistsError)):
                out.conflicts.add(tp)
            elif isinstance(res, NoNodeError):
                out.missing.add(tp)
            elif isinstance(res, Exception):
                raise res
            else:
                out.versions[tp] = res
        return out

    def _chunks(self, items: list[_Item], fenced: bool) -> list[list[_Item]]:
        budget = self.max_ops - (1 if fenced else 0) - 1  # the check, the notification
        chunks: list[list[_Item]] = []
        cur: list[_Item] = []
        ops = size = 0
        for it in items:
            if not it.size:
                it.size = sum(_op_bytes(op) for op in it.ops)
                if it.note is not None:
                    it.size += _NOTE_BYTES + len(it.note.topic)
            if cur and (ops + len(it.ops) > budget or size + it.size > MULTI_MAX_BYTES):
                chunks.append(cur)
                cur, ops, size = [], 0, 0
            cur.append(it)
            ops += len(it.ops)
            size += it.size
        if cur:
            chunks.append(cur)
        return chunks

    def _send(self, chunk: list[_Item], fence: int | None, writer: int) -> Any:
        tx = self.zk.transaction()
        if fence is not None:
            tx.check(znodes.CONTROLLER_EPOCH, fence)
        for it in chunk:
            for op in it.ops:
                if op[0] == "create":
                    tx.create(op[1], op[2])
                elif op[0] == "set_data":
                    tx.set_data(op[1], op[2], version=op[3])
                else:
                    tx.delete(op[1], version=op[2])
        notes = [it.note for it in chunk if it.note is not None]
        if notes:
            tx.create(
                znodes.LEADER_AND_ISR_PREFIX,
                znodes.encode_leader_and_isr(notes, writer),
                sequence=True,
            )
        self.stats.ops += len(tx.operations)
        return tx.commit_async()

    def _run(
        self,
        items: list[_Item],
        *,
        fence: int | None,
        writer: int,
        timeout_s: float = REQUEST_TIMEOUT_S,
    ) -> dict[Hashable, Any]:
        """Commit ``items`` in chunked transactions, ``max_in_flight`` at once. Returns
        per key: the last operation's result (new version for set_data, 0 for create,
        True for delete) or the exception of the operation that failed."""
        results: dict[Hashable, Any] = {}
        pending = items
        while pending:
            retry: list[_Item] = []
            chunks = self._chunks(pending, fence is not None)
            for w in range(0, len(chunks), self.max_in_flight):
                window = chunks[w : w + self.max_in_flight]
                sent = [(c, self._send(c, fence, writer)) for c in window]
                self.stats.requests += len(window)
                self.stats.round_trips += 1
                moved = False
                for chunk, fut in sent:
                    res = fut.get(timeout=timeout_s)
                    moved |= self._settle(chunk, res, fence is not None, results, retry)
                if moved:  # every later transaction would fail the same check
                    raise ControllerMovedError()
            pending = self._probe(retry, results)
        return results

    def _probe(self, retry: list[_Item], results: dict[Hashable, Any]) -> list[_Item]:
        """ZooKeeper names only the first failing operation of a rolled-back transaction.
        Under contention (leaders changing ISRs during a controller batch) several items
        of a chunk may be stale, and finding them one rollback at a time costs a
        transaction each: read the target znodes of the items to resend (one multiRead)
        and settle those that would fail now, so a burst of conflicts costs two rounds."""
        if not retry:
            return retry
        stats = self.read([(GET_DATA, it.ops[0][1]) for it in retry])
        again: list[_Item] = []
        for it, got in zip(retry, stats):
            op = it.ops[0]
            exists = isinstance(got, tuple)
            if op[0] == "set_data" and op[3] >= 0 and not exists:
                results[it.key] = NoNodeError()
            elif op[0] == "set_data" and op[3] >= 0 and got[1].version != op[3]:
                results[it.key] = BadVersionError()
            elif op[0] == "create" and exists:
                results[it.key] = NodeExistsError()
            elif op[0] == "delete" and not exists:
                results[it.key] = NoNodeError()
            else:
                again.append(it)
        return again

    @staticmethod
    def _settle(
        chunk: list[_Item],
        res: list[Any],
        fenced: bool,
        results: dict[Hashable, Any],
        retry: list[_Item],
    ) -> bool:
        """Record one transaction's outcome; True if the controller fence failed."""
        offset = 1 if fenced else 0
        failed = next(
            (
                i
                for i, r in enumerate(res)
                if isinstance(r, Exception)
                and not isinstance(r, (RolledBackError, RuntimeInconsistency))
            ),
            None,
        )
        if failed is None:
            i = offset
            for it in chunk:
                last = res[i + len(it.ops) - 1]
                results[it.key] = (
                    last.version
                    if hasattr(last, "version")
                    else 0
                    if isinstance(last, str)
                    else last
                )
                i += len(it.ops)
            return False
        if fenced and failed == 0:
            return True
        i = offset
        for it in chunk:
            if i <= failed < i + len(it.ops):
                results[it.key] = res[failed]
            else:
                retry.append(it)
            i += len(it.ops)
        if failed >= i:  # the notification itself failed: nothing we can retry into
            raise res[failed]
        return False
