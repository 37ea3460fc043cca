"""ACL checks on the transaction APIs, as Kafka's KafkaApis makes them (issue 14), with
confluent-kafka's transactional producer on a SASL_SSL cluster (ZooKeeper secured too):

* a producer with WRITE on its TransactionalId and on the topic, READ on the group and
  the topic runs a whole transaction (produce + send_offsets_to_transaction + commit);
* AddPartitionsToTxn without WRITE on the topic -> TOPIC_AUTHORIZATION_FAILED;
* AddOffsetsToTxn without READ on the group -> GROUP_AUTHORIZATION_FAILED;
* TxnOffsetCommit without READ on a topic -> TOPIC_AUTHORIZATION_FAILED;
* EndTxn after WRITE on the TransactionalId was revoked ->
  TRANSACTIONAL_ID_AUTHORIZATION_FAILED;
* DescribeTransactions of an id without DESCRIBE -> TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
  ListTransactions leaves such ids out, WriteTxnMarkers from a client (no CLUSTER_ACTION)
  -> CLUSTER_AUTHORIZATION_FAILED;
* a transactional Produce without WRITE on its TransactionalId (WRITE on the topic only)
  -> TRANSACTIONAL_ID_AUTHORIZATION_FAILED for every partition, nothing appended."""

from __future__ import annotations

import dataclasses
import datetime
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import (
    Consumer,
    ConsumerGroupTopicPartitions,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
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
from kio.schema.describe_transactions.v0.request import DescribeTransactionsRequest
from kio.schema.list_transactions.v0.request import ListTransactionsRequest
from kio.schema.types import ProducerId, TopicName, TransactionalId
from kio.schema.write_txn_markers.v1.request import (
    WritableTxnMarker,
    WritableTxnMarkerTopic,
    WriteTxnMarkersRequest,
)
from kio.static.primitive import i16, i32
from security_util import access, raw_connection
from tests.support.polling import wait_until

from odradek.cli.transactions_cmd import parse_describe_transactions
from odradek.cluster.local import LocalCluster
from odradek.errors import ErrorCode

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

_COORDINATOR_RETRIABLE = (
    ErrorCode.coordinator_load_in_progress,
    ErrorCode.coordinator_not_available,
    ErrorCode.not_coordinator,
)

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
        tmp_path_factory.mktemp("txn-acl"), 1, security="sasl_ssl", broker_config=SINGLE
    ) as c:
        admin = AdminClient(access(c, "SASL_SSL", "SCRAM-SHA-512").confluent())
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


def _grant(c: LocalCluster, *acls: tuple[Any, str, Any]) -> None:
    bindings = [
        AclBinding(
            rt, name, ResourcePatternType.LITERAL, "User:bob", "*", op, AclPermissionType.ALLOW
        )
        for rt, name, op in acls
    ]
    admin = _admin(c)  # referenced until the futures complete (a collected client fails them)
    for f in admin.create_acls(bindings).values():
        f.result(30)


def _revoke(c: LocalCluster, rt: Any, name: str, op: Any) -> None:
    flt = AclBindingFilter(
        rt, name, ResourcePatternType.LITERAL, "User:bob", "*", op, AclPermissionType.ALLOW
    )
    admin = _admin(c)
    for f in admin.delete_acls([flt]).values():
        f.result(30)


def _topics(c: LocalCluster, n: int) -> list[str]:
    names = [f"txn-acl-{uuid.uuid4().hex[:8]}" for _ in range(n)]
    admin = _admin(c)
    for f in admin.create_topics([NewTopic(t, 1, 1) for t in names], operation_timeout=30).values():
        f.result(60)
    return names


def _bob_producer(c: LocalCluster, txn_id: str) -> Producer:
    p = Producer(
        {
            **access(c, "SASL_SSL", "SCRAM-SHA-512", "bob", "bob-secret").confluent(),
            "transactional.id": txn_id,
            "transaction.timeout.ms": 30000,
        }
    )
    p.init_transactions(30)
    return p


