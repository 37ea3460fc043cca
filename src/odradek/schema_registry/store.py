"""The registry's in-memory view of the ``_schemas`` topic, built by applying its records
in offset order; the topic's key and value formats are Confluent's, so a registry can take
over a topic Confluent wrote (and the other way round).

Keys (JSON): ``{"keytype":"SCHEMA","subject":S,"version":V,"magic":1}``,
``{"keytype":"CONFIG","subject":S|null,"magic":0}``, ``{"keytype":"MODE",...}``,
``{"keytype":"DELETE_SUBJECT","subject":S,"magic":0}``, ``{"keytype":"NOOP","magic":0}``.
A SCHEMA value is ``{"subject","version","id","schemaType"?,"references"?,"schema",
"deleted"}`` (a tombstone: the version was hard-deleted); a CONFIG value
``{"compatibilityLevel": L}``, a MODE value ``{"mode": M}`` (tombstones: back to the
default); DELETE_SUBJECT ``{"subject": S, "version": V}`` soft-deletes versions up to V.
"""

from __future__ import annotations

import json
import logging
import threading
from dataclasses import dataclass, field
from typing import Any

__all__ = ["SchemaVersion", "StoredSchema", "RegistryView", "schema_key", "config_key",
           "mode_key", "delete_subject_key", "noop_key", "encode"]  # fmt: skip

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class StoredSchema:
    schema_type: str  # AVRO, JSON, PROTOBUF
    schema: str  # canonical text
    references: tuple[tuple[str, str, int], ...] = ()  # (name, subject, version)

    def references_json(self) -> list[dict[str, Any]]:
        return [{"name": n, "subject": s, "version": v} for n, s, v in self.references]


@dataclass
class SchemaVersion:
    subject: str
    version: int
    schema_id: int
    deleted: bool = False


@dataclass
class RegistryView:
    """Everything the REST API reads; guarded by ``lock`` (the topic reader's thread writes,
    request threads read)."""

    lock: threading.RLock = field(default_factory=threading.RLock)
    schemas: dict[int, StoredSchema] = field(default_factory=dict)
    ids_by_schema: dict[StoredSchema, int] = field(default_factory=dict)
    subjects: dict[str, dict[int, SchemaVersion]] = field(default_factory=dict)
    configs: dict[str | None, str] = field(default_factory=dict)
    modes: dict[str | None, str] = field(default_factory=dict)
    max_id: int = 0
    applied_offset: int = -1  # the last topic offset applied

    def apply(self, offset: int, key: bytes | None, value: bytes | None) -> None:
        """Apply one ``_schemas`` record; a record this version cannot read is skipped (as
        Confluent skips unknown key types) so one bad record never stops the registry."""
        with self.lock:
            try:
                self._apply(key, value)
            except (ValueError, TypeError, KeyError, AttributeError) as e:
                logger.warning("_schemas offset %d skipped: %s", offset, e)
            self.applied_offset = max(self.applied_offset, offset)

    def _apply(self, key: bytes | None, value: bytes | None) -> None:
        if key is None:
            return
        k = json.loads(key)
        keytype = k.get("keytype")
        v = json.loads(value) if value is not None else None
        if keytype == "SCHEMA":
            self._apply_schema(str(k["subject"]), int(k["version"]), v)
        elif keytype == "CONFIG":
            subject = k.get("subject")
            if v is None:
                self.configs.pop(subject, None)
            else:
                self.configs[subject] = str(v["compatibilityLevel"])
        elif keytype == "MODE":
            subject = k.get("subject")
            if v is None:
                self.modes.pop(subject, None)
            else:
                self.modes[subject] = str(v["mode"])
        elif keytype == "DELETE_SUBJECT" and v is not None:
            upto = int(v["version"])
            for sv in self.subjects.get(str(k["subject"]), {}).values():
                if sv.version <= upto:
                    sv.deleted = True

    def _apply_schema(self, subject: str, version: int, v: Any) -> None:
        versions = self.subjects.setdefault(subject, {})
        if v is None:  # hard delete
            versions.pop(version, None)
            if not versions:
                del self.subjects[subject]
            return
        schema_id = int(v["id"])
        refs = tuple(
            (str(r["name"]), str(r["subject"]), int(r["version"]))
            for r in v.get("references") or []
        )
        stored = StoredSchema(str(v.get("schemaType") or "AVRO"), str(v["schema"]), refs)
        self.schemas.setdefault(schema_id, stored)
        self.ids_by_schema.setdefault(stored, schema_id)
        self.max_id = max(self.max_id, schema_id)
        versions[version] = SchemaVersion(subject, version, schema_id, bool(v.get("deleted")))

    # ------------------------------------------------------------------ reads

    def live_versions(self, subject: str, include_deleted: bool = False) -> list[SchemaVersion]:
        with self.lock:
            vs = self.subjects.get(subject, {})
            return [vs[n] for n in sorted(vs) if include_deleted or not vs[n].deleted]

    def subjects_of(self, schema_id: int, include_deleted: bool = False) -> list[SchemaVersion]:
        with self.lock:
            return [
                sv
                for s in sorted(self.subjects)
                for sv in self.live_versions(s, include_deleted)
                if sv.schema_id == schema_id
            ]

    def referenced_by(self, subject: str, version: int) -> list[int]:
        with self.lock:
            out = []
            for sid, stored in self.schemas.items():
                if any(s == subject and v == version for _, s, v in stored.references) and (
                    self.subjects_of(sid)
                ):
                    out.append(sid)
            return sorted(out)


def encode(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


def schema_key(subject: str, version: int) -> bytes:
    return encode({"keytype": "SCHEMA", "subject": subject, "version": version, "magic": 1})


def config_key(subject: str | None) -> bytes:
    return encode({"keytype": "CONFIG", "subject": subject, "magic": 0})


def mode_key(subject: str | None) -> bytes:
    return encode({"keytype": "MODE", "subject": subject, "magic": 0})


def delete_subject_key(subject: str) -> bytes:
    return encode({"keytype": "DELETE_SUBJECT", "subject": subject, "magic": 0})


def noop_key() -> bytes:
    return encode({"keytype": "NOOP", "magic": 0})
