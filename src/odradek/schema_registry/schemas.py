"""Schema types (AVRO, PROTOBUF, JSON): parsing, the canonical text ids are keyed on, and
compatibility of a new schema against earlier versions under a compatibility level."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import jsonschema
from fastavro.schema import SchemaParseException, UnknownType

from odradek.schema_registry import errors
from odradek.schema_registry.avro_compat import avro_incompatibilities, parse_avro
from odradek.schema_registry.json_compat import json_incompatibilities
from odradek.schema_registry.protobuf_schema import parse_proto, proto_incompatibilities

__all__ = [
    "SCHEMA_TYPES",
    "COMPATIBILITY_LEVELS",
    "ParsedSchema",
    "parse_schema",
    "canonical_text",
    "incompatibilities",
]

SCHEMA_TYPES = ("JSON", "PROTOBUF", "AVRO")
COMPATIBILITY_LEVELS = (
    "NONE",
    "BACKWARD",
    "BACKWARD_TRANSITIVE",
    "FORWARD",
    "FORWARD_TRANSITIVE",
    "FULL",
    "FULL_TRANSITIVE",
)
_MAX_JSON_DEPTH = 200


@dataclass
class ParsedSchema:
    schema_type: str
    parsed: Any
    names: dict[str, Any]  # Avro: named types, this schema's and its references'


def _json_depth_ok(text: str) -> bool:
    # json.loads recurses in C, but a deeply nested document still costs stack in the
    # checkers that walk it; refuse absurd nesting before parsing.
    depth = deepest = 0
    in_str = esc = False
    for ch in text:
        if in_str:
            if esc:
                esc = False
            elif ch == "\\":
                esc = True
            elif ch == '"':
                in_str = False
        elif ch == '"':
            in_str = True
        elif ch in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif ch in "]}":
            depth -= 1
    return deepest <= _MAX_JSON_DEPTH


def _load_json(text: str) -> Any:
    if not _json_depth_ok(text):
        raise errors.invalid_schema("nested too deeply")
    try:
        return json.loads(text)
    except ValueError as e:
        raise errors.invalid_schema(str(e)) from e


def parse_schema(
    schema_type: str, text: str, references: Sequence[ParsedSchema] = ()
) -> ParsedSchema:
    """Parse and validate ``text``; ``references``: the referenced schemas, already parsed
    (Avro named types they define become usable here). Raises 42201 when invalid."""
    if schema_type == "AVRO":
        named: dict[str, Any] = {}
        for ref in references:
            if ref.schema_type == "AVRO":
                named.update(ref.names)
        try:
            parsed, names = parse_avro(_load_json(text), named)
        except (SchemaParseException, UnknownType, ValueError, TypeError, KeyError) as e:
            raise errors.invalid_schema(f"{type(e).__name__}: {e}") from e
        return ParsedSchema("AVRO", parsed, names)
    if schema_type == "JSON":
        doc = _load_json(text)
        if not isinstance(doc, (dict, bool)):
            raise errors.invalid_schema("a JSON schema is an object or a boolean")
        try:
            jsonschema.validators.validator_for(doc).check_schema(doc)
        except jsonschema.SchemaError as e:
            raise errors.invalid_schema(e.message) from e
        return ParsedSchema("JSON", doc, {})
    if schema_type == "PROTOBUF":
        try:
            return ParsedSchema("PROTOBUF", parse_proto(text), {})
        except (ValueError, IndexError) as e:
            raise errors.invalid_schema(str(e)) from e
    raise errors.invalid_schema(f"unknown schema type {schema_type!r}")


_PRIMITIVES = frozenset({"null", "boolean", "int", "long", "float", "double", "bytes", "string"})
# Avro's Schema.toString() writes attributes in one order whatever the input's order; so
# does this (attributes it does not know follow, sorted), so reordered keys are one schema.
_SCHEMA_KEYS = ("type", "name", "namespace", "doc", "fields", "symbols", "items", "values",
                "size", "default", "aliases")  # fmt: skip
_FIELD_KEYS = ("name", "type", "doc", "default", "order", "aliases")


def _ordered(d: dict[str, Any], first: tuple[str, ...]) -> dict[str, Any]:
    return {k: d[k] for k in (*[k for k in first if k in d], *sorted(set(d) - set(first)))}


def _avro_canonical(s: Any, depth: int = 0) -> Any:
    if depth > _MAX_JSON_DEPTH:
        return s
    if isinstance(s, list):
        return [_avro_canonical(b, depth + 1) for b in s]
    if not isinstance(s, dict):
        return s
    if set(s) == {"type"} and s["type"] in _PRIMITIVES:
        return s["type"]  # {"type": "string"} is "string"
    out = dict(s)
    if isinstance(out.get("type"), (dict, list)):
        out["type"] = _avro_canonical(out["type"], depth + 1)
    for key in ("items", "values"):
        if key in out:
            out[key] = _avro_canonical(out[key], depth + 1)
    if isinstance(out.get("fields"), list):
        out["fields"] = [
            _ordered({**f, "type": _avro_canonical(f.get("type"), depth + 1)}, _FIELD_KEYS)
            if isinstance(f, dict)
            else f
            for f in out["fields"]
        ]
    return _ordered(out, _SCHEMA_KEYS)


def canonical_text(schema_type: str, text: str) -> str:
    """The text stored and compared for "same schema": compact JSON for Avro and JSON
    (whitespace does not make a new schema), the text as given for Protobuf. Avro schemas
    also get Avro's attribute order and ``{"type": "string"}`` written ``"string"``, as
    Avro's own Schema.toString() (hence Confluent) prints them."""
    if schema_type == "PROTOBUF":
        return text
    doc = json.loads(text)
    if schema_type == "AVRO":
        doc = _avro_canonical(doc)
    return json.dumps(doc, separators=(",", ":"), ensure_ascii=False)


def _pair(reader: ParsedSchema, writer: ParsedSchema) -> list[str]:
    if reader.schema_type != writer.schema_type:
        return [f"{{type:SCHEMA_TYPE_CHANGED, {writer.schema_type} -> {reader.schema_type}}}"]
    if reader.schema_type == "AVRO":
        return avro_incompatibilities(reader.parsed, reader.names, writer.parsed, writer.names)
    if reader.schema_type == "JSON":
        return json_incompatibilities(reader.parsed, writer.parsed)
    return proto_incompatibilities(reader.parsed, writer.parsed)


def incompatibilities(level: str, new: ParsedSchema, previous: Sequence[ParsedSchema]) -> list[str]:
    """Why ``new`` may not follow ``previous`` (oldest first) under ``level``; empty: it may.
    BACKWARD: the new schema reads data written with the latest; FORWARD: the latest reads
    data written with the new one; FULL: both; *_TRANSITIVE: against every version."""
    if level == "NONE" or not previous:
        return []
    against = previous if level.endswith("_TRANSITIVE") else previous[-1:]
    checks: list[Callable[[ParsedSchema], list[str]]] = []
    if level.startswith(("BACKWARD", "FULL")):
        checks.append(lambda old: _pair(new, old))
    if level.startswith(("FORWARD", "FULL")):
        checks.append(lambda old: _pair(old, new))
    problems: list[str] = []
    for old in reversed(against):
        for check in checks:
            problems += check(old)
    return problems
