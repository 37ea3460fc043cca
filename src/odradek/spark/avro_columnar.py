"""Avro values straight into Arrow columns: a compiled decoder for ``value.format=avro``.

fastavro decodes one record at a time into a Python dict (~10 µs for ten fields), and
turning the dicts into Arrow costs as much again: the source was no faster than a fastavro
UDF (docs/spark.md, "Measured"). This module decodes a whole batch of values written
with the reader's own schema in one compiled loop and builds the Arrow arrays from flat
numpy buffers, so no Python object is made per record or per field.

The reader schema is compiled into a small table of nodes (one per schema position: kind,
output slot, arguments, children) that ``avro_events`` walks for every value with an
explicit stack. Each decoded item appends one *event* to flat arrays: its output slot,
its value (an integer, a float's bits, or a bytes value's start), an auxiliary number
(a bytes value's length, a float's width) and whether it is valid. A null union branch
appends a null event to its slot and to every struct field under it, so every child
array has its struct's length. Grouping the events by slot (one stable sort) gives each
column's values in row order, from which the Arrow arrays are built with numpy.

Anything the loop does not accept — truncated or malformed bytes, a bool byte other than
0/1, an enum index out of range, an int outside int32, a timestamp outside Python's
datetime range, invalid UTF-8 — raises ``ColumnarFallback``; the caller then decodes those
values with fastavro one by one, so errors and ``value.decode.errors`` behave exactly as
before. Schemas with a decimal (fastavro's Decimal objects) are not compiled at all.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from odradek.client.kernels import _varint, jit

__all__ = ["ColumnarFallback", "ColumnarAvroDecoder", "compile_schema", "avro_events"]

# Node kinds of the compiled schema.
K_BOOL, K_INT, K_LONG, K_FLOAT, K_DOUBLE, K_BYTES, K_FIXED, K_ENUM = range(1, 9)
K_RECORD, K_ARRAY, K_MAP, K_UNION = range(9, 13)

# Status of ``avro_events``.
OK, BAD_VALUE, FULL = 0, 1, 2

_PRIMS = {
    "boolean": K_BOOL,
    "int": K_INT,
    "long": K_LONG,
    "float": K_FLOAT,
    "double": K_DOUBLE,
    "bytes": K_BYTES,
    "string": K_BYTES,
}
# Python's datetime range (year 1 to 9999) in microseconds and days since the epoch:
# fastavro fails outside it, and so must this path (the caller then reports the record).
_MIN_US, _MAX_US = -62_135_596_800_000_000, 253_402_300_799_999_999
_MIN_DAY, _MAX_DAY = -719_162, 2_932_896
_I32 = 2**31


def _prim(branch: Any) -> str:
    return str(branch["type"] if isinstance(branch, Mapping) else branch)


class ColumnarFallback(Exception):
    """These values (or this schema) need fastavro's per-record path."""


@jit
def _emit(
    ev_slot: np.ndarray,
    ev_val: np.ndarray,
    ev_aux: np.ndarray,
    ev_valid: np.ndarray,
    ne: int,
    slot: int,
    val: int,
    aux: int,
    valid: int,
) -> int:
    ev_slot[ne] = slot
    ev_val[ne] = val
    ev_aux[ne] = aux
    ev_valid[ne] = valid
    return ne + 1


@jit
def _le(buf: np.ndarray, pos: int, n: int) -> int:
    """Little-endian integer of n (4 or 8) bytes; 8 bytes wrap to int64 (a double's bits)."""
    v = 0
    for i in range(n - 1):
        v |= int(buf[pos + i]) << (8 * i)
    top = int(buf[pos + n - 1])
    if n == 8 and top >= 128:
        top -= 256
    return v | (top << (8 * (n - 1)))


