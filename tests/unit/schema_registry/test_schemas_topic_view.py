"""The in-memory view built from ``_schemas`` records in Confluent's key/value formats:
registrations, soft deletes (a SCHEMA value with deleted=true, or DELETE_SUBJECT), hard
deletes (tombstones), configs and modes; a record it cannot read is skipped, never fatal."""

from __future__ import annotations

import json
from typing import Any

from odradek.schema_registry.store import (
    RegistryView,
    config_key,
    delete_subject_key,
    mode_key,
    noop_key,
    schema_key,
)


def _v(subject: str, version: int, schema_id: int, schema: str, **kw: Any) -> bytes:
    return json.dumps(
        {"subject": subject, "version": version, "id": schema_id, "schema": schema,
         "deleted": False, **kw}
    ).encode()  # fmt: skip


def _view(*records: tuple[bytes | None, bytes | None]) -> RegistryView:
    view = RegistryView()
    for offset, (k, v) in enumerate(records):
        view.apply(offset, k, v)
    return view


def test_keys_are_confluents() -> None:
    assert json.loads(schema_key("s", 3)) == {
        "keytype": "SCHEMA", "subject": "s", "version": 3, "magic": 1}  # fmt: skip
    assert json.loads(config_key(None)) == {"keytype": "CONFIG", "subject": None, "magic": 0}
    assert json.loads(mode_key("s"))["keytype"] == "MODE"
    assert json.loads(delete_subject_key("s"))["keytype"] == "DELETE_SUBJECT"
    assert json.loads(noop_key()) == {"keytype": "NOOP", "magic": 0}


def test_registrations_soft_and_hard_deletes() -> None:
    view = _view(
        (noop_key(), None),
        (schema_key("a", 1), _v("a", 1, 1, '"int"')),
        (schema_key("a", 2), _v("a", 2, 2, '"long"')),
        (schema_key("b", 1), _v("b", 1, 1, '"int"')),
        (schema_key("j", 1), _v("j", 1, 3, "{}", schemaType="JSON")),
    )
    assert [sv.version for sv in view.live_versions("a")] == [1, 2]
    assert view.max_id == 3 and view.schemas[3].schema_type == "JSON"
    assert view.schemas[1].schema_type == "AVRO"  # no schemaType: Avro, as Confluent writes
    assert [(u.subject, u.version) for u in view.subjects_of(1)] == [("a", 1), ("b", 1)]
    view.apply(5, schema_key("a", 2), _v("a", 2, 2, '"long"', deleted=True))
    assert [sv.version for sv in view.live_versions("a")] == [1]
    assert [sv.version for sv in view.live_versions("a", include_deleted=True)] == [1, 2]
    view.apply(6, schema_key("a", 2), None)  # hard delete
    assert [sv.version for sv in view.live_versions("a", include_deleted=True)] == [1]
    view.apply(7, delete_subject_key("b"), json.dumps({"subject": "b", "version": 1}).encode())
    assert view.live_versions("b") == [] and view.live_versions("b", include_deleted=True)
    assert view.max_id == 3 and view.applied_offset == 7


def test_configs_and_modes_with_tombstones() -> None:
    view = _view(
        (config_key(None), b'{"compatibilityLevel":"FULL"}'),
        (config_key("s"), b'{"compatibilityLevel":"NONE"}'),
        (mode_key(None), b'{"mode":"READONLY"}'),
    )
    assert view.configs == {None: "FULL", "s": "NONE"} and view.modes == {None: "READONLY"}
    view.apply(3, config_key("s"), None)
    view.apply(4, mode_key(None), None)
    assert view.configs == {None: "FULL"} and view.modes == {}


def test_unreadable_records_are_skipped() -> None:
    view = _view(
        (b"not json", b"x"),
        (schema_key("a", 1), b'{"subject": "a"}'),  # no id
        (b'{"keytype":"SOMETHING_NEWER","magic":0}', b"{}"),
        (None, b"{}"),
        (schema_key("a", 1), _v("a", 1, 7, '"int"')),
    )
    assert [sv.schema_id for sv in view.live_versions("a")] == [7]
    assert view.applied_offset == 4
