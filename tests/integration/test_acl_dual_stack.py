"""ACL hosts on a dual-stack listener (issue 28 item 3): a broker listening on an IPv6
socket sees an IPv4 client as ``::ffff:a.b.c.d``; a DENY for ``a.b.c.d`` must still
refuse it (Kafka, through Java's InetAddress, sees ``a.b.c.d``). The listener is bound to
the IPv4-mapped form of the broker's loopback address (an AF_INET6 socket that takes
only IPv4 connections to that address: no traffic leaves 127.0.0.0/8)."""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)
from tests.support.polling import wait_until
from tests.support.topics import create_topic

from odradek.client.connection import KafkaConnection
from odradek.client.wire import FetchPartitionRequest, decode_fetch_response, encode_fetch_request
from odradek.cluster.local import LocalCluster

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

TOPIC_AUTHORIZATION_FAILED = 29
NOT_LEADER_OR_FOLLOWER = 6
CLIENT_IP = "127.0.0.1"


def _fetch_error(host: str, port: int, topic: str) -> int:
    with KafkaConnection(host, port, source_address=(CLIENT_IP, 0), timeout_s=15) as conn:
        body = encode_fetch_request(
            [FetchPartitionRequest(topic, 0, 0, 1 << 16)],
            max_wait_ms=0,
            min_bytes=0,
            max_bytes=1 << 16,
            isolation_level=0,
        )
        conn.send_body(1, 11, body)
        _, _, frame = conn.receive_frame()
        return decode_fetch_response(frame)[1][0].error_code


def test_a_deny_for_an_ipv4_client_applies_on_a_dual_stack_listener(
    make_cluster: Callable[..., LocalCluster],
) -> None:
    c = make_cluster(
        1,
        broker_config={
            "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
            "allow.everyone.if.no.acl.found": "true",
        },
    )
    b = c.brokers[0]
    topic = f"ds-{uuid.uuid4().hex[:8]}"
    create_topic(c.bootstrap_servers, topic, 1, 1, timeout=30)
    c.stop_broker(b.id)
    config = Path(b.config)
    text, n = re.subn(
        r"(?m)^listeners=PLAINTEXT://[^:]+:",
        f"listeners=PLAINTEXT://[::ffff:{b.host}]:",
        config.read_text(),
    )
    assert n == 1
    config.write_text(text)
    c.start_broker(b.id)
    # A restarted broker leads again once the controller has decided on its
    # partitions (a broker that registered after the state naming it was written is
    # treated as bounced: one new leader epoch); until then NOT_LEADER_OR_FOLLOWER, as
    # a Kafka broker answers before its LeaderAndIsr, and clients retry.
    wait_until(
        lambda: _fetch_error(b.host, b.port, topic) != NOT_LEADER_OR_FOLLOWER,
        "the restarted broker to lead its partition",
        30,
    )
    assert _fetch_error(b.host, b.port, topic) == 0  # no ACL on the topic yet

    admin = AdminClient({"bootstrap.servers": c.bootstrap_servers})
    acls = [
        AclBinding(
            ResourceType.TOPIC,
            topic,
            ResourcePatternType.LITERAL,
            "User:*",
            "*",
            AclOperation.ALL,
            AclPermissionType.ALLOW,
        ),
        AclBinding(
            ResourceType.TOPIC,
            topic,
            ResourcePatternType.LITERAL,
            "User:ANONYMOUS",
            CLIENT_IP,
            AclOperation.READ,
            AclPermissionType.DENY,
        ),
    ]
    for f in admin.create_acls(acls).values():
        f.result(30)
    assert _fetch_error(b.host, b.port, topic) == TOPIC_AUTHORIZATION_FAILED
