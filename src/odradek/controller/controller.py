"""The controller: one broker, elected through ZooKeeper, decides leaders and ISRs (REQ-R13).

It is one event loop on its own thread. ZooKeeper watches (seen through the metadata
store) only enqueue events; the loop takes every event queued so far as one batch,
refreshes its ``ControllerContext`` (a cache of ZooKeeper) from what the events say
changed, decides with the pure rules of ``elections.py`` over *every* partition the
batch affects in one pass, and writes the decisions through ``KafkaZkClient`` in chunked
ZooKeeper transactions (REQ-R13: ZooKeeper first). Each transaction also creates one
``leader_and_isr`` notification, which is how brokers learn the batch (Odradek's
LeaderAndIsr): a controlled shutdown of a broker leading 3,000 partitions is a handful of
transactions, not 3,000 read-then-write round trips.

* **Controller election**: create the ephemeral ``/controller`` and bump
  ``/controller_epoch`` in one transaction (Kafka's
  ``registerControllerAndIncrementControllerEpoch``), so whoever sees the new controller
  sees its epoch; remember the epoch znode's version. Losers watch ``/controller`` and
  retry when it disappears. A new controller reads everything into
  its context and starts with a full pass, so a batch its predecessor left half done is
  finished from the znodes (REQ-R13; issue 13 item 5).
* **Fencing** (REQ-P8): every transaction starts with
  ``check(/controller_epoch, our version)``, as Kafka's ZooKeeper controller does: a
  deposed controller's writes fail as a whole. Each partition write is also conditional
  on the state znode version the decision was made from; on a conflict (a leader changed
  its ISR meanwhile) only that partition is re-read and decided again.
* **Full pass** (on broker/topic/config changes and admin requests), from the context,
  for every partition: new partitions get a leader and ISR
  (``elections.initial_leader_and_isr``); a dead leader is replaced (offline election,
  REQ-R4, R14; ``unclean.leader.election.enable`` from ``/config/topics/T`` else the
  broker default, REQ-R10); a partition with no eligible replica goes offline (leader
  -1, ISR kept) and is elected when an ISR member returns (REQ-R15); dead followers leave
  the ISR.
* **Preferred election** (REQ-R5): ``/admin/preferred_replica_election`` (Kafka's JSON)
  → preferred elections for the listed partitions, then the znode is deleted. The same
  for ``/admin/unclean_leader_election`` (Odradek's, for ElectLeaders UNCLEAN).
* **Auto rebalance** (REQ-R5): with ``auto.leader.rebalance.enable``, every
  ``leader.imbalance.check.interval.seconds`` brokers whose imbalance exceeds
  ``leader.imbalance.per.broker.percentage`` get their preferred partitions back.
* **Controlled shutdown** (REQ-R13): see ``controlled_shutdown.py``.
* **Topic deletion**: topics listed under ``/admin/delete_topics`` lose their znodes.
* **Notification purge**: ``leader_and_isr`` notifications older than one purge interval
  are deleted (a broker that fell further behind re-reads every state znode).
* **Partition reassignment** (KIP-455): ``reassigner.py`` moves
  ``/admin/reassign_partitions`` into the topic znodes and completes each move once the
  target replicas are in the ISR; a notification naming a moving partition (the leader's
  ISR expansion) triggers that check without a full pass.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from kazoo.exceptions import ConnectionLoss, KazooException, SessionExpiredError

from odradek.configdefs import setting
from odradek.controller import bounces, elections
from odradek.controller.context import ControllerContext, TopicPartition
from odradek.controller.elections import StateChange
from odradek.controller.reassigner import Reassigner
from odradek.metadata.store import (
    AdminRequestsChanged,
    BrokersChanged,
    ControllerChanged,
    DeletionsChanged,
    MetadataEvent,
    PartitionStatesChanged,
    SessionReestablished,
    StatesReloaded,
    Stop,
    TopicChanged,
    TopicConfigChanged,
    TopicsChanged,
)
from odradek.runtime import clock
from odradek.zk import znodes
from odradek.zk.kafka_zk_client import ControllerMovedError, KafkaZkClient, StateWrite

logger = logging.getLogger(__name__)

_MAX_CAS_ROUNDS = 10  # re-read-and-decide rounds for partitions whose write conflicted
_RETRY_DELAY_S = 0.5
# A notification lives between one and two of these: long enough for any broker whose
# metadata thread is not stalled (one that is re-reads every state), short enough that
# the directory stays small (each ISR change adds one).
PURGE_INTERVAL_S = 10.0


@dataclass(frozen=True, slots=True)
class _RebalanceTick:
    pass


@dataclass(frozen=True, slots=True)
class _PurgeTick:
    pass


@dataclass(frozen=True, slots=True)
class _Retry:
    """Redo a full pass (after winning the election, or after a failed step)."""


class NotController(Exception):
    """Our /controller_epoch fence failed: another broker is the controller now."""


# A decision rule for one partition: (replicas, current state) -> change or None.
Decide = Callable[[list[int], znodes.PartitionState], StateChange | None]

_WATCHED = (
    BrokersChanged,
    TopicsChanged,
    TopicChanged,
    DeletionsChanged,
    ControllerChanged,
    SessionReestablished,
    TopicConfigChanged,
    AdminRequestsChanged,
    PartitionStatesChanged,
    StatesReloaded,
)


@dataclass(frozen=True, slots=True)
class ControllerSettings:
    """The broker settings the controller uses (names and defaults: the table)."""

    unclean_leader_election_enable: bool = setting("unclean.leader.election.enable")
    auto_leader_rebalance_enable: bool = setting("auto.leader.rebalance.enable")
    leader_imbalance_check_interval_seconds: int = setting(
        "leader.imbalance.check.interval.seconds"
    )
    leader_imbalance_per_broker_percentage: int = setting("leader.imbalance.per.broker.percentage")


class Controller:
    def __init__(self, zk: KafkaZkClient, broker_id: int, config: Any = None) -> None:
        """``config``: the broker's ``BrokerConfig`` (defaults: Kafka's, if None)."""
        self.zkc = zk
        self.broker_id = broker_id
        self.epoch = -1
        self.active = False
        self._epoch_zk_version = -1  # /controller_epoch's version when we won
        settings = (
            config.settings(ControllerSettings) if config is not None else ControllerSettings()
        )
        self.unclean_default = settings.unclean_leader_election_enable
        self.auto_rebalance = settings.auto_leader_rebalance_enable
        self.imbalance_interval_s = float(settings.leader_imbalance_check_interval_seconds)
        self.imbalance_percentage = settings.leader_imbalance_per_broker_percentage
        self.purge_interval_s = PURGE_INTERVAL_S
        self.ctx: ControllerContext | None = None  # None: (re)load from ZooKeeper first
        self._purge_through = -1  # highest notification seen at the previous purge tick
        self._events: queue.Queue[Any] = queue.Queue()
        self._thread = threading.Thread(target=self._run, name="controller", daemon=True)
        self._timers: dict[type, float] = {}  # due times of the periodic ticks (start())
        self._reassigner = Reassigner(self)

    def start(self, *, threaded: bool = True) -> None:
        """``threaded=False``: no thread; whoever drives the controller (the simulator,
        odradek.sim.zk_cluster) calls ``take_batch`` and ``step`` on its own schedule."""
        self._events.put(ControllerChanged())
        now = clock.monotonic()
        self._timers = {_PurgeTick: now + self.purge_interval_s}
        if self.auto_rebalance:
            self._timers[_RebalanceTick] = now + self.imbalance_interval_s
        if threaded:
            self._thread.start()

    def stop(self) -> None:
        self._events.put(Stop())
        if self._thread.is_alive():
            self._thread.join(timeout=5)
        if self.active:
            # Resign so another broker takes over at once instead of after our session
            # times out.
            self._resign()
            self.active = False

    def _resign(self) -> None:
        try:
            got = self.zkc.get_data(znodes.CONTROLLER)
            if got is None:
                return
            data, stat = got
            if (
                znodes.decode_controller(data).broker_id == self.broker_id
                and stat.ephemeralOwner == self.zkc.zk.client_id[0]
            ):
                self.zkc.zk.delete(znodes.CONTROLLER, version=stat.version)
        except Exception:  # noqa: BLE001 - best effort: the session's end removes it too
            pass

    def on_event(self, ev: MetadataEvent) -> None:
        """Called from the metadata thread: only enqueue (never block it)."""
        if isinstance(ev, _WATCHED):
            self._events.put(ev)

    # ------------------------------------------------------------------ loop
    def _run(self) -> None:
        while True:
            try:
                first: list[Any] = [self._events.get(timeout=max(0.0, self.next_tick_in()))]
            except queue.Empty:
                first = []
            batch = self.take_batch(first)
            if any(isinstance(e, Stop) for e in batch):
                return
            pause = self.step(batch)
            if pause:
                time.sleep(pause)

    def next_tick_in(self) -> float:
        """Seconds until the next timer (purge, auto rebalance) is due."""
        return min(self._timers.values()) - clock.monotonic()

    def has_events(self) -> bool:
        """Anything queued (the simulator's driver asks before it sleeps)."""
        return not self._events.empty()

    def take_batch(self, first: list[Any] | None = None) -> list[Any]:
        """The next batch: ``first``, the timers due now, then every queued event."""
        batch = list(first or ())
        now = clock.monotonic()
        for kind, at in self._timers.items():
            if at <= now:
                batch.append(kind())
                # Due again one interval from now whatever our role: a non-controller
                # that skipped this would spin on an expired timer.
                self._timers[kind] = now + (
                    self.imbalance_interval_s if kind is _RebalanceTick else self.purge_interval_s
                )
        try:
            while True:
                batch.append(self._events.get_nowait())
        except queue.Empty:
            pass
        return batch

    def step(self, batch: list[Any]) -> float:
        """``process`` one batch, handling its failures; returns how long to pause before
        the next (0, or ``_RETRY_DELAY_S`` after a failed step, whose retry is queued)."""
        try:
            self.process(batch)
            return 0.0
        except NotController:
            logger.warning(
                "broker %d is no longer the controller (epoch %d fenced)",
                self.broker_id,
                self.epoch,
            )
            self.active = False
            self.ctx = None
            self._epoch_zk_version = -1
            self._resign()  # a fresh election gives whoever wins a fresh epoch
            self._events.put(ControllerChanged())
            return 0.0
        except (ConnectionLoss, SessionExpiredError) as e:
            # Cut from ZooKeeper (REQ-P8): nothing to decide until it answers again; no
            # stack trace for an outage the cluster is built to survive.
            logger.warning(
                "controller step failed, ZooKeeper unreachable (%s); retrying", type(e).__name__
            )
        except Exception:
            logger.exception("controller step failed; re-reading ZooKeeper and retrying")
        self.ctx = None  # a write may or may not have landed: trust only ZooKeeper
        self._events.put(_Retry())
        return _RETRY_DELAY_S

    def process(self, batch: list[Any]) -> None:
        """One step: every event queued so far, decided together. Public for tests,
        which drive a controller without its thread."""
        t0, requests0 = time.monotonic(), self.zkc.stats.requests
        self._process(batch)
        elapsed = time.monotonic() - t0
        if elapsed > 0.2:  # the slow steps, for whoever profiles a failover
            logger.info(
                "controller step of %d events took %.0f ms, %d ZooKeeper requests",
                len(batch),
                elapsed * 1e3,
                self.zkc.stats.requests - requests0,
            )

    def _process(self, batch: list[Any]) -> None:
        if any(isinstance(e, (ControllerChanged, SessionReestablished)) for e in batch):
            self._elect()
        if not self.active:
            return
        full_pass = self.ctx is None or any(
            not isinstance(e, (PartitionStatesChanged, _RebalanceTick, _PurgeTick)) for e in batch
        )
        if self.ctx is None:
            self.ctx = self._load_context()
        else:
            self._refresh(self.ctx, batch)
        ctx = self.ctx
        if full_pass:
            self._process_deletions(ctx)
            self._full_pass(ctx)
            self._process_elections(ctx, znodes.PREFERRED_REPLICA_ELECTION)
            self._process_elections(ctx, znodes.UNCLEAN_LEADER_ELECTION_PATH)
            self._reassigner.check_all(ctx)
            self._reassigner.process_requests(ctx)
        else:
            moving = ctx.moving()
            named = {
                (ch.topic, ch.partition)
                for e in batch
                if isinstance(e, PartitionStatesChanged)
                for ch in e.changes
            }
            if moving & named:  # a moving partition's ISR changed: maybe complete
                self._reassigner.check(ctx, sorted(moving & named))
            self._undo_ineligible(ctx, named)
        if any(isinstance(e, _RebalanceTick) for e in batch):
            self._auto_rebalance(ctx)
        if any(isinstance(e, _PurgeTick) for e in batch):
            self._purge_notifications()

    def _undo_ineligible(self, ctx: ControllerContext, named: set[TopicPartition]) -> None:
        """KIP-841: Kafka's controller refuses an AlterPartition that puts a broker in an
        ISR while it is not registered or is in a controlled shutdown. Leaders here write
        ISRs themselves, so the controller undoes such a write when its notification
        arrives. How a leader comes to make one: a fetch that a follower sent before it
        died (or before it stopped fetching to shut down) is read by a loop running late,
        after the controller took the follower out; it looks newer than anything the
        leader recorded, so the follower "rejoins". A loaded CI run then had the dead
        broker elected from that ISR with an empty log. (A method of its own so that the
        simulator's ``no-isr-eligibility`` bug can switch it off: odradek.sim.bugs.)"""
        back = {
            tp: ctx.unclean_enabled(tp[0], self.unclean_default)
            for tp in sorted(named)
            if (cur := ctx.states.get(tp)) is not None
            and not _settled(cur[0], ctx.live_brokers, ctx.shutting_down)
        }
        if back:
            self._write_per_partition(ctx, back, ctx.live_brokers, ctx.shutting_down)

    # ------------------------------------------------------------------ election
    def _elect(self) -> None:
        zkc = self.zkc
        got = zkc.get_data(znodes.CONTROLLER)
        if got is not None:
            data, stat = got
            holder = znodes.decode_controller(data).broker_id
            was = self.active
            self.active = (
                holder == self.broker_id
                and stat.ephemeralOwner == zkc.zk.client_id[0]
                and self._epoch_zk_version >= 0
            )
            if was and not self.active:
                logger.warning("controller role lost to broker %d", holder)
                self.ctx = None
            return
        won = zkc.register_controller(self.broker_id)
        if won is None:
            self.active = False
            return
        self.epoch, self._epoch_zk_version = won
        self.ctx = None  # read everything: our predecessor may have left a batch half done
        self.active = True
        logger.info("broker %d is the controller (epoch %d)", self.broker_id, self.epoch)

    # ------------------------------------------------------------------ reading
    def _load_context(self) -> ControllerContext:
        """Everything the controller decides from, in O(partitions / chunk) requests."""
        t0 = time.monotonic()
        zkc = self.zkc
        epochs = zkc.get_broker_epochs()
        ctx = ControllerContext(live_brokers=set(epochs), broker_epochs=epochs)
        ctx.shutting_down = self._shutdown_requests() & ctx.live_brokers
        ctx.deleting = set(zkc.get_children(znodes.DELETE_TOPICS))
        self._load_topics(ctx, zkc.get_children(znodes.BROKER_TOPICS))
        logger.info(
            "controller context loaded: %d brokers, %d topics, %d partitions in "
            "%.0f ms (%d ZooKeeper requests so far)",
            len(ctx.live_brokers),
            len(ctx.assignments),
            len(ctx.states),
            (time.monotonic() - t0) * 1e3,
            zkc.stats.requests,
        )
        return ctx

    def _load_topics(self, ctx: ControllerContext, topics: Iterable[str]) -> None:
        names = list(topics)
        assignments = self.zkc.get_topic_assignments(names)
        configs = self.zkc.get_topic_configs(assignments)
        for a in assignments.values():
            ctx.set_topic(a)
        ctx.configs.update(configs)
        tps = [(t, p) for t, a in assignments.items() for p in a.partitions]
        read = self.zkc.get_partition_states_mzxid(tps)
        ctx.put_states({tp: (st, version) for tp, (st, version, _) in read.items()}, absent=tps)
        # A bounce no controller saw (bounces.py): a new controller -- maybe the bounced
        # broker itself -- would keep a restarted leader at its old epoch (odradek sim,
        # seed 22 of --profile power-loss with instant restarts).
        for tp, (st, _version, mzxid) in read.items():
            gone = bounces.stale_members(st, mzxid, ctx.broker_epochs)
            if gone:
                ctx.stale.setdefault(tp, set()).update(gone)

    def _refresh(self, ctx: ControllerContext, batch: list[Any]) -> None:
        """Re-read what the batch's events say changed; nothing else."""
        zkc = self.zkc
        kinds = {type(e) for e in batch}
        if BrokersChanged in kinds:
            epochs = zkc.get_broker_epochs()
            back = bounces.bounced(ctx.broker_epochs, epochs)  # gone and back meanwhile
            ctx.live_brokers, ctx.broker_epochs = set(epochs), epochs
            if back:
                states = ((tp, st) for tp, (st, _) in ctx.states.items())
                for tp, named in bounces.naming(states, back).items():
                    ctx.stale.setdefault(tp, set()).update(named)
        if AdminRequestsChanged in kinds or BrokersChanged in kinds:
            self._adopt_shutdown_requests(ctx, self._shutdown_requests())
        if TopicsChanged in kinds or DeletionsChanged in kinds:
            ctx.deleting = set(zkc.get_children(znodes.DELETE_TOPICS))
            names = set(zkc.get_children(znodes.BROKER_TOPICS))
            for gone in set(ctx.assignments) - names:
                ctx.remove_topic(gone)
            self._load_topics(ctx, sorted(names - set(ctx.assignments)))
        changed = sorted(
            {e.topic for e in batch if isinstance(e, TopicChanged) and e.topic in ctx.assignments}
        )
        if changed:  # partitions added: their (rare) existing states are read too
            assignments = zkc.get_topic_assignments(changed)
            for a in assignments.values():
                ctx.set_topic(a)
            new = [
                (t, p)
                for t, a in assignments.items()
                for p in a.partitions
                if (t, p) not in ctx.states
            ]
            ctx.put_states(zkc.get_partition_states(new), absent=new)
        configs = sorted(
            {
                e.topic
                for e in batch
                if isinstance(e, TopicConfigChanged) and e.topic in ctx.assignments
            }
        )
        if configs:
            ctx.configs.update(zkc.get_topic_configs(configs))
        if StatesReloaded in kinds:
            # The metadata store missed notifications (purged before it read them): so
            # may we have. Re-read every state.
            tps = [tp for tp, _ in ctx.partitions()]
            ctx.put_states(zkc.get_partition_states(tps), absent=tps)
        for e in batch:
            if isinstance(e, PartitionStatesChanged):
                ctx.apply_changes(e.changes)

    def _shutdown_requests(self) -> set[int]:
        return {
            int(c) for c in self.zkc.get_children(znodes.CONTROLLED_SHUTDOWN_PATH) if c.isdigit()
        }

    def _adopt_shutdown_requests(self, ctx: ControllerContext, requests: set[int]) -> None:
        """The brokers in a controlled shutdown from now on: those registered that asked
        (a broker whose session ended is forgotten: its next incarnation may lead again).

        Leaders change ISRs behind our back; we hear of it by notification, a few ms
        late. A decision made on a stale ISR fails its version check and is redone,
        except "nothing to do": a broker re-admitted to an ISR a moment ago would stay in
        it after it stops, and the leader's acks=all would wait for it until
        replica.lag.time.max.ms (REQ-R9). So a controlled shutdown is decided on fresh
        reads of that broker's partitions -- wherever its request is first seen: the
        event that announced it, or the full pass of a batch that came just before it
        (a loaded machine found that second way in). A broker death is not: there the dead
        follower costs the same wait at worst, and failover time matters more than one
        re-read of every partition (a third of the step at 3,000 partitions)."""
        shutting = (ctx.shutting_down | requests) & ctx.live_brokers
        starting = shutting - ctx.shutting_down
        ctx.shutting_down = shutting
        if starting:
            tps = [tp for tp, replicas in ctx.partitions() if starting.intersection(replicas)]
            ctx.put_states(self.zkc.get_partition_states(tps), absent=tps)

    # ------------------------------------------------------------------ writing
    def _write_changes(
        self, ctx: ControllerContext, tps: Iterable[TopicPartition], decide: Decide, why: str
    ) -> dict[TopicPartition, StateChange]:
        """Decide ``tps`` from the context and write every change in chunked, fenced,
        conditional transactions (Kafka's ``doElectLeaderForPartitions`` loop). Partitions
        whose znode changed meanwhile are re-read (one multiRead) and decided again."""
        t0, requests0 = time.monotonic(), self.zkc.stats.requests
        remaining = sorted(set(tps))
        done: dict[TopicPartition, StateChange] = {}
        for _ in range(_MAX_CAS_ROUNDS):
            writes: list[StateWrite] = []
            olds: dict[TopicPartition, tuple[znodes.PartitionState, StateChange]] = {}
            for tp in remaining:
                cur, replicas = ctx.states.get(tp), ctx.replicas(tp)
                if cur is None or replicas is None:
                    continue  # not created yet (or topic deleted): the full pass handles it
                change = decide(replicas, cur[0])
                if change is None:
                    continue
                new = znodes.PartitionState(
                    change.leader, change.leader_epoch, change.isr, self.epoch
                )
                writes.append(StateWrite(tp[0], tp[1], ctx.topic_ids.get(tp[0]), new, cur[1]))
                olds[tp] = (cur[0], change)
            if not writes:
                break
            try:
                result = self.zkc.update_partition_states(
                    writes, fence=self._epoch_zk_version, writer=self.broker_id
                )
            except ControllerMovedError:
                raise NotController() from None
            for w in writes:
                version = result.versions.get(w.tp)
                if version is not None:
                    ctx.states[w.tp] = (w.state, version)
                    done[w.tp] = olds[w.tp][1]
                    _log_change(w.tp, olds[w.tp][0], olds[w.tp][1])
            for tp in result.missing:
                ctx.states.pop(tp, None)
            remaining = sorted(result.conflicts)
            if not remaining:
                break
            ctx.put_states(self.zkc.get_partition_states(remaining), absent=remaining)
        else:
            logger.warning(
                "%s: gave up on %d partitions after %d conflicting rounds: %s",
                why,
                len(remaining),
                _MAX_CAS_ROUNDS,
                _names(remaining),
            )
        if done:
            kinds: dict[str, int] = {}
            for ch in done.values():
                kinds[ch.kind] = kinds.get(ch.kind, 0) + 1
            logger.info(
                "%s: wrote %d partition states (%s) at controller epoch %d in %.0f ms, "
                "%d ZooKeeper requests",
                why,
                len(done),
                ", ".join(f"{k} {n}" for k, n in sorted(kinds.items())),
                self.epoch,
                (time.monotonic() - t0) * 1e3,
                self.zkc.stats.requests - requests0,
            )
        return done

    def _create_states(self, ctx: ControllerContext, tps: list[TopicPartition]) -> None:
        """Leader and ISR for new partitions (Kafka's ``onNewPartitionCreation``)."""
        writes = []
        for tp in tps:
            replicas = ctx.replicas(tp)
            res = elections.initial_leader_and_isr(replicas or [], ctx.eligible)
            if res is None:
                continue  # stays "new" until a replica is alive
            state = znodes.PartitionState(res.leader, 0, res.isr, self.epoch)
            writes.append(StateWrite(tp[0], tp[1], ctx.topic_ids.get(tp[0]), state, -1))
        if not writes:
            return
        try:
            result = self.zkc.create_partition_states(
                writes, fence=self._epoch_zk_version, writer=self.broker_id
            )
        except ControllerMovedError:
            raise NotController() from None
        for w in writes:
            if w.tp in result.versions:
                ctx.states[w.tp] = (w.state, result.versions[w.tp])
                logger.debug(
                    "partition %s-%d: leader %d at epoch 0, isr %s (new partition)",
                    w.topic,
                    w.partition,
                    w.state.leader,
                    w.state.isr,
                )
        if result.conflicts:  # created meanwhile (an earlier attempt of ours): read them
            again = sorted(result.conflicts)
            ctx.put_states(self.zkc.get_partition_states(again), absent=again)
        logger.info(
            "new partitions: created %d partition states at controller epoch %d%s",
            len(result.versions),
            self.epoch,
            f" ({len(result.conflicts)} existed already)" if result.conflicts else "",
        )

    # ------------------------------------------------------------------ full pass
    def _full_pass(self, ctx: ControllerContext) -> None:
        """``elections.reconcile_partition`` for every partition, from the context, then
        every resulting write in one batch; controlled-shutdown requests are answered
        once their broker's partitions have been decided."""
        requests = self._shutdown_requests() & ctx.live_brokers
        self._adopt_shutdown_requests(ctx, requests)
        new = [tp for tp, _ in ctx.partitions() if tp not in ctx.states]
        self._create_states(ctx, new)
        registered, shutting = ctx.live_brokers, ctx.shutting_down
        if ctx.stale:
            self._fail_bounced(ctx, registered, shutting)
        unclean = {t: ctx.unclean_enabled(t, self.unclean_default) for t in ctx.assignments}
        todo: dict[TopicPartition, bool] = {}
        for tp, _replicas in ctx.partitions():
            cur = ctx.states.get(tp)
            if cur is None:
                continue
            if _settled(cur[0], registered, shutting):
                continue
            todo[tp] = unclean[tp[0]]

        self._write_per_partition(ctx, todo, registered, shutting)
        for broker_id in sorted(requests):
            # Every partition has been decided with the broker shutting down: done.
            try:
                self.zkc.delete_paths(
                    [f"{znodes.CONTROLLED_SHUTDOWN_PATH}/{broker_id}"], fence=self._epoch_zk_version
                )
            except ControllerMovedError:
                raise NotController() from None
            logger.info("controlled shutdown of broker %d: leadership moved", broker_id)

    def _fail_bounced(
        self, ctx: ControllerContext, registered: set[int], shutting: set[int]
    ) -> None:
        """Partitions naming brokers that bounced: decided as if those brokers had failed,
        then started (``bounces.after_bounce``; Kafka's onBrokerFailure, onBrokerStartup)."""
        stale, ctx.stale = ctx.stale, {}
        groups: dict[frozenset[int], list[TopicPartition]] = {}
        for tp, members in sorted(stale.items()):
            if ctx.replicas(tp) is not None:
                groups.setdefault(frozenset(members), []).append(tp)
        for gone, tps in sorted(groups.items(), key=lambda g: sorted(g[0])):
            logger.warning(
                "brokers %s registered again since %d partition states naming them "
                "were written (%s): treated as failed there first",
                sorted(gone),
                len(tps),
                _names(tps),
            )
            for flag in (False, True):
                chosen = [
                    tp for tp in tps if ctx.unclean_enabled(tp[0], self.unclean_default) is flag
                ]

                def rule(
                    replicas: list[int],
                    st: znodes.PartitionState,
                    _flag: bool = flag,
                    _gone: frozenset[int] = gone,
                ) -> StateChange | None:
                    return bounces.after_bounce(replicas, st, registered, _gone, shutting, _flag)

                if chosen:
                    self._write_changes(ctx, chosen, rule, "bounced brokers")

    def _write_per_partition(
        self,
        ctx: ControllerContext,
        todo: dict[TopicPartition, bool],
        registered: set[int],
        shutting: set[int],
    ) -> None:
        # Partitions of unclean-enabled topics and the others are decided by the same
        # rule with a different flag: two batches at most.
        for flag in (False, True):
            tps = [tp for tp, u in todo.items() if u is flag]
            if not tps:
                continue

            def rule(
                replicas: list[int], st: znodes.PartitionState, _flag: bool = flag
            ) -> StateChange | None:
                return elections.reconcile_partition(
                    replicas, st.leader, st.leader_epoch, st.isr, registered, shutting, _flag
                )

            self._write_changes(ctx, tps, rule, "full pass")

    # ------------------------------------------------------------------ admin elections
    def _process_elections(self, ctx: ControllerContext, path: str) -> None:
        """``/admin/preferred_replica_election`` or ``/admin/unclean_leader_election``:
        elect the listed partitions in one batch, then delete the znode (Kafka's
        protocol)."""
        wanted = self.zkc.get_partition_list(path)
        if wanted is None:
            return
        kind = "unclean" if path == znodes.UNCLEAN_LEADER_ELECTION_PATH else "preferred"
        logger.info(
            "%s election requested for %d partitions: %s", kind, len(wanted), _names(wanted)
        )
        # An operator's request names its partitions: decide them on fresh reads.
        named = sorted({tp for tp in wanted if ctx.replicas(tp) is not None})
        ctx.put_states(self.zkc.get_partition_states(named), absent=named)
        eligible, registered = ctx.eligible, ctx.live_brokers
        if kind == "preferred":

            def rule(replicas: list[int], st: znodes.PartitionState) -> StateChange | None:
                return elections.preferred_change(
                    replicas, st.leader, st.leader_epoch, st.isr, eligible
                )
        else:

            def rule(replicas: list[int], st: znodes.PartitionState) -> StateChange | None:
                return elections.unclean_change(
                    replicas, st.leader, st.leader_epoch, st.isr, registered, eligible
                )

        self._write_changes(ctx, named, rule, f"{kind} election")
        try:
            self.zkc.delete_paths([path], fence=self._epoch_zk_version)
        except ControllerMovedError:
            raise NotController() from None

    def _auto_rebalance(self, ctx: ControllerContext) -> None:
        """REQ-R5: move leadership back to preferred replicas of imbalanced brokers."""
        flat: dict[TopicPartition, list[int]] = {}
        leaders: dict[TopicPartition, int] = {}
        isrs: dict[TopicPartition, list[int]] = {}
        for tp, replicas in ctx.partitions():
            cur = ctx.states.get(tp)
            if cur is None:
                continue
            flat[tp], leaders[tp], isrs[tp] = replicas, cur[0].leader, cur[0].isr
        eligible = ctx.eligible
        todo = elections.partitions_to_rebalance(
            flat, leaders, isrs, eligible, self.imbalance_percentage
        )
        if not todo:
            return
        logger.info(
            "auto leader rebalance: preferred election for %d partitions: %s",
            len(todo),
            _names(todo),
        )
        ctx.put_states(self.zkc.get_partition_states(todo), absent=todo)

        def rule(replicas: list[int], st: znodes.PartitionState) -> StateChange | None:
            return elections.preferred_change(
                replicas, st.leader, st.leader_epoch, st.isr, eligible
            )

        self._write_changes(ctx, todo, rule, "auto leader rebalance")

    # ------------------------------------------------------------------ deletion
    def _process_deletions(self, ctx: ControllerContext) -> None:
        topics = sorted(ctx.deleting)
        if not topics:
            return
        logger.info("deleting topics %s", ", ".join(topics))
        roots = [p for t in topics for p in (znodes.topic_path(t), znodes.topic_config_path(t))]
        try:
            self.zkc.delete_recursive(roots, fence=self._epoch_zk_version)
            self.zkc.delete_paths(
                [znodes.delete_topic_path(t) for t in topics], fence=self._epoch_zk_version
            )
        except ControllerMovedError:
            raise NotController() from None
        for t in topics:
            ctx.remove_topic(t)
        ctx.deleting.clear()

    # ------------------------------------------------------------------ notifications
    def _purge_notifications(self) -> None:
        """Delete the notifications that were already there at the previous tick: each
        lives one to two purge intervals, plenty for a broker's metadata thread."""
        names, _ = self.zkc.list_leader_and_isr_notifications()
        old = [(s, n) for s, n in names if s <= self._purge_through]
        self._purge_through = max((s for s, _ in names), default=self._purge_through)
        if not old:
            return
        try:
            self.zkc.purge_leader_and_isr_notifications(old, fence=self._epoch_zk_version)
        except ControllerMovedError:
            raise NotController() from None
        except KazooException as e:
            logger.warning("purging leader_and_isr notifications failed: %r", e)
            return
        logger.debug("purged %d leader_and_isr notifications", len(old))


def _settled(st: znodes.PartitionState, registered: set[int], shutting: set[int]) -> bool:
    """Nothing for the controller to do (a cheap pre-filter; ``reconcile_partition``
    decides): the leader is live and eligible, and every ISR member is registered and
    not shutting down."""
    return (
        st.leader in registered
        and st.leader not in shutting
        and all(b in registered and b not in shutting for b in st.isr)
    )


def _names(tps: Iterable[TopicPartition], limit: int = 20) -> str:
    items = [f"{t}-{p}" for t, p in tps]
    shown = ", ".join(items[:limit])
    return shown + (f", ... ({len(items)} in all)" if len(items) > limit else "") or "nothing"


def _log_change(tp: TopicPartition, old: znodes.PartitionState, ch: StateChange) -> None:
    name = f"{tp[0]}-{tp[1]}"
    if ch.kind == "unclean":
        logger.warning(
            "unclean election for %s: leader %d -> %d at epoch %d, isr %s "
            "(records not on the new leader are lost, REQ-R10)",
            name,
            old.leader,
            ch.leader,
            ch.leader_epoch,
            ch.isr,
        )
    elif ch.kind == "offline":
        logger.warning(
            "partition %s is offline: leader %d -> -1 at epoch %d, no live replica in isr %s",
            name,
            old.leader,
            ch.leader_epoch,
            ch.isr,
        )
    elif ch.kind == "isr":
        logger.debug(
            "partition %s: isr %s -> %s (leader %d, epoch %d)",
            name,
            old.isr,
            ch.isr,
            ch.leader,
            ch.leader_epoch,
        )
    else:
        logger.debug(
            "partition %s: leader %d -> %d at epoch %d, isr %s (%s)",
            name,
            old.leader,
            ch.leader,
            ch.leader_epoch,
            ch.isr,
            ch.kind,
        )
