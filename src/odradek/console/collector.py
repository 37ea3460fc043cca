"""The console's light collector: asks the cluster like a Kafka client and like
Prometheus, for what the open pages show, and publishes snapshots (kafka-exporter does
the same for consumer lag).

One thread. What a round asks for depends on the pages open (``Interest``: the live
views the web app streams, ``app.ConsoleState``), because every request costs the
brokers' event loops and the console runs on the same cores (issue 29: a round of
everything every second made the brokers' p99 10-20x worse):

- every round: Metadata (leaders, ISRs, brokers), the local processes' liveness;
- the partitions of open topic pages, and the groups of open group pages (DescribeGroups,
  OffsetFetch, and their partitions' offsets): every round, ``refresh_s`` (2 s);
- every partition's offsets and every group (ListGroups on every broker, then per
  coordinator): every ``lists_s`` (5 s) while a topics or groups list is open, else every
  ``background_s`` (15 s: ``/health`` and the lag exporter stay current). The offsets of
  every partition come from its leader's ``/metrics`` scrape, made in the same round
  (high watermark and log start offset, what ListOffsets answers for latest and
  earliest); ListOffsets asks only for those no scrape had. A ListOffsets of every
  partition is one request per leader that the broker answers in one event-loop step:
  at 10,000 partitions it stalled the brokers for tens of ms (issue 29);
- each broker's ``/metrics`` (rates, LEO, size, offsets): with the offsets above, and else
  every ``background_s``, as Prometheus scrapes; at once when a topic page opens, and
  every round for a broker whose last scrape failed (it shows as down until one
  succeeds). A scrape asks only for the samples the console shows (``name[]``);
- min.insync.replicas of new topics at once, of every topic every ``configs_s`` (5 min),
  in one DescribeConfigs naming only that key.

A newly opened page wakes the collector, so it shows fresh figures at once. With no
page open, one round every ``background_s``. Failures are recorded in the snapshot's
``errors`` and the round goes on with what it has: the console must keep working while
brokers die.
"""

from __future__ import annotations

import concurrent.futures
import json
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlencode

from odradek.cluster import procs
from odradek.cluster.health import ClusterView, fetch_metadata
from odradek.console.groups import GroupReader
from odradek.console.snapshot import Interest, RawGroup, RawState, Snapshot, SnapshotBuilder, View
from odradek.metrics.scrape import Samples, scrape
from odradek.security.client_security import PLAINTEXT, ClientSecurity

logger = logging.getLogger(__name__)

__all__ = ["Cadence", "ClusterCollector", "local_cluster_brokers"]

REQUEST_TIMEOUT_S = 5.0
SCRAPE_TIMEOUT_S = 2.0
HIGH_WATERMARK = "odradek_log_log_highwatermark"
LOG_START = "kafka_log_log_logstartoffset"
# The samples the console reads from a broker's /metrics (snapshot.py), asked for by
# name: at 10,000 partitions the whole text is ~4 MB, these are under half of it.
SHOWN_SAMPLES = (
    "kafka_server_brokertopicmetrics_bytesin_total",
    "kafka_server_brokertopicmetrics_bytesout_total",
    "kafka_server_brokertopicmetrics_messagesin_total",
    "kafka_server_replicamanager_underreplicatedpartitions",
    "odradek_eventloop_stalls_total",
    "kafka_log_log_logendoffset",
    "kafka_log_log_size",
    HIGH_WATERMARK,
    LOG_START,
)
_SHOWN_QUERY = "?" + urlencode([("name[]", n) for n in SHOWN_SAMPLES])


@dataclass(frozen=True)
class Cadence:
    """How often each part of the cluster is asked for (see the module docstring)."""

    refresh_s: float = 2.0
    lists_s: float = 5.0
    background_s: float = 15.0
    configs_s: float = 300.0


