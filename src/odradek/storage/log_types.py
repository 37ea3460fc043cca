"""The plain value types of a partition log: its config, an append's result, a file slice.

Kept apart from ``odradek.storage.log`` so modules that only pass these around (config
mapping, protocol encoders, the cleaner) do not import the log machinery.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass

from odradek.errors import ErrorCode, KafkaError

__all__ = ["LogConfig", "AppendInfo", "FileSlice"]


@dataclass
class LogConfig:
    """Kafka's topic-level names: segment.bytes, segment.ms, index.interval.bytes,
    segment.index.bytes, max.message.bytes, message.timestamp.type,
    flush.messages, flush.ms (None = leave flushing to the OS, Kafka's default)."""

    segment_bytes: int = 1073741824
    segment_ms: int = 604800000
    index_interval_bytes: int = 4096
    segment_index_bytes: int = 10485760
    max_message_bytes: int = 1048588
    message_timestamp_type: str = "CreateTime"
    # compression.type: "producer" keeps each batch's codec; a codec name makes the
    # leader recompress batches in another codec (odradek.storage.recompression).
    compression_type: str = "producer"
    flush_messages: int | None = None
    flush_ms: int | None = None
    # odradek.ack.fsync (beyond Kafka): produce is acknowledged only once durable; the
    # broker's group-commit flusher (odradek.log_manager.flusher) fsyncs after every append.
    ack_fsync: bool = False
    # Log compaction (REQ-R25, odradek.storage.cleaner): cleanup.policy is Kafka's LIST
    # ("compact", "delete" or both); the rest are the cleaner's topic-level settings.
    cleanup_policy: Sequence[str] = ("delete",)
    min_cleanable_dirty_ratio: float = 0.5
    min_compaction_lag_ms: int = 0
    max_compaction_lag_ms: int = 9223372036854775807
    delete_retention_ms: int = 86400000
    # Retention (REQ-R24, odradek.storage.retention): -1 = unlimited. Read from
    # ``log.config`` at every check (dynamic topic configs replace the LogConfig).
    retention_ms: int = 604800000
    retention_bytes: int = -1
    # file.delete.delay.ms: a deleted segment's files are renamed to .deleted at once
    # and closed/unlinked this much later (a FileSlice may still be being sent).
    file_delete_delay_ms: int = 60000

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
