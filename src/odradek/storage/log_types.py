"""The plain value types of a partition log: its config, an append's result, a file slice.

Kept apart from ``odradek.storage.log`` so modules that only pass these around (config
mapping, protocol encoders, the cleaner) do not import the log machinery.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from odradek.configdefs import TOPIC_CONFIGS
from odradek.errors import ErrorCode, KafkaError

__all__ = ["LogConfig", "AppendInfo", "FileSlice"]


def _default(name: str) -> Any:
    """A topic setting's default, parsed, from the one table (configdefs.py), so no
    default is written twice (issue 16). flush.messages / flush.ms stay None here:
    Kafka's default (Long.MAX_VALUE) means "leave flushing to the OS"."""
    d = TOPIC_CONFIGS[name]
    return d.parse(d.default)


@dataclass
class LogConfig:
    """Kafka's topic-level names: segment.bytes, segment.ms, index.interval.bytes,
    segment.index.bytes, max.message.bytes, message.timestamp.type,
    flush.messages, flush.ms (None = leave flushing to the OS, Kafka's default)."""

    segment_bytes: int = _default("segment.bytes")
    segment_ms: int = _default("segment.ms")
    index_interval_bytes: int = _default("index.interval.bytes")
    segment_index_bytes: int = _default("segment.index.bytes")
    max_message_bytes: int = _default("max.message.bytes")
    message_timestamp_type: str = _default("message.timestamp.type")
    # compression.type: "producer" keeps each batch's codec; a codec name makes the
    # leader recompress batches in another codec (odradek.storage.recompression).
    compression_type: str = _default("compression.type")
    flush_messages: int | None = None
    flush_ms: int | None = None
    # odradek.ack.fsync (beyond Kafka): produce is acknowledged only once durable; the
    # broker's group-commit flusher (odradek.log_manager.flusher) fsyncs after every append.
    ack_fsync: bool = _default("odradek.ack.fsync")
    # Confluent Server's broker-side schema id validation (issue 27): checked by the
    # produce handler (odradek.server.schema_validation) before the append.
    key_schema_validation: bool = _default("confluent.key.schema.validation")
    value_schema_validation: bool = _default("confluent.value.schema.validation")
    key_subject_name_strategy: str = _default("confluent.key.subject.name.strategy")
    value_subject_name_strategy: str = _default("confluent.value.subject.name.strategy")
    # Log compaction (REQ-R25, odradek.storage.cleaner): cleanup.policy is Kafka's LIST
    # ("compact", "delete" or both); the rest are the cleaner's topic-level settings.
    cleanup_policy: Sequence[str] = tuple(_default("cleanup.policy"))
    min_cleanable_dirty_ratio: float = _default("min.cleanable.dirty.ratio")
    min_compaction_lag_ms: int = _default("min.compaction.lag.ms")
    max_compaction_lag_ms: int = _default("max.compaction.lag.ms")
    delete_retention_ms: int = _default("delete.retention.ms")
    # Retention (REQ-R24, odradek.storage.retention): -1 = unlimited. Read from
    # ``log.config`` at every check (dynamic topic configs replace the LogConfig).
    retention_ms: int = _default("retention.ms")
    retention_bytes: int = _default("retention.bytes")
    # file.delete.delay.ms: a deleted segment's files are renamed to .deleted at once
    # and closed/unlinked this much later (a FileSlice may still be being sent).
    file_delete_delay_ms: int = _default("file.delete.delay.ms")

    @property
    def compact(self) -> bool:
        return "compact" in self.cleanup_policy

    @property
    def delete(self) -> bool:
        """cleanup.policy contains "delete": retention by time/size applies (REQ-R24)."""
        return "delete" in self.cleanup_policy


@dataclass
class AppendInfo:
    first_offset: int
    last_offset: int
    max_timestamp: int
    offset_of_max_timestamp: int
    log_append_time: int  # -1 unless the topic uses LogAppendTime
    num_batches: int
    size_bytes: int
    log_start_offset: int


@dataclass(frozen=True, slots=True)
class FileSlice:
    """Whole batches at [position, position+size) of an open segment file."""

    fd: int
    position: int
    size: int

    def read_bytes(self) -> bytes:
        data = os.pread(self.fd, self.size, self.position)
        if len(data) == self.size:
            return data  # the usual case: one read, no extra copy
        out = bytearray(data)
        while len(out) < self.size:
            chunk = os.pread(self.fd, self.size - len(out), self.position + len(out))
            if not chunk:
                raise KafkaError(ErrorCode.kafka_storage_error, "short read from segment")
            out += chunk
        return bytes(out)
