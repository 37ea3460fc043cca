"""ACL changes are visible on the broker that made them as soon as it answers (issue 28
item 2): Kafka's authorizer updates its own cache as it writes ZooKeeper, so a
DescribeAcls or DeleteAcls sent right after a CreateAcls to the same broker sees the new
bindings (KafkaJS's suite checks exactly this: describe after create, delete after
create). One broker with the ACL authorizer (``allow.everyone.if.no.acl.found``: the
anonymous client may alter ACLs), confluent-kafka's AdminClient bound to it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)

from odradek.cluster.local import LocalCluster

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

ROUNDS = 25


@pytest.fixture(scope="module")
def acl_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    c = LocalCluster.start(
        tmp_path_factory.mktemp("acl-vis"),
        1,
        broker_config={
            "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
            "allow.everyone.if.no.acl.found": "true",
        },
    )
    try:
        yield c
    finally:
        c.down()


def _filter(name: str | None) -> AclBindingFilter:
    return AclBindingFilter(
        ResourceType.TOPIC,
        name,
        ResourcePatternType.LITERAL,
        None,
        None,
        AclOperation.ANY,
        AclPermissionType.ANY,
    )


def test_describe_and_delete_right_after_create(acl_cluster: LocalCluster) -> None:
    admin = AdminClient({"bootstrap.servers": acl_cluster.bootstrap_servers})
    misses: list[str] = []
    for i in range(ROUNDS):
        name = f"vis-{i}"
        binding = AclBinding(
            ResourceType.TOPIC,
            name,
            ResourcePatternType.LITERAL,
            "User:alice",
            "*",
            AclOperation.READ,
            AclPermissionType.ALLOW,
        )
        for f in admin.create_acls([binding]).values():
            f.result(30)
        if admin.describe_acls(_filter(name)).result(30) != [binding]:
            misses.append(f"describe after create {i}")
        deleted = admin.delete_acls([_filter(name)])[_filter(name)].result(30)
        if deleted != [binding]:
            misses.append(f"delete after create {i}: {deleted}")
        if admin.describe_acls(_filter(name)).result(30) != []:
            misses.append(f"describe after delete {i}")
    assert misses == [], f"{len(misses)} misses in {ROUNDS} rounds: {misses[:6]}"