def _group_metadata(c: LocalCluster, group: str) -> Any:
    cons = Consumer(
        {
            **access(c, "SASL_SSL", "SCRAM-SHA-512", "bob", "bob-secret").confluent(),
            "group.id": group,
        }
    )
    md = cons.consumer_group_metadata()
    cons.close()
    return md


def _started(p: Producer, topic: str) -> None:
    p.produce(topic, b"aborted")
    assert p.flush(30) == 0


TXN_ID_DENIED = 53  # TRANSACTIONAL_ID_AUTHORIZATION_FAILED


def _described(conn: Any, txn_id: str) -> int:
    # Parsed by hand (odradek transactions' parser): kio's decoder refuses the -1 start
    # time Kafka sends for a transaction that is not ongoing.
    conn.send(DescribeTransactionsRequest(transactional_ids=(TransactionalId(txn_id),)))
    _key, _version, body = conn.receive_frame()
    return int(parse_describe_transactions(bytes(body))[0].error_code)


def _listed(conn: Any) -> set[str]:
    r = conn.request(ListTransactionsRequest(state_filters=(), producer_id_filters=()))
    assert int(r.error_code) == 0
    return {str(x.transactional_id) for x in r.transaction_states}


def _code(e: KafkaException) -> int:
    return int(e.args[0].code())