@jit
def avro_events(
    buf: np.ndarray,
    starts: np.ndarray,
    ends: np.ndarray,
    kinds: np.ndarray,
    slots: np.ndarray,
    arg_a: np.ndarray,
    arg_b: np.ndarray,
    kids: np.ndarray,
    fill_off: np.ndarray,
    fill: np.ndarray,
    root: int,
    ev_slot: np.ndarray,
    ev_val: np.ndarray,
    ev_aux: np.ndarray,
    ev_valid: np.ndarray,
    st_node: np.ndarray,
    st_i: np.ndarray,
    st_n: np.ndarray,
) -> tuple[int, int, int]:
    """Decode the Avro values ``buf[starts[r]:ends[r]]`` into events (module docstring).

    Returns (events, status, row): status OK; BAD_VALUE when value ``row`` does not decode
    (or holds more array items than bytes); FULL when the event arrays are too small.
    Node arguments: record a = first child in ``kids``, b = field count; array a = item
    node; map a = value node, b = key slot; union a = first branch in ``kids`` (-1 for
    null), b = branch count; fixed a = size; enum a = symbol count.
    """
    cap = ev_slot.shape[0]
    ne = 0
    for r in range(starts.shape[0]):
        pos = int(starts[r])
        end = int(ends[r])
        st_node[0] = root
        st_i[0] = 0
        st_n[0] = 0
        sp = 1
        while sp > 0:
            if ne + 2 > cap:
                return ne, FULL, r
            node = st_node[sp - 1]
            k = kinds[node]
            s = slots[node]
            if k == K_RECORD:
                i = st_i[sp - 1]
                if i == 0:
                    ne = _emit(ev_slot, ev_val, ev_aux, ev_valid, ne, s, 0, 0, 1)
                if i < arg_b[node]:
                    st_i[sp - 1] = i + 1
                    st_node[sp] = kids[arg_a[node] + i]
                    st_i[sp] = 0
                    st_n[sp] = 0
                    sp += 1
                else:
                    sp -= 1
            elif k == K_ARRAY or k == K_MAP:
                rem = st_i[sp - 1]
                if rem == 0:
                    cnt, pos = _varint(buf, pos, end)
                    if pos < 0:
                        return ne, BAD_VALUE, r
                    if cnt == 0:  # the end of the array
                        ne = _emit(ev_slot, ev_val, ev_aux, ev_valid, ne, s, st_n[sp - 1], 0, 1)
                        sp -= 1
                        continue
                    if cnt < 0:  # a block that gives its size in bytes too
                        cnt = -cnt
                        _, pos = _varint(buf, pos, end)
                        if pos < 0:
                            return ne, BAD_VALUE, r
                    if cnt > end - pos:  # bounded by the bytes left (zero-byte items: fastavro)
                        return ne, BAD_VALUE, r
                    rem = cnt
                st_i[sp - 1] = rem - 1
                st_n[sp - 1] += 1
                if k == K_MAP:
                    ln, pos = _varint(buf, pos, end)
                    if pos < 0 or ln < 0 or pos + ln > end:
                        return ne, BAD_VALUE, r
                    ne = _emit(ev_slot, ev_val, ev_aux, ev_valid, ne, arg_b[node], pos, ln, 1)
                    pos += ln
                st_node[sp] = arg_a[node]
                st_i[sp] = 0
                st_n[sp] = 0
                sp += 1
            elif k == K_UNION:
                br, pos = _varint(buf, pos, end)
                if pos < 0 or br < 0 or br >= arg_b[node]:
                    return ne, BAD_VALUE, r
                child = kids[arg_a[node] + br]
                if child < 0:
                    sp -= 1
                    if ne + fill_off[s + 1] - fill_off[s] > cap:
                        return ne, FULL, r
                    for j in range(fill_off[s], fill_off[s + 1]):
                        ne = _emit(ev_slot, ev_val, ev_aux, ev_valid, ne, fill[j], 0, 0, 0)
                else:
                    st_node[sp - 1] = child
            else:
                sp -= 1
                if k == K_BOOL:
                    if pos >= end or buf[pos] > 1:
                        return ne, BAD_VALUE, r
                    ne = _emit(ev_slot, ev_val, ev_aux, ev_valid, ne, s, int(buf[pos]), 0, 1)
                    pos += 1
                elif k == K_INT or k == K_LONG or k == K_ENUM:
                    v, pos = _varint(buf, pos, end)
                    if pos < 0 or (k == K_ENUM and (v < 0 or v >= arg_a[node])):
                        return ne, BAD_VALUE, r
                    ne = _emit(ev_slot, ev_val, ev_aux, ev_valid, ne, s, v, 0, 1)
                elif k == K_FLOAT or k == K_DOUBLE:
                    w = 4 if k == K_FLOAT else 8
                    if pos + w > end:
                        return ne, BAD_VALUE, r
                    ne = _emit(ev_slot, ev_val, ev_aux, ev_valid, ne, s, _le(buf, pos, w), w, 1)
                    pos += w
                else:  # K_BYTES, K_FIXED
                    if k == K_FIXED:
                        ln = int(arg_a[node])
                    else:
                        ln, pos = _varint(buf, pos, end)
                        if pos < 0:
                            return ne, BAD_VALUE, r
                    if ln < 0 or pos + ln > end:
                        return ne, BAD_VALUE, r
                    ne = _emit(ev_slot, ev_val, ev_aux, ev_valid, ne, s, pos, ln, 1)
                    pos += ln
    return ne, OK, -1


