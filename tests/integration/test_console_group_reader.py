"""The console's consumer-group reader against a real cluster: members with their
assignments, committed offsets, and a coordinator that dies mid-life (the console used
to abort inside librdkafka's group admin calls when that happened)."""

from __future__ import annotations

import signal
import time
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition
from replication_util import create_topic, produce, wait_for

from odradek.console.groups import GroupReader

pytestmark = pytest.mark.integration


def test_members_offsets_and_a_dead_coordinator(make_cluster: Any, topic_name: str) -> None:
    c = make_cluster(3)
    create_topic(c.bootstrap_servers, topic_name, 3, 3)
    produce(c.bootstrap_servers, topic_name, [f"v{i}".encode() for i in range(30)])
    g = Consumer(
        {
            "bootstrap.servers": c.bootstrap_servers,
            "group.id": "readers",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    reader = GroupReader(c.bootstrap_servers, 5.0)
    try:
        g.subscribe([topic_name])

        def joined() -> bool:
            g.poll(0.2)
            return len(g.assignment()) == 3

        wait_for(joined, 60, "the consumer's assignment")
        g.commit(offsets=[TopicPartition(topic_name, p, 4) for p in range(3)], asynchronous=False)

        def described() -> Any:
            g.poll(0.1)  # stay in the group
            groups, _ = reader.read()
            return next(
                (
                    x
                    for x in groups
                    if x.group_id == "readers" and x.state == "Stable" and x.members
                ),
                None,
            )

        grp = wait_for(described, 30, "the group described")
        assert grp.protocol == "range" or grp.protocol  # the assignor librdkafka chose
        [(member_id, client_id, host, tps)] = grp.members
        assert member_id and client_id == "rdkafka" and host
        assert sorted(tps) == [(topic_name, p) for p in range(3)]
        assert grp.committed == {(topic_name, p): 4 for p in range(3)}

        # The coordinator dies: a round answers with errors, bounded, and the process
        # lives on; once a new coordinator took over, the group is read again.
        c.stop_broker(grp.coordinator, signal.SIGKILL)
        t0 = time.monotonic()
        groups, errors = reader.read()
        assert time.monotonic() - t0 < 30
        assert errors or all(x.coordinator != grp.coordinator for x in groups)
        wait_for(
            lambda: any(
                x.group_id == "readers" and x.coordinator != grp.coordinator
                for x in reader.read()[0]
            ),
            60,
            "the group on a new coordinator",
        )
    finally:
        reader.close()
        g.close()
