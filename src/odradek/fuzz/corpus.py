"""Valid requests for every served (API, version): the seeds the mutator starts from.

A mutation of a valid request reaches much deeper into the broker than random bytes: the
header, the version and most of the body still make sense, so the request passes framing
and often decoding, and the lie lands in a handler. ``build_corpus`` therefore makes,
for each (api_key, version) in ``protocol.versions.SERVED``, a few requests filled from
kio's own schema dataclasses with values that mean something to this broker: its topics
and partitions, group ids, valid record batches, short timeouts (a delayed operation
must not stall the fuzzer), valid topic configs. Encoding is kio's own writer, behind a
request header v1 or v2 as the schema says.

The topics the liveness check uses are never named here, so a mutated DeleteTopics or
AlterConfigs cannot take the liveness check down with it; internal topics are named only
by requests that must refuse or merely read them (Produce, DeleteRecords, reads).
"""

from __future__ import annotations

import io
import random
import uuid
from dataclasses import dataclass, fields
from datetime import timedelta
from typing import Any

from kio.index import load_request_schema
from kio.schema.request_header.v1.header import RequestHeader as RequestHeaderV1
from kio.schema.request_header.v2.header import RequestHeader as RequestHeaderV2
from kio.serial import entity_writer
from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    PrimitiveField,
    PrimitiveTupleField,
    classify_field,
    get_field_tag,
    is_optional,
)
from kio.static.primitive import i32

from odradek.protocol.versions import SERVED
from odradek.storage.records import (
    COMPRESSION_GZIP,
    COMPRESSION_LZ4,
    COMPRESSION_NONE,
    COMPRESSION_SNAPPY,
    COMPRESSION_ZSTD,
    encode_batch,
)

__all__ = ["CorpusEntry", "FUZZ_TOPICS", "build_corpus", "encode_request"]

# Topics the fuzz harness creates before it starts (2 partitions each).
FUZZ_TOPICS = ("fz-a", "fz-b")
_INTERNAL = "__consumer_offsets"
_GROUPS = ("fz-group", "fz-other", "")
_CONFIGS = {
    "retention.ms": ("86400000", "-1", "1000"),
    "cleanup.policy": ("delete", "compact", "compact,delete"),
    "max.message.bytes": ("1048588", "100"),
    "segment.bytes": ("1048576",),
    "min.insync.replicas": ("1",),
}
# APIs whose requests may name internal topics: they refuse writes or only read.
_MAY_NAME_INTERNAL = frozenset({0, 1, 2, 3, 21, 23})
_CODECS = (
    COMPRESSION_NONE,
    COMPRESSION_GZIP,
    COMPRESSION_SNAPPY,
    COMPRESSION_LZ4,
    COMPRESSION_ZSTD,
)


@dataclass(frozen=True, slots=True)
class CorpusEntry:
    api_key: int
    api_version: int
    payload: bytes  # request header + body, without the size prefix
    extreme: bool = False  # built with boundary values (see _Values)


def encode_request(entity: Any, correlation_id: int = 1, client_id: str | None = "fuzz") -> bytes:
    """Request header (v1 or v2, as the schema says) + body, with kio's writers."""
    cls = type(entity)
    header_cls = RequestHeaderV2 if cls.__header_schema__.__version__ >= 2 else RequestHeaderV1
    buf = io.BytesIO()
    entity_writer(header_cls)(
        buf,
        header_cls(
            request_api_key=cls.__api_key__,
            request_api_version=cls.__version__,
            correlation_id=i32(correlation_id),
            client_id=client_id,
        ),
    )
    entity_writer(cls)(buf, entity)
    return buf.getvalue()


# Well-formed but hostile values: what a request can say without being malformed.
_EXTREME_INTS: dict[str, tuple[int, ...]] = {
    "int8": (-128, -1, 0, 127),
    "int16": (-32768, -1, 0, 32767),
    "int32": (-2147483648, -1, 0, 2147483647),
    "int64": (-9223372036854775808, -1, 0, 9223372036854775807),
}
_EXTREME_STRINGS = (
    "",
    "..",
    "../x",
    ".",
    "a\n",
    "x" * 250,
    "\u00fc\u00f1\u00ef",
    "a/b",
    "__consumer_offsets",
    "fz-a\x00",
    " ",
)


