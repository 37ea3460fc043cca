"""A consume-transform-produce client for the exactly-once tests (run as a subprocess so
the test can SIGKILL it): reads ``input`` read_committed from the group's committed
offsets, writes ``<value>-out`` to ``output`` and commits the input offsets inside the
same transaction (KIP-98, KIP-447). Runs until killed.

Usage: python txn_processor.py BOOTSTRAP INPUT OUTPUT GROUP TRANSACTIONAL_ID PARTITIONS
"""

from __future__ import annotations

import sys

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition


def main() -> None:
    bootstrap, src, dst, group, txn_id, n = sys.argv[1:7]
    parts = int(n)
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    p = Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": txn_id,
            "linger.ms": 5,
            "transaction.timeout.ms": 10000,
        }
    )
    # Fences the previous incarnation (same transactional.id) and aborts its open
    # transaction, so the committed offsets read below are final.
    p.init_transactions(60)
    tps = [TopicPartition(src, i) for i in range(parts)]

    def rewind() -> None:
        committed = c.committed(tps, 60)
        c.assign(
            [TopicPartition(src, t.partition, t.offset if t.offset >= 0 else -2) for t in committed]
        )

    rewind()
    print("ready", flush=True)
    while True:
        msgs = c.consume(100, 0.5)
        msgs = [m for m in msgs if m.error() is None]
        if not msgs:
            continue
        try:
            p.begin_transaction()
            for m in msgs:
                p.produce(dst, m.value() + b"-out", key=m.key(), partition=m.partition())
            p.send_offsets_to_transaction(
                c.position(c.assignment()), c.consumer_group_metadata(), 60
            )
            p.commit_transaction(60)
        except KafkaException as e:
            if e.args[0].fatal():
                raise  # fenced: a newer incarnation exists; the test restarts us
            p.abort_transaction(60)  # abortable or retriable: redo from committed offsets
            rewind()


if __name__ == "__main__":
    main()
