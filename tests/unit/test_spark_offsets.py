"""Pure offset planning of the Spark source (odradek.spark.offsets; issue 7, item 1).

Mirrors Spark's Kafka connector rules: option precedence and validation, -2/-1 in JSON,
maxOffsetsPerTrigger's proportional split, minPartitions splitting and the data-loss
checks behind failOnDataLoss (including "retention removed unread data", which the
integration tests cannot produce until retention exists, issue 5).
"""

from __future__ import annotations

import itertools

import pytest

from odradek.spark import offsets as om
from odradek.spark.offsets import DataLossError, OffsetRange, OffsetSpec, SparkOptionError

A0, A1, B0 = ("a", 0), ("a", 1), ("b", 0)


# --------------------------------------------------------------------------- options


def test_exactly_one_subscription_option() -> None:
    with pytest.raises(SparkOptionError, match="exactly one"):
        om.parse_subscription({})
    with pytest.raises(SparkOptionError, match="exactly one"):
        om.parse_subscription({"subscribe": "a", "assign": '{"a":[0]}'})
    assert om.parse_subscription({"subscribe": "a, b"}).topics == ("a", "b")
    assert om.parse_subscription({"assign": '{"a":[0,1]}'}).partitions == (A0, A1)
    with pytest.raises(SparkOptionError):
        om.parse_subscription({"subscribePattern": "("})


def test_subscription_select() -> None:
    counts = {"a": 2, "b": 1, "ab": 1, "__odradek_spark_sink-x": 1}
    assert om.parse_subscription({"subscribe": "a"}).select(counts) == [A0, A1]
    assert om.parse_subscription({"subscribePattern": "a.*"}).select(counts) == [A0, A1, ("ab", 0)]
    # internal topics are never matched by a pattern
    assert om.parse_subscription({"subscribePattern": ".*"}).select(counts) == [
        A0,
        A1,
        ("ab", 0),
        B0,
    ]


def test_json_round_trip_and_errors() -> None:
    assert om.parse_partition_json('{"a":{"0":23,"1":-1}}', "x") == {A0: 23, A1: -1}
    assert om.to_json({A1: 5, A0: 3, B0: 1}) == {"a": {"0": 3, "1": 5}, "b": {"0": 1}}
    assert om.from_json(om.to_json({A1: 5, B0: 1})) == {A1: 5, B0: 1}
    for bad in ("nope", "[1]", '{"a":[0]}', '{"a":{"x":1}}'):
        with pytest.raises(SparkOptionError):
            om.parse_partition_json(bad, "startingOffsets")


def test_starting_and_ending_specs() -> None:
    assert om.starting_spec({}, streaming=True).kind == "latest"
    assert om.starting_spec({}, streaming=False).kind == "earliest"
    assert om.ending_spec({}, streaming=False).kind == "latest"
    # precedence: startingTimestamp > startingOffsetsByTimestamp > startingOffsets
    spec = om.starting_spec(
        {
            "startingTimestamp": "5",
            "startingOffsetsByTimestamp": '{"a":{"0":1}}',
            "startingOffsets": "earliest",
        },
        streaming=True,
    )
    assert (spec.kind, spec.timestamp, spec.no_match) == ("global_timestamp", 5, "error")
    spec = om.starting_spec(
        {
            "startingOffsetsByTimestamp": '{"a":{"0":1}}',
            "startingOffsetsByTimestampStrategy": "latest",
        },
        streaming=False,
    )
    assert (spec.kind, dict(spec.offsets), spec.no_match) == ("timestamps", {A0: 1}, "latest")
    with pytest.raises(SparkOptionError, match="latest for batch"):
        om.starting_spec({"startingOffsets": "latest"}, streaming=False)
    with pytest.raises(SparkOptionError, match="latest for batch"):
        om.starting_spec({"startingOffsets": '{"a":{"0":-1}}'}, streaming=False)
    with pytest.raises(SparkOptionError, match="earliest for batch"):
        om.ending_spec({"endingOffsets": '{"a":{"0":-2}}'}, streaming=False)
    with pytest.raises(SparkOptionError, match="streaming"):
        om.ending_spec({"endingOffsets": "latest"}, streaming=True)
    with pytest.raises(SparkOptionError):
        om.parse_positive_int({"maxOffsetsPerTrigger": "0"}, "maxOffsetsPerTrigger")
    with pytest.raises(SparkOptionError):
        om.parse_bool({"failOnDataLoss": "yes"}, "failOnDataLoss", True)


