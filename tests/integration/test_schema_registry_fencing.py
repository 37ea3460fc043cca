"""No schema id lost or reused when a registry primary dies or is cut off (issue 27's
proof: "the registry survives the SIGKILL of its primary and of a broker").

* A fenced primary: two registries on one ``_schemas`` topic, each believing it is the
  primary (the older one has not heard that it lost its ZooKeeper session). The newer
  one's ``become_primary`` fences the older one's producer: the older one's registration
  is refused (50004) and nothing of it reaches any reader, so the id the newer one hands
  out names one schema only.
* SIGKILL: two registry processes elected through ZooKeeper on a 3-broker cluster; a
  client registers schemas without pause, retrying on either instance; the primary is
  SIGKILLed, then the broker leading ``_schemas``. Every id a client was given is then
  served by the survivor (and by a registry started afresh from the topic) with the
  schema it was given for, and no id names two schemas.
"""

from __future__ import annotations

import json
import signal
import threading
import time
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient
from schema_registry_util import http, start_registry
from tests.support.polling import wait_until

from odradek.cluster.local import LocalCluster
from odradek.schema_registry.errors import RegistryError
from odradek.schema_registry.kafka_store import SchemasTopic
from odradek.schema_registry.registry import Registry
from odradek.schema_registry.store import RegistryView

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]


def _schema(name: str) -> str:
    return json.dumps({"type": "record", "name": name, "fields": [{"name": "f", "type": "int"}]})


def _instance(bootstrap: str, topic: str) -> tuple[Registry, SchemasTopic]:
    log = SchemasTopic(bootstrap, RegistryView(), topic=topic, timeout_s=20.0)
    log.start()
    return Registry(log.view, log), log


def test_a_fenced_primary_cannot_write(cluster: LocalCluster) -> None:
    topic = "_schemas_fenced"
    bs = cluster.bootstrap_servers
    old, old_log = _instance(bs, topic)
    new, new_log = _instance(bs, topic)
    fresh_log: SchemasTopic | None = None
    try:
        old_log.become_primary()
        first = old.register("a", {"schema": _schema("A")})["id"]
        # The newer instance wins an election the older one has not heard of yet.
        new_log.become_primary()
        with pytest.raises(RegistryError) as refused:
            old.register("zombie", {"schema": _schema("Zombie")})
        assert (refused.value.status, refused.value.code) == (500, 50004), refused.value
        got = new.register("b", {"schema": _schema("B")})["id"]
        assert got == first + 1
        # A reader started afresh: the zombie's record never landed (or was aborted).
        fresh, fresh_log = _instance(bs, topic)
        assert fresh.list_subjects() == ["a", "b"]
        assert json.loads(fresh.schema_by_id(got)["schema"])["name"] == "B"
        # Elected again, the older instance writes again, after everything before.
        old_log.become_primary()
        assert old.register("c", {"schema": _schema("C")})["id"] == got + 1
    finally:
        for log in (old_log, new_log, fresh_log):
            if log is not None:
                log.stop()


def _leader(bootstrap: str, topic: str) -> int:
    md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=15)
    return int(md.topics[topic].partitions[0].leader)


def test_sigkill_of_the_primary_and_a_broker_loses_and_reuses_no_id(
    make_cluster: Any,
) -> None:
    c: LocalCluster = make_cluster(3)
    first = start_registry(c, 8081, zookeeper=True)
    wait_until(lambda: "is the primary" in first.log.read_text(), "the first primary")
    second = start_registry(c, 8082, zookeeper=True)
    given: dict[int, int] = {}  # schema number -> id the client was given
    errors: list[str] = []
    stop = threading.Event()

    def register(i: int) -> int | None:
        for reg in (second, first):  # the survivor first; the primary while alive
            try:
                st, body = http(reg.url, "POST", f"/subjects/s{i}/versions",
                                {"schema": _schema(f"R{i}")}, timeout=15)  # fmt: skip
            except OSError as e:
                errors.append(f"s{i} {reg.url}: {e!r}")
                continue
            if st == 200:
                return int(body["id"])
            errors.append(f"s{i} {reg.url}: {st} {body}")
        return None

    def client() -> None:
        i = 0
        while not stop.is_set():
            got = register(i)
            if got is None:
                time.sleep(0.05)  # every instance refused (an election, a failover): retry
                continue
            given[i] = got
            i += 1

    worker = threading.Thread(target=client, daemon=True)
    worker.start()
    try:
        wait_until(lambda: len(given) >= 10, "10 registrations", timeout=60)
        first.kill()  # SIGKILL of the primary, mid-stream
        wait_until(lambda: len(given) >= 20, "registrations after the primary's SIGKILL",
                   timeout=120)  # fmt: skip
        c.stop_broker(_leader(c.bootstrap_servers, "_schemas"), signal.SIGKILL)
        wait_until(lambda: len(given) >= 30, "registrations after a broker's SIGKILL",
                   timeout=120)  # fmt: skip
    finally:
        stop.set()
        worker.join(60)
    assert not worker.is_alive()
    ids = dict(given)
    assert len(set(ids.values())) == len(ids), f"an id was given for two schemas: {ids}"
    third = start_registry(c, 8083)  # from the topic alone
    try:
        for reg in (second, third):
            for i, schema_id in ids.items():
                st, body = http(reg.url, "GET", f"/schemas/ids/{schema_id}")
                assert st == 200, (reg.url, i, schema_id, body)
                assert json.loads(body["schema"])["name"] == f"R{i}", (reg.url, i, body)
                st, versions = http(reg.url, "GET", f"/subjects/s{i}/versions")
                assert versions == [1], (reg.url, i, versions)
    finally:
        third.stop()
        second.stop()
    assert errors, "the failover was expected to refuse some attempts"
