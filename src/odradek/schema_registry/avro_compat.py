"""Avro reader/writer compatibility: the schema resolution rules of the Avro specification
("Schema Resolution"), as Avro's SchemaCompatibility applies them and Confluent reports them.

Schemas are parsed by fastavro (``parse_schema`` validates them and qualifies every name);
this module only walks the parsed form. A reader can read a writer's data when, recursively:
primitives match or promote (int -> long -> float -> double, string <-> bytes); records have
the same name and every reader field either exists in the writer (compatible type) or has a
default; enums have the same name and the writer's symbols are the reader's (or the reader
has a default symbol); fixed have the same name and size; arrays and maps by their items and
values; a writer union needs every branch readable, a reader union one branch that reads.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import fastavro

__all__ = ["parse_avro", "avro_incompatibilities"]

_PROMOTIONS = {
    "int": {"int", "long", "float", "double"},
    "long": {"long", "float", "double"},
    "float": {"float", "double"},
    "string": {"string", "bytes"},
    "bytes": {"bytes", "string"},
}


def parse_avro(schema: Any, named: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
    """fastavro's parsed schema and its named types (full name -> definition). ``named``
    holds types from referenced schemas (Confluent references), parsed before this one."""
    _require_fields(schema, 0)
    names: dict[str, Any] = dict(named or {})
    parsed = fastavro.parse_schema(schema, named_schemas=names)
    return parsed, names


def _require_fields(s: Any, depth: int) -> None:
    """fastavro takes a record without ``fields`` as an empty record; the specification
    (and Avro's Java parser, hence Confluent) requires the attribute."""
    if depth > 200:
        raise ValueError("schema nested too deeply")
    if isinstance(s, list):
        for branch in s:
            _require_fields(branch, depth + 1)
    elif isinstance(s, dict):
        if s.get("type") in ("record", "error") and not isinstance(s.get("fields"), list):
            raise ValueError(f"record {s.get('name')!r} has no fields array")
        for key in ("type", "items", "values"):
            if isinstance(s.get(key), (dict, list)):
                _require_fields(s[key], depth + 1)
        for f in s.get("fields") or []:
            if isinstance(f, dict):
                _require_fields(f.get("type"), depth + 1)


def _resolve(s: Any, names: Mapping[str, Any]) -> Any:
    # fastavro leaves a named type used a second time as its full name (a string).
    seen = 0
    while isinstance(s, str) and s in names and seen < 64:
        s, seen = names[s], seen + 1
    return s


def _kind(s: Any) -> str:
    if isinstance(s, list):
        return "union"
    if isinstance(s, str):
        return s
    t = s.get("type")
    if isinstance(t, (dict, list)):
        return _kind(t)
    return str(t)


def _short(name: str) -> str:
    return name.rsplit(".", 1)[-1]


def _name_matches(reader: Mapping[str, Any], writer: Mapping[str, Any]) -> bool:
    rn, wn = str(reader.get("name", "")), str(writer.get("name", ""))
    if _short(rn) == _short(wn):
        return True
    return any(_short(str(a)) == _short(wn) for a in reader.get("aliases", []) or [])


class _Checker:
    def __init__(self, rnames: Mapping[str, Any], wnames: Mapping[str, Any]) -> None:
        self.rnames, self.wnames = rnames, wnames
        self.problems: list[str] = []
        # Recursive types: a pair already being compared is assumed compatible (Avro does so).
        self._active: set[tuple[int, int]] = set()

    def check(self, reader: Any, writer: Any, path: str) -> bool:
        reader, writer = _resolve(reader, self.rnames), _resolve(writer, self.wnames)
        if isinstance(reader, dict) and isinstance(reader.get("type"), (dict, list)):
            reader = reader["type"]
        if isinstance(writer, dict) and isinstance(writer.get("type"), (dict, list)):
            writer = writer["type"]
        key = (id(reader), id(writer))
        if key in self._active:
            return True
        self._active.add(key)
        try:
            return self._check(reader, writer, path)
        finally:
            self._active.discard(key)

    def _fail(self, what: str, path: str) -> bool:
        self.problems.append(f"{{type:{what}, location:{path or '/'}}}")
        return False

    def _check(self, reader: Any, writer: Any, path: str) -> bool:
        rk, wk = _kind(reader), _kind(writer)
        if wk == "union":
            ok = True
            for i, branch in enumerate(writer):
                ok = self.check(reader, branch, f"{path}/{i}") and ok
            return ok
        if rk == "union":
            for branch in reader:
                sub = _Checker(self.rnames, self.wnames)
                sub._active = set(self._active)
                if sub.check(branch, writer, path):
                    return True
            return self._fail(f"MISSING_UNION_BRANCH reader union lacks {wk}", path)
        if rk != wk:
            if wk in _PROMOTIONS and rk in _PROMOTIONS[wk]:
                return True
            return self._fail(f"TYPE_MISMATCH reader {rk} writer {wk}", path)
        if rk == "record" or rk == "error":
            return self._record(reader, writer, path)
        if rk == "enum":
            return self._enum(reader, writer, path)
        if rk == "fixed":
            if not _name_matches(reader, writer):
                return self._fail("NAME_MISMATCH", path + "/name")
            if reader.get("size") != writer.get("size"):
                return self._fail("FIXED_SIZE_MISMATCH", path + "/size")
            return True
        if rk == "array":
            return self.check(reader["items"], writer["items"], path + "/items")
        if rk == "map":
            return self.check(reader["values"], writer["values"], path + "/values")
        return True

    def _record(self, reader: Mapping[str, Any], writer: Mapping[str, Any], path: str) -> bool:
        if not _name_matches(reader, writer):
            return self._fail("NAME_MISMATCH", path + "/name")
        wfields = {f["name"]: f for f in writer.get("fields", [])}
        ok = True
        for i, rf in enumerate(reader.get("fields", [])):
            names = [rf["name"], *(rf.get("aliases") or [])]
            wf = next((wfields[n] for n in names if n in wfields), None)
            fpath = f"{path}/fields/{i}"
            if wf is None:
                if "default" not in rf:
                    ok = self._fail(f"READER_FIELD_MISSING_DEFAULT_VALUE {rf['name']}", fpath)
                continue
            ok = self.check(rf["type"], wf["type"], fpath + "/type") and ok
        return ok

    def _enum(self, reader: Mapping[str, Any], writer: Mapping[str, Any], path: str) -> bool:
        if not _name_matches(reader, writer):
            return self._fail("NAME_MISMATCH", path + "/name")
        missing = [s for s in writer.get("symbols", []) if s not in reader.get("symbols", [])]
        if missing and "default" not in reader:
            return self._fail(f"MISSING_ENUM_SYMBOLS {missing}", path + "/symbols")
        return True


def avro_incompatibilities(
    reader: Any, reader_names: Mapping[str, Any], writer: Any, writer_names: Mapping[str, Any]
) -> list[str]:
    """Why ``reader`` cannot read data written with ``writer`` (empty: it can). Both are
    fastavro-parsed schemas with their named types."""
    c = _Checker(reader_names, writer_names)
    c.check(reader, writer, "")
    return c.problems
