"""The exactly-once sink's marker I/O through Odradek's own client (``odradek.client=columnar``).

Same markers, same topic, same rules as the confluent-kafka helpers in ``sink``
(docs/spark.md, "Sink guarantee"): a begin marker is committed (acks=all) before the
first record of an attempt reaches a topic, markers of batch B are found by reading the
marker topic backwards from its end until an older batch shows up, and the driver's
commit marker is committed before ``commit`` returns. Only the client differs: one
connection per broker and synchronous requests instead of a librdkafka AdminClient,
Consumer and Producer per task (their start-up and polling cost ~0.1 s each, per task
and micro-batch). Creating the marker topic (once per query) still goes through the
AdminClient in ``sink``.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Mapping
from typing import Any

from odradek.client.cluster import EARLIEST, LATEST, ClusterClient
from odradek.client.fetcher import FetchConfig, PartitionFetcher
from odradek.client.producer import BatchProducer
from odradek.errors import ErrorCode, KafkaError
from odradek.spark.offsets import client_security
from odradek.storage.batch import BATCH_HEADER_SIZE
from odradek.storage.records import encode_batch

__all__ = ["NativeMarkers"]

logger = logging.getLogger(__name__)


class NativeMarkers:
    """Marker topic reads and writes for one task (or the driver's commit)."""

    def __init__(self, conf: Mapping[str, str]) -> None:
        self.bootstrap = conf["bootstrap.servers"]
        self.security = client_security(conf)
        self.cluster = ClusterClient(
            self.bootstrap,
            client_id=str(conf.get("client.id", "odradek-spark-sink")),
            security=self.security,
        )

    def close(self) -> None:
        self.cluster.close()

    def topic_ready(self, topic: str) -> bool:
        """The topic exists and every partition has a leader."""
        md = self.cluster.refresh([topic])
        leaders = [info.leader for (t, _p), info in md.partitions.items() if t == topic]
        return bool(leaders) and all(leader >= 0 for leader in leaders)

    def latest_offsets(self, topic: str) -> dict[str, int]:
        """``{"partition": high watermark}`` of every partition of ``topic``."""
        n = self.cluster.refresh([topic]).partition_count(topic)
        if n == 0:
            raise KafkaError(ErrorCode.unknown_topic_or_partition, f"topic {topic} does not exist")
        got = self.cluster.list_offsets({(topic, p): LATEST for p in range(n)})
        return {str(p): off for (_t, p), off in sorted(got.items())}

    def read(self, topic: str, batch_id: int) -> list[dict[str, Any]]:
        """All markers of ``batch_id``, reading backwards in growing windows."""
        offs = self.cluster.list_offsets({(topic, 0): EARLIEST})
        low = offs[(topic, 0)]
        high = self.cluster.list_offsets({(topic, 0): LATEST})[(topic, 0)]
        found: list[dict[str, Any]] = []
        window, stop = 64, high
        while stop > low:
            frm = max(low, stop - window)
            older = False
            for marker in self._scan(topic, frm, stop):
                if marker["batch"] == batch_id:
                    found.append(marker)
                elif marker["batch"] < batch_id:
                    older = True
            if older:
                break
            stop, window = frm, window * 4
        return found

    def _scan(self, topic: str, start: int, end: int) -> list[dict[str, Any]]:
        def lost(message: str) -> None:
            raise KafkaError(ErrorCode.offset_out_of_range, f"marker topic: {message}")

        out: list[dict[str, Any]] = []
        fetcher = PartitionFetcher(
            self.bootstrap,
            topic,
            0,
            start,
            end,
            FetchConfig(poll_timeout_s=60, client_id="odradek-spark-sink", security=self.security),
            lost,
        )
        for cols in fetcher:
            for i in range(cols.n):
                raw = bytes(cols.val_bytes[cols.val_offs[i] : cols.val_offs[i + 1]])
                out.append(json.loads(raw))
        return out

    @staticmethod
    def write(producer: BatchProducer, topic: str, marker: dict[str, Any]) -> None:
        """Append one marker and wait until it (and everything queued before it) is
        committed: acks=all, idempotent."""
        now = int(time.time() * 1000)
        batch = encode_batch(
            [(str(marker["batch"]).encode(), json.dumps(marker).encode())], timestamp_ms=now
        )
        producer.append(
            topic, 0, batch[BATCH_HEADER_SIZE:], 1, codec=0, first_timestamp=now, max_timestamp=now
        )
        producer.flush()
