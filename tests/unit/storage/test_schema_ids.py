"""The per-record schema id check of broker-side schema validation (issue 27): reading
each record's wire-format header (odradek.storage.schema_ids) and judging it against
what the registry said (odradek.server.schema_validation.check_records)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from odradek.errors import ErrorCode, InvalidRecordsError, KafkaError
from odradek.server.schema_validation import (
    RECORD_NAME,
    TOPIC_RECORD_NAME,
    IdInfo,
    SchemaIdValidator,
    check_records,
    record_name,
)
from odradek.storage import schema_ids
from odradek.storage.log_types import LogConfig
from odradek.storage.records import COMPRESSION_GZIP, COMPRESSION_LZ4, encode_batch
from odradek.storage.schema_ids import (
    NOT_FRAMED,
    NULL,
    OUT_OF_RANGE,
    distinct_ids,
    record_schema_ids,
    schema_id_of,
)


@pytest.fixture(autouse=True)
def _compiled_walk() -> None:
    """The tests read records with the compiled walk where numba is installed (a broker
    loads it in a thread on first use and walks in Python meanwhile)."""
    schema_ids.load_kernel(wait=True)


def rows(records: bytes, key: bool, value: bool) -> list[tuple[int, int, int]]:
    return [tuple(r) for r in record_schema_ids(records, key, value).tolist()]  # type: ignore[misc]


def framed(sid: int, body: bytes = b"\x02ab") -> bytes:
    return b"\x00" + sid.to_bytes(4, "big") + body


def test_values_keys_tombstones_and_unframed_fields() -> None:
    batch = encode_batch(
        [
            (None, framed(7)),
            (b"k", framed(300_000)),
            (framed(9), None),  # a tombstone: value None passes
            (None, b"plain text"),
            (None, b"\x00\x00\x01"),  # magic 0 but shorter than 5 bytes
            (None, b""),
        ]
    )
    assert rows(batch, key=False, value=True) == [
        (0, NULL, 7),
        (1, NULL, 300_000),
        (2, NULL, NULL),
        (3, NULL, NOT_FRAMED),
        (4, NULL, NOT_FRAMED),
        (5, NULL, NOT_FRAMED),
    ]
    keys = [k for _, k, _ in rows(batch, key=True, value=False)]
    assert keys == [NULL, NOT_FRAMED, 9, NULL, NULL, NULL]


@pytest.mark.parametrize("codec", [COMPRESSION_GZIP, COMPRESSION_LZ4])
def test_compressed_batches_are_read_and_indexes_restart_per_batch(codec: int) -> None:
    big = b"x" * 300  # multi-byte varint lengths
    one = encode_batch([(None, framed(1, big)), (b"k" * 200, framed(2))], compression=codec)
    two = encode_batch([(None, b"raw")])
    assert rows(one + two, key=True, value=True) == [
        (0, NULL, 1),
        (1, NOT_FRAMED, 2),
        (0, NULL, NOT_FRAMED),
    ]


def test_control_batches_are_skipped() -> None:
    marker = encode_batch(
        [(b"\x00\x00\x00\x00", b"\x00\x00\x00\x00\x00\x00")],
        control=True,
        producer_id=1,
        producer_epoch=0,
        transactional=True,
    )
    assert rows(marker, key=True, value=True) == []


@pytest.mark.parametrize("cut", [1, 10, 61, 70])
def test_truncated_or_lying_batches_are_corrupt(cut: int) -> None:
    batch = encode_batch([(None, framed(7, b"y" * 40))] * 3)
    with pytest.raises(KafkaError) as e:
        record_schema_ids(batch[:-cut], key=False, value=True)
    assert e.value.code is ErrorCode.corrupt_message


def test_a_record_count_larger_than_the_records_is_corrupt() -> None:
    batch = bytearray(encode_batch([(None, framed(7))]))
    batch[57:61] = (1_000_000).to_bytes(4, "big")  # records count; the CRC is not checked here
    with pytest.raises(KafkaError):
        record_schema_ids(bytes(batch), key=False, value=True)


def test_distinct_ids() -> None:
    table = np.array([(0, NULL, 7), (1, NOT_FRAMED, 7), (2, 5, NULL), (3, NULL, 9)])
    assert distinct_ids(table) == {5, 7, 9}


def test_schema_id_of() -> None:
    assert schema_id_of(None) == NULL
    assert schema_id_of(b"\x01\x00\x00\x00\x07") == NOT_FRAMED
    assert schema_id_of(framed(0x7FFFFFFF)) == 0x7FFFFFFF
    # Above a Java int: kept apart, so 0xFFFFFFFE can never pass as NULL (-2).
    assert schema_id_of(framed(0xFFFFFFFE)) == OUT_OF_RANGE == schema_id_of(framed(1 << 31))


def test_ids_above_a_java_int_are_refused_not_taken_for_null() -> None:
    batch = encode_batch([(None, framed(0xFFFFFFFE)), (None, framed(0xFFFFFFFF))])
    table = record_schema_ids(batch, key=False, value=True)
    assert table[:, 2].tolist() == [OUT_OF_RANGE, OUT_OF_RANGE]
    errs = _errors(VALUE, table, {})
    assert [i for i, _ in errs] == [0, 1] and "above 2^31 - 1" in (errs[0][1] or "")


# ------------------------------------------------------------------ check_records
VALUE = LogConfig(value_schema_validation=True)


def _errors(cfg: LogConfig, table: np.ndarray, known: dict) -> list[tuple[int, str | None]]:
    with pytest.raises(InvalidRecordsError) as e:
        check_records("orders", 3, cfg, table, known)
    assert e.value.code is ErrorCode.invalid_record
    assert e.value.message == (e.value.record_errors[0][1] or "") + (
        f" (and {len(e.value.record_errors) - 1} more records)"
        if len(e.value.record_errors) > 1
        else ""
    )
    return e.value.record_errors


def test_topic_name_strategy() -> None:
    known = {
        7: IdInfo(frozenset({"orders-value"}), "x.Order"),
        8: IdInfo(frozenset({"payments-value"}), "x.Payment"),
        9: None,
    }
    check_records("orders", 0, VALUE, np.array([(0, NULL, 7), (1, NULL, NULL)]), known)
    errs = _errors(
        VALUE, np.array([(0, NULL, 7), (1, NULL, 8), (2, NULL, 9), (3, NULL, NOT_FRAMED)]), known
    )
    assert [i for i, _ in errs] == [1, 2, 3]
    assert "value schema id 8 is not registered under subject orders-value" in errs[0][1]
    assert "value schema id 9 is not known to the schema registry" in errs[1][1]
    assert "value has no schema id" in errs[2][1]
    assert "orders-3" in errs[0][1]


def test_keys_checked_only_when_asked_and_null_keys_pass() -> None:
    known = {5: IdInfo(frozenset({"orders-key"}), None)}
    both = LogConfig(key_schema_validation=True, value_schema_validation=True)
    check_records("orders", 0, both, np.array([(0, 5, NULL), (1, NULL, NULL)]), known)
    errs = _errors(both, np.array([(0, NOT_FRAMED, NULL)]), known)
    assert "key has no schema id" in errs[0][1]
    # key validation off: an unframed key is nobody's business
    check_records("orders", 0, VALUE, np.array([(0, NOT_FRAMED, NULL)]), known)


def test_record_name_strategies() -> None:
    info = IdInfo(frozenset({"x.Order", "orders-x.Order"}), "x.Order")
    nameless = IdInfo(frozenset({"orders-value"}), None)
    for strategy in (RECORD_NAME, TOPIC_RECORD_NAME):
        cfg = LogConfig(value_schema_validation=True, value_subject_name_strategy=strategy)
        check_records("orders", 0, cfg, np.array([(0, NULL, 1)]), {1: info})
        errs = _errors(cfg, np.array([(0, NULL, 2)]), {2: nameless})
        assert "no record name" in errs[0][1]
    other = IdInfo(frozenset({"x.Order"}), "x.Order")
    cfg = LogConfig(value_schema_validation=True, value_subject_name_strategy=TOPIC_RECORD_NAME)
    assert "subject orders-x.Order" in _errors(cfg, np.array([(0, NULL, 1)]), {1: other})[0][1]


def test_record_names_of_each_schema_type() -> None:
    avro = '{"type":"record","name":"Order","namespace":"shop","fields":[]}'
    assert record_name("AVRO", avro) == "shop.Order"
    assert record_name("AVRO", '{"type":"record","name":"a.b.C","namespace":"z"}') == "a.b.C"
    assert record_name("AVRO", '"string"') is None
    assert record_name("JSON", '{"title":"Order","type":"object"}') == "Order"
    proto = 'syntax = "proto3";\npackage shop.v1;\n\nmessage Order {\n  int32 id = 1;\n}\n'
    assert record_name("PROTOBUF", proto) == "shop.v1.Order"


def test_cache_expires_and_is_bounded() -> None:
    now = [0.0]
    v = SchemaIdValidator(
        ["http://127.0.0.1:1"], ttl_s=10.0, negative_ttl_s=1.0, max_ids=3, clock=lambda: now[0]
    )
    info = IdInfo(frozenset({"t-value"}), None)
    v.put(1, info)
    v.put(2, None)  # unknown to the registry: remembered briefly
    assert v.cached({1, 2, 3}) == ({1: info, 2: None}, {3})
    assert v.refreshable({1}) == set()  # fetched just now: a refusal stands
    now[0] = 1.5
    assert v.cached({1, 2}) == ({1: info}, {2})
    assert v.refreshable({1}) == {1}  # fetched 1.5 s ago: a refusal asks again
    assert v.cached({1}) == ({}, {1})
    v.put(1, info)
    now[0] = 11.0
    assert v.cached({1}) == ({1: info}, set())
    now[0] = 11.6
    assert v.cached({1}) == ({}, {1})  # the TTL ran out
    for sid in range(10, 20):
        v.put(sid, info)
    assert len(v._cache) == 3
    assert v.cached({17, 18, 19})[1] == set()


def test_the_python_walk_agrees_with_the_kernel(monkeypatch: pytest.MonkeyPatch) -> None:
    batch = encode_batch([(None, framed(7)), (framed(3), b"raw"), (b"k" * 300, None)] * 50)
    compiled = rows(batch, key=True, value=True)
    monkeypatch.setattr(schema_ids, "_kernel", None)  # still loading, or no numba
    assert rows(batch, key=True, value=True) == compiled
    with pytest.raises(KafkaError):
        record_schema_ids(batch[:-5], key=True, value=True)


def test_a_refusal_names_at_most_max_record_errors_records() -> None:
    from odradek.server.schema_validation import MAX_RECORD_ERRORS

    n = MAX_RECORD_ERRORS + 1
    table = np.array([(i, NULL, NOT_FRAMED) for i in range(n)])
    with pytest.raises(InvalidRecordsError) as e:
        check_records("orders", 0, VALUE, table, {})
    assert e.value.record_errors == []  # the client fails the whole batch
    assert e.value.message.endswith(
        f"value has no schema id (Confluent wire format: magic "
        f"byte 0 and a 4-byte schema id) (and {n - 1} more records)"
    )
    errs = _errors(VALUE, table[:MAX_RECORD_ERRORS], {})
    assert len(errs) == MAX_RECORD_ERRORS


def test_key_and_value_both_failing_give_the_key_reason_once() -> None:
    both = LogConfig(key_schema_validation=True, value_schema_validation=True)
    errs = _errors(both, np.array([(0, NOT_FRAMED, NOT_FRAMED), (1, NULL, NOT_FRAMED)]), {})
    assert [i for i, _ in errs] == [0, 1]
    assert "key has no schema id" in (errs[0][1] or "")
    assert "value has no schema id" in (errs[1][1] or "")


@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_hostile_batches_end_in_a_table_or_corrupt_message(data: st.DataObject) -> None:
    """A produce is walked before the append checks its CRC: any byte of a batch may be
    anything. The walk must end in a table or CORRUPT_MESSAGE (UNSUPPORTED_COMPRESSION_TYPE
    for a mutated codec id), never another error or a
    read past the records (both the kernel and the Python walk)."""
    batch = bytearray(encode_batch([(b"k" * 3, framed(7, b"v" * 20)), (None, b"raw")] * 3))
    for _ in range(data.draw(st.integers(1, 6))):
        pos = data.draw(st.integers(0, len(batch) - 1))
        batch[pos] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(batch)))
    raw = bytes(batch[:cut])
    compiled = schema_ids._kernel
    for kernel in {compiled, None}:
        schema_ids._kernel = kernel
        try:
            table = record_schema_ids(raw, key=True, value=True)
            assert table.shape[1] == 3
        except KafkaError as e:  # a mutated codec id: Kafka's answer for it
            assert e.code in (ErrorCode.corrupt_message, ErrorCode.unsupported_compression_type)
        finally:
            schema_ids._kernel = compiled
