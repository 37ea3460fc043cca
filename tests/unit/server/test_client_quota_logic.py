"""Client quotas, pure parts: KIP-55 precedence, Kafka's Rate and throttle time, the
AlterClientQuotas / DescribeClientQuotas semantics."""

from __future__ import annotations

import random
from typing import Any

import pytest

from odradek.errors import ErrorCode, KafkaError
from odradek.protocol.codec import RequestHeaderInfo, encode_response
from odradek.protocol.fetch_response import encode_fetch_response
from odradek.protocol.produce_response import PartitionProduceResult, encode_produce_response
from odradek.protocol.responses import response
from odradek.server.client_quotas import (
    DEFAULT,
    PRODUCER_BYTE_RATE,
    ClientQuotaManager,
    QuotaManager,
    Rate,
    resolve_quota,
    throttle_time_ms,
)
from odradek.server.handlers.quotas import (
    MATCH_DEFAULT,
    MATCH_EXACT,
    MATCH_SPECIFIED,
    apply_ops,
    describe_matches,
    entity_key,
    parse_filter,
)
from odradek.server.request_quota import exempt, with_throttle
from odradek.zk.quota_store import entity_path, parse_entity_path

P = PRODUCER_BYTE_RATE

# One entity per KIP-55 level, each with its level number as the quota.
ALL_LEVELS = {
    ("u", "c"): {P: 1.0},
    ("u", DEFAULT): {P: 2.0},
    ("u", None): {P: 3.0},
    (DEFAULT, "c"): {P: 4.0},
    (DEFAULT, DEFAULT): {P: 5.0},
    (DEFAULT, None): {P: 6.0},
    (None, "c"): {P: 7.0},
    (None, DEFAULT): {P: 8.0},
}
TAGS = {
    1: ("u", "c"),
    2: ("u", "c"),
    3: ("u", ""),
    4: ("u", "c"),
    5: ("u", "c"),
    6: ("u", ""),
    7: ("", "c"),
    8: ("", "c"),
}


def test_precedence_follows_kip55_levels_in_order() -> None:
    configs = dict(ALL_LEVELS)
    for level in range(1, 9):
        bound, utag, ctag = resolve_quota(configs, P, "u", "c") or (0, "", "")
        assert bound == level
        assert (utag, ctag) == TAGS[level]
        # Remove the winning level: the next one takes over.
        del configs[next(e for e, v in configs.items() if v[P] == level)]
    assert resolve_quota(configs, P, "u", "c") is None


def test_precedence_ignores_other_users_and_clients_and_other_keys() -> None:
    configs = {
        ("v", "c"): {P: 1.0},
        ("u", "d"): {P: 2.0},
        (None, "d"): {P: 3.0},
        ("u", None): {"consumer_byte_rate": 9.0},
    }
    assert resolve_quota(configs, P, "u", "c") is None
    assert resolve_quota(configs, "consumer_byte_rate", "u", "c") == (9.0, "u", "")


def test_throttle_time_is_kafkas_formula() -> None:
    # (O - T) / T * W, rounded; 0 within the bound.
    assert throttle_time_ms(1000.0, 1000.0, 10_000) == 0
    assert throttle_time_ms(500.0, 1000.0, 10_000) == 0
    assert throttle_time_ms(1500.0, 1000.0, 10_000) == 5000
    assert throttle_time_ms(1100.0, 1000.0, 11_000) == 1100


def test_rate_counts_at_least_num_minus_one_full_windows() -> None:
    r = Rate(1000, 11)
    r.record(10_000, 0)
    # One sample at t=0: the span is counted as 10 windows (Kafka's Rate.windowSize).
    assert r.window_size_ms(0) == 10_000
    assert r.measure(0) == pytest.approx(1000.0)
    r.record(5_000, 12_000)  # the first sample expired (11 windows after it started)
    assert r.total(12_000) == 5_000
    assert r.window_size_ms(12_000) == 10_000


