"""The classic consumer-group state machine (Kafka's GroupMetadata + GroupCoordinator rules).

Pure: no I/O, no clocks, no randomness. Events come in (join, sync, heartbeat, leave,
commit validation, ``expire(now_ms)``); decisions come out as *effects*: replies to
parked JoinGroup/SyncGroup requests (``JoinResult`` / ``SyncResult``, addressed by member
id) and ``Persist`` (write the group's metadata to ``__consumer_offsets``). The asyncio
layer (``group_coordinator``) parks requests on futures, runs the clock and does the
writes. This is the "consumer group rebalancing" lever of docs/requirements.md (reliability levers).

Rules, stated once
------------------

======================  ====================================================================
state                   event → outcome
======================  ====================================================================
Empty (no members)      join: add member, → PreparingRebalance with the *initial delay*
                        (``group.initial.rebalance.delay.ms``; extended by the delay while
                        new members keep arriving, never past the rebalance timeout —
                        Kafka's InitialDelayedJoin). sync/heartbeat: UNKNOWN_MEMBER_ID.
                        commit with generation -1 and member "": accepted (simple consumer).
PreparingRebalance      join (known or new member): parked until every member has rejoined
                        (and no MEMBER_ID_REQUIRED member is outstanding), or the rebalance
                        timeout (max over members) passes: then members that did not rejoin
                        are removed, generation += 1, the protocol is chosen by vote, and all
                        parked joins are answered (the leader also gets every member's
                        metadata) → CompletingRebalance; with no members left → Empty.
                        heartbeat: REBALANCE_IN_PROGRESS. sync: REBALANCE_IN_PROGRESS.
                        commit (current generation): accepted.
CompletingRebalance     sync: parked; the leader's sync stores every assignment → Stable and
                        answers all parked syncs. join with unchanged metadata: the current
                        generation's join answer again; with changed metadata: rebalance.
                        heartbeat: NONE. commit: REBALANCE_IN_PROGRESS. If the leader has not
                        synced within the rebalance timeout, members that did not sync are
                        removed and the group rebalances.
Stable                  sync: the member's assignment. heartbeat: NONE. join by the leader
                        or with changed metadata: rebalance; otherwise the current
                        generation's answer. commit: accepted.
Dead                    (deleted or unloaded) every request: COORDINATOR_NOT_AVAILABLE.
======================  ====================================================================

Every state change goes through ``GROUP_TRANSITIONS`` (Kafka's validPreviousStates): one
the table does not list raises IllegalStateError instead of happening.

Any state: leaving (LeaveGroup) or a session timeout removes the member; in Stable or
CompletingRebalance that starts a rebalance, in PreparingRebalance it may complete the
join. Parked members (awaiting join or sync) do not expire by session: they cannot send
heartbeats; the rebalance/sync deadlines cover them. Errors checked first, in order:
DEAD → COORDINATOR_NOT_AVAILABLE; ``group.instance.id`` mapped to another member →
FENCED_INSTANCE_ID; unknown member → UNKNOWN_MEMBER_ID; wrong generation →
ILLEGAL_GENERATION. JoinGroup v4+ from a new dynamic member gets MEMBER_ID_REQUIRED with
its new id (KIP-394); a static member (KIP-345) is never asked: rejoining with a new
identity replaces the old member id (whose parked requests get FENCED_INSTANCE_ID), and in
Stable with unchanged metadata it gets the current generation without a rebalance.
"""

from __future__ import annotations

import enum
from collections import Counter
from dataclasses import dataclass, field

from odradek.configdefs import setting
from odradek.coordinator.group_codec import GroupValue, MemberValue
from odradek.coordinator.state_table import TransitionTable
from odradek.errors import ErrorCode
from odradek.protocol.consumer_protocol import subscription_topics


