"""``odradek lost-records list | export | replay``: the ledger of truncated records.

Beyond Kafka (issue 6 item 5): a replica that truncates its log -- a follower after
OffsetsForLeaderEpoch (REQ-R19, R20), a deposed leader rejoining (REQ-P4,
REQ-P6), a replica whose committed suffix an unclean election discarded (REQ-R10) -- first
copies the removed batches to ``<log dir>/lost-records/`` (see
``odradek.storage.truncation_ledger``). These commands read that ledger from one or more
log dirs (``--log-dir``, repeatable, or ``--cluster-dir`` for every broker of a
``LocalCluster``); they never need the broker to be running, except ``replay``, which
re-produces the records to a live cluster.
"""

from __future__ import annotations

import argparse
import base64
import datetime as _dt
import json
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from odradek.storage.truncation_ledger import (
    LedgerEntry,
    LostRecord,
    ledger_root,
    list_entries,
    mark_replayed,
    unique_records,
)

__all__ = [
    "add_parser",
    "log_dirs_of",
    "load_entries",
    "export_rows",
    "cmd_list",
    "cmd_export",
    "cmd_replay",
    "replay",
]

_REPLAY_HELP = """\
Re-produce the ledger's records with an idempotent producer (acks=all), keeping keys,
values, headers and timestamps, in ledger order. Batches present in several replicas'
ledgers (a leader and a follower both truncated them) are produced once. After a
successful delivery each entry's JSON file gets a "replayed" stamp (time, bootstrap,
target), so a second replay skips it; if only part of an entry was delivered, the
delivered offsets are recorded ("replayed_offsets") and a later replay sends only the
rest. --force ignores the stamps. Note: a record the original producer also retried
successfully elsewhere is in the ledger and in the log; check with `export` first."""


