"""Authorization and validation holes in request handlers (issue 28, part A), each
against a SASL_SSL broker (ZooKeeper secured too) as Kafka's KafkaApis answers them:

* a Produce carries exactly one record batch per partition (ProduceRequest.
  validateRecords, INVALID_RECORD): a principal with WRITE on a topic only could
  otherwise hide a transactional batch behind a plain one and pin the partition's LSO;
* TxnOffsetCommit checks WRITE on the TransactionalId before READ on the group, and an
  empty transactional id fails the transaction verification (INVALID_REQUEST);
* TxnOffsetCommit of a producer the coordinator does not know is answered
  INVALID_PRODUCER_ID_MAPPING per partition (it was UNKNOWN_SERVER_ERROR);
* ListOffsets v0 checks DESCRIBE on the topic; ElectLeaders without ALTER on the
  cluster and a null partition list names no topic;
* CreateTopics without DESCRIBE_CONFIGS on the topic hides its configs, partition count
  and replication factor (TOPIC_AUTHORIZATION_FAILED in topic_config_error_code)."""

from __future__ import annotations

import dataclasses
import struct
import uuid
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)
from rawclient import (
    create_topics_request,
    fetch_request,
    list_offsets_request,
    produce_request,
    request_cls,
)
from security_util import Access, access, raw_connection

from odradek.cluster.local import LocalCluster
from odradek.errors import ErrorCode
from odradek.storage.records import encode_batch
from support.polling import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

SINGLE = {
    "offsets.topic.replication.factor": "1",
    "offsets.topic.num.partitions": "2",
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
    "transaction.state.log.num.partitions": "2",
    "group.initial.rebalance.delay.ms": "0",
}


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with LocalCluster.start(
        tmp_path_factory.mktemp("handler-acl"), 1, security="sasl_ssl", broker_config=SINGLE
    ) as c:
        admin = _admin(c)
        for f in admin.alter_user_scram_credentials(
            [
                UserScramCredentialUpsertion(
                    "bob", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), b"bob-secret"
                )
            ]
        ).values():
            f.result(30)
        yield c


def _admin(c: LocalCluster) -> AdminClient:
    return AdminClient(access(c, "SASL_SSL", "SCRAM-SHA-512").confluent())


def _admin_access(c: LocalCluster) -> Access:
    return access(c, "SASL_SSL", "SCRAM-SHA-512")


def _bob(c: LocalCluster) -> Access:
    return access(c, "SASL_SSL", "SCRAM-SHA-512", "bob", "bob-secret")


def _grant(c: LocalCluster, *acls: tuple[Any, str, Any]) -> None:
    bindings = [
        AclBinding(
            rt, name, ResourcePatternType.LITERAL, "User:bob", "*", op, AclPermissionType.ALLOW
        )
        for rt, name, op in acls
    ]
    admin = _admin(c)  # referenced until the futures complete
    for f in admin.create_acls(bindings).values():
        f.result(30)


def _topic(c: LocalCluster) -> str:
    name = f"h-acl-{uuid.uuid4().hex[:8]}"
    admin = _admin(c)
    for f in admin.create_topics([NewTopic(name, 1, 1)], operation_timeout=30).values():
        f.result(60)
    return name


def _ask(a: Access, req: Any) -> Any:
    with raw_connection(a) as conn:  # one broker: leader and both coordinators
        return conn.request(req)


def _until(a: Access, req: Any, code_of: Any, settled: Any) -> Any:
    """Ask until ``settled(code)`` (an ACL change reaches the broker asynchronously, a
    coordinator needs its internal topic); the last response."""

    def answer() -> Any:
        r = _ask(a, req)
        return r if settled(code_of(r)) else None

    return wait_until(answer, f"a settled answer to {type(req).__name__}", 30, interval=0.1)