@jit
def _by_slot(
    ev_slot: np.ndarray,
    ev_val: np.ndarray,
    ev_aux: np.ndarray,
    ev_valid: np.ndarray,
    ne: int,
    bounds: np.ndarray,
    vals: np.ndarray,
    aux: np.ndarray,
    valid: np.ndarray,
) -> None:
    """Group the events by slot, keeping their order (a counting sort: slot s's events go
    to ``[bounds[s], bounds[s + 1])``); 3x cheaper than numpy's stable argsort here."""
    cur = bounds[:-1].copy()
    for i in range(ne):
        s = ev_slot[i]
        j = cur[s]
        cur[s] = j + 1
        vals[j] = ev_val[i]
        aux[j] = ev_aux[i]
        valid[j] = ev_valid[i] != 0


@jit
def _gather(
    buf: np.ndarray, starts: np.ndarray, lens: np.ndarray, offs: np.ndarray, out: np.ndarray
) -> None:
    """Copy the byte ranges (starts, lens) of ``buf`` one after another into ``out``."""
    for i in range(starts.shape[0]):
        o = offs[i]
        s = starts[i]
        for j in range(lens[i]):
            out[o + j] = buf[s + j]


@dataclass
class _Slot:
    """One output Arrow array: how to build it from its events."""

    kind: str  # bool int32 int64 float32 float64 f_or_d bytes string enum record list map
    logical: str = ""  # date, timestamp-millis/micros, local-timestamp-millis/micros
    children: list[int] = field(default_factory=list)  # record fields; list item; map key+value
    names: list[str] = field(default_factory=list)  # record field names
    symbols: list[str] = field(default_factory=list)