class _Values:
    """Field values chosen by name, so requests mean something to the broker; with
    ``extreme`` set, a third of the values are boundary values instead (well-formed on the
    wire, hostile in meaning: Kafka must answer them with error codes)."""

    def __init__(self, rnd: random.Random, api_key: int, extreme: bool = False) -> None:
        self.rnd = rnd
        self.api_key = api_key
        self.extreme = extreme

    def _wild(self) -> bool:
        return self.extreme and self.rnd.random() < 0.33

    def topic(self) -> str:
        r = self.rnd.random()
        if r < 0.7:
            return self.rnd.choice(FUZZ_TOPICS)
        if r < 0.8 and self.api_key in _MAY_NAME_INTERNAL:
            return _INTERNAL
        return f"fz-{self.rnd.randrange(1000)}"

    def primitive(self, name: str, kafka_type: str, owner: str) -> Any:
        rnd = self.rnd
        if self._wild():
            if kafka_type in _EXTREME_INTS:
                return rnd.choice(_EXTREME_INTS[kafka_type])
            if kafka_type == "string":
                return rnd.choice(_EXTREME_STRINGS)
            if kafka_type == "timedelta_i32":
                return timedelta(milliseconds=rnd.choice((-1, 0, 2147483647)))
        if kafka_type == "records":
            n = rnd.randrange(1, 4)
            return encode_batch(
                [
                    (b"k%d" % i if rnd.random() < 0.5 else None, b"v" * rnd.randrange(0, 200))
                    for i in range(n)
                ],
                compression=rnd.choice(_CODECS),
            )
        if kafka_type in ("timedelta_i32", "timedelta_i64"):
            if name == "session_timeout":
                return timedelta(milliseconds=rnd.choice((6000, 10000, 1000)))
            if name == "retention_time":
                return timedelta(milliseconds=rnd.choice((-1, 60000)))
            if name == "transaction_timeout":
                return timedelta(milliseconds=60000)
            return timedelta(milliseconds=rnd.choice((0, 0, 10, 100)))  # short waits
        if kafka_type == "string":
            return self.string(name, owner)
        if kafka_type == "bytes":
            return bytes(rnd.getrandbits(8) for _ in range(rnd.randrange(0, 24)))
        if kafka_type == "uuid":
            return uuid.UUID(int=0) if rnd.random() < 0.7 else uuid.UUID(int=rnd.getrandbits(128))
        if kafka_type == "bool":
            return rnd.random() < 0.5
        return self.integer(name, kafka_type)

    def string(self, name: str, owner: str) -> str | None:
        rnd = self.rnd
        if name in ("topic", "topic_names") or (name == "name" and "Config" not in owner):
            return self.topic()
        if name == "resource_name":
            return rnd.choice((*FUZZ_TOPICS, "1", ""))
        if name == "name" or name == "configuration_keys":
            return rnd.choice(tuple(_CONFIGS))
        if name == "value":
            return rnd.choice(sum(_CONFIGS.values(), ()))
        if name in ("group_id", "groups", "groups_names", "key"):
            return rnd.choice(_GROUPS)
        if name == "protocol_type":
            return "consumer"
        if name == "protocol_name":
            return rnd.choice(("range", "roundrobin"))
        if name in ("member_id", "group_instance_id"):
            return rnd.choice(("", "m-1", "fuzz-" + str(rnd.randrange(10))))
        if name == "states_filter":
            return rnd.choice(("Stable", "Empty"))
        if name == "transactional_id" and owner in ("ProduceRequest", "InitProducerIdRequest"):
            return None if rnd.random() < 0.9 else "fz-txn"  # nullable only there
        if name.endswith("transactional_id") or name == "transactional_ids":
            return "fz-txn"
        if name == "mechanism":
            return rnd.choice(("PLAIN", "SCRAM-SHA-256"))
        return "".join(rnd.choice("abcxyz-_.0") for _ in range(rnd.randrange(0, 12)))

    def integer(self, name: str, kafka_type: str) -> int:
        rnd = self.rnd
        if name in ("partition", "partition_index", "index", "partitions", "partition_indexes"):
            return rnd.choice((0, 1, 0, 1, 2, -1, 7))
        if name == "acks":
            return rnd.choice((-1, 1, 1, 0))
        if name == "replica_id":
            return rnd.choice((-1, -1, -1, 1))
        if name == "num_partitions":
            return rnd.choice((1, 2, 3, -1))
        if name == "replication_factor":
            return rnd.choice((1, -1))
        if name == "count":
            return rnd.choice((3, 4, 5))
        if name == "broker_ids":
            return 1
        if name in ("resource_type", "resource_type_filter"):
            return rnd.choice((2, 4, 2))
        if name == "config_operation":
            return rnd.choice((0, 1, 2, 3))
        if name in ("max_bytes", "partition_max_bytes", "min_bytes"):
            return rnd.choice((1, 1024, 1 << 20))
        if name in ("fetch_offset", "offset", "committed_offset", "timestamp"):
            return rnd.choice((0, 1, 5, -1, -2))
        if name in (
            "current_leader_epoch",
            "leader_epoch",
            "last_fetched_epoch",
            "committed_leader_epoch",
            "generation_id",
            "generation_id_or_member_epoch",
            "session_epoch",
            "producer_epoch",
            "producer_id",
            "log_start_offset",
        ):
            return rnd.choice((-1, 0, 1))
        if name == "session_id":
            return rnd.choice((0, 0, 1))
        if name == "election_type":
            return rnd.choice((0, 1))
        if name == "endpoint_type":
            return rnd.choice((1, 2))
        if name == "key_type":
            return rnd.choice((0, 0, 1))
        limit = {"int8": 1 << 7, "int16": 1 << 15, "int32": 1 << 31, "int64": 1 << 63}.get(
            kafka_type, 1 << 7
        )
        return rnd.choice((0, 1, 2, min(100, limit - 1)))

    def entity(self, cls: type, depth: int = 0) -> Any:
        rnd = self.rnd
        kwargs: dict[str, Any] = {}
        for f in fields(cls):
            if f.name.startswith("__") or get_field_tag(f) is not None:
                continue
            fc = classify_field(f)
            nullable = is_optional(f)
            if nullable and rnd.random() < 0.1:
                kwargs[f.name] = None
            elif isinstance(fc, PrimitiveField):
                kwargs[f.name] = self.primitive(f.name, f.metadata["kafka_type"], cls.__name__)
            elif isinstance(fc, PrimitiveTupleField):
                kwargs[f.name] = tuple(
                    self.primitive(f.name, f.metadata["kafka_type"], cls.__name__)
                    for _ in range(rnd.randrange(0, 3))
                )
            elif isinstance(fc, EntityField):
                kwargs[f.name] = self.entity(fc.type_, depth + 1)
            else:
                assert isinstance(fc, EntityTupleField)
                n = rnd.randrange(1, 3) if depth < 3 else 0
                if self._wild():
                    n = rnd.choice((0, 0, 6)) if depth < 3 else 0
                kwargs[f.name] = tuple(self.entity(fc.type_, depth + 1) for _ in range(n))
        return cls(**kwargs)


def build_corpus(
    seed: int = 0, per_version: int = 3, extreme_per_version: int = 4
) -> list[CorpusEntry]:
    """``per_version`` valid requests for every served (api_key, version), plus
    ``extreme_per_version`` well-formed ones full of boundary values."""
    rnd = random.Random(seed)
    out: list[CorpusEntry] = []
    for api_key, (lo, hi) in sorted(SERVED.items()):
        plain, extreme = _Values(rnd, api_key), _Values(rnd, api_key, extreme=True)
        for version in range(lo, hi + 1):
            cls = load_request_schema(api_key, version)
            for _ in range(per_version):
                out.append(CorpusEntry(api_key, version, encode_request(plain.entity(cls))))
            for _ in range(extreme_per_version):
                try:
                    payload = encode_request(extreme.entity(cls))
                except (ValueError, OverflowError, TypeError):
                    continue  # a value kio cannot encode in this field (e.g. a null)
                out.append(CorpusEntry(api_key, version, payload, extreme=True))
    return out