def test_transaction_apis_check_acls(secure: LocalCluster) -> None:
    c = secure
    t, u, v = _topics(c, 3)
    txn, group, denied_group = f"tx-{uuid.uuid4().hex[:6]}", "g-ok", "g-denied"
    _grant(
        c,
        (ResourceType.TRANSACTIONAL_ID, txn, AclOperation.WRITE),
        (ResourceType.TOPIC, t, AclOperation.WRITE),
        (ResourceType.TOPIC, t, AclOperation.READ),
        (ResourceType.GROUP, group, AclOperation.READ),
        # DESCRIBE only on u and v: metadata shows them, writing/reading is refused
        (ResourceType.TOPIC, u, AclOperation.DESCRIBE),
        (ResourceType.TOPIC, v, AclOperation.DESCRIBE),
    )

    # The whole transaction, with the right ACLs.
    p = _bob_producer(c, txn)
    p.begin_transaction()
    for i in range(10):
        p.produce(t, f"r{i}".encode())
    p.send_offsets_to_transaction([TopicPartition(t, 0, 7)], _group_metadata(c, group), 30)
    p.commit_transaction(30)
    admin = _admin(c)
    committed = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[
        group
    ].result(30)
    assert [(x.topic, x.offset) for x in committed.topic_partitions] == [(t, 7)]
    reader = Consumer(
        {
            **access(c, "SASL_SSL", "SCRAM-SHA-512").confluent(),
            "group.id": "reader",
            "isolation.level": "read_committed",
        }
    )
    reader.assign([TopicPartition(t, 0, 0)])
    got: list[bytes] = []
    deadline = time.monotonic() + 30
    while len(got) < 10 and time.monotonic() < deadline:
        m = reader.poll(0.5)
        if m is not None and m.error() is None:
            got.append(m.value())
    reader.close()
    assert got == [f"r{i}".encode() for i in range(10)]

    # AddPartitionsToTxn: no WRITE on u. Each denial below comes inside a transaction
    # that already holds a partition of t, so the abort that follows is a real one.
    p.begin_transaction()
    _started(p, t)
    errs: list[Any] = []
    p.produce(u, b"x", on_delivery=lambda err, _m: errs.append(err))
    p.flush(30)
    assert errs and errs[0] is not None  # the record is purged with the transaction
    # librdkafka makes the broker's answer the transaction's (abortable) error.
    with pytest.raises(KafkaException) as e:
        p.commit_transaction(30)
    assert _code(e.value) == KafkaError.TOPIC_AUTHORIZATION_FAILED, e.value
    # refused by AddPartitionsToTxn itself, not only later by the Produce
    assert "add partition" in e.value.args[0].str().lower(), e.value
    assert e.value.args[0].txn_requires_abort()
    p.abort_transaction(30)

    # AddOffsetsToTxn: no READ on the group.
    p.begin_transaction()
    _started(p, t)
    with pytest.raises(KafkaException) as e:
        p.send_offsets_to_transaction(
            [TopicPartition(t, 0, 1)], _group_metadata(c, denied_group), 30
        )
    assert _code(e.value) == KafkaError.GROUP_AUTHORIZATION_FAILED, e.value
    p.abort_transaction(30)

    # TxnOffsetCommit: READ on the group, none on topic v.
    p.begin_transaction()
    _started(p, t)
    with pytest.raises(KafkaException) as e:
        p.send_offsets_to_transaction([TopicPartition(v, 0, 1)], _group_metadata(c, group), 30)
    assert _code(e.value) == KafkaError.TOPIC_AUTHORIZATION_FAILED, e.value
    p.abort_transaction(30)
    p.flush(10)

    # Describe/ListTransactions (DESCRIBE on the TransactionalId; WRITE implies it) and
    # WriteTxnMarkers (CLUSTER_ACTION: brokers only), over bob's own SASL_SSL connection.
    bob_conn = raw_connection(access(c, "SASL_SSL", "SCRAM-SHA-512", "bob", "bob-secret"))
    admin_conn = raw_connection(access(c, "SASL_SSL", "SCRAM-SHA-512"))
    other = f"tx-other-{uuid.uuid4().hex[:6]}"
    try:
        other_p = Producer(
            {**access(c, "SASL_SSL", "SCRAM-SHA-512").confluent(), "transactional.id": other}
        )
        other_p.init_transactions(30)  # a transaction bob may not see
        assert _described(bob_conn, txn) == 0
        assert _described(bob_conn, other) == TXN_ID_DENIED
        assert _described(admin_conn, other) == 0
        assert txn in _listed(bob_conn) and other not in _listed(bob_conn)
        assert {txn, other} <= _listed(admin_conn)
        # The command line tool, as the admin user through --command-config.
        cli = subprocess.run(
            [
                sys.executable,
                "-m",
                "odradek",
                "transactions",
                "--list",
                "--bootstrap-server",
                c.bootstrap_servers,
                "--command-config",
                str(c.client_properties),
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert cli.returncode == 0, cli.stderr
        assert txn in cli.stdout and other in cli.stdout
        markers = bob_conn.request(
            WriteTxnMarkersRequest(
                markers=(
                    WritableTxnMarker(
                        producer_id=ProducerId(1),
                        producer_epoch=i16(0),
                        transaction_result=True,
                        topics=(
                            WritableTxnMarkerTopic(name=TopicName(t), partition_indexes=(i32(0),)),
                        ),
                        coordinator_epoch=i32(0),
                    ),
                )
            )
        )
        codes = [
            int(pp.error_code) for m in markers.markers for tt in m.topics for pp in tt.partitions
        ]
        assert codes == [KafkaError.CLUSTER_AUTHORIZATION_FAILED]
    finally:
        bob_conn.close()
        admin_conn.close()

    # EndTxn: WRITE on the TransactionalId revoked in the middle of a transaction.
    p.begin_transaction()
    p.produce(t, b"late")
    p.flush(30)
    _revoke(c, ResourceType.TRANSACTIONAL_ID, txn, AclOperation.WRITE)
    # A barrier: a later change (bob loses DESCRIBE on u) is applied after the revocation
    # (the broker applies ACL change notifications in sequence order), and bob's metadata
    # shows when it was.
    _revoke(c, ResourceType.TOPIC, u, AclOperation.DESCRIBE)
    bob_admin = AdminClient(access(c, "SASL_SSL", "SCRAM-SHA-512", "bob", "bob-secret").confluent())
    deadline = time.monotonic() + 10
    while u in bob_admin.list_topics(timeout=10).topics:
        assert time.monotonic() < deadline, "the revocation did not reach the broker"
        time.sleep(0.05)
    with pytest.raises(KafkaException) as e:
        p.commit_transaction(30)
    assert _code(e.value) == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, e.value
    # The ExceptionInfo's traceback holds this frame (a cycle): without this the clients
    # above live until a full garbage collection, reconnecting to addresses later tests
    # reuse.
    del e


def test_transactional_produce_needs_write_on_its_transactional_id(secure: LocalCluster) -> None:
    """Kafka's KafkaApis.handleProduceRequest: a produce of transactional records needs
    WRITE on the request's TransactionalId besides WRITE on the topic. Without it every
    partition is TRANSACTIONAL_ID_AUTHORIZATION_FAILED and nothing is appended, even
    inside a transaction the coordinator knows (opened here by the superuser, over raw
    requests: a client without WRITE on the id could not even initialise it)."""
    from rawclient import list_offsets_request, produce_request, request_cls

    from odradek.storage.records import encode_batch

    c = secure
    (t,) = _topics(c, 1)
    txn = f"tx-raw-{uuid.uuid4().hex[:6]}"
    admin_access = access(c, "SASL_SSL", "SCRAM-SHA-512")
    bob_access = access(c, "SASL_SSL", "SCRAM-SHA-512", "bob", "bob-secret")
    _grant(c, (ResourceType.TOPIC, t, AclOperation.WRITE))

    def ask(a: Any, req: Any) -> Any:
        with raw_connection(a) as conn:  # one broker: leader and both coordinators
            return conn.request(req)

    def init_producer_id() -> Any:
        # As a client does: FindCoordinator first (it creates __transaction_state if no
        # earlier test did, as in Kafka), then InitProducerId, retried while the answer is
        # COORDINATOR_NOT_AVAILABLE / LOAD_IN_PROGRESS (the partition is still loading).
        find = ask(admin_access, request_cls(10, 3)(key=txn, key_type=1))
        if int(find.error_code) in _COORDINATOR_RETRIABLE:
            return None
        assert int(find.error_code) == 0, find
        r = ask(
            admin_access,
            request_cls(22, 3)(
                transactional_id=txn,
                transaction_timeout=datetime.timedelta(seconds=60),
                producer_id=-1,
                producer_epoch=-1,
            ),
        )
        return None if int(r.error_code) in _COORDINATOR_RETRIABLE else r

    init = wait_until(init_producer_id, "InitProducerId past the coordinator's load", 60)
    assert int(init.error_code) == 0
    pid, epoch = int(init.producer_id), int(init.producer_epoch)
    m = sys.modules[request_cls(24, 3).__module__]
    added = ask(
        admin_access,
        m.AddPartitionsToTxnRequest(
            v3_and_below_transactional_id=txn,
            v3_and_below_producer_id=pid,
            v3_and_below_producer_epoch=epoch,
            v3_and_below_topics=(m.AddPartitionsToTxnTopic(name=t, partitions=(0,)),),
        ),
    )
    assert (
        int(added.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code)
        == 0
    )

    def produce(seq: int) -> int:
        batch = encode_batch(
            [(b"k", b"v%d" % seq)],
            producer_id=pid,
            producer_epoch=epoch,
            base_sequence=seq,
            transactional=True,
        )
        req = dataclasses.replace(produce_request(t, 0, batch), transactional_id=txn)
        return int(ask(bob_access, req).responses[0].partition_responses[0].error_code)

    assert produce(0) == TXN_ID_DENIED
    _grant(c, (ResourceType.TRANSACTIONAL_ID, txn, AclOperation.WRITE))
    deadline = time.monotonic() + 10
    while (code := produce(0)) != 0:
        assert code == TXN_ID_DENIED and time.monotonic() < deadline, code
        time.sleep(0.05)
    # Only the authorized batch was appended: the refused ones left nothing behind.
    end = ask(admin_access, list_offsets_request(t, 0, -1)).topics[0].partitions[0]
    assert int(end.offset) == 1