class _Compiler:
    """Reader schema -> node table (the arguments ``avro_events`` takes) and slot list."""

    def __init__(self) -> None:
        self.kinds: list[int] = []
        self.slots: list[int] = []
        self.arg_a: list[int] = []
        self.arg_b: list[int] = []
        self.kids: list[int] = []
        self.out: list[_Slot] = []
        self.named: dict[str, Any] = {}

    def node(self, kind: int, slot: int, a: int = 0, b: int = 0) -> int:
        self.kinds.append(kind)
        self.slots.append(slot)
        self.arg_a.append(a)
        self.arg_b.append(b)
        return len(self.kinds) - 1

    def slot(self, s: _Slot) -> int:
        self.out.append(s)
        return len(self.out) - 1

    def full_name(self, schema: Mapping[str, Any], namespace: str) -> tuple[str, str]:
        name = str(schema.get("name", ""))
        if "." in name:
            return name, name.rsplit(".", 1)[0]
        ns = str(schema.get("namespace", namespace) or "")
        return (f"{ns}.{name}" if ns else name), ns

    def compile(self, schema: Any, ns: str, slot: int = -1) -> int:
        """The node for ``schema``; ``slot`` >= 0 writes into a union's shared slot."""
        if isinstance(schema, list):
            return self.union(schema, ns)
        if isinstance(schema, str):
            if schema in _PRIMS:
                return self.leaf(schema, "", ns, slot)
            ref = self.named.get(schema) or self.named.get(f"{ns}.{schema}")
            if ref is None:
                raise ColumnarFallback(f"unknown Avro type {schema!r}")
            return self.compile(ref, ns, slot)
        kind = schema.get("type")
        if isinstance(kind, str) and kind in _PRIMS:
            return self.leaf(kind, str(schema.get("logicalType", "")), ns, slot)
        if kind in ("record", "error"):
            name, rns = self.full_name(schema, ns)
            self.named[name] = schema
            s = self.slot(_Slot("record"))
            fields = list(schema.get("fields", []))
            children = [self.compile(f["type"], rns) for f in fields]
            self.out[s].children = [self.slots[c] for c in children]
            self.out[s].names = [str(f["name"]) for f in fields]
            first = len(self.kids)
            self.kids.extend(children)
            return self.node(K_RECORD, s, first, len(children))
        if kind in ("enum", "fixed"):
            name, _ = self.full_name(schema, ns)
            self.named[name] = schema
            if schema.get("logicalType") == "decimal":
                raise ColumnarFallback("decimal")
            if kind == "fixed":
                return self.node(K_FIXED, self.slot(_Slot("bytes")), int(schema["size"]))
            symbols = [str(x) for x in schema.get("symbols", [])]
            return self.node(K_ENUM, self.slot(_Slot("enum", symbols=symbols)), len(symbols))
        if kind == "array":
            s = self.slot(_Slot("list"))
            item = self.compile(schema.get("items"), ns)
            self.out[s].children = [self.slots[item]]
            return self.node(K_ARRAY, s, item)
        if kind == "map":
            s = self.slot(_Slot("map"))
            key = self.slot(_Slot("string"))
            value = self.compile(schema.get("values"), ns)
            self.out[s].children = [key, self.slots[value]]
            return self.node(K_MAP, s, value, key)
        return self.compile(kind, ns, slot)

    def leaf(self, prim: str, logical: str, ns: str, slot: int) -> int:
        if logical == "decimal":
            raise ColumnarFallback("decimal")
        kind = _PRIMS[prim]
        if slot < 0:
            out = {
                "boolean": "bool",
                "int": "int32",
                "long": "int64",
                "float": "float32",
                "double": "float64",
                "bytes": "bytes",
                "string": "string",
            }[prim]
            known = {
                ("int", "date"),
                ("long", "timestamp-millis"),
                ("long", "timestamp-micros"),
                ("long", "local-timestamp-millis"),
                ("long", "local-timestamp-micros"),
            }
            slot = self.slot(_Slot(out, logical if (prim, logical) in known else ""))
        return self.node(kind, slot)

    def union(self, branches: list[Any], ns: str) -> int:
        others = [b for b in branches if b != "null" and b != {"type": "null"}]
        names = sorted(map(str, others))
        if len(others) == 1:
            value = self.compile(others[0], ns)
            s = self.slots[value]
            nodes = [-1 if b not in others else value for b in branches]
        elif names in (["int", "long"], ["double", "float"]):
            s = self.slot(_Slot("int64" if names == ["int", "long"] else "f_or_d"))
            nodes = [-1 if b not in others else self.leaf(_prim(b), "", ns, s) for b in branches]
        else:
            raise ColumnarFallback(f"union {branches!r}")
        first = len(self.kids)
        self.kids.extend(nodes)
        return self.node(K_UNION, s, first, len(branches))


@dataclass(frozen=True)
class _Program:
    kinds: np.ndarray
    slots: np.ndarray
    arg_a: np.ndarray
    arg_b: np.ndarray
    kids: np.ndarray
    fill_off: np.ndarray
    fill: np.ndarray
    root: int
    out: list[_Slot]


