"""Pure offset planning for the Spark source: options, resolution, rate limits, splits.

Mirrors Spark's Kafka connector (``KafkaSourceProvider`` option rules,
``KafkaMicroBatchStream.rateLimit``, ``KafkaOffsetRangeCalculator``) so a Spark user's
options mean the same thing here. Nothing in this module does I/O: the source gathers
earliest/latest/by-timestamp offsets from the cluster and hands them in.

Offsets are kept as ``{(topic, partition): offset}``; in Spark's checkpoint they are
Spark's JSON shape ``{"topic": {"0": 23, "1": 5}}`` (``to_json`` / ``from_json``).
In user JSON, ``-2`` means earliest and ``-1`` latest, as in Spark.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from odradek.errors import ErrorCode, KafkaError
from odradek.security.client_security import ClientSecurity

__all__ = [
    "TP",
    "EARLIEST",
    "LATEST",
    "SparkOptionError",
    "DataLossError",
    "OffsetSpec",
    "OffsetRange",
    "Subscription",
    "parse_subscription",
    "parse_partition_json",
    "to_json",
    "from_json",
    "starting_spec",
    "ending_spec",
    "timestamp_queries",
    "resolve",
    "rate_limit",
    "plan_ranges",
    "split_ranges",
    "parse_bool",
    "parse_positive_int",
]

TP = tuple[str, int]
EARLIEST = -2  # Spark's (and Kafka's ListOffsets) sentinel values in offset JSON
LATEST = -1


class SparkOptionError(KafkaError, ValueError):
    """An invalid source/sink option (Spark raises IllegalArgumentException)."""

    def __init__(self, message: str) -> None:
        super().__init__(ErrorCode.invalid_config, message)


class DataLossError(KafkaError):
    """Offsets the query needs are gone (failOnDataLoss=true), as Spark reports it."""

    def __init__(self, message: str) -> None:
        super().__init__(
            ErrorCode.offset_out_of_range,
            message
            + (
                ". Some data may have been lost because they are not available in Odradek any "
                "more; either the data was aged out or the topic may have been deleted before "
                "all the data in the topic was processed. If you don't want your streaming query "
                "to fail on such cases, set the source option \"failOnDataLoss\" to \"false\"."
            ),
        )


# --------------------------------------------------------------------------- options


def parse_bool(options: Mapping[str, str], name: str, default: bool) -> bool:
    raw = options.get(name)
    if raw is None:
        return default
    v = str(raw).strip().lower()
    if v not in ("true", "false"):
        raise SparkOptionError(f"option '{name}' must be true or false, got {raw!r}")
    return v == "true"


def parse_positive_int(options: Mapping[str, str], name: str) -> int | None:
    raw = options.get(name)
    if raw is None:
        return None
    try:
        v = int(str(raw).strip())
    except ValueError:
        raise SparkOptionError(f"option '{name}' must be a positive integer, got {raw!r}") from None
    if v <= 0:
        raise SparkOptionError(f"option '{name}' must be a positive integer, got {raw!r}")
    return v


@dataclass(frozen=True)
class Subscription:
    """Exactly one of Spark's three subscription strategies."""

    kind: Literal["subscribe", "subscribePattern", "assign"]
    topics: tuple[str, ...] = ()  # subscribe
    pattern: str = ""  # subscribePattern (Java regex; Python's re covers the usual subset)
    partitions: tuple[TP, ...] = ()  # assign

    def matches(self, topic: str) -> bool:
        if self.kind == "subscribe":
            return topic in self.topics
        if self.kind == "subscribePattern":
            return re.fullmatch(self.pattern, topic) is not None
        return any(t == topic for t, _ in self.partitions)

    def select(self, topic_partitions: Mapping[str, int]) -> list[TP]:
        """The partitions this subscription reads, from ``{topic: partition count}``.

        Internal topics (``__*``) are never matched by a pattern, like Kafka's consumer
        with ``exclude.internal.topics``. ``assign`` returns exactly what was assigned
        (missing ones included: the caller reports them).
        """
        if self.kind == "assign":
            return list(self.partitions)
        out: list[TP] = []
        for topic in sorted(topic_partitions):
            if self.kind == "subscribePattern" and topic.startswith("__"):
                continue
            if self.matches(topic):
                out.extend((topic, p) for p in range(topic_partitions[topic]))
        return out


