"""One internal error type that mirrors Kafka's wire error codes.

Every layer (storage, partition, replica manager, handlers) raises ``KafkaError``
with a Kafka error code; the request boundary (``odradek.server.handlers``) turns it
into the error field of the response. ``retriable`` comes from Kafka's own table (via
kio's ``ErrorCode``), so clients and our own tools agree on what to retry.
"""

from __future__ import annotations

from kio.schema.errors import ErrorCode

__all__ = ["ErrorCode", "InvalidRecordsError", "KafkaError", "error_name"]


def error_name(code: int) -> str:
    """Kafka's upper-case name for a wire error code, e.g. ``NOT_LEADER_OR_FOLLOWER``."""
    try:
        return ErrorCode(code).name.upper()
    except ValueError:
        return f"UNKNOWN_ERROR_{code}"


class KafkaError(Exception):
    """An error with a Kafka wire error code.

    ``KafkaError(ErrorCode.not_leader_or_follower, "partition t-0 is led by 2")``
    """

    __slots__ = ("code", "message")

    def __init__(self, code: ErrorCode, message: str = "") -> None:
        super().__init__(f"{error_name(code)}: {message}" if message else error_name(code))
        self.code: ErrorCode = ErrorCode(code)
        self.message = message

    @property
    def retriable(self) -> bool:
        return bool(self.code.retriable)


class InvalidRecordsError(KafkaError):
    """INVALID_RECORD naming the offending records of the batch (KIP-467: Produce v8+
    ``record_errors``; clients fail those records with INVALID_RECORD and the rest of
    the batch with a retriable "different record" error)."""

    __slots__ = ("record_errors",)

    def __init__(self, message: str, record_errors: list[tuple[int, str | None]]) -> None:
        super().__init__(ErrorCode.invalid_record, message)
        self.record_errors = record_errors
