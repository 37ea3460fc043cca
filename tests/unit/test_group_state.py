"""The pure consumer-group state machine (group_state): rules from its header table."""

from __future__ import annotations

from odradek.coordinator.group_state import (
    Group,
    GroupConfig,
    GroupState,
    JoinRequest,
    JoinResult,
    Persist,
    SyncResult,
)
from odradek.errors import ErrorCode

CFG = GroupConfig(
    initial_rebalance_delay_ms=3000, min_session_timeout_ms=6000, max_session_timeout_ms=1800000
)
PROTOS = (("range", b"r-meta"), ("roundrobin", b"rr-meta"))


def req(
    member_id: str = "",
    *,
    instance: str | None = None,
    session: int = 10000,
    rebalance: int = 60000,
    protocols: tuple[tuple[str, bytes], ...] = PROTOS,
    v4: bool = True,
    ptype: str = "consumer",
) -> JoinRequest:
    return JoinRequest(
        member_id, instance, "client", "/127.0.0.1", session, rebalance, ptype, protocols, v4
    )


def joins(effects: list) -> dict[str, JoinResult]:
    return {e.member_id: e for e in effects if isinstance(e, JoinResult)}


def syncs(effects: list) -> dict[str, SyncResult]:
    return {e.member_id: e for e in effects if isinstance(e, SyncResult)}


def stable_group_of_two(now: int = 0, session: int = 10000) -> tuple[Group, str, str]:
    """Two dynamic members, generation 1, Stable."""
    g = Group("g", CFG)
    _a, eff = g.join(req(session=session), now, "a")
    assert joins(eff)["a"].error is ErrorCode.member_id_required
    assert g.join(req("a", session=session), now, "x") == ("a", [])  # parked: initial delay
    _b, _ = g.join(req(session=session), now + 10, "b")
    assert g.join(req("b", session=session), now + 10, "x") == ("b", [])
    eff = g.expire(now + 3000)  # new member arrived during the delay: extend once
    assert eff == [] and g.state is GroupState.PREPARING_REBALANCE
    eff = g.expire(now + 6000)
    res = joins(eff)
    assert set(res) == {"a", "b"} and res["a"].generation == 1 == res["b"].generation
    assert res["a"].leader == "a" and [m[0] for m in res["a"].members] == ["a", "b"]
    assert res["b"].members == ()
    assert g.state is GroupState.COMPLETING_REBALANCE
    assert g.sync("b", None, 1, None, None, {}, now + 6001) == []  # parked until leader
    eff = g.sync("a", None, 1, "consumer", "range", {"a": b"A", "b": b"B"}, now + 6002)
    assert syncs(eff)["a"].assignment == b"A" and syncs(eff)["b"].assignment == b"B"
    assert Persist("g") in eff and g.state is GroupState.STABLE
    return g, "a", "b"


def test_first_join_waits_initial_delay_only() -> None:
    g = Group("g", CFG)
    _, eff = g.join(req(), 0, "m1")
    assert joins(eff)["m1"].error is ErrorCode.member_id_required
    assert g.state is GroupState.EMPTY  # a MEMBER_ID_REQUIRED round trip is not a member
    assert g.join(req("m1"), 5, "x") == ("m1", [])
    assert g.state is GroupState.PREPARING_REBALANCE
    assert g.expire(3004) == []
    res = joins(g.expire(3005))["m1"]
    assert (res.error, res.generation, res.protocol_name, res.leader) == (
        ErrorCode.none,
        1,
        "range",
        "m1",
    )
    assert res.members == (("m1", None, b"r-meta"),)


def test_join_v3_without_member_id_round_trip() -> None:
    g = Group("g", CFG)
    mid, eff = g.join(req(v4=False), 0, "m1")
    assert mid == "m1" and eff == [] and "m1" in g.members