def parse_subscription(options: Mapping[str, str]) -> Subscription:
    """Exactly one of subscribe / subscribePattern / assign, validated like Spark."""
    given = [k for k in ("subscribe", "subscribePattern", "assign") if options.get(k) is not None]
    if len(given) != 1:
        raise SparkOptionError(
            "One of the following options must be specified for the odradek source: "
            "subscribe, subscribePattern, assign (exactly one)"
            + (f"; got {', '.join(given)}" if given else "")
        )
    kind = given[0]
    raw = str(options[kind]).strip()
    if kind == "subscribe":
        topics = tuple(t.strip() for t in raw.split(",") if t.strip())
        if not topics:
            raise SparkOptionError(
                f"No topics to subscribe to as specified value for option 'subscribe' is '{raw}'"
            )
        return Subscription("subscribe", topics=topics)
    if kind == "subscribePattern":
        if not raw:
            raise SparkOptionError(
                "Pattern to subscribe is empty as specified value for "
                "option 'subscribePattern' is ''"
            )
        try:
            re.compile(raw)
        except re.error as e:
            raise SparkOptionError(f"invalid subscribePattern {raw!r}: {e}") from None
        return Subscription("subscribePattern", pattern=raw)
    parsed = _parse_json_object(raw, "assign")
    tps: list[TP] = []
    for topic, parts in parsed.items():
        if not isinstance(parts, list) or not all(isinstance(p, int) for p in parts):
            raise SparkOptionError(
                f"option 'assign' must look like {{\"topicA\":[0,1]}}, got {raw!r}"
            )
        tps.extend((topic, p) for p in parts)
    if not tps:
        raise SparkOptionError("option 'assign' names no partitions")
    return Subscription("assign", partitions=tuple(tps))


def _parse_json_object(raw: str, name: str) -> dict[str, object]:
    try:
        parsed = json.loads(raw)
    except json.JSONDecodeError as e:
        raise SparkOptionError(f"option '{name}' is not valid JSON ({e}): {raw!r}") from None
    if not isinstance(parsed, dict):
        raise SparkOptionError(f"option '{name}' must be a JSON object, got {raw!r}")
    return parsed


def parse_partition_json(raw: str, name: str) -> dict[TP, int]:
    """``{"topicA":{"0":23,"1":-1}}`` -> ``{("topicA", 0): 23, ("topicA", 1): -1}``."""
    out: dict[TP, int] = {}
    for topic, parts in _parse_json_object(raw, name).items():
        if not isinstance(parts, dict):
            raise SparkOptionError(
                f"option '{name}' must look like {{\"topicA\":{{\"0\":23}}}}, got {raw!r}"
            )
        for p, v in parts.items():
            try:
                out[(topic, int(p))] = int(v)
            except (TypeError, ValueError):
                raise SparkOptionError(
                    f"option '{name}': bad partition/offset {p!r}: {v!r}"
                ) from None
    return out


def to_json(offsets: Mapping[TP, int]) -> dict[str, dict[str, int]]:
    """Spark's checkpoint shape, sorted so equal offsets serialize identically."""
    out: dict[str, dict[str, int]] = {}
    for (topic, p), off in sorted(offsets.items()):
        out.setdefault(topic, {})[str(p)] = int(off)
    return out


def from_json(obj: Mapping[str, Mapping[str, int]]) -> dict[TP, int]:
    return {(topic, int(p)): int(off) for topic, parts in obj.items() for p, off in parts.items()}


# --------------------------------------------------------------------------- specs


@dataclass(frozen=True)
class OffsetSpec:
    """Where to start or stop: Spark's KafkaOffsetRangeLimit cases."""

    kind: Literal["earliest", "latest", "offsets", "timestamps", "global_timestamp"]
    offsets: Mapping[TP, int] = field(default_factory=dict)  # offsets or per-tp timestamps
    timestamp: int | None = None  # global_timestamp
    # startingOffsetsByTimestampStrategy: "error" (fail) or "latest" when nothing matches
    no_match: Literal["error", "latest"] = "latest"


def _timestamp_option(options: Mapping[str, str], name: str) -> int | None:
    raw = options.get(name)
    if raw is None:
        return None
    try:
        return int(str(raw).strip())
    except ValueError:
        raise SparkOptionError(
            f"option '{name}' must be milliseconds since the epoch, got {raw!r}"
        ) from None


def starting_spec(options: Mapping[str, str], *, streaming: bool) -> OffsetSpec:
    """startingTimestamp > startingOffsetsByTimestamp > startingOffsets (Spark's order)."""
    strategy = str(options.get("startingOffsetsByTimestampStrategy", "error")).lower()
    if strategy not in ("error", "latest"):
        raise SparkOptionError(
            "option 'startingOffsetsByTimestampStrategy' must be "
            f"'error' or 'latest', got {strategy!r}"
        )
    ts = _timestamp_option(options, "startingTimestamp")
    if ts is not None:
        return OffsetSpec("global_timestamp", timestamp=ts, no_match=strategy)  # type: ignore[arg-type]
    raw = options.get("startingOffsetsByTimestamp")
    if raw is not None:
        return OffsetSpec(
            "timestamps",
            parse_partition_json(str(raw), "startingOffsetsByTimestamp"),
            no_match=strategy,  # type: ignore[arg-type]
        )
    raw = options.get("startingOffsets")
    default = "latest" if streaming else "earliest"
    spec = _offsets_spec(str(raw) if raw is not None else default, "startingOffsets")
    if not streaming:
        # Spark: a batch query cannot start at "latest" (it would read nothing, by design).
        if spec.kind == "latest" or any(v == LATEST for v in spec.offsets.values()):
            raise SparkOptionError(
                "starting offset can't be latest for batch queries on the odradek source"
            )
    return spec


