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
from collections.abc import Callable
from functools import partial
from typing import Any

from odradek.client.cluster import ClusterClient
from odradek.client.connection import ConnectionLost, KafkaConnection
from odradek.console.snapshot import RawGroup
from odradek.errors import ErrorCode, KafkaError, error_name
from odradek.protocol.client_codec import request_entity
from odradek.protocol.consumer_protocol import assignment_partitions
from odradek.security.client_security import PLAINTEXT, ClientSecurity

logger = logging.getLogger(__name__)

__all__ = ["GroupReader"]

# Request versions: within what Odradek serves and kio decodes, and what Kafka 3.x's
# admin client sends to a ZooKeeper-mode broker.
_LIST_GROUPS_V, _FIND_COORDINATOR_V, _DESCRIBE_GROUPS_V, _OFFSET_FETCH_V = 4, 3, 5, 7

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

    def read(self) -> tuple[list[RawGroup], list[str]]:
        """(groups, errors): what could be read this round, and why the rest could not."""
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

        ids: set[str] = set()
        for b in brokers:
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