def test_balanced_rebalance_heartbeat_and_leave() -> None:
    g, a, b = stable_group_of_two()
    assert g.heartbeat(a, None, 1, 7000) is ErrorCode.none
    assert g.heartbeat(a, None, 0, 7000) is ErrorCode.illegal_generation
    assert g.heartbeat("nobody", None, 1, 7000) is ErrorCode.unknown_member_id
    errors, eff = g.leave([(b, None)], 7000)
    assert errors == [ErrorCode.none] and g.state is GroupState.PREPARING_REBALANCE
    assert g.heartbeat(a, None, 1, 7001) is ErrorCode.rebalance_in_progress
    assert g.sync(a, None, 1, None, None, {}, 7001) == [
        SyncResult(a, ErrorCode.rebalance_in_progress)
    ]
    # the remaining member rejoins: everyone has joined, so the join completes at once
    _, eff = g.join(req(a), 7002, "x")
    assert joins(eff)[a].generation == 2 and joins(eff)[a].members == ((a, None, b"r-meta"),)


def test_session_timeout_removes_member_and_rebalances() -> None:
    g, a, b = stable_group_of_two()
    assert g.heartbeat(a, None, 1, 15000) is ErrorCode.none  # a alive, b silent
    g.expire(16001)  # b's session (10 s after its sync at 6001) is over
    assert b not in g.members and g.state is GroupState.PREPARING_REBALANCE
    assert g.heartbeat(a, None, 1, 16002) is ErrorCode.rebalance_in_progress


def test_rebalance_timeout_drops_members_that_did_not_rejoin() -> None:
    g, a, b = stable_group_of_two(session=120000)
    # a rejoins with changed metadata; b never rejoins
    _, eff = g.join(req(a, session=120000, protocols=(("roundrobin", b"x"),)), 7000, "x")
    assert eff == [] and g.state is GroupState.PREPARING_REBALANCE
    assert g.expire(7000 + 59999) == []
    res = joins(g.expire(7000 + 60000))
    assert set(res) == {a} and res[a].generation == 2 and res[a].protocol_name == "roundrobin"
    assert b not in g.members


def test_leader_sync_timeout_restarts_rebalance() -> None:
    g = Group("g", CFG)
    g.join(req(v4=False, rebalance=20000), 0, "a")
    g.expire(3000)
    assert g.state is GroupState.COMPLETING_REBALANCE
    assert g.heartbeat("a", None, 1, 100) is ErrorCode.none
    g.expire(3000 + 20000)  # the leader never synced
    assert "a" not in g.members and g.state is GroupState.EMPTY and g.generation == 2


def test_static_member_rejoin_is_fenced_and_skips_rebalance() -> None:
    g = Group("g", CFG)
    mid, eff = g.join(req(instance="i1"), 0, "s1")  # static members skip MEMBER_ID_REQUIRED
    assert mid == "s1" and eff == []
    g.join(req(v4=False), 1, "d1")
    assert g.expire(3001) == []  # d1 arrived during the initial delay: extended once
    res = joins(g.expire(6001))
    assert res["s1"].leader == "s1"
    g.sync("s1", "i1", 1, None, None, {"s1": b"S", "d1": b"D"}, 6002)
    g.sync("d1", None, 1, None, None, {}, 6002)
    assert g.state is GroupState.STABLE
    # The leader s1 restarting (same instance id, new member id) forces a rebalance: it
    # must compute the assignments. Its old member id is fenced.
    _, eff = g.join(req(instance="i1"), 7000, "s2")
    assert g.state is GroupState.PREPARING_REBALANCE and "s1" not in g.members
    assert g.heartbeat("s1", "i1", 1, 7001) is ErrorCode.fenced_instance_id

    h = Group("h", CFG)
    h.join(req(v4=False), 0, "lead")
    h.join(req(instance="i2"), 0, "f1")
    h.expire(3000)
    h.expire(6000)
    h.sync("lead", None, 1, None, None, {"lead": b"L", "f1": b"F"}, 6001)
    assert h.state is GroupState.STABLE
    mid, eff = h.join(req(instance="i2"), 5000, "f2")  # follower restarts: no rebalance
    res = joins(eff)["f2"]
    assert (res.error, res.generation, res.members) == (ErrorCode.none, 1, ())
    assert h.state is GroupState.STABLE
    assert h.sync("f2", "i2", 1, None, None, {}, 5001)[0].assignment == b"F"
    assert h.sync("f1", "i2", 1, None, None, {}, 5001)[0].error is ErrorCode.fenced_instance_id


