"""The version table is consistent with kio and with what real clients need (docs/platform-notes.md)."""

from __future__ import annotations

from kio.index import load_request_schema, load_response_schema

from odradek.protocol.versions import ADVERTISED, API_NAMES, SERVED, is_served


def test_every_served_version_exists_in_kio() -> None:
    for key, (lo, hi) in SERVED.items():
        assert lo <= hi
        for version in range(lo, hi + 1):
            assert load_request_schema(key, version).__version__ == version
            assert load_response_schema(key, version).__version__ == version


def test_advertised_covers_served_and_nothing_else() -> None:
    assert set(ADVERTISED) == set(SERVED)
    for key, (lo, hi) in SERVED.items():
        alo, ahi = ADVERTISED[key]
        if key == 24:  # AddPartitionsToTxn v4-5: between brokers only (KIP-890)
            assert (alo, ahi) == (0, 3) and hi == 5
            continue
        assert alo <= lo and ahi == hi


def test_client_compatibility_facts() -> None:
    # librdkafka 2.0.2 (kcat) needs Produce advertised from v0; we decode v3+.
    assert ADVERTISED[0] == (0, 10) and SERVED[0] == (3, 10)
    assert 71 not in ADVERTISED and 72 not in ADVERTISED  # no telemetry
    assert ADVERTISED[18] == (0, 4)
    assert is_served(1, 12) and not is_served(1, 13) and not is_served(0, 2)


def test_api_names() -> None:
    assert API_NAMES[0] == "Produce"
    assert API_NAMES[18] == "ApiVersions"
    assert API_NAMES[2] == "ListOffsets"
    assert API_NAMES[60] == "DescribeCluster"