class GroupState(enum.Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


_G = GroupState
# Kafka's GroupState.validPreviousStates (GroupMetadata.scala): the only transitions a
# group makes. Restoring a group from the log sets its state directly (``Group.restore``).
GROUP_TRANSITIONS: TransitionTable[GroupState] = TransitionTable(
    "group",
    {
        _G.PREPARING_REBALANCE: frozenset({_G.STABLE, _G.COMPLETING_REBALANCE, _G.EMPTY}),
        _G.COMPLETING_REBALANCE: frozenset({_G.PREPARING_REBALANCE}),
        _G.STABLE: frozenset({_G.COMPLETING_REBALANCE}),
        _G.EMPTY: frozenset({_G.PREPARING_REBALANCE}),
        _G.DEAD: frozenset(
            {_G.STABLE, _G.PREPARING_REBALANCE, _G.COMPLETING_REBALANCE, _G.EMPTY, _G.DEAD}
        ),
    },
    ErrorCode.unknown_server_error,
)


@dataclass(frozen=True, slots=True)
class GroupConfig:
    """The broker settings a group's state machine uses (names and defaults: the table)."""

    initial_rebalance_delay_ms: int = setting("group.initial.rebalance.delay.ms")
    min_session_timeout_ms: int = setting("group.min.session.timeout.ms")
    max_session_timeout_ms: int = setting("group.max.session.timeout.ms")


@dataclass(frozen=True, slots=True)
class JoinRequest:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: tuple[tuple[str, bytes], ...]
    require_known_member_id: bool  # JoinGroup v4+


# ----------------------------------------------------------------- effects (closed set)
@dataclass(frozen=True, slots=True)
class JoinResult:
    member_id: str  # whose parked JoinGroup this answers
    error: ErrorCode
    generation: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str = ""
    members: tuple[tuple[str, str | None, bytes], ...] = ()  # leader only


@dataclass(frozen=True, slots=True)
class SyncResult:
    member_id: str
    error: ErrorCode
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""


@dataclass(frozen=True, slots=True)
class Persist:
    """The group's metadata changed in a way Kafka records (Stable or Empty)."""

    group_id: str


Effect = JoinResult | SyncResult | Persist


@dataclass(slots=True)
class Member:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: tuple[tuple[str, bytes], ...]
    session_deadline_ms: int = 0
    assignment: bytes = b""
    awaiting_join: bool = False
    awaiting_sync: bool = False

    def metadata_for(self, protocol: str | None) -> bytes:
        for name, meta in self.protocols:
            if name == protocol:
                return meta
        return b""


@dataclass
class Group:
    group_id: str
    config: GroupConfig = field(default_factory=GroupConfig)
    state: GroupState = GroupState.EMPTY
    generation: int = 0
    protocol_type: str | None = None
    protocol: str | None = None
    leader: str | None = None
    members: dict[str, Member] = field(default_factory=dict)
    pending: dict[str, int] = field(default_factory=dict)  # MEMBER_ID_REQUIRED → deadline
    instances: dict[str, str] = field(default_factory=dict)  # group.instance.id → member
    state_timestamp_ms: int = -1
    rebalance_deadline_ms: int | None = None
    sync_deadline_ms: int | None = None
    initial_delay_active: bool = False
    initial_remaining_ms: int = 0
    new_member_added: bool = False

    # ================================================================= JoinGroup
    def join(self, r: JoinRequest, now_ms: int, fresh_member_id: str) -> tuple[str, list[Effect]]:
        """Returns the member id the requester's answer will be addressed to, and effects.

        ``fresh_member_id`` is used if the requester needs a new id (the caller makes it,
        like Kafka, from client id / instance id and a UUID)."""
        mid = r.member_id
        if self.state is GroupState.DEAD:
            return mid, [JoinResult(mid, ErrorCode.coordinator_not_available)]
        cfg = self.config
        if not cfg.min_session_timeout_ms <= r.session_timeout_ms <= cfg.max_session_timeout_ms:
            return mid, [JoinResult(mid, ErrorCode.invalid_session_timeout)]
        if not self._supports(r):
            return mid, [JoinResult(mid, ErrorCode.inconsistent_group_protocol)]
        if mid == "":
            return self._join_new(r, now_ms, fresh_member_id)
        return mid, self._join_known(r, now_ms)

    def _supports(self, r: JoinRequest) -> bool:
        if not r.protocol_type or not r.protocols:
            return False
        others = [m for m in self.members.values() if m.member_id != r.member_id]
        if not others:
            return True
        if r.protocol_type != self.protocol_type:
            return False
        common = set.intersection(*({n for n, _ in m.protocols} for m in others))
        return any(n in common for n, _ in r.protocols)

    def _join_new(self, r: JoinRequest, now_ms: int, new_id: str) -> tuple[str, list[Effect]]:
        if r.group_instance_id is not None:
            old = self.instances.get(r.group_instance_id)
            if old is not None:
                return new_id, self._replace_static(old, new_id, r, now_ms)
            return new_id, self._add_and_rebalance(new_id, r, now_ms)
        if r.require_known_member_id:
            # KIP-394: hand out the id first, so a retried join cannot leave a ghost member.
            self.pending[new_id] = now_ms + r.session_timeout_ms
            return new_id, [JoinResult(new_id, ErrorCode.member_id_required)]
        return new_id, self._add_and_rebalance(new_id, r, now_ms)

    def _join_known(self, r: JoinRequest, now_ms: int) -> list[Effect]:
        mid = r.member_id
        if mid in self.pending:
            del self.pending[mid]
            return self._add_and_rebalance(mid, r, now_ms)
        if r.group_instance_id is not None:
            cur = self.instances.get(r.group_instance_id)
            if cur is not None and cur != mid:
                return [JoinResult(mid, ErrorCode.fenced_instance_id)]
        m = self.members.get(mid)
        if m is None:
            return [JoinResult(mid, ErrorCode.unknown_member_id)]
        # (A retry of a join still parked replaces it: the coordinator answers the old
        # parked request itself before parking the new one.)
        effects: list[Effect] = []
        changed = m.protocols != r.protocols
        if self.state is GroupState.PREPARING_REBALANCE:
            self._update(m, r, now_ms)
            m.awaiting_join = True
            return effects + self._maybe_complete_join(now_ms)
        if self.state is GroupState.COMPLETING_REBALANCE and not changed:
            self._update(m, r, now_ms)
            return effects + [self._join_answer(m)]
        if self.state is GroupState.STABLE and not changed and mid != self.leader:
            self._update(m, r, now_ms)
            return effects + [self._join_answer(m)]
        self._update(m, r, now_ms)
        m.awaiting_join = True
        return effects + self._prepare_rebalance(now_ms)

    def _update(self, m: Member, r: JoinRequest, now_ms: int) -> None:
        m.protocols = r.protocols
        m.session_timeout_ms = r.session_timeout_ms
        m.rebalance_timeout_ms = r.rebalance_timeout_ms
        m.client_id, m.client_host = r.client_id, r.client_host
        m.session_deadline_ms = now_ms + r.session_timeout_ms

    def _replace_static(
        self, old_id: str, new_id: str, r: JoinRequest, now_ms: int
    ) -> list[Effect]:
        m = self.members.pop(old_id)
        effects: list[Effect] = []
        if m.awaiting_join:
            effects.append(JoinResult(old_id, ErrorCode.fenced_instance_id))
        if m.awaiting_sync:
            effects.append(SyncResult(old_id, ErrorCode.fenced_instance_id))
        m.awaiting_join = m.awaiting_sync = False
        changed = m.protocols != r.protocols
        m.member_id = new_id
        self._update(m, r, now_ms)
        self.members[new_id] = m
        self.instances[r.group_instance_id or ""] = new_id
        was_leader = self.leader == old_id
        if was_leader:
            self.leader = new_id
        if self.state is GroupState.STABLE and not changed and not was_leader:
            # KIP-345: a static member's restart does not cost the group a rebalance.
            return effects + [self._join_answer(m), Persist(self.group_id)]
        m.awaiting_join = True
        if self.state is GroupState.PREPARING_REBALANCE:
            return effects + self._maybe_complete_join(now_ms)
        return effects + self._prepare_rebalance(now_ms)

    def _add_and_rebalance(self, mid: str, r: JoinRequest, now_ms: int) -> list[Effect]:
        m = Member(
            mid,
            r.group_instance_id,
            r.client_id,
            r.client_host,
            r.session_timeout_ms,
            r.rebalance_timeout_ms,
            r.protocol_type,
            r.protocols,
            session_deadline_ms=now_ms + r.session_timeout_ms,
            awaiting_join=True,
        )
        if not self.members:
            self.protocol_type = r.protocol_type
        self.members[mid] = m
        if r.group_instance_id is not None:
            self.instances[r.group_instance_id] = mid
        if self.leader is None:
            self.leader = mid
        if self.state is GroupState.PREPARING_REBALANCE:
            if self.initial_delay_active:
                self.new_member_added = True
            return self._maybe_complete_join(now_ms)
        return self._prepare_rebalance(now_ms)

    def _join_answer(self, m: Member) -> JoinResult:
        members: tuple[tuple[str, str | None, bytes], ...] = ()
        if m.member_id == self.leader:
            members = tuple(
                (o.member_id, o.group_instance_id, o.metadata_for(self.protocol))
                for o in self.members.values()
            )
        return JoinResult(
            m.member_id,
            ErrorCode.none,
            self.generation,
            self.protocol_type,
            self.protocol,
            self.leader or "",
            members,
        )

    # ================================================================= rebalance
    def _rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def _prepare_rebalance(self, now_ms: int) -> list[Effect]:
        effects: list[Effect] = []
        if self.state is GroupState.COMPLETING_REBALANCE:
            for m in self.members.values():
                if m.awaiting_sync:
                    m.awaiting_sync = False
                    effects.append(SyncResult(m.member_id, ErrorCode.rebalance_in_progress))
        self.sync_deadline_ms = None
        if self.state is GroupState.EMPTY:
            delay = self.config.initial_rebalance_delay_ms
            self.initial_delay_active = True
            self.new_member_added = False
            self.initial_remaining_ms = max(self._rebalance_timeout_ms() - delay, 0)
            self.rebalance_deadline_ms = now_ms + delay
        else:
            self.initial_delay_active = False
            self.rebalance_deadline_ms = now_ms + self._rebalance_timeout_ms()
        self._transition(GroupState.PREPARING_REBALANCE, now_ms)
        return effects + self._maybe_complete_join(now_ms)

    def _all_joined(self) -> bool:
        return not self.pending and all(m.awaiting_join for m in self.members.values())

    def _maybe_complete_join(self, now_ms: int) -> list[Effect]:
        if (
            self.state is GroupState.PREPARING_REBALANCE
            and not self.initial_delay_active
            and self._all_joined()
        ):
            return self._complete_join(now_ms)
        return []

    def _complete_join(self, now_ms: int) -> list[Effect]:
        effects: list[Effect] = []
        for m in [m for m in self.members.values() if not m.awaiting_join]:
            effects += self._remove(m.member_id)
        self.rebalance_deadline_ms = None
        self.initial_delay_active = False
        self.generation += 1
        if not self.members:
            self.protocol = None
            self._transition(GroupState.EMPTY, now_ms)
            return effects + [Persist(self.group_id)]
        self.protocol = self._select_protocol()
        self._transition(GroupState.COMPLETING_REBALANCE, now_ms)
        self.sync_deadline_ms = now_ms + self._rebalance_timeout_ms()
        for m in self.members.values():
            m.awaiting_join = False
            m.session_deadline_ms = now_ms + m.session_timeout_ms
            effects.append(self._join_answer(m))
        return effects

    def _select_protocol(self) -> str:
        """Protocols every member supports; each member votes for its first such one."""
        ms = list(self.members.values())
        common = set.intersection(*({n for n, _ in m.protocols} for m in ms))
        votes: Counter[str] = Counter()
        for m in ms:
            votes[next(n for n, _ in m.protocols if n in common)] += 1
        best = max(votes.values())
        # Ties go to the first member's preference order (deterministic).
        return next(n for n, _ in ms[0].protocols if votes.get(n) == best)

    def _transition(self, state: GroupState, now_ms: int) -> None:
        GROUP_TRANSITIONS.check(self.state, state)  # raises IllegalStateError
        self.state = state
        self.state_timestamp_ms = now_ms

    # ================================================================= SyncGroup
    def sync(
        self,
        member_id: str,
        instance_id: str | None,
        generation: int,
        protocol_type: str | None,
        protocol_name: str | None,
        assignments: dict[str, bytes],
        now_ms: int,
    ) -> list[Effect]:
        err = self._check_member(member_id, instance_id, generation)
        if err is not ErrorCode.none:
            return [SyncResult(member_id, err)]
        if (protocol_type is not None and protocol_type != self.protocol_type) or (
            protocol_name is not None and protocol_name != self.protocol
        ):
            return [SyncResult(member_id, ErrorCode.inconsistent_group_protocol)]
        m = self.members[member_id]
        m.session_deadline_ms = now_ms + m.session_timeout_ms
        if self.state is GroupState.PREPARING_REBALANCE:
            return [SyncResult(member_id, ErrorCode.rebalance_in_progress)]
        if self.state is GroupState.STABLE:
            return [
                SyncResult(
                    member_id, ErrorCode.none, self.protocol_type, self.protocol, m.assignment
                )
            ]
        effects: list[Effect] = []
        m.awaiting_sync = True
        if member_id != self.leader:
            return effects
        for o in self.members.values():
            o.assignment = assignments.get(o.member_id, b"")
        self.sync_deadline_ms = None
        self._transition(GroupState.STABLE, now_ms)
        for o in self.members.values():
            if o.awaiting_sync:
                o.awaiting_sync = False
                effects.append(
                    SyncResult(
                        o.member_id, ErrorCode.none, self.protocol_type, self.protocol, o.assignment
                    )
                )
        return effects + [Persist(self.group_id)]

    def _check_member(
        self, member_id: str, instance_id: str | None, generation: int | None
    ) -> ErrorCode:
        if self.state is GroupState.DEAD:
            return ErrorCode.coordinator_not_available
        if instance_id is not None:
            cur = self.instances.get(instance_id)
            if cur is not None and cur != member_id:
                return ErrorCode.fenced_instance_id
        if member_id not in self.members:
            return ErrorCode.unknown_member_id
        if generation is not None and generation != self.generation:
            return ErrorCode.illegal_generation
        return ErrorCode.none

    # ================================================================= Heartbeat
    def heartbeat(
        self, member_id: str, instance_id: str | None, generation: int, now_ms: int
    ) -> ErrorCode:
        err = self._check_member(member_id, instance_id, generation)
        if err is not ErrorCode.none:
            return err
        m = self.members[member_id]
        m.session_deadline_ms = now_ms + m.session_timeout_ms
        if self.state is GroupState.PREPARING_REBALANCE:
            return ErrorCode.rebalance_in_progress
        return ErrorCode.none

    # ================================================================= LeaveGroup
    def leave(
        self, who: list[tuple[str, str | None]], now_ms: int
    ) -> tuple[list[ErrorCode], list[Effect]]:
        """``who``: (member_id, group_instance_id) pairs; v3+ may name a static member by
        its instance id alone."""
        errors: list[ErrorCode] = []
        effects: list[Effect] = []
        removed = False
        for mid, instance in who:
            if self.state is GroupState.DEAD:
                errors.append(ErrorCode.coordinator_not_available)
                continue
            if instance is not None:
                cur = self.instances.get(instance)
                if cur is None:
                    errors.append(ErrorCode.unknown_member_id)
                    continue
                if mid not in ("", cur):
                    errors.append(ErrorCode.fenced_instance_id)
                    continue
                mid = cur
            if mid in self.pending:
                del self.pending[mid]
                removed = True
                errors.append(ErrorCode.none)
                continue
            if mid not in self.members:
                errors.append(ErrorCode.unknown_member_id)
                continue
            effects += self._remove(mid)
            removed = True
            errors.append(ErrorCode.none)
        if removed:
            effects += self._after_removal(now_ms)
        return errors, effects

    def _remove(self, mid: str) -> list[Effect]:
        m = self.members.pop(mid)
        effects: list[Effect] = []
        if m.awaiting_join:
            effects.append(JoinResult(mid, ErrorCode.unknown_member_id))
        if m.awaiting_sync:
            effects.append(SyncResult(mid, ErrorCode.unknown_member_id))
        if m.group_instance_id is not None and self.instances.get(m.group_instance_id) == mid:
            del self.instances[m.group_instance_id]
        if self.leader == mid:
            self.leader = next(iter(self.members), None)
        return effects

    def _after_removal(self, now_ms: int) -> list[Effect]:
        if self.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            return self._prepare_rebalance(now_ms)
        return self._maybe_complete_join(now_ms)

    # ================================================================= timers
    def next_deadline_ms(self) -> int | None:
        ds = [d for d in (self.rebalance_deadline_ms, self.sync_deadline_ms) if d is not None]
        ds += self.pending.values()
        ds += [
            m.session_deadline_ms
            for m in self.members.values()
            if not m.awaiting_join and not m.awaiting_sync
        ]
        return min(ds) if ds else None

    def expire(self, now_ms: int) -> list[Effect]:
        effects: list[Effect] = []
        if self.state is GroupState.DEAD:
            return effects
        changed = False
        for pid, deadline in list(self.pending.items()):
            if now_ms >= deadline:
                del self.pending[pid]
                changed = True
        for m in list(self.members.values()):
            if not m.awaiting_join and not m.awaiting_sync and now_ms >= m.session_deadline_ms:
                effects += self._remove(m.member_id)  # session timeout
                changed = True
        if changed:
            effects += self._after_removal(now_ms)
        if (
            self.state is GroupState.PREPARING_REBALANCE
            and self.rebalance_deadline_ms is not None
            and now_ms >= self.rebalance_deadline_ms
        ):
            if (
                self.initial_delay_active
                and self.new_member_added
                and self.initial_remaining_ms > 0
            ):
                step = min(self.config.initial_rebalance_delay_ms, self.initial_remaining_ms)
                self.initial_remaining_ms -= step
                self.new_member_added = False
                self.rebalance_deadline_ms = now_ms + step
            else:
                effects += self._complete_join(now_ms)
        if (
            self.state is GroupState.COMPLETING_REBALANCE
            and self.sync_deadline_ms is not None
            and now_ms >= self.sync_deadline_ms
        ):
            # The leader never sent its assignment: drop whoever did not sync, start over.
            for m in [m for m in self.members.values() if not m.awaiting_sync]:
                effects += self._remove(m.member_id)
            effects += self._prepare_rebalance(now_ms)
        return effects

    # ================================================================= offsets & admin
    def validate_commit(
        self, member_id: str, instance_id: str | None, generation: int, now_ms: int
    ) -> ErrorCode:
        if self.state is GroupState.DEAD:
            return ErrorCode.coordinator_not_available
        if generation < 0 and member_id == "" and self.state is GroupState.EMPTY:
            return ErrorCode.none  # a simple (assign-based) consumer, as Kafka allows
        err = self._check_member(member_id, instance_id, generation)
        if err is not ErrorCode.none:
            return err
        if self.state is GroupState.COMPLETING_REBALANCE:
            return ErrorCode.rebalance_in_progress
        m = self.members[member_id]
        m.session_deadline_ms = now_ms + m.session_timeout_ms  # a commit is a sign of life
        return ErrorCode.none

    def subscribed_topics(self) -> set[str]:
        """Topics the members of a consumer-protocol group subscribe to (OffsetDelete
        may not delete their offsets while the group is active, KIP-496)."""
        out: set[str] = set()
        for m in self.members.values():
            out |= subscription_topics(m.metadata_for(self.protocol))
        return out

    def delete_error(self) -> ErrorCode:
        if self.state is GroupState.DEAD:
            return ErrorCode.group_id_not_found
        if self.state is not GroupState.EMPTY:
            return ErrorCode.non_empty_group
        return ErrorCode.none

    def mark_dead(self, now_ms: int) -> list[Effect]:
        """Deleted or unloaded: answer every parked request."""
        effects: list[Effect] = []
        for m in list(self.members.values()):
            if m.awaiting_join:
                effects.append(JoinResult(m.member_id, ErrorCode.not_coordinator))
            if m.awaiting_sync:
                effects.append(SyncResult(m.member_id, ErrorCode.not_coordinator))
            m.awaiting_join = m.awaiting_sync = False
        for pid in self.pending:
            effects.append(JoinResult(pid, ErrorCode.not_coordinator))
        self.pending.clear()
        self._transition(GroupState.DEAD, now_ms)
        return effects

    # ================================================================= persistence
    def to_value(self) -> GroupValue:
        return GroupValue(
            protocol_type=self.protocol_type or "",
            generation=self.generation,
            protocol=self.protocol,
            leader=self.leader,
            current_state_timestamp=self.state_timestamp_ms,
            members=tuple(
                MemberValue(
                    m.member_id,
                    m.group_instance_id,
                    m.client_id,
                    m.client_host,
                    m.rebalance_timeout_ms,
                    m.session_timeout_ms,
                    m.metadata_for(self.protocol),
                    m.assignment,
                )
                for m in self.members.values()
            ),
        )

    @classmethod
    def restore(cls, group_id: str, v: GroupValue, config: GroupConfig, now_ms: int) -> Group:
        """A group as loaded from ``__consumer_offsets``: Stable with its members (who get a
        fresh session to find the new coordinator), or Empty."""
        g = cls(
            group_id,
            config,
            generation=v.generation,
            protocol_type=v.protocol_type or None,
            protocol=v.protocol,
            leader=v.leader,
            state_timestamp_ms=v.current_state_timestamp,
        )
        for mv in v.members:
            g.members[mv.member_id] = Member(
                mv.member_id,
                mv.group_instance_id,
                mv.client_id,
                mv.client_host,
                mv.session_timeout_ms,
                mv.rebalance_timeout_ms,
                v.protocol_type,
                ((v.protocol or "", mv.subscription),),
                session_deadline_ms=now_ms + mv.session_timeout_ms,
                assignment=mv.assignment,
            )
            if mv.group_instance_id is not None:
                g.instances[mv.group_instance_id] = mv.member_id
        g.state = GroupState.STABLE if g.members else GroupState.EMPTY
        if g.leader not in g.members:
            g.leader = next(iter(g.members), None)
        return g
