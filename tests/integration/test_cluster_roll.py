"""``odradek cluster roll`` on a loaded 3-broker cluster (issue 19).

An idempotent acks=all producer runs through the whole roll; with RF 3 and
min.insync.replicas=2 and the roll waiting for a full ISR before each broker, every
record must be acknowledged: zero delivery errors, each acked record in the log once.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
from replication_util import consume_all, create_topic

from odradek.cli.main import main as odradek
from odradek.cluster.roll import partition_isrs, under_replicated

pytestmark = pytest.mark.integration

FAST = {"replica.lag.time.max.ms": "4000", "zookeeper.session.timeout.ms": "6000"}


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_roll_under_load_loses_and_fails_nothing(
    make_cluster: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from confluent_kafka import Producer

    c = make_cluster(3, broker_config=FAST)
    topic = "roll-load"
    create_topic(c.bootstrap_servers, topic, 6, 3, {"min.insync.replicas": "2"})
    p = Producer(
        {
            "bootstrap.servers": c.bootstrap_servers,
            "acks": "all",
            "enable.idempotence": True,
            "linger.ms": 5,
            "message.timeout.ms": 120000,
        }
    )
    acked: list[bytes] = []
    errors: list[str] = []
    stop = threading.Event()

    def on_delivery(err: Any, msg: Any) -> None:
        if err is None:
            acked.append(msg.value())
        else:
            errors.append(str(err))

    def load() -> None:
        i = 0
        while not stop.is_set():
            p.produce(topic, b"r%07d" % i, on_delivery=on_delivery)
            i += 1
            p.poll(0.002)
        p.flush(120)

    t = threading.Thread(target=load, daemon=True)
    t.start()
    try:
        assert odradek(["cluster", "roll", "--dir", str(c.dir), "--timeout", "120"]) == 0
    finally:
        stop.set()
        t.join(150)
    out = capsys.readouterr().out
    assert "roll order:" in out and out.count(": done in") == 3, out
    assert errors == [], errors[:5]
    assert len(acked) > 500
    assert under_replicated(partition_isrs(c.zk_client())) == []
    logged = [
        v
        for recs in consume_all(c.bootstrap_servers, topic, list(range(6)), 60).values()
        for _, v in recs
    ]
    assert set(acked) <= set(logged)
    assert len(logged) == len(set(logged))  # idempotence: no duplicates from retries