def test_rate_span_grows_past_the_minimum() -> None:
    r = Rate(1000, 11)
    for t in range(0, 11_000, 1000):
        r.record(1000, t)
    # 11 samples, oldest at 0: span 10.5 s at t=10.5 s, rate 11000 / 10.5.
    assert r.window_size_ms(10_500) == 10_500
    assert r.measure(10_500) == pytest.approx(11_000 / 10.5)


def _throttled_client_rates(request_bytes: int, span_ms: int) -> tuple[float, float]:
    """(lowest, highest) rate in MB/s over any ``span_ms`` of a client that sends
    ``request_bytes`` requests back to back against a 1 MB/s quota (window 1 s, 2
    samples, as the integration test's broker) and waits out each throttle time, as
    librdkafka does (KIP-219); 1-11 ms (seeded) between requests for the round trip."""
    mb = 1 << 20
    m = ClientQuotaManager(P, 1, 2)
    m.configure({(None, "c"): {P: float(mb)}})
    rnd = random.Random(7)
    sent: list[float] = []
    t = 0.0
    while t < 60_000:
        delay = m.record("u", "c", request_bytes, t)
        sent.append(t)
        t += delay + 1 + rnd.random() * 10
    rates = []
    for start in range(3_000, 40_000, 7):  # after a 3 s warm-up, as the test
        n = sum(1 for x in sent if start <= x < start + span_ms)
        rates.append(n * request_bytes / (span_ms / 1000) / mb)
    return min(rates), max(rates)


def test_quota_accuracy_over_a_span_depends_on_the_request_size() -> None:
    # Kafka's Rate lets a request through whole and throttles after it, so how close the
    # bytes of a few seconds come to the quota depends on the request size against one
    # window's worth. The integration test (test_client_quotas) measures 6 s of a
    # producer: with librdkafka's default batch.size (~1 MB requests, a whole window's
    # worth) 6 s can hold 26 % more than the quota (CI measured 1.257 MB/s once), with
    # 100 kB requests the band is 0.83-1.05. That test sets batch.size=100000.
    low, high = _throttled_client_rates(990_000, 6_000)
    assert high > 1.25 and low < 0.8
    low, high = _throttled_client_rates(100_000, 6_000)
    assert 0.8 < low and high < 1.1
    low, high = _throttled_client_rates(100_000, 20_000)  # the slow 20 s test: within 10 %
    assert 0.9 < low and high < 1.1


def test_manager_throttles_over_the_bound_and_shares_the_user_sensor() -> None:
    m = ClientQuotaManager(P, 1, 11)
    m.configure({("alice", None): {P: 1000.0}})
    assert m.active
    # 10 000 bytes at once: 1000 B/s over the 10 s minimum span, exactly the bound.
    assert m.record("alice", "c1", 10_000, 0.0) == 0
    # 1000 more from another client-id of alice: the same (alice, "") sensor,
    # 11 000 / 10 s = 1100 B/s, 10 % over: throttled 10 % of the window.
    assert m.record("alice", "c2", 1000, 0.0) == 1000
    assert set(m.sensors) == {("alice", "")}
    # bob has no quota at all.
    assert m.record("bob", "c1", 10**9, 0.0) == 0


def test_manager_follows_a_changed_bound_and_an_emptied_config() -> None:
    m = ClientQuotaManager(P, 1, 11)
    m.configure({(None, DEFAULT): {P: 1000.0}})
    m.record("u", "c", 15_000, 0.0)  # 1500 B/s measured
    assert m.record("u", "c", 0, 0.0) == 5000
    m.configure({(None, DEFAULT): {P: 3000.0}})  # raised: the same rate is now within
    assert m.record("u", "c", 0, 0.0) == 0
    m.configure({})
    assert not m.active
    assert m.record("u", "c", 10**9, 0.0) == 0


def test_quota_manager_is_inactive_without_quotas_and_ignores_other_keys() -> None:
    q = QuotaManager()
    assert not q.active
    q.set_entity(("alice", None), {"SCRAM-SHA-256": "salt=...,iterations=4096"})
    assert not q.active and q.configs == {}
    q.set_entity(("alice", None), {"SCRAM-SHA-256": "x", P: "1024"})
    assert q.active and q.produce.active and not q.fetch.active
    q.set_entity(("alice", None), {})
    assert not q.active


