"""The registry's operations, in Confluent's semantics (REST paths in app.py).

Reads come from the RegistryView; every write is a record produced to ``_schemas`` and read
back before the call returns. Writes run only on the primary (app.py forwards them), one at
a time (``_write_lock``), so "next id" and "next version" are decided on a view that
already holds every earlier write."""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from typing import Any, Protocol

from odradek.schema_registry import errors
from odradek.schema_registry.schemas import (
    COMPATIBILITY_LEVELS,
    SCHEMA_TYPES,
    ParsedSchema,
    canonical_text,
    incompatibilities,
    parse_schema,
)
from odradek.schema_registry.store import (
    RegistryView,
    SchemaVersion,
    StoredSchema,
    config_key,
    delete_subject_key,
    encode,
    mode_key,
    schema_key,
)

__all__ = ["Registry", "Log", "MODES", "parse_version"]

logger = logging.getLogger(__name__)

MODES = ("READWRITE", "READONLY", "IMPORT")
_MAX_VERSION = 2**31 - 1
_MAX_REFERENCE_DEPTH = 32
_MAX_REFERENCES = 1000  # per schema
_PARSED_CACHE_SIZE = 4096


class Log(Protocol):
    """Where writes go: the ``_schemas`` topic (kafka_store.SchemasTopic)."""

    def write(self, key: bytes, value: bytes | None) -> int: ...


def parse_version(v: str) -> int | None:
    """A version path segment: None for "latest" (or -1), else 1..2^31-1 (42202)."""
    if v == "latest" or v == "-1":
        return None
    try:
        n = int(v)
    except ValueError:
        raise errors.invalid_version(v) from None
    if not 1 <= n <= _MAX_VERSION:
        raise errors.invalid_version(v)
    return n