def add_parser(subparsers: Any) -> None:
    lr = subparsers.add_parser(
        "lost-records", help="inspect/export/replay records removed by truncation"
    )
    sub = lr.add_subparsers(dest="lost_command", metavar="{list,export,replay}")
    sub.required = True

    def common(p: argparse.ArgumentParser) -> None:
        p.add_argument(
            "--log-dir",
            action="append",
            default=[],
            metavar="DIR",
            help="a broker's log dir (log.dirs); repeatable",
        )
        p.add_argument(
            "--cluster-dir",
            default=None,
            metavar="DIR",
            help="a LocalCluster directory: every broker's log dir",
        )
        p.add_argument("--topic", default=None, help="only this topic")

    lst = sub.add_parser("list", help="one line per truncation")
    common(lst)
    lst.set_defaults(func=cmd_list)
    exp = sub.add_parser("export", help="decoded records as JSON lines or Parquet")
    common(exp)
    exp.add_argument("--format", choices=("jsonl", "parquet"), default="jsonl")
    exp.add_argument(
        "--out", required=True, metavar="FILE", help="output file ('-': stdout, jsonl)"
    )
    exp.add_argument(
        "--all-copies",
        action="store_true",
        help="one row per replica copy (default: each batch once)",
    )
    exp.set_defaults(func=cmd_export)
    rep = sub.add_parser(
        "replay",
        help="re-produce the records",
        description=_REPLAY_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    common(rep)
    rep.add_argument("--bootstrap-server", required=True, metavar="HOST:PORT")
    rep.add_argument(
        "--partition-mode",
        choices=("same", "any"),
        default="same",
        help="same: the partition the record was truncated from; any: the "
        "producer's partitioner (by key)",
    )
    rep.add_argument(
        "--target-topic", default=None, help="produce to this topic instead of the original one"
    )
    rep.add_argument("--dry-run", action="store_true", help="show what would be produced")
    from odradek.cli.common import add_command_config  # noqa: PLC0415

    add_command_config(rep)
    rep.add_argument("--force", action="store_true", help="also replay entries marked replayed")
    rep.add_argument("--timeout", type=float, default=60.0, help="delivery timeout (s)")
    rep.set_defaults(func=cmd_replay)


# ----------------------------------------------------------------- reading


def log_dirs_of(args: argparse.Namespace) -> list[Path]:
    dirs = [Path(d) for d in args.log_dir]
    if args.cluster_dir:
        from odradek.cluster.local import LocalCluster  # noqa: PLC0415

        c = LocalCluster(Path(args.cluster_dir))
        dirs += [Path(b.log_dir) for b in c.brokers]
    if not dirs:
        raise SystemExit("odradek lost-records: give --log-dir DIR or --cluster-dir DIR")
    return dirs


def load_entries(dirs: Iterable[Path], topic: str | None = None) -> list[LedgerEntry]:
    out: list[LedgerEntry] = []
    for d in dirs:
        out += list_entries(ledger_root(d), topic)
    out.sort(key=lambda e: (e.time_ms, e.topic, e.partition, e.start_offset, e.broker_id))
    return out


def _time(ms: int) -> str:
    return (
        _dt.datetime.fromtimestamp(ms / 1000, _dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
    )


def cmd_list(args: argparse.Namespace) -> int:
    entries = load_entries(log_dirs_of(args), args.topic)
    rows = [
        (
            "BROKER",
            "TOPIC",
            "PARTITION",
            "OFFSETS",
            "RECORDS",
            "EPOCH",
            "NEW-LEADER",
            "TIME",
            "REPLAYED",
            "REASON",
        )
    ]
    for e in entries:
        rows.append(
            (
                str(e.broker_id),
                e.topic,
                str(e.partition),
                f"{e.start_offset}-{e.end_offset - 1}",
                str(e.records),
                ",".join(map(str, e.data_epochs)),
                f"{e.new_leader_id}@{e.new_leader_epoch}",
                _time(e.time_ms),
                "yes" if e.replayed else ("partly" if e.replayed_offsets else "no"),
                e.reason,
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths)) + "  " + r[-1])
    total = sum(e.records for e in entries)
    sys.stdout.flush()
    print(
        f"{len(entries)} entr{'y' if len(entries) == 1 else 'ies'}, {total} record(s)",
        file=sys.stderr,
    )
    return 0


def _records(
    entries: list[LedgerEntry], all_copies: bool
) -> Iterator[tuple[LostRecord, LedgerEntry]]:
    if all_copies:
        for e in entries:
            for r in e.iter_records():
                yield r, e
    else:
        yield from unique_records(entries)


def export_rows(
    entries: list[LedgerEntry], *, all_copies: bool = False
) -> Iterator[dict[str, Any]]:
    """One dict per record: the record as produced plus where and why it was lost."""
    for r, e in _records(entries, all_copies):
        yield {
            "broker": e.broker_id,
            "topic": r.topic,
            "partition": r.partition,
            "offset": r.offset,
            "timestamp": r.timestamp,
            "key": r.key,
            "value": r.value,
            "headers": r.headers,
            "producer_id": r.producer_id,
            "producer_epoch": r.producer_epoch,
            "sequence": r.sequence,
            "leader_epoch": r.leader_epoch,
            "new_leader_id": e.new_leader_id,
            "new_leader_epoch": e.new_leader_epoch,
            "below_high_watermark": e.below_high_watermark,
            "reason": e.reason,
            "truncated_at_ms": e.time_ms,
            "replayed": e.replayed is not None,
            "entry": e.path.name,
        }


def _b64(b: bytes | None) -> str | None:
    return None if b is None else base64.b64encode(b).decode()


def write_parquet(rows: Iterable[dict[str, Any]], out: Path) -> int:
    import pyarrow as pa  # noqa: PLC0415
    import pyarrow.parquet as pq  # noqa: PLC0415

    hdr = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
    schema = pa.schema(
        [
            ("broker", pa.int32()),
            ("topic", pa.string()),
            ("partition", pa.int32()),
            ("offset", pa.int64()),
            ("timestamp", pa.int64()),
            ("key", pa.binary()),
            ("value", pa.binary()),
            ("headers", hdr),
            ("producer_id", pa.int64()),
            ("producer_epoch", pa.int32()),
            ("sequence", pa.int32()),
            ("leader_epoch", pa.int32()),
            ("new_leader_id", pa.int32()),
            ("new_leader_epoch", pa.int32()),
            ("below_high_watermark", pa.bool_()),
            ("reason", pa.string()),
            ("truncated_at_ms", pa.int64()),
            ("replayed", pa.bool_()),
            ("entry", pa.string()),
        ]
    )
    cols: dict[str, list[Any]] = {n: [] for n in schema.names}
    n = 0
    for row in rows:
        row = dict(row, headers=[{"key": k, "value": v} for k, v in row["headers"]])
        for k in schema.names:
            cols[k].append(row[k])
        n += 1
    pq.write_table(pa.table(cols, schema=schema), out)
    return n


def cmd_export(args: argparse.Namespace) -> int:
    entries = load_entries(log_dirs_of(args), args.topic)
    rows = export_rows(entries, all_copies=args.all_copies)
    if args.format == "parquet":
        n = write_parquet(rows, Path(args.out))
    else:
        n = 0
        f = sys.stdout if args.out == "-" else open(args.out, "w")  # noqa: SIM115
        try:
            for row in rows:
                row = dict(
                    row,
                    key=_b64(row["key"]),
                    value=_b64(row["value"]),
                    headers=[[k, _b64(v)] for k, v in row["headers"]],
                )
                f.write(json.dumps(row) + "\n")
                n += 1
        finally:
            if f is not sys.stdout:
                f.close()
    print(
        f"exported {n} record(s) from {len(entries)} entr{'y' if len(entries) == 1 else 'ies'}"
        f" to {args.out}",
        file=sys.stderr,
    )
    return 0


# ----------------------------------------------------------------- replay

RecordId = tuple[tuple[str, int, int, int, int], int]  # (batch key, offset)


def replay(
    entries: list[LedgerEntry],
    bootstrap: str,
    *,
    partition_mode: str = "same",
    target_topic: str | None = None,
    dry_run: bool = False,
    force: bool = False,
    timeout_s: float = 60.0,
    out: Any = None,
    client_conf: dict[str, str] | None = None,
) -> tuple[int, int]:
    """Re-produce the entries' records; returns (delivered, failed). Marks entries."""
    out = sys.stdout if out is None else out  # looked up per call, not at import
    todo = [e for e in entries if force or e.replayed is None]
    done: set[RecordId] = set()
    members: dict[int, list[RecordId]] = {}  # id(entry) -> its records
    for e in entries:
        if e.replayed is not None and not force:
            # Another replica's copy of these batches was replayed already.
            done.update((r.batch_key, r.offset) for r in e.iter_records())
    for e in todo:
        ids = []
        for r in e.iter_records():
            rid = (r.batch_key, r.offset)
            ids.append(rid)
            if not force and r.offset in e.replayed_offsets:
                done.add(rid)
        members[id(e)] = ids
    plan = [(r, e) for r, e in unique_records(todo) if (r.batch_key, r.offset) not in done]
    if dry_run:
        for r, e in plan:
            print(
                f"would produce {target_topic or r.topic}"
                f"[{r.partition if partition_mode == 'same' else '*'}] offset-was {r.offset} "
                f"key={r.key!r} value={(r.value or b'')[:40]!r} (from {e.path.name}, "
                f"broker {e.broker_id})",
                file=out,
            )
        print(
            f"dry run: {len(plan)} record(s) from {len(todo)} entr"
            f"{'y' if len(todo) == 1 else 'ies'}",
            file=out,
        )
        return 0, 0
    delivered: set[RecordId] = set()
    failures: list[str] = []
    if plan:
        from confluent_kafka import Producer  # noqa: PLC0415

        p = Producer(
            {
                "bootstrap.servers": bootstrap,
                "enable.idempotence": True,
                "acks": "all",
                "message.timeout.ms": int(timeout_s * 1000),
                "log_level": 3,
                **(client_conf or {}),
            }
        )
        for r, _e in plan:
            rid: RecordId = (r.batch_key, r.offset)

            def cb(err: Any, _msg: Any, rid: RecordId = rid) -> None:
                if err is None:
                    delivered.add(rid)
                else:
                    failures.append(str(err))

            kw: dict[str, Any] = {
                "key": r.key,
                "value": r.value,
                "on_delivery": cb,
                "headers": list(r.headers) or None,
            }
            if r.timestamp >= 0:
                kw["timestamp"] = r.timestamp
            if partition_mode == "same":
                kw["partition"] = r.partition
            while True:
                try:
                    p.produce(target_topic or r.topic, **kw)
                    break
                except BufferError:  # local queue full: let deliveries drain
                    p.poll(0.1)
            p.poll(0)
        remaining = p.flush(timeout_s)
        if remaining:
            failures.append(f"{remaining} record(s) undelivered after {timeout_s:.0f} s")
    done |= delivered
    info = {"bootstrap": bootstrap, "target_topic": target_topic, "partition_mode": partition_mode}
    for e in todo:
        ids = members[id(e)]
        if all(rid in done for rid in ids):
            mark_replayed(e, complete=True, info=info)
        else:
            mark_replayed(e, complete=False, offsets=[rid[1] for rid in ids if rid in delivered])
    print(
        f"replayed {len(delivered)} record(s) from {len(todo)} entr"
        f"{'y' if len(todo) == 1 else 'ies'} ({len(entries) - len(todo)} already replayed)",
        file=out,
    )
    for f in failures[:5]:
        print(f"delivery failed: {f}", file=sys.stderr)
    return len(delivered), len(plan) - len(delivered)


def cmd_replay(args: argparse.Namespace) -> int:
    entries = load_entries(log_dirs_of(args), args.topic)
    from odradek.cli.common import client_config  # noqa: PLC0415

    conf = client_config(args)
    conf.pop("bootstrap.servers", None)
    _, failed = replay(
        entries,
        args.bootstrap_server,
        partition_mode=args.partition_mode,
        target_topic=args.target_topic,
        dry_run=args.dry_run,
        force=args.force,
        timeout_s=args.timeout,
        client_conf=conf,
    )
    return 1 if failed else 0