def test_max_value_in_window_caps_fetches() -> None:
    m = ClientQuotaManager("consumer_byte_rate", 2, 11)
    m.configure({(None, "c"): {"consumer_byte_rate": 1000.0}})
    assert m.max_value_in_window("u", "c", 0.0) == 2000.0
    assert m.max_value_in_window("u", "other", 0.0) == float("inf")


# ------------------------------------------------------------------- AlterClientQuotas
def test_entity_key_sanitizes_and_maps_defaults() -> None:
    assert entity_key([("user", "alice"), ("client-id", None)]) == ("alice", DEFAULT)
    # Kafka's Sanitizer: URLEncoder, then * and space percent-encoded.
    assert entity_key([("client-id", "a/b c*~._-")]) == (None, "a%2Fb%20c%2A%7E._-")
    assert entity_key([("user", None)]) == (DEFAULT, None)
    for bad in ([], [("user", "")], [("group", "g")], [("ip", "1.2.3.4")]):
        with pytest.raises(KafkaError) as e:
            entity_key(bad)
        assert e.value.code == ErrorCode.invalid_request


def test_apply_ops_sets_removes_and_keeps_other_keys() -> None:
    current = {"SCRAM-SHA-256": "cred", P: "10"}
    out = apply_ops(
        current,
        [
            (P, 2048.0, False),
            ("request_percentage", 12.5, False),
            ("consumer_byte_rate", 0.0, True),
        ],
    )
    assert out == {"SCRAM-SHA-256": "cred", P: "2048", "request_percentage": "12.5"}
    assert apply_ops(out, [(P, 0.0, True)]) == {
        "SCRAM-SHA-256": "cred",
        "request_percentage": "12.5",
    }


@pytest.mark.parametrize(
    "op", [("unknown_key", 1.0, False), (P, 1.5, False), (P, -1.0, False), (P, float("nan"), False)]
)
def test_apply_ops_refuses_bad_keys_and_values(op: tuple[str, float, bool]) -> None:
    with pytest.raises(KafkaError) as e:
        apply_ops({}, [op])
    assert e.value.code == ErrorCode.invalid_request


# ------------------------------------------------------------------ DescribeClientQuotas
CONFIGS = {
    ("alice", None): {P: "100", "SCRAM-SHA-256": "cred"},
    ("alice", "c1"): {P: "200"},
    (DEFAULT, None): {P: "300"},
    (None, "c1"): {P: "400"},
    (None, DEFAULT): {P: "500"},
    ("bob", None): {"SCRAM-SHA-256": "cred"},  # no quota: never described
}


def _describe(components: list[tuple[str, int, str | None]], strict: bool) -> set[tuple]:
    return {e for e, _ in describe_matches(CONFIGS, parse_filter(components), strict)}


def test_describe_filters_match_kafkas_semantics() -> None:
    assert _describe([], False) == set(CONFIGS) - {("bob", None)}
    assert _describe([], True) == set()
    assert _describe([("user", MATCH_EXACT, "alice")], False) == {("alice", None), ("alice", "c1")}
    assert _describe([("user", MATCH_EXACT, "alice")], True) == {("alice", None)}
    assert _describe([("user", MATCH_DEFAULT, None)], True) == {(DEFAULT, None)}
    assert _describe([("user", MATCH_SPECIFIED, None)], True) == {("alice", None), (DEFAULT, None)}
    assert _describe([("client-id", MATCH_SPECIFIED, None)], True) == {
        (None, "c1"),
        (None, DEFAULT),
    }
    assert _describe([("user", MATCH_SPECIFIED, None), ("client-id", MATCH_EXACT, "c1")], True) == {
        ("alice", "c1")
    }


def test_describe_values_are_numbers_without_other_keys() -> None:
    [(_, values)] = describe_matches(CONFIGS, parse_filter([("user", MATCH_EXACT, "alice")]), True)
    assert values == {P: 100.0}


