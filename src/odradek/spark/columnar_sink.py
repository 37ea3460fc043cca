"""The sink's columnar write path (``odradek.client=columnar``, issue 17 item 2).

An Arrow batch from Spark becomes record batches v2 without a Python object per row:

1. ``ArrowRows`` takes the buffers of the ``value``/``key``/``topic``/``partition``/
   ``headers`` columns as they are (offsets + bytes + validity; no copy).
2. Each row gets its partition the way a Kafka producer chooses it: the ``partition``
   column when set; else Java's murmur2 of the key (``toPositive(murmur2(key)) % n``,
   compiled); else, for keyless rows, a sticky partition that moves on after each
   ``batch.size`` bytes (the uniform sticky partitioner of KIP-794).
3. Rows are grouped by (topic, partition) with a stable sort (per-partition order is
   the input order), cut into batches of at most ``batch.size`` bytes and
   ``batch.num.messages`` records, encoded by the compiled record encoder (plus the
   replay tag header for the exactly-once streaming sink), compressed with
   ``compression.type``, and handed to the idempotent ``BatchProducer``.

The row digest of the replay tag (``batch_digests``) is XXH64 over the same
length-prefixed fields on both clients, so a micro-batch replayed with the other client
still recognises what an earlier attempt wrote.
"""

from __future__ import annotations

import logging
import random
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from odradek.client.producer import BatchProducer, ProduceConfig
from odradek.errors import ErrorCode, KafkaError
from odradek.spark.offsets import SparkOptionError, client_security
from odradek.storage.records import (
    COMPRESSION_GZIP,
    COMPRESSION_LZ4,
    COMPRESSION_NONE,
    COMPRESSION_SNAPPY,
    COMPRESSION_ZSTD,
    compress_payload,
)

__all__ = [
    "ArrowRows",
    "ColumnarWriter",
    "batch_digests",
    "not_written_before",
    "produce_settings",
    "ProduceSettings",
    "TAG_KEY",
]

logger = logging.getLogger(__name__)

TAG_KEY = b"odradek.sink"
_CODECS = {
    "none": COMPRESSION_NONE,
    "gzip": COMPRESSION_GZIP,
    "snappy": COMPRESSION_SNAPPY,
    "lz4": COMPRESSION_LZ4,
    "zstd": COMPRESSION_ZSTD,
}
_EMPTY_I32 = np.zeros(1, np.int32)
_EMPTY_U8 = np.zeros(1, np.uint8)
_EMPTY_BOOL = np.zeros(1, np.bool_)
for _a in (_EMPTY_I32, _EMPTY_U8, _EMPTY_BOOL):
    _a.setflags(write=False)


def _ro(a: np.ndarray) -> np.ndarray:
    """Read-only: the compiled kernels then see one array type per argument (one
    compilation), whether the buffer came from Arrow (read-only) or from numpy."""
    a.setflags(write=False)
    return a


