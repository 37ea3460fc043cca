"""Consumer-group APIs: FindCoordinator, JoinGroup, SyncGroup, Heartbeat, LeaveGroup,
OffsetCommit, OffsetFetch, DescribeGroups, ListGroups, DeleteGroups, OffsetDelete.

Thin: decode the version-specific request fields, ask ``ctx.groups`` (the
``GroupCoordinator``), build the response with ``responses.part/response`` (fields a
version lacks are dropped there). JoinGroup, SyncGroup, OffsetCommit and DeleteGroups
return coroutines (they wait for a rebalance or for replication).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from odradek.coordinator.group_state import GroupState, JoinRequest
from odradek.errors import ErrorCode, KafkaError
from odradek.protocol.codec import RequestHeaderInfo
from odradek.protocol.responses import part, response
from odradek.security.acl import AclOperation, ResourceType
from odradek.server import network as server

if TYPE_CHECKING:
    from odradek.server.context import RequestContext

logger = logging.getLogger(__name__)

FIND_COORDINATOR, OFFSET_COMMIT, OFFSET_FETCH = 10, 8, 9
JOIN_GROUP, HEARTBEAT, LEAVE_GROUP, SYNC_GROUP = 11, 12, 13, 14
DESCRIBE_GROUPS, LIST_GROUPS, DELETE_GROUPS, OFFSET_DELETE = 15, 16, 42, 47
KEY_TYPE_GROUP = 0
KEY_TYPE_TRANSACTION = 1


def _client_host() -> str:
    """Kafka's ``/1.2.3.4`` for DescribeGroups, from the requesting connection's peer."""
    peer = server.CURRENT_PEER.get()
    return f"/{peer[0]}" if peer else ""


def _ms(value: Any) -> int:
    return int(value.total_seconds() * 1000) if hasattr(value, "total_seconds") else int(value)


def _require_group(ctx: RequestContext, op: AclOperation, group_id: str) -> None:
    """Kafka's group checks (issue 14): READ to join, sync, heartbeat, leave and commit;
    DESCRIBE to find the coordinator, describe and fetch offsets; DELETE to delete."""
    if not ctx.authorize(op, ResourceType.GROUP, group_id):
        raise KafkaError(
            ErrorCode.group_authorization_failed, f"Not authorized to access group: {group_id}"
        )


# =============================================================================== FindCoordinator
def handle_find_coordinator(ctx: RequestContext, header: RequestHeaderInfo, req: Any) -> Any:
    v = header.api_version
    kw: dict[str, Any] = dict(
        error_code=ErrorCode.none, error_message=None, node_id=-1, host="", port=-1
    )
    try:
        key_type = int(getattr(req, "key_type", KEY_TYPE_GROUP))
        if key_type == KEY_TYPE_TRANSACTION:
            if not ctx.authorize(AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, req.key):
                raise KafkaError(ErrorCode.transactional_id_authorization_failed)
            node, host, port = ctx.txns.coordinator_for(req.key)
        elif key_type == KEY_TYPE_GROUP:
            _require_group(ctx, AclOperation.DESCRIBE, req.key)
            node, host, port = ctx.groups.coordinator_for(req.key)
        else:
            raise KafkaError(ErrorCode.invalid_request, f"unknown key type {key_type}")
        info = ctx.image.brokers.get(node)
        ep = info.endpoint(ctx.session.listener) if info is not None else None
        if ep is not None:  # the coordinator's address on this client's listener
            host, port = ep
        kw.update(node_id=node, host=host, port=port)
    except KafkaError as e:
        kw.update(error_code=e.code, error_message=e.message or None)
    return response(FIND_COORDINATOR, v, throttle_time=0, **kw)


# =============================================================================== JoinGroup
async def handle_join_group(ctx: RequestContext, header: RequestHeaderInfo, req: Any) -> Any:
    v = header.api_version
    session_ms = _ms(req.session_timeout)
    r = JoinRequest(
        member_id=req.member_id,
        group_instance_id=getattr(req, "group_instance_id", None),
        client_id=header.client_id or "",
        client_host=_client_host(),
        session_timeout_ms=session_ms,
        rebalance_timeout_ms=_ms(getattr(req, "rebalance_timeout", session_ms)),
        protocol_type=req.protocol_type,
        protocols=tuple((p.name, bytes(p.metadata)) for p in req.protocols),
        require_known_member_id=v >= 4,
    )
    try:
        _require_group(ctx, AclOperation.READ, req.group_id)
        res = await ctx.groups.join(req.group_id, r)
    except KafkaError as e:
        return response(
            JOIN_GROUP,
            v,
            error_code=e.code,
            generation_id=-1,
            protocol_type=None,
            protocol_name=None if v >= 7 else "",
            leader="",
            member_id=req.member_id,
            members=(),
        )
    member_id = res.member_id
    members = tuple(
        part(
            JOIN_GROUP,
            v,
            "JoinGroupResponseMember",
            member_id=m,
            group_instance_id=inst,
            metadata=meta,
        )
        for m, inst, meta in res.members
    )
    name = res.protocol_name
    if name is None and v < 7:
        name = ""  # not nullable before v7
    return response(
        JOIN_GROUP,
        v,
        error_code=res.error,
        generation_id=res.generation,
        protocol_type=res.protocol_type,
        protocol_name=name,
        leader=res.leader,
        member_id=member_id,
        members=members,
    )


# =============================================================================== SyncGroup
async def handle_sync_group(ctx: RequestContext, header: RequestHeaderInfo, req: Any) -> Any:
    v = header.api_version
    assignments = {a.member_id: bytes(a.assignment) for a in req.assignments}
    try:
        _require_group(ctx, AclOperation.READ, req.group_id)
        res = await ctx.groups.sync(
            req.group_id,
            req.member_id,
            getattr(req, "group_instance_id", None),
            int(req.generation_id),
            getattr(req, "protocol_type", None),
            getattr(req, "protocol_name", None),
            assignments,
        )
        code, ptype, pname, assignment = (
            res.error,
            res.protocol_type,
            res.protocol_name,
            res.assignment,
        )
    except KafkaError as e:
        code, ptype, pname, assignment = e.code, None, None, b""
    return response(
        SYNC_GROUP,
        v,
        error_code=code,
        protocol_type=ptype,
        protocol_name=pname,
        assignment=assignment,
    )


# =============================================================================== Heartbeat
def handle_heartbeat(ctx: RequestContext, header: RequestHeaderInfo, req: Any) -> Any:
    try:
        _require_group(ctx, AclOperation.READ, req.group_id)
        code = ctx.groups.heartbeat(
            req.group_id,
            req.member_id,
            getattr(req, "group_instance_id", None),
            int(req.generation_id),
        )
    except KafkaError as e:
        code = e.code
    return response(HEARTBEAT, header.api_version, error_code=code)


# =============================================================================== LeaveGroup
def handle_leave_group(ctx: RequestContext, header: RequestHeaderInfo, req: Any) -> Any:
    v = header.api_version
    if v >= 3:
        who = [(m.member_id, m.group_instance_id) for m in req.members]
    else:
        who = [(req.member_id, None)]
    try:
        _require_group(ctx, AclOperation.READ, req.group_id)
        errors = ctx.groups.leave(req.group_id, who)
        top = ErrorCode.none
    except KafkaError as e:
        errors, top = [e.code] * len(who), e.code
    if v < 3:
        top = errors[0] if errors else top
    members = (
        tuple(
            part(LEAVE_GROUP, v, "MemberResponse", member_id=m, group_instance_id=i, error_code=err)
            for (m, i), err in zip(who, errors)
        )
        if v >= 3
        else ()
    )
    return response(LEAVE_GROUP, v, error_code=top, members=members)


# =============================================================================== OffsetCommit
async def handle_offset_commit(ctx: RequestContext, header: RequestHeaderInfo, req: Any) -> Any:
    v = header.api_version
    readable = {
        t.name for t in req.topics if ctx.authorize(AclOperation.READ, ResourceType.TOPIC, t.name)
    }
    entries = [
        (
            t.name,
            int(p.partition_index),
            int(p.committed_offset),
            int(getattr(p, "committed_leader_epoch", -1)),
            p.committed_metadata,
        )
        for t in req.topics
        for p in t.partitions
        if t.name in readable
    ]
    denied = {
        (t.name, int(p.partition_index)): ErrorCode.topic_authorization_failed
        for t in req.topics
        for p in t.partitions
        if t.name not in readable
    }
    try:
        _require_group(ctx, AclOperation.READ, req.group_id)
        results = (
            await ctx.groups.commit(
                req.group_id,
                req.member_id,
                getattr(req, "group_instance_id", None),
                int(req.generation_id_or_member_epoch),
                entries,
            )
            if entries
            else {}
        )
        results.update(denied)
    except KafkaError as e:
        results = {
            (t.name, int(p.partition_index)): e.code for t in req.topics for p in t.partitions
        }
    except Exception:
        logger.exception("offset commit for group %s failed", req.group_id)
        results = {(t, p): ErrorCode.unknown_server_error for t, p, *_ in entries}
    topics = tuple(
        part(
            OFFSET_COMMIT,
            v,
            "OffsetCommitResponseTopic",
            name=t.name,
            partitions=tuple(
                part(
                    OFFSET_COMMIT,
                    v,
                    "OffsetCommitResponsePartition",
                    partition_index=p.partition_index,
                    error_code=results.get(
                        (t.name, int(p.partition_index)), ErrorCode.unknown_server_error
                    ),
                )
                for p in t.partitions
            ),
        )
        for t in req.topics
    )
    return response(OFFSET_COMMIT, v, throttle_time=0, topics=topics)


# =============================================================================== OffsetFetch
def handle_offset_fetch(ctx: RequestContext, header: RequestHeaderInfo, req: Any) -> Any:
    v = header.api_version
    wanted = (
        None
        if req.topics is None
        else [(t.name, [int(p) for p in t.partition_indexes]) for t in req.topics]
    )
    top = ErrorCode.none
    try:
        _require_group(ctx, AclOperation.DESCRIBE, req.group_id)
        found = ctx.groups.fetch_offsets(req.group_id, wanted)
    except KafkaError as e:
        top = e.code
        found = [(t, [(p, None) for p in ps]) for t, ps in (wanted or [])]
    # Topics the principal may not describe: named ones answer TOPIC_AUTHORIZATION_FAILED,
    # and "all topics" leaves them out (Kafka's handleOffsetFetchRequest).
    visible = {t for t, _ in found if ctx.authorize(AclOperation.DESCRIBE, ResourceType.TOPIC, t)}
    if wanted is None:
        found = [(t, ps) for t, ps in found if t in visible]
    # v1 has no top-level error: the coordinator error goes to every partition.
    part_error = top if v < 2 else ErrorCode.none
    # KIP-447: a read_committed consumer asks for stable offsets; while a transaction
    # holds an offset for the partition, it gets UNSTABLE_OFFSET_COMMIT and retries.
    unstable = (
        ctx.groups.pending_txn_partitions(req.group_id)
        if getattr(req, "require_stable", False) and top is ErrorCode.none
        else set()
    )

    def code(t: str, p: int) -> ErrorCode:
        return ErrorCode.unstable_offset_commit if (t, p) in unstable else part_error

    topics = tuple(
        part(
            OFFSET_FETCH,
            v,
            "OffsetFetchResponseTopic",
            name=t,
            partitions=tuple(
                part(
                    OFFSET_FETCH,
                    v,
                    "OffsetFetchResponsePartition",
                    partition_index=p,
                    committed_offset=(
                        val.offset if val and t in visible and (t, p) not in unstable else -1
                    ),
                    committed_leader_epoch=val.leader_epoch if val and t in visible else -1,
                    metadata=val.metadata if val and t in visible else "",
                    error_code=code(t, p)
                    if t in visible or top
                    else ErrorCode.topic_authorization_failed,
                )
                for p, val in ps
            ),
        )
        for t, ps in found
    )
    return response(OFFSET_FETCH, v, throttle_time=0, topics=topics, error_code=top)


# =============================================================================== DescribeGroups
def handle_describe_groups(ctx: RequestContext, header: RequestHeaderInfo, req: Any) -> Any:
    v = header.api_version
    out = []
    for gid in req.groups:
        kw: dict[str, Any] = dict(
            error_code=ErrorCode.none,
            group_id=gid,
            group_state=GroupState.DEAD.value,
            protocol_type="",
            protocol_data="",
            members=(),
            authorized_operations=-2147483648,
        )
        try:
            _require_group(ctx, AclOperation.DESCRIBE, gid)
            g = ctx.groups.describe(gid)
            if g is not None and g.state is not GroupState.DEAD:
                stable = g.state is GroupState.STABLE
                kw.update(
                    group_state=g.state.value,
                    protocol_type=g.protocol_type or "",
                    protocol_data=g.protocol or "" if stable else "",
                    members=tuple(
                        part(
                            DESCRIBE_GROUPS,
                            v,
                            "DescribedGroupMember",
                            member_id=m.member_id,
                            group_instance_id=m.group_instance_id,
                            client_id=m.client_id,
                            client_host=m.client_host,
                            member_metadata=m.metadata_for(g.protocol) if stable else b"",
                            member_assignment=m.assignment if stable else b"",
                        )
                        for m in g.members.values()
                    ),
                )
        except KafkaError as e:
            kw["error_code"] = e.code
        out.append(part(DESCRIBE_GROUPS, v, "DescribedGroup", **kw))
    return response(DESCRIBE_GROUPS, v, throttle_time=0, groups=tuple(out))


# =============================================================================== ListGroups
def handle_list_groups(ctx: RequestContext, header: RequestHeaderInfo, req: Any) -> Any:
    v = header.api_version
    states = {s.lower() for s in getattr(req, "states_filter", ()) or ()}
    # DESCRIBE on the cluster lists every group; otherwise the groups the principal may
    # describe (Kafka's handleListGroupsRequest).
    every = ctx.authorize_cluster(AclOperation.DESCRIBE)
    code, listed = ctx.groups.list_groups(states or None)
    groups = tuple(
        part(
            LIST_GROUPS,
            v,
            "ListedGroup",
            group_id=g.group_id,
            protocol_type=g.protocol_type or "",
            group_state=g.state.value,
        )
        for g in listed
        if every or ctx.authorize(AclOperation.DESCRIBE, ResourceType.GROUP, g.group_id)
    )
    return response(LIST_GROUPS, v, throttle_time=0, error_code=code, groups=groups)


# =============================================================================== DeleteGroups
async def handle_delete_groups(ctx: RequestContext, header: RequestHeaderInfo, req: Any) -> Any:
    v = header.api_version
    results = []
    for gid in req.groups_names:
        if ctx.authorize(AclOperation.DELETE, ResourceType.GROUP, gid):
            code = await ctx.groups.delete(gid)
        else:
            code = ErrorCode.group_authorization_failed
        results.append(
            part(DELETE_GROUPS, v, "DeletableGroupResult", group_id=gid, error_code=code)
        )
    return response(DELETE_GROUPS, v, throttle_time=0, results=tuple(results))


# =============================================================================== OffsetDelete
async def handle_offset_delete(ctx: RequestContext, header: RequestHeaderInfo, req: Any) -> Any:
    """KIP-496, as Kafka's handleDeleteConsumerGroupOffsetsRequest: DELETE on the group,
    READ on each topic; partitions of unknown topics are answered without asking the
    coordinator."""
    v = header.api_version

    def answer(code: ErrorCode, per: dict[tuple[str, int], ErrorCode]) -> Any:
        topics = []
        for t in req.topics if code is ErrorCode.none else ():
            parts = []
            for p in t.partitions:
                index = int(p.partition_index)
                parts.append(
                    part(
                        OFFSET_DELETE,
                        v,
                        "OffsetDeleteResponsePartition",
                        partition_index=index,
                        error_code=per.get((t.name, index), ErrorCode.none),
                    )
                )
            topics.append(
                part(
                    OFFSET_DELETE,
                    v,
                    "OffsetDeleteResponseTopic",
                    name=t.name,
                    partitions=tuple(parts),
                )
            )
        return response(OFFSET_DELETE, v, error_code=code, throttle_time=0, topics=tuple(topics))

    if not ctx.authorize(AclOperation.DELETE, ResourceType.GROUP, req.group_id):
        return answer(ErrorCode.group_authorization_failed, {})
    per: dict[tuple[str, int], ErrorCode] = {}
    wanted: list[tuple[str, int]] = []
    for t in req.topics:
        for p in t.partitions:
            tp = (t.name, int(p.partition_index))
            if not ctx.authorize(AclOperation.READ, ResourceType.TOPIC, t.name):
                per[tp] = ErrorCode.topic_authorization_failed
            elif t.name not in ctx.image.topics:
                per[tp] = ErrorCode.unknown_topic_or_partition
            else:
                wanted.append(tp)
    code, results = await ctx.groups.delete_offsets(req.group_id, wanted)
    per.update(results)
    return answer(code, per)