@pytest.mark.parametrize(
    ("components", "code"),
    [
        ([("user", 0, "a"), ("user", 0, "b")], ErrorCode.invalid_request),
        ([("", 0, "a")], ErrorCode.invalid_request),
        ([("group", 0, "a")], ErrorCode.unsupported_version),
        ([("user", 7, None)], ErrorCode.invalid_request),
        ([("ip", 2, None), ("user", 2, None)], ErrorCode.invalid_request),
    ],
)
def test_describe_refuses_bad_filters(
    components: list[tuple[str, int, str | None]], code: ErrorCode
) -> None:
    with pytest.raises(KafkaError) as e:
        parse_filter(components)
    assert e.value.code == code


def test_entity_paths_round_trip() -> None:
    for entity in [("alice", None), (None, "c"), ("alice", "c"), (DEFAULT, DEFAULT)]:
        assert parse_entity_path(entity_path(entity)) == entity
    assert entity_path((DEFAULT, "c")) == "users/<default>/clients/c"
    assert parse_entity_path("topics/t") is None
    assert parse_entity_path("users/a/groups/b") is None


# ------------------------------------------------------------------ request_percentage
def test_request_throttle_is_capped_at_one_window() -> None:
    q = QuotaManager(window_s=1, num=11)
    q.set_entity((None, "c"), {"request_percentage": "1"})
    assert q.request.active and q.active
    # 1 s of handler time = 100 units, over a 10 s span: 10 % against a 1 % quota.
    # Kafka's formula says (10 - 1) / 1 * 10 s = 90 s; the request quota caps it at 1 s.
    assert q.request.record("u", "c", 100.0, 0.0) == 1000
    # Byte-rate quotas are not capped.
    q.set_entity((None, "c"), {PRODUCER_BYTE_RATE: "1"})
    assert q.produce.record("u", "c", 100.0, 0.0) == 90_000


def _header(api_key: int, version: int) -> RequestHeaderInfo:
    return RequestHeaderInfo(
        api_key=api_key, api_version=version, correlation_id=7, client_id="c", header_size=0
    )


def test_with_throttle_raises_the_throttle_of_every_response_form() -> None:
    tp = [("t", [PartitionProduceResult(index=0, error_code=0, base_offset=5)])]
    for version in (3, 8, 9, 10):
        raw = encode_produce_response(version, 7, tp, 100)
        assert with_throttle(_header(0, version), raw, 250) == encode_produce_response(
            version, 7, tp, 250
        )
        # A larger byte-rate throttle already in the response stays.
        assert with_throttle(_header(0, version), raw, 50) == raw
    for version in (4, 7, 11, 12):
        parts = encode_fetch_response(version, 7, [], throttle_time_ms=0)
        assert with_throttle(_header(1, version), parts, 300) == encode_fetch_response(
            version, 7, [], throttle_time_ms=300
        )
    entity = response(
        3,
        12,
        brokers=(),
        cluster_id=None,
        controller_id=-1,
        topics=(),
        cluster_authorized_operations=-2147483648,
    )
    out = with_throttle(_header(3, 12), entity, 1000)
    assert out.throttle_time.total_seconds() == 1.0
    assert with_throttle(_header(3, 12), entity, 0) is entity
    # A kept Metadata answer is bytes (server/metadata_answers.py): patched in place.
    for version in (3, 8, 9, 12):
        kwargs: dict[str, Any] = dict(
            brokers=(),
            cluster_id=None,
            controller_id=-1,
            topics=(),
            cluster_authorized_operations=-2147483648,
        )
        h = _header(3, version)
        raw = encode_response(h, response(3, version, throttle_time=0, **kwargs))
        assert with_throttle(h, raw, 1000) == encode_response(
            h, response(3, version, throttle_time=1000, **kwargs)
        )


def test_request_quota_exemptions() -> None:
    class Fetch:
        def __init__(self, replica_id: int) -> None:
            self.replica_id = replica_id

    assert exempt(_header(1, 12), Fetch(2))  # a follower
    assert not exempt(_header(1, 12), Fetch(-1))
    for key in (17, 18, 27, 36):
        assert exempt(_header(key, 0), None)
    assert exempt(_header(24, 4), None) and not exempt(_header(24, 3), None)
    assert not exempt(_header(3, 12), None)