def local_cluster_brokers(
    cluster_dir: Path,
) -> tuple[dict[int, str], dict[int, tuple[int, int | None]]]:
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
    def __init__(
        self,
        bootstrap: str,
        on_snapshot: Callable[[Snapshot], None],
        *,
        cadence: Cadence | None = None,
        cluster_dir: Path | None = None,
        metrics_urls: dict[int, str] | None = None,
        security: ClientSecurity = PLAINTEXT,
        interest: Callable[[], Interest] = Interest,
    ) -> None:
        from confluent_kafka.admin import AdminClient  # noqa: PLC0415

        self.bootstrap = bootstrap
        self.cadence = cadence or Cadence()
        self.cluster_dir = cluster_dir
        self.metrics_urls = dict(metrics_urls or {})
        self.on_snapshot = on_snapshot
        self.interest = interest
        # librdkafka's own log lines (a dead broker: "Connect to ... failed") go to the
        # console's log file through this logger, never to the terminal.
        self.admin = AdminClient(
            {
                "bootstrap.servers": bootstrap,
                "logger": logging.getLogger("odradek.console.librdkafka"),
                "socket.connection.setup.timeout.ms": 3000,
                **security.librdkafka_config(),
            }
        )
        # Consumer groups (and topic configs) through Odradek's own client: librdkafka's
        # group admin calls can abort the process when a coordinator dies
        # (console/groups.py says why).
        self.group_reader = GroupReader(bootstrap, REQUEST_TIMEOUT_S, security)
        self.builder = SnapshotBuilder()
        self._pool = ThreadPoolExecutor(max_workers=8, thread_name_prefix="console-scrape")
        self._stop = threading.Event()
        self._wake = threading.Event()
        # Made by start(): a thread that never ran keeps its target, the bound self._run,
        # and that cycle kept a collector driven by hand (and its librdkafka client,
        # reconnecting) alive until a full garbage collection.
        self._thread: threading.Thread | None = None
        self._state = _Cache()

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="console-collector", daemon=True)
        self._thread.start()

    def wake(self) -> None:
        """A page was opened: collect what it shows now (any thread)."""
        self._wake.set()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:  # started (rounds may also be driven by hand)
            self._thread.join(timeout=REQUEST_TIMEOUT_S * 3)
        self._pool.shutdown(wait=False, cancel_futures=True)
        if self._thread is None or not self._thread.is_alive():  # else the round owns it
            self.group_reader.close()

    def _run(self) -> None:
        while not self._stop.is_set():
            t0 = time.monotonic()
            self._wake.clear()
            interest = self.interest()
            try:
                self.on_snapshot(self.builder.build(self.collect(interest)))
            except Exception:
                logger.exception("collection round failed")
            c = self.cadence
            pause = c.refresh_s if interest.views else c.background_s
            self._wake.wait(max(pause - (time.monotonic() - t0), 0.05))

    # ------------------------------------------------------------------ one round
    def collect(self, interest: Interest | None = None) -> RawState:
        """One round: ask for what ``interest`` shows (and what is due), merge it into
        what earlier rounds read, and return the whole."""
        interest = interest or Interest()
        st = self._state
        now = time.monotonic()
        opened = interest.views - st.views_seen
        st.views_seen = set(interest.views)
        raw = RawState(taken_at=time.time(), view=None)
        urls = dict(self.metrics_urls)
        known: list[int] = []
        if self.cluster_dir is not None:
            try:
                local_urls, pids = local_cluster_brokers(self.cluster_dir)
                urls.update(local_urls)
                known = sorted(set(local_urls) | set(pids))
                raw.process_down = {b for b, (pid, start) in pids.items() if not _alive(pid, start)}
            except (OSError, ValueError) as e:
                raw.errors.append(f"cluster.json: {e}")
        raw.metrics_urls = urls
        c = self.cadence
        lists = c.lists_s if interest.has("topics") or interest.has("groups") else c.background_s
        all_offsets = now - st.offsets_at >= lists or bool(
            opened & {("topics", ""), ("groups", "")}
        )
        force_scrape = all_offsets or any(v == "topic" for v, _ in opened)
        due_scrapes = {
            b: url
            for b, url in urls.items()
            if force_scrape
            or st.scrape_failed.get(b, True)
            or now - st.scraped_at.get(b, -1e9) >= c.background_s
        }
        scrapes = {b: self._pool.submit(_scrape_or_none, url) for b, url in due_scrapes.items()}
        try:
            view = fetch_metadata(self.admin, REQUEST_TIMEOUT_S, known)
        except Exception as e:  # noqa: BLE001
            raw.errors.append(f"metadata: {e}")
            view = None
        if view is not None:
            self._configs(view, now, raw)
            raw.view = view
        self._groups(interest, opened, now, lists, raw)
        fresh: dict[int, Samples] = {}
        for b, fut in scrapes.items():
            samples = fut.result()
            st.scrape_failed[b] = samples is None
            st.scraped_at[b] = now
            st.metrics[b] = samples
            st.metrics_taken[b] = time.time()
            if samples is not None:
                fresh[b] = samples
        if view is not None:
            if all_offsets:
                st.offsets_at = now
            self._offsets(view, interest, all_offsets, fresh, raw)
        for b in list(st.metrics):
            if b not in urls:
                del st.metrics[b]
        raw.metrics = dict(st.metrics)
        raw.metrics_at = dict(st.metrics_taken)
        raw.groups = list(st.groups.values())
        raw.high_watermarks = dict(st.high_watermarks)
        raw.log_starts = dict(st.log_starts)
        raw.errors.extend(st.group_errors)
        return raw

    def _configs(self, view: ClusterView, now: float, raw: RawState) -> None:
        st = self._state
        topics = {p.topic for p in view.partitions}
        if now - st.configs_at >= self.cadence.configs_s:
            ask, st.configs_at = topics, now
        else:  # new topics; one that failed (not authorized...) waits for the next pass
            ask = topics - st.configs_asked
        st.configs_asked = set(topics)
        if ask:
            got, errors = self.group_reader.min_insync_replicas(ask)
            st.min_isr.update(got)
            raw.errors.extend(errors)
        for t in [t for t in st.min_isr if t not in topics]:
            del st.min_isr[t]
        view.min_isr.update(st.min_isr)

    def _groups(
        self, interest: Interest, opened: set[View], now: float, every_s: float, raw: RawState
    ) -> None:
        st = self._state
        if now - st.groups_at >= every_s or ("groups", "") in opened:
            groups, errors = self.group_reader.read()
            st.groups = {g.group_id: g for g in groups}
            st.group_errors = errors
            st.groups_at = now
            return
        wanted = interest.args("group")
        if wanted:
            groups, errors = self.group_reader.read(only=wanted)
            for gid in wanted:
                st.groups.pop(gid, None)
            st.groups.update((g.group_id, g) for g in groups)
            raw.errors.extend(errors)

    def _offsets(
        self,
        view: ClusterView,
        interest: Interest,
        everything: bool,
        scraped: dict[int, Samples],
        raw: RawState,
    ) -> None:
        from confluent_kafka import TopicPartition  # noqa: PLC0415
        from confluent_kafka.admin import OffsetSpec  # noqa: PLC0415

        st = self._state
        leaders = {(p.topic, p.partition): p.leader for p in view.partitions if p.leader >= 0}
        led = set(leaders)
        if everything:
            tps = led
        else:
            topics = interest.args("topic")
            groups = [st.groups[g] for g in interest.args("group") if g in st.groups]
            hot = {tp for tp in led if tp[0] in topics}
            for g in groups:
                hot |= set(g.committed) | {tp for m in g.members for tp in m[3]}
            tps = hot & led
        if everything:  # from the leaders' scrapes of this round, where they have them
            tps = _offsets_from_scrapes(tps, leaders, scraped, st)
        for cache in (st.high_watermarks, st.log_starts):  # deleted topics' partitions
            for tp in [tp for tp in cache if tp not in led]:
                del cache[tp]
        if not tps:
            return
        sent = []
        for spec, target in (
            (OffsetSpec.latest(), st.high_watermarks),
            (OffsetSpec.earliest(), st.log_starts),
        ):
            try:
                sent.append(
                    (
                        target,
                        self.admin.list_offsets(
                            {TopicPartition(t, p): spec for t, p in sorted(tps)},
                            request_timeout=REQUEST_TIMEOUT_S,
                        ),
                    )
                )
            except Exception as e:  # noqa: BLE001
                raw.errors.append(f"list offsets: {e}")
        # Both requests in flight at once, one deadline for every answer.
        concurrent.futures.wait(
            [f for _, futs in sent for f in futs.values()], timeout=REQUEST_TIMEOUT_S
        )
        for target, futs in sent:
            for ktp, fut in futs.items():
                if not fut.done():
                    continue
                try:
                    target[(ktp.topic, ktp.partition)] = fut.result(0).offset
                except Exception:  # noqa: BLE001 - a partition without a leader right now
                    continue


