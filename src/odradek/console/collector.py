"""The console's light collector: polls the cluster like a Kafka client and like
Prometheus, and publishes snapshots (kafka-exporter does the same for consumer lag).

One thread, one round every ``interval_s``: Metadata + topic configs (``fetch_view``),
ListOffsets (earliest, latest) for every partition, ListGroups / DescribeGroups /
OffsetFetch for every consumer group (console/groups.py, Odradek's own client), and a
scrape of each broker's ``/metrics`` (concurrently, each with its own deadline, so one
hung broker costs one timeout).
Failures are recorded in the snapshot's ``errors`` and the round goes on with what it
has: the console must keep working while brokers die.
"""

from __future__ import annotations

import concurrent.futures
import json
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from odradek.cluster import procs
from odradek.cluster.health import fetch_view
from odradek.console.groups import GroupReader
from odradek.console.snapshot import RawState, Snapshot, SnapshotBuilder
from odradek.metrics.scrape import Samples, scrape
from odradek.security.client_security import PLAINTEXT, ClientSecurity

logger = logging.getLogger(__name__)

__all__ = ["ClusterCollector", "local_cluster_brokers"]

REQUEST_TIMEOUT_S = 5.0
SCRAPE_TIMEOUT_S = 2.0


def local_cluster_brokers(cluster_dir: Path) -> tuple[dict[int, str], dict[int, tuple[int, int | None]]]:
    """From a local cluster's ``cluster.json``: broker id → metrics URL, and broker id
    → (pid, start time) for liveness checks."""
    state = json.loads((cluster_dir / "cluster.json").read_text())
    urls, pids = {}, {}
    for b in state.get("brokers", []):
        if b.get("metrics_url"):
            urls[int(b["id"])] = b["metrics_url"]
        if b.get("pid"):
            pids[int(b["id"])] = (int(b["pid"]), b.get("start_time"))
    return urls, pids


class ClusterCollector:
    def __init__(self, bootstrap: str, on_snapshot: Callable[[Snapshot], None], *,
                 interval_s: float = 1.0, cluster_dir: Path | None = None,
                 metrics_urls: dict[int, str] | None = None,
                 security: ClientSecurity = PLAINTEXT) -> None:
        from confluent_kafka.admin import AdminClient  # noqa: PLC0415

        self.bootstrap = bootstrap
        self.interval_s = interval_s
        self.cluster_dir = cluster_dir
        self.metrics_urls = dict(metrics_urls or {})
        self.on_snapshot = on_snapshot
        # librdkafka's own log lines (a dead broker: "Connect to ... failed") go to the
        # console's log file through this logger, never to the terminal.
        self.admin = AdminClient({"bootstrap.servers": bootstrap,
                                  "logger": logging.getLogger("odradek.console.librdkafka"),
                                  "socket.connection.setup.timeout.ms": 3000,
                                  **security.librdkafka_config()})
        # Consumer groups through Odradek's own client: librdkafka's group admin calls
        # can abort the process when a coordinator dies (console/groups.py says why).
        self.group_reader = GroupReader(bootstrap, REQUEST_TIMEOUT_S, security)
        self.builder = SnapshotBuilder()
        self._pool = ThreadPoolExecutor(max_workers=8, thread_name_prefix="console-scrape")
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="console-collector",
                                        daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=REQUEST_TIMEOUT_S * 3)
        self._pool.shutdown(wait=False, cancel_futures=True)
        if not self._thread.is_alive():  # else the round still owns the client
            self.group_reader.close()

    def _run(self) -> None:
        while not self._stop.is_set():
            t0 = time.monotonic()
            try:
                self.on_snapshot(self.builder.build(self.collect()))
            except Exception:
                logger.exception("collection round failed")
            self._stop.wait(max(self.interval_s - (time.monotonic() - t0), 0.05))

    # ------------------------------------------------------------------ one round
    def collect(self) -> RawState:
        raw = RawState(taken_at=time.time(), view=None)
        urls = dict(self.metrics_urls)
        known: list[int] = []
        if self.cluster_dir is not None:
            try:
                local_urls, pids = local_cluster_brokers(self.cluster_dir)
                urls.update(local_urls)
                known = sorted(set(local_urls) | set(pids))
                raw.process_down = {b for b, (pid, start) in pids.items()
                                    if not _alive(pid, start)}
            except (OSError, ValueError) as e:
                raw.errors.append(f"cluster.json: {e}")
        raw.metrics_urls = urls
        scrapes = {b: self._pool.submit(_scrape_or_none, url) for b, url in urls.items()}
        try:
            raw.view = fetch_view(self.admin, REQUEST_TIMEOUT_S, known)
        except Exception as e:  # noqa: BLE001
            raw.errors.append(f"metadata: {e}")
        if raw.view is not None:
            self._offsets(raw)
        self._groups(raw)
        for b, fut in scrapes.items():
            raw.metrics[b] = fut.result()
        return raw

    def _offsets(self, raw: RawState) -> None:
        from confluent_kafka import TopicPartition  # noqa: PLC0415
        from confluent_kafka.admin import OffsetSpec  # noqa: PLC0415

        assert raw.view is not None
        tps = [(p.topic, p.partition) for p in raw.view.partitions if p.leader >= 0]
        if not tps:
            return
        sent = []
        for spec, target in ((OffsetSpec.latest(), raw.high_watermarks),
                             (OffsetSpec.earliest(), raw.log_starts)):
            try:
                sent.append((target, self.admin.list_offsets(
                    {TopicPartition(t, p): spec for t, p in tps},
                    request_timeout=REQUEST_TIMEOUT_S)))
            except Exception as e:  # noqa: BLE001
                raw.errors.append(f"list offsets: {e}")
        # Both requests in flight at once, one deadline for every answer.
        concurrent.futures.wait([f for _, futs in sent for f in futs.values()],
                                timeout=REQUEST_TIMEOUT_S)
        for target, futs in sent:
            for tp, fut in futs.items():
                if not fut.done():
                    continue
                try:
                    target[(tp.topic, tp.partition)] = fut.result(0).offset
                except Exception:  # noqa: BLE001 - a partition without a leader right now
                    continue

    def _groups(self, raw: RawState) -> None:
        groups, errors = self.group_reader.read()
        raw.groups.extend(groups)
        raw.errors.extend(errors)


def _scrape_or_none(url: str) -> Samples | None:
    try:
        return scrape(url, SCRAPE_TIMEOUT_S)
    except Exception as e:  # noqa: BLE001 - a down broker: no samples this round
        logger.debug("scrape %s failed: %s", url, e)
        return None


def _alive(pid: int, start_time: int | None) -> bool:
    """The recorded process exists and is not frozen (SIGSTOP): it can serve."""
    return procs.alive(pid, start_time) and not procs.is_stopped(pid, start_time)
