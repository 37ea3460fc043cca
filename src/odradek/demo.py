"""The main job: a local cluster, a real client workload, a verified result, shutdown.

``odradek demo`` starts ZooKeeper and brokers as real processes, creates a topic,
produces records with confluent-kafka (acks=all), consumes them back, checks every
record byte for byte and in order per partition, prints what happened, and shuts the
cluster down (also on Ctrl-C or failure).
"""

from __future__ import annotations

import hashlib
import tempfile
import time
from pathlib import Path

from odradek.cluster.local import LocalCluster
from odradek.cluster.security_setup import client_config


def _value(i: int, size: int) -> bytes:
    seed = hashlib.blake2b(i.to_bytes(8, "big"), digest_size=16).digest()
    return (seed * (size // 16 + 1))[:size]


def run_demo(
    n_brokers: int = 3,
    records: int = 100_000,
    record_size: int = 100,
    partitions: int = 4,
    directory: Path | None = None,
    security: str = "plaintext",
) -> int:
    from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: PLC0415
    from confluent_kafka.admin import AdminClient, NewTopic  # noqa: PLC0415

    workdir = Path(directory) if directory else Path(tempfile.mkdtemp(prefix="odradek-demo-"))
    print(f"== Odradek demo: {n_brokers} broker(s), {records:,} records of {record_size} B")
    print(f"   working directory: {workdir}")
    t0 = time.monotonic()
    with LocalCluster.start(workdir, n_brokers, security=security) as cluster:
        bootstrap = cluster.bootstrap_servers
        # sasl_ssl: every client is the admin user of DIR/client.properties, over TLS
        sec = client_config(cluster.client_properties)
        print(
            f"-- cluster up in {time.monotonic() - t0:.1f} s: ZooKeeper {cluster.zk_connect}, "
            f"bootstrap.servers={bootstrap}"
        )
        if sec:
            print(
                f"   security {sec.get('security.protocol')} "
                f"{sec.get('sasl.mechanism', '')}: {cluster.client_properties}"
            )
        for b in cluster.brokers:
            print(f"   broker {b.id}: {b.host}:{b.port} pid {b.pid}")
        admin = AdminClient({"bootstrap.servers": bootstrap, **sec})
        rf = min(3, n_brokers)
        topic = "demo-events"
        admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=rf)])[
            topic
        ].result(30)
        md = admin.list_topics(topic, timeout=10).topics[topic]
        print(f"-- created topic {topic}: {partitions} partitions, replication factor {rf}")
        for p in sorted(md.partitions.values(), key=lambda x: x.id):
            print(
                f"   Topic: {topic}\tPartition: {p.id}\tLeader: {p.leader}\t"
                f"Replicas: {','.join(map(str, p.replicas))}\tIsr: {','.join(map(str, p.isrs))}"
            )

        acked: dict[int, list[tuple[int, int]]] = {}
        errors: list[str] = []

        def on_delivery(err: object, msg: object) -> None:
            if err is not None:
                errors.append(str(err))
                return
            acked.setdefault(msg.partition(), []).append((msg.offset(), int(msg.key())))

        producer = Producer(
            {
                **sec,
                "bootstrap.servers": bootstrap,
                "acks": "all",
                "linger.ms": 5,
                "compression.type": "lz4",
                "enable.idempotence": False,
            }
        )
        t1 = time.monotonic()
        for i in range(records):
            while True:
                try:
                    producer.produce(
                        topic,
                        key=str(i).encode(),
                        value=_value(i, record_size),
                        on_delivery=on_delivery,
                    )
                    break
                except BufferError:
                    producer.poll(0.05)
            producer.poll(0)
        remaining = producer.flush(60)
        dt = time.monotonic() - t1
        n_acked = sum(len(v) for v in acked.values())
        print(
            f"-- produced {n_acked:,} acknowledged records (acks=all, lz4) in {dt:.2f} s: "
            f"{n_acked / dt:,.0f} records/s, {n_acked * record_size / dt / 1e6:.1f} MB/s; "
            f"errors {len(errors)}, unsent {remaining}"
        )

        consumer = Consumer(
            {
                **sec,
                "bootstrap.servers": bootstrap,
                "group.id": "odradek-demo",
                "enable.auto.commit": False,
                "enable.partition.eof": False,
            }
        )
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        seen: dict[int, list[tuple[int, int]]] = {}
        bad = 0
        got = 0
        t2 = time.monotonic()
        deadline = t2 + 60
        while got < n_acked and time.monotonic() < deadline:
            for m in consumer.consume(10_000, 0.5):
                if m.error() is not None:
                    errors.append(str(m.error()))
                    continue
                i = int(m.key())
                if m.value() != _value(i, record_size):
                    bad += 1
                seen.setdefault(m.partition(), []).append((m.offset(), i))
                got += 1
        consumer.close()
        del producer, consumer, admin  # close client connections before the brokers stop
        dt2 = time.monotonic() - t2
        print(f"-- consumed {got:,} records in {dt2:.2f} s: {got / max(dt2, 1e-9):,.0f} records/s")
        in_order = all(seen.get(p, []) == sorted(v) for p, v in acked.items())
        complete = all(sorted(seen.get(p, [])) == sorted(v) for p, v in acked.items())
        ok = complete and in_order and bad == 0 and not errors and n_acked == records
        print(
            f"-- verification: every acknowledged record read back exactly once: {complete}; "
            f"in offset order per partition: {in_order}; corrupt values: {bad}"
        )
        print("-- shutting the cluster down")
    print(f"== {'OK' if ok else 'FAILED'} in {time.monotonic() - t0:.1f} s")
    return 0 if ok else 1