def _end_offset(c: LocalCluster, topic: str, isolation_level: int = 0) -> int:
    req = dataclasses.replace(list_offsets_request(topic, 0, -1), isolation_level=isolation_level)
    p = _ask(_admin_access(c), req).topics[0].partitions[0]
    assert int(p.error_code) == 0, p
    return int(p.offset)


# =============================================================================== Produce
def test_produce_refuses_more_than_one_batch_per_partition(secure: LocalCluster) -> None:
    """A plain batch followed by a transactional one of a producer no coordinator knows:
    with WRITE on the topic only, bob used to open a transaction nothing closes (the
    transactional id and KIP-890 checks looked at the first batch only)."""
    c = secure
    t = _topic(c)
    _grant(c, (ResourceType.TOPIC, t, AclOperation.WRITE))
    plain = encode_batch([(b"k", b"plain")])
    hidden = encode_batch(
        [(b"k", b"hidden")], producer_id=4242, producer_epoch=0, base_sequence=0, transactional=True
    )

    def code(r: Any) -> int:
        return int(r.responses[0].partition_responses[0].error_code)

    # WRITE reaches the broker asynchronously: a single batch shows when it has.
    _until(
        _bob(c),
        produce_request(t, 0, plain),
        code,
        lambda x: x != ErrorCode.topic_authorization_failed,
    )
    assert _end_offset(c, t) == 1
    for records in (plain + hidden, plain + plain):
        assert code(_ask(_bob(c), produce_request(t, 0, records))) == ErrorCode.invalid_record
    # A transactional first batch is refused for the TransactionalId first, as in Kafka.
    assert (
        code(_ask(_bob(c), produce_request(t, 0, hidden + plain)))
        == ErrorCode.transactional_id_authorization_failed
    )
    # Nothing of the refused requests was appended, and no transaction holds the LSO.
    assert _end_offset(c, t) == 1
    assert _end_offset(c, t, isolation_level=1) == 1


# =============================================================================== TxnOffsetCommit
def _txn_offset_commit(tid: str, group: str, topic: str, pid: int = 4242, epoch: int = 0) -> Any:
    m = __import__(request_cls(28, 3).__module__, fromlist=["x"])
    return m.TxnOffsetCommitRequest(
        transactional_id=tid,
        group_id=group,
        producer_id=pid,
        producer_epoch=epoch,
        generation_id=-1,
        member_id="",
        group_instance_id=None,
        topics=(
            m.TxnOffsetCommitRequestTopic(
                name=topic,
                partitions=(
                    m.TxnOffsetCommitRequestPartition(
                        partition_index=0,
                        committed_offset=5,
                        committed_leader_epoch=-1,
                        committed_metadata="",
                    ),
                ),
            ),
        ),
    )


def _commit_code(r: Any) -> int:
    return int(r.topics[0].partitions[0].error_code)


def _coordinators_ready(c: LocalCluster, group: str, tid: str) -> None:
    """FindCoordinator creates __consumer_offsets / __transaction_state; wait for both."""
    for key, key_type in ((group, 0), (tid, 1)):
        _until(
            _admin_access(c),
            request_cls(10, 3)(key=key, key_type=key_type),
            lambda r: int(r.error_code),
            lambda x: x == 0,
        )


