"""Consumer groups for the console, read with Odradek's own client.

ListGroups on every broker, FindCoordinator per group, DescribeGroups per coordinator
(every group it coordinates in one request) and OffsetFetch per group — what Kafka's
admin client sends for ``kafka-consumer-groups.sh --describe``.

Why not librdkafka's admin API, as the rest of the collector uses: its coordinator
requests (DescribeConsumerGroups, ListConsumerGroupOffsets) can abort the whole process
with ``rd_kafka_enq_once_del_source_return: Assertion `eonce->refcnt > 0' failed``
when a coordinator dies or comes back while a request is out (librdkafka issue 4605,
open in 2.16). The console died that way when a broker was killed and restarted; a
monitoring tool must outlive the brokers it watches.

Every answer is bounded by the client (frame sizes, socket timeout); a broker that does
not answer costs one timeout per round and is skipped for the rest of it.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Callable, Collection
from functools import partial
from typing import Any

from odradek.client.cluster import ClusterClient
from odradek.client.connection import ConnectionLost, KafkaConnection
from odradek.console.snapshot import RawGroup
from odradek.errors import ErrorCode, KafkaError, error_name
from odradek.protocol.client_codec import nested_request, request_entity
from odradek.protocol.consumer_protocol import assignment_partitions
from odradek.security.client_security import PLAINTEXT, ClientSecurity

logger = logging.getLogger(__name__)

__all__ = ["GroupReader"]

# Request versions: within what Odradek serves and kio decodes, and what Kafka 3.x's
# admin client sends to a ZooKeeper-mode broker.
_LIST_GROUPS_V, _FIND_COORDINATOR_V, _DESCRIBE_GROUPS_V, _OFFSET_FETCH_V = 4, 3, 5, 7
_DESCRIBE_CONFIGS_V, _TOPIC_RESOURCE = 4, 2

_STATES = {"PreparingRebalance", "CompletingRebalance", "Stable", "Dead", "Empty"}


class GroupReader:
    """Reads every consumer group of a cluster, once per collection round. One owner
    thread (the collector's)."""

    def __init__(
        self, bootstrap: str, timeout_s: float, security: ClientSecurity = PLAINTEXT
    ) -> None:
        self.client = ClusterClient(
            bootstrap,
            client_id="odradek-console",
            timeout_s=timeout_s,
            max_response_bytes=16 << 20,
            security=security,
        )

    def close(self) -> None:
        self.client.close()

    def read(self, only: Collection[str] | None = None) -> tuple[list[RawGroup], list[str]]:
        """(groups, errors): what could be read this round, and why the rest could not.
        ``only``: just these groups (the pages open on them), without ListGroups on every
        broker; a group that does not exist is left out, as ListGroups leaves it out."""
        errors: list[str] = []
        client = self.client
        try:
            brokers = sorted(client.refresh([]).brokers)
        except (ConnectionLost, KafkaError) as e:
            return [], [f"list groups: {e}"]
        down: set[int] = set()

        def on(broker: int, what: str, call: Callable[[KafkaConnection], Any]) -> Any:
            if broker in down:
                return None
            try:
                return call(client.connection(broker))
            except (ConnectionLost, KafkaError, OSError) as e:
                down.add(broker)
                client.drop(broker)
                errors.append(f"{what} on broker {broker}: {e}")
                return None

        ids: set[str] = set(only or ())
        for b in brokers if only is None else ():
            resp = on(
                b,
                "list groups",
                lambda c: c.request(request_entity(16, _LIST_GROUPS_V, states_filter=())),
            )
            if resp is None:
                continue
            if resp.error_code != ErrorCode.none:
                errors.append(f"list groups on broker {b}: {error_name(resp.error_code)}")
            ids.update(g.group_id for g in resp.groups if g.protocol_type in ("consumer", ""))
        if not ids:
            return [], errors
        coordinators = self._coordinators(sorted(ids), errors)
        by_coordinator: dict[int, list[str]] = defaultdict(list)
        for gid, coord in coordinators.items():
            by_coordinator[coord].append(gid)
        groups: list[RawGroup] = []
        for coord, gids in sorted(by_coordinator.items()):
            describe = request_entity(
                15, _DESCRIBE_GROUPS_V, groups=tuple(gids), include_authorized_operations=False
            )
            resp = on(coord, "describe groups", partial(_request, entity=describe))
            if resp is None:
                continue
            for d in resp.groups:
                if d.error_code != ErrorCode.none:
                    errors.append(f"group {d.group_id}: {error_name(d.error_code)}")
                    continue
                if only is not None and (
                    d.group_state == "Dead" or d.protocol_type not in ("consumer", "")
                ):
                    continue  # no such group (Kafka describes it as Dead), or not a consumer's
                group_id: str = d.group_id
                committed = on(
                    coord,
                    f"offsets of group {group_id}",
                    partial(self._committed, group=group_id),
                )
                if committed is None:
                    continue
                members = [
                    (
                        m.member_id,
                        m.client_id,
                        m.client_host,
                        assignment_partitions(m.member_assignment),
                    )
                    for m in d.members
                ]
                state = d.group_state if d.group_state in _STATES else d.group_state.title()
                groups.append(
                    RawGroup(d.group_id, state, d.protocol_data, coord, members, committed)
                )
        return groups, errors

    def _coordinators(self, ids: list[str], errors: list[str]) -> dict[str, int]:
        out: dict[str, int] = {}
        for gid in ids:
            try:
                resp = self.client.any_connection().request(
                    request_entity(10, _FIND_COORDINATOR_V, key=gid, key_type=0)
                )
            except (ConnectionLost, KafkaError) as e:
                errors.append(f"group {gid}: find coordinator: {e}")
                continue
            if resp.error_code != ErrorCode.none:
                errors.append(f"group {gid}: {error_name(resp.error_code)}")
                continue
            out[gid] = int(resp.node_id)
        return out

    def min_insync_replicas(self, topics: Collection[str]) -> tuple[dict[str, int], list[str]]:
        """Each topic's min.insync.replicas: one DescribeConfigs naming only that key, so
        the broker builds and sends one entry per topic, not every topic config."""
        if not topics:
            return {}, []
        resources = tuple(
            nested_request(
                32,
                _DESCRIBE_CONFIGS_V,
                "DescribeConfigsResource",
                resource_type=_TOPIC_RESOURCE,
                resource_name=t,
                configuration_keys=("min.insync.replicas",),
            )
            for t in sorted(topics)
        )
        try:
            resp = self.client.any_connection().request(
                request_entity(
                    32,
                    _DESCRIBE_CONFIGS_V,
                    resources=resources,
                    include_synonyms=False,
                    include_documentation=False,
                )
            )
        except (ConnectionLost, KafkaError, OSError) as e:
            return {}, [f"describe configs: {e}"]
        out: dict[str, int] = {}
        errors: list[str] = []
        for r in resp.results:
            if r.error_code != ErrorCode.none:
                errors.append(f"configs of {r.resource_name}: {error_name(r.error_code)}")
                continue
            for c in r.configs:
                if c.name == "min.insync.replicas" and c.value is not None:
                    out[r.resource_name] = int(c.value)
        return out, errors

    @staticmethod
    def _committed(conn: KafkaConnection, group: str) -> dict[tuple[str, int], int]:
        resp = conn.request(
            request_entity(9, _OFFSET_FETCH_V, group_id=group, topics=None, require_stable=False)
        )
        if resp.error_code != ErrorCode.none:
            raise KafkaError(ErrorCode(resp.error_code), f"OffsetFetch for {group}")
        return {
            (t.name, p.partition_index): int(p.committed_offset)
            for t in resp.topics
            for p in t.partitions
            if p.error_code == ErrorCode.none and p.committed_offset >= 0
        }


def _request(conn: KafkaConnection, entity: Any) -> Any:
    return conn.request(entity)
