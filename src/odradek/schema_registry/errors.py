"""Confluent's REST error codes: an HTTP status plus an ``error_code`` that clients branch on
(confluent-kafka's SchemaRegistryError carries both)."""

from __future__ import annotations

__all__ = [
    "RegistryError",
    "subject_not_found",
    "version_not_found",
    "schema_not_found",
    "invalid_schema",
    "invalid_version",
    "invalid_compatibility_level",
    "invalid_mode",
    "incompatible",
    "subject_soft_deleted",
    "subject_not_soft_deleted",
    "schema_version_soft_deleted",
    "schema_version_not_soft_deleted",
    "operation_not_permitted",
    "referenced_by_others",
    "bad_request",
    "store_error",
]


class RegistryError(Exception):
    """An error answered as ``{"error_code": code, "message": message}`` with ``status``."""

    def __init__(
        self, status: int, code: int, message: str, headers: dict[str, str] | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.headers = headers or {}  # e.g. a 401's WWW-Authenticate

    def body(self) -> dict[str, object]:
        return {"error_code": self.code, "message": self.message}


def subject_not_found(subject: str) -> RegistryError:
    return RegistryError(404, 40401, f"Subject '{subject}' not found.")


def version_not_found(version: object) -> RegistryError:
    return RegistryError(404, 40402, f"Version {version} not found.")


def schema_not_found(detail: str = "Schema not found") -> RegistryError:
    return RegistryError(404, 40403, detail)


def subject_soft_deleted(subject: str) -> RegistryError:
    return RegistryError(
        404,
        40404,
        f"Subject '{subject}' was soft deleted.Set permanent=true to delete permanently",
    )


def subject_not_soft_deleted(subject: str) -> RegistryError:
    return RegistryError(
        404,
        40405,
        f"Subject '{subject}' was not deleted first before being permanently deleted",
    )


def schema_version_soft_deleted(subject: str, version: int) -> RegistryError:
    return RegistryError(
        404,
        40406,
        f"Subject '{subject}' Version {version} was soft deleted.Set permanent=true to "
        "delete permanently",
    )


def schema_version_not_soft_deleted(subject: str, version: int) -> RegistryError:
    return RegistryError(
        404,
        40407,
        f"Subject '{subject}' Version {version} was not deleted first before being "
        "permanently deleted",
    )


def invalid_schema(detail: str) -> RegistryError:
    return RegistryError(422, 42201, f"Invalid schema: {detail}")


def invalid_version(version: object) -> RegistryError:
    return RegistryError(
        422,
        42202,
        f"The specified version '{version}' is not a valid version id. Allowed values are "
        "between [1, 2^31-1] and the string \"latest\"",
    )


def invalid_compatibility_level(level: object) -> RegistryError:
    return RegistryError(
        422,
        42203,
        f"Invalid compatibility level. Valid values are none, backward, forward, full, "
        f"backward_transitive, forward_transitive, and full_transitive (got {level!r})",
    )


def invalid_mode(mode: object) -> RegistryError:
    return RegistryError(
        422, 42204, f"Invalid mode. Valid values are READWRITE, READONLY, IMPORT (got {mode!r})"
    )


def operation_not_permitted(detail: str) -> RegistryError:
    return RegistryError(422, 42205, detail)


def referenced_by_others(detail: str) -> RegistryError:
    return RegistryError(422, 42206, detail)


def incompatible(messages: list[str]) -> RegistryError:
    detail = "; ".join(messages) if messages else "incompatible"
    return RegistryError(
        409,
        409,
        "Schema being registered is incompatible with an earlier schema for subject: " + detail,
    )


def bad_request(detail: str) -> RegistryError:
    return RegistryError(400, 400, detail)


def store_error(detail: str) -> RegistryError:
    return RegistryError(500, 50001, f"Error in the backend data store: {detail}")