def test_resolve() -> None:
    tps = [A0, A1]
    earliest, latest = {A0: 0, A1: 4}, {A0: 10, A1: 20}
    assert om.resolve(OffsetSpec("earliest"), tps, earliest, latest, {}, is_start=True) == earliest
    assert om.resolve(OffsetSpec("latest"), tps, earliest, latest, {}, is_start=True) == latest
    spec = OffsetSpec("offsets", {A0: -2, A1: 7})
    assert om.resolve(spec, tps, earliest, latest, {}, is_start=True) == {A0: 0, A1: 7}
    spec = OffsetSpec("offsets", {A0: -1, A1: -1})
    assert om.resolve(spec, tps, earliest, latest, {}, is_start=False) == latest
    with pytest.raises(SparkOptionError, match="does not name"):
        om.resolve(OffsetSpec("offsets", {A0: 1}), tps, earliest, latest, {}, is_start=True)
    spec = OffsetSpec("global_timestamp", timestamp=100, no_match="error")
    assert om.timestamp_queries(spec, tps) == {A0: 100, A1: 100}
    assert om.resolve(spec, tps, earliest, latest, {A0: 3, A1: 9}, is_start=True) == {A0: 3, A1: 9}
    with pytest.raises(SparkOptionError, match="No offset matched"):
        om.resolve(spec, tps, earliest, latest, {A0: 3, A1: -1}, is_start=True)
    lenient = OffsetSpec("global_timestamp", timestamp=100, no_match="latest")
    assert om.resolve(lenient, tps, earliest, latest, {A0: 3, A1: -1}, is_start=True) == {
        A0: 3,
        A1: 20,
    }
    # an ending timestamp without a match means latest
    assert om.resolve(spec, tps, earliest, latest, {A0: -1, A1: 9}, is_start=False) == {
        A0: 10,
        A1: 9,
    }


# --------------------------------------------------------------------------- rate limit


def test_rate_limit_under_budget_returns_latest() -> None:
    assert om.rate_limit({A0: 0, A1: 0}, {A0: 5, A1: 5}, 100) == {A0: 5, A1: 5}


def test_rate_limit_is_proportional_and_never_exceeds() -> None:
    start = {A0: 0, A1: 100, B0: 0}
    latest = {A0: 1000, A1: 110, B0: 1}  # backlogs 1000, 10, 1
    end = om.rate_limit(start, latest, 100)
    taken = {tp: end[tp] - start[tp] for tp in start}
    assert sum(taken.values()) == 100
    assert taken[A0] >= 98 and taken[A1] >= 0
    assert taken[B0] == 1  # small partitions are not starved (Spark rounds them up too)
    assert all(end[tp] <= latest[tp] for tp in latest)


def test_rate_limit_many_rounds_converges() -> None:
    start = {A0: 0, A1: 0, B0: 0}
    latest = {A0: 201, A1: 200, B0: 200}
    rounds = 0
    while start != latest:
        end = om.rate_limit(start, latest, 70)
        assert 0 < sum(end[tp] - start[tp] for tp in start) <= 70
        start, rounds = end, rounds + 1
    assert rounds == 9  # ceil(601 / 70)


def test_rate_limit_new_partitions_start_at_their_earliest() -> None:
    end = om.rate_limit({A0: 10}, {A0: 20, A1: 30}, 10, new_start={A1: 0})
    assert end[A0] - 10 + end[A1] == 10
    assert end[A1] > 0


# --------------------------------------------------------------------------- planning


def test_plan_ranges_plain_and_new_partition() -> None:
    ranges, problems = om.plan_ranges(
        {A0: 5}, {A0: 9, A1: 3}, {A0: 0, A1: 0}, fail_on_data_loss=True
    )
    assert ranges == [OffsetRange("a", 0, 5, 9), OffsetRange("a", 1, 0, 3)]
    assert problems == []
    ranges, _ = om.plan_ranges({A0: 9}, {A0: 9}, {A0: 0}, fail_on_data_loss=True)
    assert ranges == []


@pytest.mark.parametrize(
    "start,end,earliest,message",
    [
        ({A0: 5}, {A0: 9}, {A0: 7}, "the log starts at 7"),  # retention removed unread data
        ({A0: 30}, {A0: 10}, {A0: 0}, "offset was changed from 30 to 10"),  # topic recreated
        ({A0: 3, B0: 4}, {A0: 3}, {A0: 0}, "b-0 are gone"),  # topic deleted
        ({A0: 3}, {A0: 3, A1: 9}, {A0: 0, A1: 2}, "Added partition a-1 starts from 2"),
    ],
)
def test_plan_ranges_data_loss(start: dict, end: dict, earliest: dict, message: str) -> None:
    with pytest.raises(DataLossError, match=message) as e:
        om.plan_ranges(start, end, earliest, fail_on_data_loss=True)
    assert "failOnDataLoss" in str(e.value)
    ranges, problems = om.plan_ranges(start, end, earliest, fail_on_data_loss=False)
    assert any(message in p for p in problems)
    for r in ranges:  # what remains readable is still read, from where it is available
        assert r.start >= earliest[(r.topic, r.partition)] and r.end == end[(r.topic, r.partition)]


def test_plan_ranges_retention_skips_to_log_start() -> None:
    ranges, _ = om.plan_ranges({A0: 5}, {A0: 9}, {A0: 7}, fail_on_data_loss=False)
    assert ranges == [OffsetRange("a", 0, 7, 9)]


def test_split_ranges() -> None:
    rs = [OffsetRange("a", 0, 0, 90), OffsetRange("a", 1, 0, 10), OffsetRange("b", 0, 5, 5)]
    assert om.split_ranges(rs, None) == rs[:2]  # empty ranges dropped
    assert om.split_ranges(rs, 2) == rs[:2]
    out = om.split_ranges(rs, 10)
    assert [r for r in out if r.partition == 1] == [rs[1]]  # small range kept whole
    a0 = [r for r in out if r.topic == "a" and r.partition == 0]
    assert len(a0) == 9 and a0[0].start == 0 and a0[-1].end == 90
    assert all(x.end == y.start for x, y in itertools.pairwise(a0))
    assert {r.size for r in a0} == {10}