def ending_spec(options: Mapping[str, str], *, streaming: bool) -> OffsetSpec:
    """endingTimestamp > endingOffsetsByTimestamp > endingOffsets; batch queries only."""
    names = ("endingTimestamp", "endingOffsetsByTimestamp", "endingOffsets")
    if streaming:
        for n in names:
            if options.get(n) is not None:
                raise SparkOptionError(
                    f"option '{n}' is not valid for streaming queries on the odradek source"
                )
        return OffsetSpec("latest")
    ts = _timestamp_option(options, "endingTimestamp")
    if ts is not None:
        return OffsetSpec("global_timestamp", timestamp=ts)
    raw = options.get("endingOffsetsByTimestamp")
    if raw is not None:
        return OffsetSpec("timestamps", parse_partition_json(str(raw), "endingOffsetsByTimestamp"))
    raw = options.get("endingOffsets")
    spec = _offsets_spec(str(raw) if raw is not None else "latest", "endingOffsets")
    if spec.kind == "earliest" or any(v == EARLIEST for v in spec.offsets.values()):
        raise SparkOptionError(
            "ending offset can't be earliest for batch queries on the odradek source"
        )
    return spec


def _offsets_spec(raw: str, name: str) -> OffsetSpec:
    v = raw.strip()
    if v.lower() in ("earliest", "latest"):
        return OffsetSpec(v.lower())  # type: ignore[arg-type]
    return OffsetSpec("offsets", parse_partition_json(v, name))


def timestamp_queries(spec: OffsetSpec, partitions: list[TP]) -> dict[TP, int]:
    """The (partition -> timestamp) ListOffsets lookups ``resolve`` will need."""
    if spec.kind == "global_timestamp":
        assert spec.timestamp is not None
        return {tp: spec.timestamp for tp in partitions}
    if spec.kind == "timestamps":
        return {tp: ts for tp, ts in spec.offsets.items() if tp in set(partitions)}
    return {}


def resolve(
    spec: OffsetSpec,
    partitions: list[TP],
    earliest: Mapping[TP, int],
    latest: Mapping[TP, int],
    by_timestamp: Mapping[TP, int | None],
    *,
    is_start: bool,
) -> dict[TP, int]:
    """Concrete offsets for ``partitions``.

    ``by_timestamp[tp]`` is ListOffsets' answer for the timestamp (None: no record at or
    after it). Spark: for a starting timestamp without a match, the strategy decides
    (``error`` fails, ``latest`` starts at the end); an ending timestamp without a match
    means latest. Per-partition JSON must name every partition (Spark asserts the same).
    """
    out: dict[TP, int] = {}
    if spec.kind in ("offsets", "timestamps"):
        missing = [tp for tp in partitions if tp not in spec.offsets]
        if missing:
            which = "startingOffsets" if is_start else "endingOffsets"
            raise SparkOptionError(
                f"{which}{'ByTimestamp' if spec.kind == 'timestamps' else ''}"
                f" does not name partitions {sorted(missing)}; every "
                "subscribed partition must be listed"
            )
    for tp in partitions:
        if spec.kind == "earliest":
            out[tp] = earliest[tp]
        elif spec.kind == "latest":
            out[tp] = latest[tp]
        elif spec.kind == "offsets":
            v = spec.offsets[tp]
            out[tp] = earliest[tp] if v == EARLIEST else latest[tp] if v == LATEST else v
        else:
            found = by_timestamp.get(tp)
            if found is None or found < 0:
                if is_start and spec.no_match == "error":
                    raise SparkOptionError(
                        f"No offset matched the starting timestamp for partition {tp[0]}-"
                        f"{tp[1]}; set startingOffsetsByTimestampStrategy=latest to start "
                        "from the end instead"
                    )
                found = latest[tp]
            out[tp] = found
    return out


# --------------------------------------------------------------------------- planning


@dataclass(frozen=True, slots=True)
class OffsetRange:
    """``[start, end)`` of one topic-partition; one Spark task reads one range."""

    topic: str
    partition: int
    start: int
    end: int

    @property
    def size(self) -> int:
        return self.end - self.start