@dataclass
class _Cache:
    """What earlier rounds read, merged round by round (one owner: the collector)."""

    views_seen: set[View] = field(default_factory=set)
    min_isr: dict[str, int] = field(default_factory=dict)
    configs_at: float = -1e9
    configs_asked: set[str] = field(default_factory=set)
    groups: dict[str, RawGroup] = field(default_factory=dict)
    group_errors: list[str] = field(default_factory=list)
    groups_at: float = -1e9
    high_watermarks: dict[tuple[str, int], int] = field(default_factory=dict)
    log_starts: dict[tuple[str, int], int] = field(default_factory=dict)
    offsets_at: float = -1e9
    metrics: dict[int, Samples | None] = field(default_factory=dict)
    metrics_taken: dict[int, float] = field(default_factory=dict)  # wall clock of each
    scraped_at: dict[int, float] = field(default_factory=dict)  # monotonic
    scrape_failed: dict[int, bool] = field(default_factory=dict)


def _offsets_from_scrapes(
    tps: set[tuple[str, int]],
    leaders: dict[tuple[str, int], int],
    scraped: dict[int, Samples],
    st: _Cache,
) -> set[tuple[str, int]]:
    """Take each partition's high watermark and log start offset from its leader's
    scrape; return the partitions whose leader's scrape did not have them. (A leader
    that lost its leadership since Metadata reports its own, slightly older, figures:
    a console may show a watermark one scrape late, as a ListOffsets that races the
    change may fail.)"""
    by_broker: dict[int, tuple[dict[tuple[str, ...], float], dict[tuple[str, ...], float]]] = {}
    for b, samples in scraped.items():
        by_broker[b] = (
            samples.by(HIGH_WATERMARK, "topic", "partition"),
            samples.by(LOG_START, "topic", "partition"),
        )
    missing = set()
    for tp in tps:
        got = by_broker.get(leaders[tp])
        key = (tp[0], str(tp[1]))
        if got is None or key not in got[0] or key not in got[1]:
            missing.add(tp)
            continue
        st.high_watermarks[tp] = int(got[0][key])
        st.log_starts[tp] = int(got[1][key])
    return missing


def _scrape_or_none(url: str) -> Samples | None:
    try:
        return scrape(url + _SHOWN_QUERY, SCRAPE_TIMEOUT_S)
    except Exception as e:  # noqa: BLE001 - a down broker: no samples this round
        logger.debug("scrape %s failed: %s", url, e)
        return None


def _alive(pid: int, start_time: int | None) -> bool:
    """The recorded process exists and is not frozen (SIGSTOP): it can serve."""
    return procs.alive(pid, start_time) and not procs.is_stopped(pid, start_time)