class Registry:
    def __init__(self, view: RegistryView, log: Log) -> None:
        self.view = view
        self.log = log
        self._write_lock = threading.Lock()
        self._cache_lock = threading.Lock()
        self._cache: dict[StoredSchema, ParsedSchema] = {}

    # ------------------------------------------------------------------ helpers

    def _stored(self, sv: SchemaVersion) -> StoredSchema:
        return self.view.schemas[sv.schema_id]

    def version_json(self, sv: SchemaVersion) -> dict[str, Any]:
        stored = self._stored(sv)
        out: dict[str, Any] = {
            "subject": sv.subject,
            "version": sv.version,
            "id": sv.schema_id,
        }
        if stored.schema_type != "AVRO":
            out["schemaType"] = stored.schema_type
        if stored.references:
            out["references"] = stored.references_json()
        out["schema"] = stored.schema
        return out

    def _version(self, subject: str, version: str, deleted: bool = False) -> SchemaVersion:
        n = parse_version(version)
        with self.view.lock:
            all_versions = self.view.live_versions(subject, include_deleted=True)
            if not all_versions:
                raise errors.subject_not_found(subject)
            visible = [sv for sv in all_versions if deleted or not sv.deleted]
            if n is None:
                if not visible:
                    raise errors.subject_not_found(subject)
                return visible[-1]
            for sv in visible:
                if sv.version == n:
                    return sv
            raise errors.version_not_found(n)

    def _parsed(
        self,
        stored: StoredSchema,
        depth: int = 0,
        memo: dict[tuple[str, int], ParsedSchema] | None = None,
    ) -> ParsedSchema:
        """The parsed schema with its references resolved. ``memo`` (per call) parses each
        referenced version once: references form a DAG, and one schema referencing another
        twice per level would otherwise cost 2^depth parses. Schemas without references are
        cached across calls (their text alone defines them)."""
        if depth > _MAX_REFERENCE_DEPTH:
            raise errors.invalid_schema("references nested too deeply")
        if not stored.references:
            with self._cache_lock:
                hit = self._cache.get(stored)
            if hit is not None:
                return hit
        memo = {} if memo is None else memo
        refs = []
        for _, subject, version in stored.references:
            key = (subject, version)
            if key not in memo:
                memo[key] = self._parsed(self._reference(subject, version), depth + 1, memo)
            refs.append(memo[key])
        parsed = parse_schema(stored.schema_type, stored.schema, refs)
        if not stored.references:
            with self._cache_lock:
                if len(self._cache) >= _PARSED_CACHE_SIZE:
                    self._cache.clear()
                self._cache[stored] = parsed
        return parsed

    def _reference(self, subject: str, version: int) -> StoredSchema:
        with self.view.lock:
            for sv in self.view.live_versions(subject):
                if sv.version == version:
                    return self._stored(sv)
        raise errors.invalid_schema(f"reference {subject} version {version} not found")

    def _request_schema(self, body: Any) -> tuple[StoredSchema, ParsedSchema]:
        if not isinstance(body, Mapping):
            raise errors.bad_request("the body must be a JSON object")
        text = body.get("schema")
        if not isinstance(text, str) or not text:
            raise errors.invalid_schema("the body needs a non-empty string field 'schema'")
        schema_type = body.get("schemaType") or "AVRO"
        if schema_type not in SCHEMA_TYPES:
            raise errors.invalid_schema(f"unknown schemaType {schema_type!r}")
        refs_in = body.get("references") or []
        if not isinstance(refs_in, list) or len(refs_in) > _MAX_REFERENCES:
            raise errors.invalid_schema(f"'references' must be a list of <= {_MAX_REFERENCES}")
        refs: list[tuple[str, str, int]] = []
        for r in refs_in:
            if (
                not isinstance(r, Mapping)
                or not isinstance(r.get("name"), str)
                or not isinstance(r.get("subject"), str)
                or not isinstance(r.get("version"), int)
            ):
                raise errors.invalid_schema("a reference is {name, subject, version}")
            refs.append((r["name"], r["subject"], r["version"]))
        draft = StoredSchema(schema_type, text, tuple(refs))
        parsed = self._parsed(draft)  # validates text and references
        stored = StoredSchema(schema_type, canonical_text(schema_type, text), tuple(refs))
        return stored, parsed

    def mode(self, subject: str | None = None) -> str:
        with self.view.lock:
            if subject is not None and subject in self.view.modes:
                return self.view.modes[subject]
            return self.view.modes.get(None, "READWRITE")

    def level(self, subject: str | None = None) -> str:
        with self.view.lock:
            if subject is not None and subject in self.view.configs:
                return self.view.configs[subject]
            return self.view.configs.get(None, "BACKWARD")

    def _writable(self, subject: str | None) -> str:
        mode = self.mode(subject)
        if mode == "READONLY":
            target = f"Subject {subject}" if subject else "The registry"
            raise errors.operation_not_permitted(f"{target} is in read-only mode")
        return mode

    # ------------------------------------------------------------------ schemas

    def register(self, subject: str, body: Any) -> dict[str, Any]:
        stored, parsed = self._request_schema(body)
        with self._write_lock:
            mode = self._writable(subject)
            want_id = body.get("id") if isinstance(body, Mapping) else None
            want_version = body.get("version") if isinstance(body, Mapping) else None
            for name, given in (("id", want_id), ("version", want_version)):
                if given is not None and (not isinstance(given, int) or isinstance(given, bool)):
                    raise errors.invalid_schema(f"'{name}' must be an integer")
            if want_id is not None:
                # An id names one schema for good; outside IMPORT mode only its own schema
                # may be registered with it (Confluent: 42205 either way).
                holder = self.view.schemas.get(want_id)
                if holder is not None and holder != stored:
                    raise errors.operation_not_permitted(
                        f"Overwrite new schema with id {want_id} is not permitted."
                    )
                if holder is None and mode != "IMPORT":
                    raise errors.operation_not_permitted(
                        f"A schema id ({want_id}) may only be given in IMPORT mode."
                    )
            if want_version is not None and mode == "IMPORT":
                with self.view.lock:
                    taken = self.view.subjects.get(subject, {}).get(want_version)
                if taken is not None and self.view.schemas.get(taken.schema_id) != stored:
                    raise errors.operation_not_permitted(
                        f"Overwrite of subject {subject} version {want_version} is not permitted."
                    )
            with self.view.lock:
                all_versions = self.view.live_versions(subject, include_deleted=True)
                live = [sv for sv in all_versions if not sv.deleted]
                for sv in live:
                    if self._stored(sv) == stored:
                        return {"id": sv.schema_id}
                previous = [self._stored(sv) for sv in live]
                existing_id = self.view.ids_by_schema.get(stored)
                next_id = self.view.max_id + 1
                next_version = max((sv.version for sv in all_versions), default=0) + 1
            if mode != "IMPORT":
                problems = incompatibilities(
                    self.level(subject), parsed, [self._parsed(p) for p in previous]
                )
                if problems:
                    raise errors.incompatible(problems)
            if mode == "IMPORT" and want_id is not None and want_id > 0:
                schema_id = want_id
            else:
                schema_id = existing_id if existing_id is not None else next_id
            if mode == "IMPORT" and want_version is not None and want_version > 0:
                next_version = want_version
            value: dict[str, Any] = {
                "subject": subject,
                "version": next_version,
                "id": schema_id,
            }
            if stored.schema_type != "AVRO":
                value["schemaType"] = stored.schema_type
            if stored.references:
                value["references"] = stored.references_json()
            value.update({"schema": stored.schema, "deleted": False})
            self.log.write(schema_key(subject, next_version), encode(value))
            logger.info("registered %s version %d as id %d", subject, next_version, schema_id)
            return {"id": schema_id}

    def lookup(self, subject: str, body: Any, deleted: bool = False) -> dict[str, Any]:
        stored, _ = self._request_schema(body)
        with self.view.lock:
            versions = self.view.live_versions(subject, include_deleted=deleted)
            if not versions:
                raise errors.subject_not_found(subject)
            for sv in reversed(versions):
                if self._stored(sv) == stored:
                    return self.version_json(sv)
        raise errors.schema_not_found()

    def get_version(self, subject: str, version: str, deleted: bool = False) -> dict[str, Any]:
        with self.view.lock:
            return self.version_json(self._version(subject, version, deleted))

    def list_versions(self, subject: str, deleted: bool = False) -> list[int]:
        versions = self.view.live_versions(subject, include_deleted=deleted)
        if not versions:
            raise errors.subject_not_found(subject)
        return [sv.version for sv in versions]

    def list_subjects(self, deleted: bool = False, prefix: str = "") -> list[str]:
        with self.view.lock:
            return [
                s
                for s in sorted(self.view.subjects)
                if s.startswith(prefix) and self.view.live_versions(s, include_deleted=deleted)
            ]

    def schema_by_id(self, schema_id: int, subject: str | None = None) -> dict[str, Any]:
        with self.view.lock:
            stored = self.view.schemas.get(schema_id)
            users = self.view.subjects_of(schema_id, include_deleted=True)
            if (
                stored is None
                or not users
                or (subject and all(u.subject != subject for u in users))
            ):
                raise errors.schema_not_found(f"Schema {schema_id} not found")
            out: dict[str, Any] = {}
            if stored.schema_type != "AVRO":
                out["schemaType"] = stored.schema_type
            if stored.references:
                out["references"] = stored.references_json()
            out["schema"] = stored.schema
            return out

    def id_versions(self, schema_id: int, deleted: bool = False) -> list[dict[str, Any]]:
        self.schema_by_id(schema_id)
        users = self.view.subjects_of(schema_id, include_deleted=deleted)
        return [{"subject": u.subject, "version": u.version} for u in users]

    def referenced_by(self, subject: str, version: str) -> list[int]:
        sv = self._version(subject, version)
        return self.view.referenced_by(subject, sv.version)

    # ------------------------------------------------------------------ deletes

    def delete_version(self, subject: str, version: str, permanent: bool) -> int:
        with self._write_lock:
            self._writable(subject)
            sv = self._version(subject, version, deleted=True)
            if self.view.referenced_by(subject, sv.version):
                raise errors.referenced_by_others(
                    f"One or more references exist to the schema {{{subject},{sv.version}}}"
                )
            if permanent:
                if not sv.deleted:
                    raise errors.schema_version_not_soft_deleted(subject, sv.version)
                self.log.write(schema_key(subject, sv.version), None)
                return sv.version
            if sv.deleted:
                raise errors.schema_version_soft_deleted(subject, sv.version)
            value = {**self.version_json(sv), "deleted": True}
            self.log.write(schema_key(subject, sv.version), encode(value))
            return sv.version

    def delete_subject(self, subject: str, permanent: bool) -> list[int]:
        with self._write_lock:
            self._writable(subject)
            versions = self.view.live_versions(subject, include_deleted=True)
            if not versions:
                raise errors.subject_not_found(subject)
            live = [sv for sv in versions if not sv.deleted]
            if permanent:
                if live:
                    raise errors.subject_not_soft_deleted(subject)
                for sv in versions:
                    self.log.write(schema_key(subject, sv.version), None)
                return [sv.version for sv in versions]
            if not live:
                raise errors.subject_soft_deleted(subject)
            for sv in live:
                if self.view.referenced_by(subject, sv.version):
                    raise errors.referenced_by_others(
                        f"One or more references exist to the schema {{{subject},{sv.version}}}"
                    )
            self.log.write(
                delete_subject_key(subject),
                encode({"subject": subject, "version": live[-1].version}),
            )
            # As Confluent: the subject's own compatibility level and mode go with it, as
            # tombstones of their own (what a Confluent registry reading this topic expects).
            with self.view.lock:
                has_config, has_mode = subject in self.view.configs, subject in self.view.modes
            if has_config:
                self.log.write(config_key(subject), None)
            if has_mode:
                self.log.write(mode_key(subject), None)
            return [sv.version for sv in live]

    # ------------------------------------------------------------------ config and mode

    def get_config(self, subject: str | None, default_to_global: bool = False) -> dict[str, str]:
        with self.view.lock:
            if subject is not None and subject not in self.view.configs and not default_to_global:
                raise errors.RegistryError(
                    404,
                    40408,
                    f"Subject '{subject}' does not have subject-level compatibility configured",
                )
            return {"compatibilityLevel": self.level(subject)}

    def set_config(self, subject: str | None, body: Any) -> dict[str, str]:
        level = body.get("compatibility") if isinstance(body, Mapping) else None
        if not isinstance(level, str) or level.upper() not in COMPATIBILITY_LEVELS:
            raise errors.invalid_compatibility_level(level)
        level = level.upper()
        with self._write_lock:
            self.log.write(config_key(subject), encode({"compatibilityLevel": level}))
        return {"compatibility": level}

    def delete_config(self, subject: str | None) -> dict[str, str]:
        with self._write_lock:
            previous = self.level(subject)
            if subject is not None and subject not in self.view.configs:
                raise errors.subject_not_found(subject)
            self.log.write(config_key(subject), None)
        return {"compatibilityLevel": previous}

    def get_mode(self, subject: str | None, default_to_global: bool = False) -> dict[str, str]:
        with self.view.lock:
            if subject is not None and subject not in self.view.modes and not default_to_global:
                raise errors.RegistryError(
                    404, 40409, f"Subject '{subject}' does not have subject-level mode configured"
                )
            return {"mode": self.mode(subject)}

    def set_mode(self, subject: str | None, body: Any, force: bool = False) -> dict[str, str]:
        mode = body.get("mode") if isinstance(body, Mapping) else None
        if not isinstance(mode, str) or mode.upper() not in MODES:
            raise errors.invalid_mode(mode)
        mode = mode.upper()
        with self._write_lock:
            if mode == "IMPORT" and not force:
                has = self.view.live_versions(subject) if subject else self.list_subjects()
                if has:
                    raise errors.operation_not_permitted(
                        "Cannot import since found existing subjects"
                    )
            self.log.write(mode_key(subject), encode({"mode": mode}))
        return {"mode": mode}

    def delete_mode(self, subject: str) -> dict[str, str]:
        with self._write_lock:
            previous = self.mode(subject)
            self.log.write(mode_key(subject), None)
        return {"mode": previous}

    # ------------------------------------------------------------------ compatibility

    def check(self, subject: str, version: str | None, body: Any, verbose: bool) -> dict[str, Any]:
        """POST /compatibility/subjects/S/versions[/V]: against version V only (as
        Confluent), or, without V, against what registering would be checked against."""
        _, parsed = self._request_schema(body)
        with self.view.lock:
            if version is None:
                against = [self._stored(sv) for sv in self.view.live_versions(subject)]
                level = self.level(subject)
            else:
                against = [self._stored(self._version(subject, version))]
                level = self.level(subject)
                level = level.replace("_TRANSITIVE", "")
        problems = incompatibilities(level, parsed, [self._parsed(p) for p in against])
        out: dict[str, Any] = {"is_compatible": not problems}
        if verbose:
            out["messages"] = problems
        return out
