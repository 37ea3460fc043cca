"""JSON Schema compatibility: a pragmatic subset of Confluent's rules.

A reader schema can read a writer's data when every document valid under the writer is
valid under the reader. Checked, recursively through properties, items and local ``$ref``s:
- ``type``: the reader's types include the writer's (``integer`` is within ``number``);
  narrowing is TYPE_NARROWED, a different type TYPE_CHANGED;
- ``required``: the reader requires nothing the writer does not (REQUIRED_ATTRIBUTE_ADDED);
- properties under the content models: a property the writer may carry but the reader
  forbids (``additionalProperties: false``) is PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL; a
  property the reader declares that an open writer leaves unconstrained is
  PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL (as Confluent: open models may lose properties,
  closed ones may gain them);
- ``enum``: the reader's values include the writer's (ENUM_ARRAY_NARROWED);
- bounds: ``maxLength``, ``maximum``, ``maxItems`` may not shrink, ``minLength``,
  ``minimum``, ``minItems`` may not grow; a ``pattern`` may not be added or changed;
- ``anyOf``/``oneOf`` as unions: every writer branch is accepted by some reader branch;
  ``allOf`` branch by branch (a changed count is refused).
Schemas are validated with ``jsonschema`` (check_schema) before any of this runs.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["json_incompatibilities"]

_ALL_TYPES = frozenset({"null", "boolean", "object", "array", "number", "integer", "string"})
_MAX_DEPTH = 64
_COMBINERS = ("anyOf", "oneOf", "allOf")


def _types(s: Mapping[str, Any]) -> set[str]:
    t = s.get("type")
    if t is None:
        return set(_ALL_TYPES)
    return {t} if isinstance(t, str) else {str(x) for x in t}


def _deref(root: Any, s: Any) -> Any:
    """Follow local references (``#/definitions/X``, ``#/$defs/X``); others stay as they are."""
    for _ in range(_MAX_DEPTH):
        if not isinstance(s, Mapping) or not isinstance(s.get("$ref"), str):
            return s
        ref = s["$ref"]
        if not ref.startswith("#"):
            return s
        node: Any = root
        for part in [p for p in ref[1:].split("/") if p]:
            part = part.replace("~1", "/").replace("~0", "~")
            if not isinstance(node, Mapping) or part not in node:
                return s
            node = node[part]
        s = node
    return s


class _Checker:
    def __init__(self, rroot: Any, wroot: Any) -> None:
        self.rroot, self.wroot = rroot, wroot
        self.problems: list[str] = []

    def _fail(self, what: str, path: str) -> None:
        self.problems.append(f"{{type:{what}, location:#{path}}}")

    def check(self, reader: Any, writer: Any, path: str, depth: int = 0) -> None:
        if depth > _MAX_DEPTH:
            return
        reader, writer = _deref(self.rroot, reader), _deref(self.wroot, writer)
        if reader is True or reader == {}:
            return  # the reader accepts anything
        if writer is False:
            return  # the writer produces nothing
        if reader is False:
            self._fail("SCHEMA_REMOVED", path)
            return
        if writer is True:
            writer = {}
        if not isinstance(reader, Mapping) or not isinstance(writer, Mapping):
            return
        if "$ref" in reader or "$ref" in writer:
            if reader.get("$ref") != writer.get("$ref"):
                self._fail("REFERENCE_CHANGED", path)
            return
        if any(k in reader or k in writer for k in _COMBINERS):
            self._combined(reader, writer, path, depth)
            return
        rt, wt = _types(reader), _types(writer)
        if "number" in rt:
            rt = rt | {"integer"}
        if not wt <= rt:
            self._fail("TYPE_NARROWED" if rt < wt else "TYPE_CHANGED", path + "/type")
            return
        if "enum" in reader:
            wenum = writer.get("enum")
            if wenum is None or any(v not in reader["enum"] for v in wenum):
                self._fail("ENUM_ARRAY_NARROWED", path + "/enum")
        self._bounds(reader, writer, path)
        if "pattern" in reader and reader["pattern"] != writer.get("pattern"):
            what = "PATTERN_ADDED" if "pattern" not in writer else "PATTERN_CHANGED"
            self._fail(what, path + "/pattern")
        if "object" in wt:
            self._object(reader, writer, path, depth)
        if "array" in wt and "items" in reader:
            witems = writer.get("items", {})
            if isinstance(reader["items"], (Mapping, bool)) and isinstance(witems, (Mapping, bool)):
                self.check(reader["items"], witems, path + "/items", depth + 1)

    def _accepts(self, reader: Any, writer: Any, path: str, depth: int) -> bool:
        sub = _Checker(self.rroot, self.wroot)
        sub.check(reader, writer, path, depth + 1)
        return not sub.problems

    def _combined(
        self, reader: Mapping[str, Any], writer: Mapping[str, Any], path: str, depth: int
    ) -> None:
        """anyOf/oneOf as unions (every writer branch accepted by some reader branch, as
        Avro unions); allOf branch by branch. Keywords beside a combiner are not compared."""
        if "allOf" in reader or "allOf" in writer:
            r_all, w_all = reader.get("allOf"), writer.get("allOf")
            if (
                not isinstance(r_all, list)
                or not isinstance(w_all, list)
                or len(r_all) != len(w_all)
            ):
                self._fail("COMBINED_TYPE_SUBSCHEMAS_CHANGED", path + "/allOf")
                return
            for i, (r, w) in enumerate(zip(r_all, w_all)):
                self.check(r, w, f"{path}/allOf/{i}", depth + 1)
            return
        rkey = next((k for k in ("anyOf", "oneOf") if isinstance(reader.get(k), list)), None)
        wkey = next((k for k in ("anyOf", "oneOf") if isinstance(writer.get(k), list)), None)
        rbranches = reader[rkey] if rkey else [{k: v for k, v in reader.items()}]
        wbranches = writer[wkey] if wkey else [{k: v for k, v in writer.items()}]
        for i, w in enumerate(wbranches):
            bpath = f"{path}/{wkey or rkey}/{i}"
            if not any(self._accepts(r, w, bpath, depth) for r in rbranches):
                self._fail("COMBINED_TYPE_SUBSCHEMAS_CHANGED", bpath)

    def _bounds(self, reader: Mapping[str, Any], writer: Mapping[str, Any], path: str) -> None:
        for key, smaller_ok in (
            ("maxLength", False),
            ("maximum", False),
            ("maxItems", False),
            ("maxProperties", False),
            ("minLength", True),
            ("minimum", True),
            ("minItems", True),
            ("minProperties", True),
        ):
            if key not in reader:
                continue
            r, w = reader[key], writer.get(key)
            if w is None or (r > w if smaller_ok else r < w):
                what = "ADDED" if w is None else ("INCREASED" if smaller_ok else "DECREASED")
                self._fail(f"{_snake(key)}_{what}", f"{path}/{key}")

    def _object(
        self, reader: Mapping[str, Any], writer: Mapping[str, Any], path: str, depth: int
    ) -> None:
        rprops: Mapping[str, Any] = reader.get("properties", {}) or {}
        wprops: Mapping[str, Any] = writer.get("properties", {}) or {}
        radd = reader.get("additionalProperties", True)
        wadd = writer.get("additionalProperties", True)
        for name, wp in wprops.items():
            ppath = f"{path}/properties/{name}"
            if name in rprops:
                self.check(rprops[name], wp, ppath, depth + 1)
            elif radd is False:
                self._fail("PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL", ppath)
            elif isinstance(radd, Mapping):
                self.check(radd, wp, ppath, depth + 1)
        for name, rp in rprops.items():
            if name in wprops:
                continue
            ppath = f"{path}/properties/{name}"
            if wadd is False:
                continue  # the writer never writes it
            if isinstance(wadd, Mapping):
                self.check(rp, wadd, ppath, depth + 1)
            elif not (rp is True or rp == {}):
                self._fail("PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL", ppath)
        if isinstance(radd, Mapping) and isinstance(wadd, Mapping):
            self.check(radd, wadd, path + "/additionalProperties", depth + 1)
        elif radd is False and wadd is not False:
            self._fail("ADDITIONAL_PROPERTIES_REMOVED", path + "/additionalProperties")
        wreq = set(writer.get("required", []) or [])
        for name in reader.get("required", []) or []:
            if name not in wreq:
                self._fail("REQUIRED_ATTRIBUTE_ADDED", f"{path}/required/{name}")


def _snake(key: str) -> str:
    return "".join(f"_{c}" if c.isupper() else c.upper() for c in key)


def json_incompatibilities(reader: Any, writer: Any) -> list[str]:
    """Why ``reader`` cannot accept every document ``writer`` accepts (empty: it can)."""
    c = _Checker(reader, writer)
    c.check(reader, writer, "")
    return c.problems