def compile_schema(schema: Any) -> _Program:
    """The node table of a (logical-type-stripped) reader schema; ColumnarFallback if a
    part of it has no columnar decoding here."""
    c = _Compiler()
    root = c.compile(schema, "")
    if len(c.kids) == 0:
        c.kids.append(-1)  # numba wants a typed array, even an unused one

    def null_fill(s: int) -> list[int]:
        # A null value: a null in its slot and in every struct field below it (lists and
        # maps are empty), so that each child array keeps its struct's length.
        if c.out[s].kind != "record":
            return [s]
        return [s] + [x for ch in c.out[s].children for x in null_fill(ch)]

    fills = [null_fill(s) for s in range(len(c.out))]
    off = np.zeros(len(fills) + 1, np.int64)
    off[1:] = np.cumsum([len(f) for f in fills])
    i64 = np.int64
    return _Program(
        np.array(c.kinds, i64),
        np.array(c.slots, i64),
        np.array(c.arg_a, i64),
        np.array(c.arg_b, i64),
        np.array(c.kids, i64),
        off,
        np.array([x for f in fills for x in f] or [0], i64),
        root,
        c.out,
    )


class ColumnarAvroDecoder:
    """Decodes batches of values of one schema into one Arrow array per column."""

    def __init__(self, schema: Any) -> None:
        self._p = compile_schema(schema)
        depth = len(self._p.kinds) + 1  # no recursion (refused by avro_types): a bound
        self._stack = [np.zeros(depth, np.int64) for _ in range(3)]

    def decode(self, data: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> list[pa.Array]:
        """The columns of the values ``data[starts[i]:ends[i]]``: a record's fields, or one
        array for another root type. Raises ColumnarFallback for any value it cannot take."""
        p = self._p
        n = len(starts)
        cap = int(ends.sum() - starts.sum()) + 4 * n + 64
        while True:
            ev_slot = np.empty(cap, np.int64)
            ev_val = np.empty(cap, np.int64)
            ev_aux = np.empty(cap, np.int64)
            ev_valid = np.empty(cap, np.uint8)
            ne, status, _ = avro_events(
                data,
                starts,
                ends,
                p.kinds,
                p.slots,
                p.arg_a,
                p.arg_b,
                p.kids,
                p.fill_off,
                p.fill,
                p.root,
                ev_slot,
                ev_val,
                ev_aux,
                ev_valid,
                *self._stack,
            )
            if status != FULL:
                break
            cap *= 2
        if status != OK:
            raise ColumnarFallback("a value does not decode")
        bounds = np.zeros(len(p.out) + 1, np.int64)
        bounds[1:] = np.cumsum(np.bincount(ev_slot[:ne], minlength=len(p.out)))
        vals, aux, valid = np.empty(ne, np.int64), np.empty(ne, np.int64), np.empty(ne, np.bool_)
        _by_slot(ev_slot, ev_val, ev_aux, ev_valid, ne, bounds, vals, aux, valid)
        b = _Builder(data, p.out, bounds, vals, aux, valid)
        root = int(p.slots[p.root])
        if p.kinds[p.root] == K_RECORD:
            return [b.build(ch) for ch in p.out[root].children]
        return [b.build(root)]


class _Builder:
    """Events grouped by slot -> Arrow arrays (numpy over whole columns)."""

    def __init__(
        self,
        data: np.ndarray,
        out: list[_Slot],
        bounds: np.ndarray,
        vals: np.ndarray,
        aux: np.ndarray,
        valid: np.ndarray,
    ) -> None:
        self.data, self.out, self.bounds = data, out, bounds
        self.vals, self.aux, self.valid = vals, aux, valid

    def build(self, s: int) -> pa.Array:
        lo, hi = int(self.bounds[s]), int(self.bounds[s + 1])
        v, aux, valid = self.vals[lo:hi], self.aux[lo:hi], self.valid[lo:hi]
        n = hi - lo
        nulls = n - int(np.count_nonzero(valid))
        bitmap = None if nulls == 0 else pa.py_buffer(np.packbits(valid, bitorder="little"))
        slot = self.out[s]
        kind = slot.kind

        def fixed(typ: pa.DataType, arr: np.ndarray) -> pa.Array:
            return pa.Array.from_buffers(typ, n, [bitmap, pa.py_buffer(arr)], null_count=nulls)

        if kind == "bool":
            return pa.array(v.astype(np.bool_), pa.bool_(), mask=~valid if nulls else None)
        if kind == "int32":
            if n and (v.min() < -_I32 or v.max() >= _I32):
                raise ColumnarFallback("an int outside int32")
            if slot.logical == "date":
                if n and (v.min() < _MIN_DAY or v.max() > _MAX_DAY):
                    raise ColumnarFallback("a date outside Python's range")
                return fixed(pa.date32(), v.astype(np.int32))
            return fixed(pa.int32(), v.astype(np.int32))
        if kind == "int64":
            if slot.logical:
                millis = slot.logical.endswith("millis")
                lo, hi = (_MIN_US // 1000, _MAX_US // 1000) if millis else (_MIN_US, _MAX_US)
                if n and (v.min() < lo or v.max() > hi):
                    raise ColumnarFallback("a timestamp outside Python's datetime range")
                us = v * 1000 if millis else v
                tz = None if slot.logical.startswith("local") else "UTC"
                return fixed(pa.timestamp("us", tz=tz), np.ascontiguousarray(us))
            return fixed(pa.int64(), np.ascontiguousarray(v))
        if kind == "float32":
            return fixed(pa.float32(), v.astype(np.uint32).view(np.float32))
        if kind == "float64":
            return fixed(pa.float64(), np.ascontiguousarray(v).view(np.float64))
        if kind == "f_or_d":
            out = np.ascontiguousarray(v).view(np.float64).copy()
            single = aux == 4
            out[single] = v[single].astype(np.uint32).view(np.float32).astype(np.float64)
            return fixed(pa.float64(), out)
        if kind in ("bytes", "string"):
            return self.binary(v, aux, n, bitmap, nulls, kind == "string")
        if kind == "enum":
            if not slot.symbols:
                raise ColumnarFallback("an enum without symbols")
            idx = fixed(pa.int32(), v.astype(np.int32))
            return pa.array(slot.symbols, pa.string()).take(idx)
        children = [self.build(ch) for ch in slot.children]
        if kind == "record":
            fields = [pa.field(nm, ch.type) for nm, ch in zip(slot.names, children, strict=True)]
            return pa.Array.from_buffers(
                pa.struct(fields), n, [bitmap], null_count=nulls, children=children
            )
        offs = np.zeros(n + 1, np.int32)
        np.cumsum(v, out=offs[1:])
        if kind == "list":
            return pa.Array.from_buffers(
                pa.list_(children[0].type),
                n,
                [bitmap, pa.py_buffer(offs)],
                null_count=nulls,
                children=children,
            )
        assert kind == "map"
        return pa.MapArray.from_arrays(
            pa.array(offs), children[0], children[1], mask=pa.array(~valid) if nulls else None
        )

    def binary(
        self,
        starts: np.ndarray,
        lens: np.ndarray,
        n: int,
        bitmap: pa.Buffer | None,
        nulls: int,
        utf8: bool,
    ) -> pa.Array:
        offs = np.zeros(n + 1, np.int64)
        np.cumsum(lens, out=offs[1:])
        if offs[-1] >= _I32:
            raise ColumnarFallback("more than 2 GiB of bytes in one column")
        out = np.empty(int(offs[-1]), np.uint8)
        _gather(self.data, starts, lens, offs, out)
        typ = pa.string() if utf8 else pa.binary()
        arr = pa.Array.from_buffers(
            typ,
            n,
            [bitmap, pa.py_buffer(offs.astype(np.int32)), pa.py_buffer(out)],
            null_count=nulls,
        )
        if utf8:
            try:
                arr.validate(full=True)
            except pa.ArrowInvalid as e:
                raise ColumnarFallback("invalid UTF-8") from e
        return arr