def test_txn_offset_commit_checks_the_transactional_id(secure: LocalCluster) -> None:
    """Kafka's handleTxnOffsetCommitRequest: WRITE on the TransactionalId
    (TRANSACTIONAL_ID_AUTHORIZATION_FAILED), then READ on the group
    (GROUP_AUTHORIZATION_FAILED), then READ on each topic. Without the first check a
    principal with READ on a group and a topic opened a hanging transaction on a
    __consumer_offsets partition; an empty transactional id skipped the verification."""
    c = secure
    t = _topic(c)
    group, other_group = f"g-{uuid.uuid4().hex[:6]}", f"g2-{uuid.uuid4().hex[:6]}"
    tid = f"tx-{uuid.uuid4().hex[:6]}"
    _coordinators_ready(c, group, tid)
    _grant(
        c,
        (ResourceType.GROUP, group, AclOperation.READ),
        (ResourceType.TOPIC, t, AclOperation.READ),
    )
    # READ on the group and the topic, nothing on the TransactionalId. (Until the ACLs
    # arrive the answer is one of the two denials; either way nothing is written.)
    r = _until(
        _bob(c),
        _txn_offset_commit(tid, group, t),
        _commit_code,
        lambda x: x != ErrorCode.group_authorization_failed,
    )
    assert _commit_code(r) == ErrorCode.transactional_id_authorization_failed
    # WRITE on the TransactionalId but no READ on the group: the group check follows.
    _grant(c, (ResourceType.TRANSACTIONAL_ID, tid, AclOperation.WRITE))
    r = _until(
        _bob(c),
        _txn_offset_commit(tid, other_group, t),
        _commit_code,
        lambda x: x != ErrorCode.transactional_id_authorization_failed,
    )
    assert _commit_code(r) == ErrorCode.group_authorization_failed
    # An empty transactional id (the superuser passes every ACL): Kafka's transaction
    # coordinator refuses to verify it, nothing is appended to __consumer_offsets.
    r = _ask(_admin_access(c), _txn_offset_commit("", group, t))
    assert _commit_code(r) == ErrorCode.invalid_request


def test_txn_offset_commit_of_an_unknown_producer(secure: LocalCluster) -> None:
    """A KafkaJS finding: transactional id ``foo``, producer id 999, epoch 999 (no such
    producer) got UNKNOWN_SERVER_ERROR; Kafka's verification answers
    INVALID_PRODUCER_ID_MAPPING for the partition (GroupMetadataManager.
    maybeConvertOffsetCommitError passes it through)."""
    c = secure
    t = _topic(c)
    group = f"g-{uuid.uuid4().hex[:6]}"
    _coordinators_ready(c, group, "foo")
    r = _ask(_admin_access(c), _txn_offset_commit("foo", group, t, pid=999, epoch=999))
    assert _commit_code(r) == ErrorCode.invalid_producer_id_mapping


# =============================================================================== ListOffsets v0
def _list_offsets_v0_code(a: Access, topic: str) -> int:
    body = struct.pack(">ii", -1, 1) + struct.pack(">h", len(topic)) + topic.encode()
    body += struct.pack(">i", 1) + struct.pack(">iqi", 0, -1, 1)
    with raw_connection(a) as conn:
        conn.send_body(2, 0, body)
        _key, _version, frame = conn.receive_frame()
    pos = 4  # topic count
    (n,) = struct.unpack_from(">h", frame, pos)
    pos += 2 + n + 4  # name, partition count
    _p, code = struct.unpack_from(">ih", frame, pos)
    return int(code)


def test_list_offsets_v0_needs_describe(secure: LocalCluster) -> None:
    c = secure
    t = _topic(c)
    assert _list_offsets_v0_code(_admin_access(c), t) == 0
    assert _list_offsets_v0_code(_bob(c), t) == ErrorCode.topic_authorization_failed


# =============================================================================== ElectLeaders
def test_elect_leaders_denied_names_no_topic(secure: LocalCluster) -> None:
    """Kafka (ElectLeadersRequestOps.topicPartitions): a null partition list is empty
    when refused for lack of ALTER on the cluster, so no topic name is echoed."""
    c = secure
    t = _topic(c)
    req = request_cls(43, 2)(election_type=0, topic_partitions=None, timeout=timedelta(seconds=5))
    r = _ask(_bob(c), req)
    assert int(r.error_code) == ErrorCode.cluster_authorization_failed
    assert r.replica_election_results == ()
    assert t not in str(r)


# =============================================================================== Fetch
def _follower_fetch(topic: str, replica_id: int, session_id: int, epoch: int) -> Any:
    """A follower's Fetch v12 of ``topic``-0 from offset 0 (no wait), in a session."""
    req = fetch_request(topic, 0, 0)
    return dataclasses.replace(
        req, replica_id=replica_id, session_id=session_id, session_epoch=epoch
    )


