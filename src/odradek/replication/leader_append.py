"""What a leader checks in a produce's batches before it appends them (pure of state
changes: each check raises Kafka's error, or reports what the append must do).

* **One batch** per partition in a client's Produce v3+ (Kafka's
  ``ProduceRequest.validateRecords``).
* **Producer state** (Kafka's ``UnifiedLog.analyzeAndValidateProducerState``): a retry
  of a batch already appended is answered with its original offsets; a transactional
  batch opens a transaction only with its KIP-890 verification guard.
* **Keys** on a compacted topic (Kafka's ``LogValidator``, REQ-R25).
"""

from __future__ import annotations

from odradek.errors import ErrorCode, InvalidRecordsError, KafkaError
from odradek.storage.batch import BatchHeader
from odradek.storage.log import AppendInfo
from odradek.storage.producer_state import ProducerStateManager

__all__ = ["check_batch_count", "check_producer_state", "require_keys"]


def check_batch_count(headers: list[BatchHeader]) -> None:
    """A client's Produce (v3+) must carry exactly one batch. The request handler's checks
    (the TransactionalId's ACL, KIP-890 verification) read the first batch only: a plain
    batch followed by a transactional one would open a transaction no coordinator knows
    of, pinning the LSO for good."""
    if len(headers) != 1:
        raise KafkaError(
            ErrorCode.invalid_record,
            "Produce requests are only allowed to contain exactly one record batch per partition"
            if headers
            else "Produce requests must have at least one record batch per partition",
        )


def check_producer_state(
    producers: ProducerStateManager,
    headers: list[BatchHeader],
    *,
    from_coordinator: bool,
    require_verification: bool,
    verification_guard: object | None,
    log_start_offset: int,
) -> tuple[bool, AppendInfo | None]:
    """Whether the batches are idempotent (their producer state must be updated after the
    append), and the answer to a duplicate (a retry of a batch already appended: success
    with its original offsets, nothing appended) or None."""
    if not any(h.producer_id >= 0 for h in headers):
        return False, None
    # Coordinator appends (transaction markers, transactional offset commits) carry no
    # sequence numbers: Kafka validates them only for client produces
    # (AppendOrigin.Coordinator). A transactional offset commit is verified.
    dup = None if from_coordinator else producers.check(headers)
    if dup is None:
        if require_verification:
            producers.check_verified(headers, verification_guard)
        return True, None
    return True, AppendInfo(
        first_offset=dup.first_offset,
        last_offset=dup.last_offset,
        max_timestamp=-1,
        offset_of_max_timestamp=-1,
        log_append_time=-1,
        num_batches=0,
        size_bytes=0,
        log_start_offset=log_start_offset,
    )


def require_keys(records: bytes | bytearray | memoryview, name: str) -> None:
    """Kafka's LogValidator: a compacted topic rejects records without a key (the cleaner
    could never dedupe them). Decodes record keys -- done only for cleanup.policy=compact
    topics, so the ordinary produce path stays header-only."""
    from odradek.storage.cleaner import keyless_records

    try:
        keyless = keyless_records(records if isinstance(records, bytes) else bytes(records))
    except KafkaError:
        raise
    except Exception as e:  # undecodable compressed payload
        raise KafkaError(ErrorCode.corrupt_message, f"cannot decode records: {e!r}") from e
    if keyless:
        message = f"Compacted topic cannot accept message without key in topic partition {name}."
        # KIP-467: name the records, so the client fails only those with INVALID_RECORD.
        raise InvalidRecordsError(message, [(i, message) for i in keyless])