def test_validation_errors() -> None:
    g = Group("g", CFG)
    assert (
        joins(g.join(req(session=5999), 0, "m")[1])[""].error is ErrorCode.invalid_session_timeout
    )
    assert (
        joins(g.join(req(session=1800001), 0, "m")[1])[""].error
        is ErrorCode.invalid_session_timeout
    )
    assert (
        joins(g.join(req(protocols=()), 0, "m")[1])[""].error
        is ErrorCode.inconsistent_group_protocol
    )
    assert joins(g.join(req("ghost"), 0, "m")[1])["ghost"].error is ErrorCode.unknown_member_id
    g.join(req(v4=False), 0, "a")
    _, eff = g.join(req(v4=False, protocols=(("sticky", b""),)), 0, "b")
    assert joins(eff)[""].error is ErrorCode.inconsistent_group_protocol
    _, eff = g.join(req(v4=False, ptype="connect"), 0, "c")
    assert joins(eff)[""].error is ErrorCode.inconsistent_group_protocol


def test_protocol_vote() -> None:
    g = Group("g", CFG)
    g.join(req(v4=False, protocols=(("range", b""), ("rr", b""))), 0, "a")
    g.join(req(v4=False, protocols=(("rr", b""), ("range", b""))), 0, "b")
    g.join(req(v4=False, protocols=(("rr", b""), ("sticky", b""), ("range", b""))), 0, "c")
    g.expire(3000)
    g.expire(6000)
    assert g.protocol == "rr"


def test_commit_rules() -> None:
    g = Group("g", CFG)
    assert g.validate_commit("", None, -1, 0) is ErrorCode.none  # simple consumer
    g.join(req(v4=False), 0, "a")
    assert g.validate_commit("", None, -1, 0) is ErrorCode.unknown_member_id
    assert g.validate_commit("a", None, 0, 0) is ErrorCode.none  # PreparingRebalance, gen 0
    g.expire(3000)
    assert g.validate_commit("a", None, 1, 3001) is ErrorCode.rebalance_in_progress
    g.sync("a", None, 1, None, None, {"a": b""}, 3001)
    assert g.validate_commit("a", None, 1, 3002) is ErrorCode.none
    assert g.validate_commit("a", None, 0, 3002) is ErrorCode.illegal_generation
    assert g.delete_error() is ErrorCode.non_empty_group
    g.leave([("a", None)], 3003)
    assert g.state is GroupState.EMPTY and g.delete_error() is ErrorCode.none
    g.mark_dead(3004)
    assert g.delete_error() is ErrorCode.group_id_not_found
    assert g.validate_commit("", None, -1, 0) is ErrorCode.coordinator_not_available


def test_restore_from_persisted_value() -> None:
    g, a, b = stable_group_of_two()
    r = Group.restore("g", g.to_value(), CFG, 10000)
    assert r.state is GroupState.STABLE and r.generation == 1 and r.leader == a
    assert r.heartbeat(b, None, 1, 10001) is ErrorCode.none
    assert r.sync(b, None, 1, None, None, {}, 10001)[0].assignment == b"B"
    empty = Group("e", CFG)
    assert Group.restore("e", empty.to_value(), CFG, 0).state is GroupState.EMPTY


def test_unload_answers_parked_requests() -> None:
    g = Group("g", CFG)
    g.join(req(v4=False), 0, "a")
    eff = g.mark_dead(1)
    assert joins(eff)["a"].error is ErrorCode.not_coordinator
    assert g.state is GroupState.DEAD