def _binary_buffers(arr: pa.Array | None, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(offsets int32[n+1], bytes, validity) of a string/binary column, without copying
    the bytes; a missing column is all null."""
    if arr is None:
        return _ro(np.zeros(n + 1, np.int32)), _EMPTY_U8, _ro(np.zeros(n, np.bool_))
    if pa.types.is_large_binary(arr.type) or pa.types.is_large_string(arr.type):
        arr = arr.cast(pa.binary())
    bufs = arr.buffers()
    offs = np.frombuffer(bufs[1], np.int32)[arr.offset : arr.offset + n + 1] if n else _EMPTY_I32
    data = np.frombuffer(bufs[2], np.uint8) if bufs[2] is not None and bufs[2].size else _EMPTY_U8
    valid = (
        arr.is_valid().to_numpy(zero_copy_only=False) if arr.null_count else np.ones(n, np.bool_)
    )
    return _ro(offs), _ro(data), _ro(valid)


@dataclass
class ArrowRows:
    """The columns of one Spark Arrow batch as flat buffers."""

    n: int
    topic_ids: np.ndarray  # int64 index into ``topics``
    topics: list[str]
    key: tuple[np.ndarray, np.ndarray, np.ndarray]
    value: tuple[np.ndarray, np.ndarray, np.ndarray]
    partition: np.ndarray  # int64, -1 where null
    hdr_offs: np.ndarray  # int32[n+1] into the header arrays
    hkey: tuple[np.ndarray, np.ndarray, np.ndarray]
    hval: tuple[np.ndarray, np.ndarray, np.ndarray]
    partition_text: tuple[np.ndarray, np.ndarray, np.ndarray]

    @classmethod
    def from_batch(cls, batch: pa.RecordBatch, default_topic: str | None) -> ArrowRows:
        cols = {name.lower(): batch.column(i) for i, name in enumerate(batch.schema.names)}
        n = batch.num_rows
        if default_topic is not None:
            topics, topic_ids = [default_topic], np.zeros(n, np.int64)
        else:
            col = cols.get("topic")
            if col is None or col.null_count:
                raise KafkaError(
                    ErrorCode.invalid_topic_exception,
                    "null topic present in the data. Use the topic option for "
                    "setting a default topic.",
                )
            enc = pc.dictionary_encode(col)
            topics = enc.dictionary.to_pylist()
            topic_ids = enc.indices.to_numpy(zero_copy_only=False).astype(np.int64)
        part = cols.get("partition")
        if part is None:
            partition, part_text = np.full(n, -1, np.int64), _binary_buffers(None, n)
        else:
            partition = part.fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64)
            part_text = _binary_buffers(part.cast(pa.string()), n)
        hdr_offs, hkey, hval = _headers(cols.get("headers"), n)
        return cls(
            n,
            _ro(topic_ids),
            topics,
            _binary_buffers(cols.get("key"), n),
            _binary_buffers(cols.get("value"), n),
            partition,
            hdr_offs,
            hkey,
            hval,
            part_text,
        )

    def topic_table(self) -> tuple[np.ndarray, np.ndarray]:
        raw = [t.encode() for t in self.topics]
        offs = np.zeros(len(raw) + 1, np.int32)
        offs[1:] = np.cumsum([len(r) for r in raw])
        return _ro(offs), _ro(np.frombuffer(b"".join(raw) or b"\0", np.uint8).copy())


def _headers(col: pa.Array | None, n: int) -> tuple[np.ndarray, tuple, tuple]:
    if col is None or col.null_count == n:
        return (_ro(np.zeros(n + 1, np.int32)), _binary_buffers(None, 0), _binary_buffers(None, 0))
    offs = np.frombuffer(col.buffers()[1], np.int32)[col.offset : col.offset + n + 1]
    if col.null_count:
        # A null list has no headers; Arrow lets its slot span entries anyway (rare):
        # rebuild the column then.
        valid = col.is_valid().to_numpy(zero_copy_only=False)
        if (np.diff(offs)[~valid] != 0).any():
            col = pa.array([h or [] for h in col.to_pylist()], col.type)
            offs = np.frombuffer(col.buffers()[1], np.int32)[col.offset : col.offset + n + 1]
    entries = col.values
    if entries.null_count:
        raise KafkaError(ErrorCode.invalid_record, "a header entry is null")
    keys, values = entries.flatten()
    if keys.null_count:
        raise KafkaError(ErrorCode.invalid_record, "a header key is null")
    m = len(entries)
    return _ro(np.ascontiguousarray(offs)), _binary_buffers(keys, m), _binary_buffers(values, m)


def batch_digests(rows: ArrowRows) -> np.ndarray:
    """The replay tag's 64-bit digest of every row (see ``kernels.xxh64_rows``)."""
    n = rows.n
    t_offs, t_bytes = rows.topic_table()
    lens = (
        np.diff(rows.key[0]).astype(np.int64)
        + np.diff(rows.value[0])
        + np.diff(rows.partition_text[0])
        + (np.diff(t_offs)[rows.topic_ids] if n else 0)
    )
    if int(rows.hdr_offs[-1]):
        per_header = np.diff(rows.hkey[0]).astype(np.int64) + np.diff(rows.hval[0]) + 6
        cum = np.concatenate([[0], np.cumsum(per_header)])
        lens = lens + cum[rows.hdr_offs[1:]] - cum[rows.hdr_offs[:-1]]
    scratch = np.empty(int(lens.max(initial=0)) + 32, np.uint8)
    out = np.empty(n, np.uint64)
    k.xxh64_rows(
        rows.topic_ids,
        t_offs,
        t_bytes,
        *rows.key,
        *rows.value,
        *rows.partition_text,
        rows.hdr_offs,
        rows.hkey[0],
        rows.hkey[1],
        *rows.hval,
        scratch,
        out,
    )
    return out


# --------------------------------------------------------------------------- settings


@dataclass(frozen=True)
class ProduceSettings:
    codec: int
    batch_bytes: int
    batch_records: int
    producer: ProduceConfig


def _positive(conf: Mapping[str, str], name: str, default: int) -> int:
    raw = conf.get(name)
    if raw is None:
        return default
    try:
        v = int(raw)
    except ValueError:
        raise SparkOptionError(f"option 'kafka.{name}' must be an integer, got {raw!r}") from None
    if v <= 0:
        raise SparkOptionError(f"option 'kafka.{name}' must be positive, got {raw!r}")
    return v


def produce_settings(conf: Mapping[str, str]) -> ProduceSettings:
    """The ``kafka.*`` producer options the columnar client honours (librdkafka's names
    and defaults, so one set of options means the same on both clients)."""
    codec_name = str(conf.get("compression.type", conf.get("compression.codec", "none"))).lower()
    if codec_name not in _CODECS:
        raise SparkOptionError(
            f"option 'kafka.compression.type' must be one of "
            f"{', '.join(_CODECS)}, got {codec_name!r}"
        )
    acks = str(conf.get("acks", conf.get("request.required.acks", "all"))).lower()
    if acks not in ("all", "-1"):
        raise SparkOptionError(
            f"the odradek sink's producer is idempotent: kafka.acks must be all (-1), got {acks!r}"
        )
    if str(conf.get("enable.idempotence", "true")).lower() != "true":
        raise SparkOptionError(
            "kafka.enable.idempotence=false is not supported by "
            "odradek.client=columnar (use odradek.client=confluent)"
        )
    max_message = _positive(conf, "message.max.bytes", 1_000_000)
    in_flight = min(_positive(conf, "max.in.flight.requests.per.connection", 5), 5)
    return ProduceSettings(
        codec=_CODECS[codec_name],
        batch_bytes=min(_positive(conf, "batch.size", 1_000_000), max_message),
        batch_records=_positive(conf, "batch.num.messages", 10_000),
        producer=ProduceConfig(
            acks=-1,
            request_timeout_ms=_positive(conf, "request.timeout.ms", 30_000),
            delivery_timeout_s=_positive(
                conf, "delivery.timeout.ms", _positive(conf, "message.timeout.ms", 300_000)
            )
            / 1000,
            max_in_flight=in_flight,
            retry_backoff_s=_positive(conf, "retry.backoff.ms", 100) / 1000,
            max_request_bytes=max_message,
            client_id=str(conf.get("client.id", "odradek-spark-sink")),
            socket_timeout_s=_positive(conf, "socket.timeout.ms", 60_000) / 1000,
            security=client_security(conf),
        ),
    )


# --------------------------------------------------------------------------- writer


def not_written_before(digests: np.ndarray, already: Counter[str]) -> np.ndarray:
    """The rows of a replayed batch that earlier attempts did not write: ``already`` is the
    multiset of their tags' digests (16 hex digits); a digest seen k times there skips its
    first k rows here (rows that legitimately repeat are kept the right number of times),
    and ``already`` is decremented by what was skipped, so later batches of the task see
    the rest. Whole-array work: a replay of a large micro-batch made a Python string and a
    Counter lookup per row before."""
    n = digests.shape[0]
    keep = np.ones(n, np.bool_)
    keys = [h for h, c in already.items() if c > 0 and len(h) == 16]
    values: list[int] = []
    for h in list(keys):
        try:
            values.append(int(h, 16))
        except ValueError:  # not a tag this sink wrote: it matches no row
            keys.remove(h)
    if n == 0 or not keys:
        return keep
    kv = np.array(values, np.uint64)
    order = np.argsort(kv)
    kv = kv[order]
    kc = np.array([already[keys[i]] for i in order], np.int64)
    at = np.minimum(np.searchsorted(kv, digests), kv.shape[0] - 1)
    rows = np.flatnonzero(kv[at] == digests)
    if rows.shape[0] == 0:
        return keep
    # Each hit row's rank among the earlier rows with its digest (0 for the first).
    by = np.argsort(digests[rows], kind="stable")
    d = digests[rows][by]
    first = np.concatenate([[0], np.flatnonzero(d[1:] != d[:-1]) + 1])
    sizes = np.diff(np.concatenate([first, [d.shape[0]]]))
    rank = np.empty(rows.shape[0], np.int64)
    rank[by] = np.arange(d.shape[0]) - np.repeat(first, sizes)
    skip = rank < kc[at[rows]]
    keep[rows[skip]] = False
    used = np.bincount(at[rows][skip], minlength=kv.shape[0])
    for i in np.flatnonzero(used).tolist():
        already[keys[int(order[i])]] -= int(used[i])
    return keep


_MIN_RECORD_OVERHEAD = 12  # framing bytes a record adds beyond key, value and headers


class _Kernels:
    """``odradek.client.kernels``, imported on first use: importing numba takes ~0.3 s,
    which the driver (planning, option checks) should not pay."""

    def __getattr__(self, name: str) -> Any:
        from odradek.client import kernels

        return getattr(kernels, name)


k = _Kernels()


class ColumnarWriter:
    """Writes Arrow batches as record batches through one idempotent producer."""

    def __init__(self, bootstrap_servers: str, settings: ProduceSettings) -> None:
        self.settings = settings
        self.producer = BatchProducer(bootstrap_servers, settings.producer)
        self._sticky: dict[str, int] = {}
        self.batches = 0

    def close(self) -> None:
        self.producer.close()

    def flush(self) -> None:
        self.producer.flush()

    def write(
        self,
        rows: ArrowRows,
        keep: np.ndarray | None = None,
        *,
        tag_prefix: bytes | None = None,
        digests: np.ndarray | None = None,
        before_topic: Callable[[str], None] | None = None,
    ) -> int:
        """Queue the rows selected by ``keep`` (all when None); returns how many.

        ``tag_prefix`` + ``digests``: the replay tag header of the exactly-once sink.
        ``before_topic(t)`` runs before the first batch of this call to topic t.
        """
        selected = np.arange(rows.n, dtype=np.int64) if keep is None else np.flatnonzero(keep)
        if selected.shape[0] == 0:
            return 0
        parts = self._partitions(rows, selected)
        topic_ids = rows.topic_ids[selected]
        group = (topic_ids << 32) | parts
        order = np.argsort(group, kind="stable")
        sorted_group = group[order]
        cuts = np.flatnonzero(np.diff(sorted_group)) + 1
        starts = np.concatenate([[0], cuts])
        ends = np.concatenate([cuts, [order.shape[0]]])
        use_tag = tag_prefix is not None
        prefix = _ro(np.frombuffer(tag_prefix or b"", np.uint8).copy())
        tag_key = _ro(np.frombuffer(TAG_KEY, np.uint8).copy())
        dig = digests if digests is not None else np.zeros(1, np.uint64)
        seen_topics: set[int] = set()
        for a, b in zip(starts.tolist(), ends.tolist(), strict=True):
            idx = selected[order[a:b]]
            tid, part = int(topic_ids[order[a]]), int(parts[order[a]])
            topic = rows.topics[tid]
            if tid not in seen_topics:
                seen_topics.add(tid)
                if before_topic is not None:
                    before_topic(topic)
            self._encode_partition(rows, idx, topic, part, prefix, tag_key, dig, use_tag)
        return int(selected.shape[0])

    def _partitions(self, rows: ArrowRows, selected: np.ndarray) -> np.ndarray:
        parts = rows.partition[selected].copy()
        counts = np.array([self.producer.partition_count(t) for t in rows.topics], np.int64)
        n_for_row = counts[rows.topic_ids[selected]]
        bad = (parts >= n_for_row) | (parts < -1)
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise KafkaError(
                ErrorCode.unknown_topic_or_partition,
                f"Invalid partition given with record: {int(parts[i])} is not in "
                f"the range [0...{int(n_for_row[i])}]",
            )
        key_valid = rows.key[2][selected]
        keyed = (parts < 0) & key_valid
        if keyed.any():
            hashes = np.empty(rows.n, np.int64)
            k.murmur2_keys(rows.key[0], rows.key[1], hashes)
            parts[keyed] = hashes[selected[keyed]] % n_for_row[keyed]
        keyless = parts < 0
        if keyless.any():
            parts[keyless] = self._sticky_partitions(
                rows, selected[keyless], rows.topic_ids[selected[keyless]], counts
            )
        return parts

    def _sticky_partitions(
        self, rows: ArrowRows, idx: np.ndarray, tids: np.ndarray, counts: np.ndarray
    ) -> np.ndarray:
        """KIP-794: keyless records fill one partition's batch, then move to the next."""
        out = np.empty(idx.shape[0], np.int64)
        size = (
            np.diff(rows.value[0])[idx].astype(np.int64)
            + np.diff(rows.key[0])[idx]
            + _MIN_RECORD_OVERHEAD
        )
        for tid in np.unique(tids).tolist():
            sel = tids == tid
            topic, n = rows.topics[tid], int(counts[tid])
            start = self._sticky.get(topic)
            if start is None:
                start = random.randrange(n)
            chunk = np.cumsum(size[sel]) // self.settings.batch_bytes
            out[sel] = (start + chunk) % n
            self._sticky[topic] = int((start + int(chunk[-1]) + 1) % n)
        return out

    def _encode_partition(
        self,
        rows: ArrowRows,
        idx: np.ndarray,
        topic: str,
        partition: int,
        prefix: np.ndarray,
        tag_key: np.ndarray,
        digests: np.ndarray,
        use_tag: bool,
    ) -> None:
        s = self.settings
        sizes = np.empty(idx.shape[0], np.int64)
        k.record_sizes(
            idx,
            rows.key[0],
            rows.key[2],
            rows.value[0],
            rows.value[2],
            rows.hdr_offs,
            rows.hkey[0],
            rows.hval[0],
            rows.hval[2],
            prefix,
            tag_key,
            use_tag,
            sizes,
        )
        cum = np.cumsum(sizes)
        budget = s.batch_bytes - k.HEADER_SIZE
        at, total = 0, idx.shape[0]
        while at < total:
            base = int(cum[at - 1]) if at else 0
            end = int(np.searchsorted(cum, base + budget, side="right"))
            end = min(max(end, at + 1), at + s.batch_records, total)
            chunk = idx[at:end]
            # The records go straight after room for the batch header, which the producer
            # then writes in place (``append_framed``): no second buffer, no copy.
            out = np.empty(k.HEADER_SIZE + int(cum[end - 1]) - base + 16, np.uint8)
            starts = np.empty(chunk.shape[0] + 1, np.int64)
            used = k.encode_records(
                chunk,
                rows.key[0],
                rows.key[1],
                rows.key[2],
                rows.value[0],
                rows.value[1],
                rows.value[2],
                rows.hdr_offs,
                rows.hkey[0],
                rows.hkey[1],
                rows.hval[0],
                rows.hval[1],
                rows.hval[2],
                prefix,
                tag_key,
                digests,
                use_tag,
                out[k.HEADER_SIZE :],
                starts,
            )
            now = int(time.time() * 1000)
            if s.codec == COMPRESSION_NONE:
                self.producer.append_framed(
                    topic,
                    partition,
                    out[: k.HEADER_SIZE + used].data,
                    chunk.shape[0],
                    codec=s.codec,
                    first_timestamp=now,
                    max_timestamp=now,
                )
            else:
                self.producer.append(
                    topic,
                    partition,
                    compress_payload(s.codec, bytes(out[k.HEADER_SIZE : k.HEADER_SIZE + used])),
                    chunk.shape[0],
                    codec=s.codec,
                    first_timestamp=now,
                    max_timestamp=now,
                )
            self.batches += 1
            at = end
