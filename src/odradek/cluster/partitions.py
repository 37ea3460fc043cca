"""Per-partition view for ``odradek cluster status``: leader, epoch, ISR, HW, replica LEOs.

Leader, leader epoch and ISR come from the state znodes (what the controller and the
leaders wrote, REQ-R13); the HW from a ListOffsets(latest) to the leader, as a consumer
sees it (REQ-R16); each replica's LEO from the tail of its own segment files (the
local cluster keeps every broker's log dir on this machine), read without disturbing the
running broker: the last offset-index entry, then a header scan to the end.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kazoo.exceptions import NoNodeError

from odradek.storage.batch import scan_batches
from odradek.zk import znodes

_INDEX_ENTRY = struct.Struct(">ii")


@dataclass
class PartitionStatus:
    topic: str
    partition: int
    replicas: list[int]
    leader: int = -1
    leader_epoch: int = -1
    isr: list[int] = field(default_factory=list)
    high_watermark: int | None = None
    leo: dict[int, int | None] = field(default_factory=dict)


def peek_log_end_offset(partition_dir: Path) -> int | None:
    """The LEO of a replica's log on disk (None if it has no log)."""
    logs = sorted(partition_dir.glob("*.log"))
    if not logs:
        return None
    last = logs[-1]
    base = int(last.stem)
    position = 0
    index = last.with_suffix(".index")
    try:
        raw = index.read_bytes()
        # Index files may be preallocated with zeros: take the last non-zero entry.
        for off in range(len(raw) - _INDEX_ENTRY.size, -1, -_INDEX_ENTRY.size):
            rel, pos = _INDEX_ENTRY.unpack_from(raw, off)
            if rel or pos:
                position = pos
                break
    except OSError:
        pass
    with open(last, "rb") as f:
        f.seek(position)
        data = f.read()
    scan = scan_batches(data, verify_crc=False)
    if scan.batches:
        return scan.batches[-1].last_offset + 1
    if position:
        # The index pointed past valid data (a torn tail being recovered): scan it all.
        scan = scan_batches(last.read_bytes(), verify_crc=False)
        return scan.batches[-1].last_offset + 1 if scan.batches else base
    return base


def collect(
    zk: Any,
    log_dirs: dict[int, str],
    bootstrap: str | None,
    client_conf: dict[str, str] | None = None,
) -> list[PartitionStatus]:
    out: list[PartitionStatus] = []
    for topic in sorted(zk.get_children(znodes.BROKER_TOPICS)):
        try:
            data, _ = zk.get(znodes.topic_path(topic))
        except NoNodeError:
            continue
        assignment = znodes.decode_topic(topic, data)
        for p, replicas in sorted(assignment.partitions.items()):
            st = PartitionStatus(topic, p, list(replicas))
            try:
                raw, _ = zk.get(znodes.partition_state_path(topic, p))
                s = znodes.decode_partition_state(raw)
                st.leader, st.leader_epoch, st.isr = s.leader, s.leader_epoch, list(s.isr)
            except NoNodeError:
                pass
            for r in replicas:
                d = log_dirs.get(r)
                st.leo[r] = peek_log_end_offset(Path(d) / f"{topic}-{p}") if d else None
            out.append(st)
    if bootstrap and out:
        _fill_high_watermarks(bootstrap, out, client_conf or {})
    return out


def _fill_high_watermarks(
    bootstrap: str, parts: list[PartitionStatus], client_conf: dict[str, str]
) -> None:
    try:
        from confluent_kafka import Consumer, TopicPartition  # noqa: PLC0415
    except ImportError:
        return
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "odradek-status",
            "enable.auto.commit": False,
            "log_level": 0,
            **client_conf,
        }
    )
    try:
        for st in parts:
            if st.leader < 0:
                continue
            try:
                _, hi = c.get_watermark_offsets(TopicPartition(st.topic, st.partition), timeout=2)
                st.high_watermark = hi
            except Exception:
                pass
    finally:
        c.close()


def format_table(parts: list[PartitionStatus]) -> list[str]:
    lines = []
    for st in parts:
        leader = st.leader if st.leader >= 0 else "none"
        hw = "?" if st.high_watermark is None else st.high_watermark
        reps = []
        for r in st.replicas:
            leo = st.leo.get(r)
            if leo is None:
                reps.append(f"{r}:-")
                continue
            lag = (
                ""
                if st.high_watermark is None
                else f"(lag {st.high_watermark - leo:+d})"
                if leo != st.high_watermark
                else ""
            )
            reps.append(f"{r}:{leo}{lag}")
        lines.append(
            f"Topic: {st.topic}\tPartition: {st.partition}\tLeader: {leader}\t"
            f"Epoch: {st.leader_epoch}\tIsr: {','.join(map(str, st.isr))}\tHW: {hw}\t"
            f"LEO: {' '.join(reps)}"
        )
    return lines