def rate_limit(
    start: Mapping[TP, int],
    latest: Mapping[TP, int],
    max_rows: int,
    new_start: Mapping[TP, int] | None = None,
) -> dict[TP, int]:
    """End offsets advancing at most ``max_rows`` records in total (maxOffsetsPerTrigger).

    Like Spark's ``rateLimit``, the budget is shared in proportion to each partition's
    backlog. Unlike Spark (which rounds each share up to 1 and so may exceed the limit by
    up to one record per partition) the total never exceeds ``max_rows``: shares are
    floored and the leftover records go first to partitions that would otherwise get
    nothing, then to the largest fractional shares, so small partitions are not starved
    as long as ``max_rows`` >= the number of partitions with a backlog.
    """
    begin = {**(new_start or {}), **start}
    sizes = {
        tp: end - begin[tp] for tp, end in latest.items() if tp in begin and end - begin[tp] > 0
    }
    total = sum(sizes.values())
    if total <= max_rows:
        return dict(latest)
    shares = {tp: max_rows * size / total for tp, size in sizes.items()}
    take = {tp: math.floor(s) for tp, s in shares.items()}
    left = max_rows - sum(take.values())
    order = sorted(sizes, key=lambda tp: (take[tp] > 0, -(shares[tp] - take[tp]), tp))
    for tp in order[:left]:
        take[tp] += 1
    return {
        tp: (min(end, begin[tp] + take[tp]) if tp in sizes else end) for tp, end in latest.items()
    }


def plan_ranges(
    start: Mapping[TP, int],
    end: Mapping[TP, int],
    earliest: Mapping[TP, int],
    *,
    fail_on_data_loss: bool,
) -> tuple[list[OffsetRange], list[str]]:
    """The ranges of a micro-batch, with Spark's data-loss checks.

    * partition in ``start`` missing from ``end`` (deleted): data loss;
    * partition new in ``end``: read from its earliest offset; if that is not 0, records
      were lost before we saw the partition (Spark's "Added partition ... starts from");
    * ``start`` below the log start (retention deleted unread data): data loss, read
      from the log start;
    * ``end < start`` (the partition's offsets went backwards: topic recreated): data
      loss, the range is skipped.

    With ``fail_on_data_loss`` the first problem raises DataLossError; otherwise the
    messages are returned for logging and the plan skips what is gone.
    """
    problems: list[str] = []

    def report(msg: str) -> None:
        if fail_on_data_loss:
            raise DataLossError(msg)
        problems.append(msg)

    gone = sorted(set(start) - set(end))
    if gone:
        report(f"{', '.join(f'{t}-{p}' for t, p in gone)} are gone")
    ranges: list[OffsetRange] = []
    for tp in sorted(end):
        until = end[tp]
        lo = earliest.get(tp, 0)
        if tp in start:
            frm = start[tp]
        else:
            frm = lo
            if lo != 0:
                report(f"Added partition {tp[0]}-{tp[1]} starts from {lo} instead of 0")
        if frm < lo:
            report(f"Cannot read {tp[0]}-{tp[1]} from offset {frm}: the log starts at {lo}")
            frm = lo
        if until < frm:
            report(f"Partition {tp[0]}-{tp[1]}'s offset was changed from {frm} to {until}")
            continue
        if until > frm:
            ranges.append(OffsetRange(tp[0], tp[1], frm, until))
    return ranges, problems


def split_ranges(ranges: list[OffsetRange], min_partitions: int | None) -> list[OffsetRange]:
    """Split ranges so there are at least ``min_partitions`` tasks (KafkaOffsetRangeCalculator).

    Each range gets ``round(size / total * minPartitions)`` pieces (at least one) of
    near-equal size, so large partitions are split and small ones are kept whole.
    """
    ranges = [r for r in ranges if r.size > 0]
    if min_partitions is None or len(ranges) >= min_partitions:
        return ranges
    total = sum(r.size for r in ranges)
    out: list[OffsetRange] = []
    for r in ranges:
        parts = max(round(r.size / total * min_partitions), 1)
        remaining, at = r.size, r.start
        for i in range(parts):
            n = remaining // (parts - i)
            remaining -= n
            if n > 0:
                out.append(OffsetRange(r.topic, r.partition, at, at + n))
            at += n
    return out


def client_security(conf: Mapping[str, str]) -> ClientSecurity:
    """The columnar client's TLS / SASL from librdkafka's names (``kafka.security.protocol``,
    ``kafka.sasl.mechanism``, ``kafka.sasl.username``/``password``, ``kafka.ssl.ca.location``,
    ...), as the confluent path would read them."""
    try:
        return ClientSecurity.from_properties(dict(conf))
    except ValueError as e:
        raise SparkOptionError(f"option 'kafka.security.protocol': {e}") from None