def test_a_fetch_claiming_a_replica_id_without_cluster_action_leaves_its_sessions(
    secure: LocalCluster,
) -> None:
    """A follower opening a fetch session retires its older sessions on that leader (one
    fetcher per source broker; odradek sim seed 5005). The claim "I am broker N" counts
    only with CLUSTER_ACTION: bob's Fetch with replica_id=N is refused
    (CLUSTER_AUTHORIZATION_FAILED) and must leave broker N's session alone, or any client
    could force a follower back to full fetches, again and again."""
    c = secure
    t = _topic(c)
    follower = 7  # follower sessions are keyed by the replica id the fetch names
    with raw_connection(_admin_access(c)) as fetcher, raw_connection(_bob(c)) as intruder:
        opened = fetcher.request(_follower_fetch(t, follower, 0, 0))
        assert int(opened.error_code) == 0, opened
        session = int(opened.session_id)
        assert session != 0

        denied = intruder.request(_follower_fetch(t, follower, 0, 0))
        assert int(denied.error_code) == 0, denied
        codes = [int(p.error_code) for r in denied.responses for p in r.partitions]
        assert codes == [ErrorCode.cluster_authorization_failed]

        # The follower's session goes on: its next incremental fetch is served.
        going_on = fetcher.request(_follower_fetch(t, follower, session, 1))
        assert int(going_on.error_code) == 0, going_on
        assert int(going_on.session_id) == session

        # Control: the same claim with CLUSTER_ACTION is the follower starting over, and
        # retires the session (so the assertion above can fail).
        with raw_connection(_admin_access(c)) as restarted:
            reopened = restarted.request(_follower_fetch(t, follower, 0, 0))
            assert int(reopened.error_code) == 0, reopened
            assert int(reopened.session_id) not in (0, session)
        retired = fetcher.request(_follower_fetch(t, follower, session, 2))
        assert int(retired.error_code) == ErrorCode.fetch_session_id_not_found


# =============================================================================== CreateTopics
def test_create_topics_hides_configs_without_describe_configs(secure: LocalCluster) -> None:
    """Kafka's handleCreateTopicsRequest: without DESCRIBE_CONFIGS on the topic its
    configs, partition count and replication factor are left out (ZkAdminManager's
    includeConfigsAndMetadata) and topic_config_error_code is TOPIC_AUTHORIZATION_FAILED."""
    c = secure
    hidden, shown = f"h-cfg-{uuid.uuid4().hex[:8]}", f"h-cfg-{uuid.uuid4().hex[:8]}"
    _grant(
        c,
        (ResourceType.TOPIC, hidden, AclOperation.CREATE),
        (ResourceType.TOPIC, shown, AclOperation.CREATE),
        (ResourceType.TOPIC, shown, AclOperation.DESCRIBE_CONFIGS),
    )
    cfg = {"retention.ms": "123456"}

    def created(r: Any) -> int:
        return int(r.topics[0].error_code)

    r = _until(
        _bob(c),
        create_topics_request([(shown, 1, 1, cfg)], validate_only=True),
        created,
        lambda x: x == 0,
    )
    res = r.topics[0]
    assert int(res.topic_config_error_code) == 0
    assert (int(res.num_partitions), int(res.replication_factor)) == (1, 1)
    assert {e.name: e.value for e in res.configs}["retention.ms"] == "123456"
    for validate_only in (True, False):
        r = _ask(_bob(c), create_topics_request([(hidden, 1, 1, cfg)], validate_only=validate_only))
        res = r.topics[0]
        assert int(res.error_code) == 0, res
        assert int(res.topic_config_error_code) == ErrorCode.topic_authorization_failed
        assert not res.configs
        assert (int(res.num_partitions), int(res.replication_factor)) == (-1, -1)
