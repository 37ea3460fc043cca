"""Client quotas (KIP-13, KIP-55, KIP-124, KIP-219): Kafka's ClientQuotaManager, sans-IO.

Quotas are configured per user, per client-id and per (user, client-id), each with a
``<default>``, in ZooKeeper (``odradek.zk.quota_store``). For a request of user U and
client-id C the first of Kafka's eight levels (KIP-55) that sets the quota wins::

    /config/users/U/clients/C            tags (U, C)
    /config/users/U/clients/<default>    tags (U, C)
    /config/users/U                      tags (U, "")
    /config/users/<default>/clients/C    tags (U, C)
    /config/users/<default>/clients/<default>   tags (U, C)
    /config/users/<default>              tags (U, "")
    /config/clients/C                    tags ("", C)
    /config/clients/<default>            tags ("", C)

The *tags* name the sensor whose rate is limited (Kafka's ``quotaMetricTags``): every
connection with the same tags shares one rate, so a user-level quota limits all that
user's client-ids together, and a client-id quota all users of that client-id.

Each sensor is Kafka's ``Rate`` over ``quota.window.num`` samples of
``quota.window.size.seconds``: the sum of the retained samples divided by their span,
counting at least ``num - 1`` full windows (a burst at start is averaged over the whole
span). A request that takes the rate above the bound is throttled for
``(rate - bound) / bound * window`` ms (``ClientQuotaManager.throttleTime``): the broker
answers at once with that ``throttle_time_ms`` and then does not read from the
connection until it has passed (KIP-219, ``odradek.server.network``).

``request_percentage`` (KIP-124) uses the same sensors for handler time
(``odradek.server.request_quota``); ``controller_mutation_rate`` is stored, not enforced.

Hot path: ``QuotaManager.active`` is False while no quota is configured anywhere, and
the handlers check only that. Otherwise a request costs one dict lookup of its
(user, client-id) in a cache of resolved sensors, which a configuration change clears.
"""

from __future__ import annotations

import logging
import math
import urllib.parse
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field

from odradek.configdefs import broker_default

logger = logging.getLogger(__name__)

__all__ = [
    "DEFAULT",
    "PRODUCER_BYTE_RATE",
    "CONSUMER_BYTE_RATE",
    "REQUEST_PERCENTAGE",
    "CONTROLLER_MUTATION_RATE",
    "QUOTA_KEYS",
    "EntityKey",
    "Rate",
    "Sensor",
    "ClientQuotaManager",
    "QuotaManager",
    "resolve_quota",
    "sanitize",
    "throttle_time_ms",
]

DEFAULT = "<default>"  # Kafka's ConfigEntityName.Default, a znode name of its own

PRODUCER_BYTE_RATE = "producer_byte_rate"
CONSUMER_BYTE_RATE = "consumer_byte_rate"
REQUEST_PERCENTAGE = "request_percentage"
CONTROLLER_MUTATION_RATE = "controller_mutation_rate"
# Kafka's QuotaConfigs for users and clients: name -> whether the value is integral
# (LONG) rather than DOUBLE.
QUOTA_KEYS: dict[str, bool] = {
    PRODUCER_BYTE_RATE: True,
    CONSUMER_BYTE_RATE: True,
    REQUEST_PERCENTAGE: False,
    CONTROLLER_MUTATION_RATE: False,
}

# (sanitized user or DEFAULT or None, sanitized client-id or DEFAULT or None): the
# znode of a quota entity, None = the entity has no such component.
EntityKey = tuple[str | None, str | None]

# Sensors not used for this long are dropped when the cache is full (Kafka expires
# quota sensors after an hour of inactivity).
SENSOR_IDLE_MS = 3_600_000
MAX_SENSORS = 10_000


def sanitize(name: str) -> str:
    """Kafka's Sanitizer: a user or client-id as one znode name (Java's URLEncoder, with
    ``*`` and space percent-encoded; Python's quote also keeps ``~``, Java does not)."""
    return urllib.parse.quote(name, safe="").replace("~", "%7E")


def unsanitize(name: str) -> str:
    return urllib.parse.unquote(name)


# =============================================================================== rate
class Rate:
    """Kafka's ``Rate`` over a ``SampledStat``: samples are started by recording (an idle
    second makes none), a sample is complete after ``window_ms`` and expires
    ``num * window_ms`` after it started. The sums over the live samples are kept
    running, so a record and a measure cost O(1)."""

    __slots__ = ("window_ms", "num", "_samples", "_total", "_events")

    def __init__(self, window_ms: int, num: int) -> None:
        self.window_ms = window_ms
        self.num = max(2, num)
        self._samples: deque[list[float]] = deque()  # [start ms, value sum, events]
        self._total = 0.0
        self._events = 0

    def record(self, value: float, now_ms: float) -> None:
        samples = self._samples
        if not samples or now_ms - samples[-1][0] >= self.window_ms:
            self._purge(now_ms)
            samples.append([now_ms, 0.0, 0])
            if len(samples) > self.num:
                self._drop_oldest()
        last = samples[-1]
        last[1] += value
        last[2] += 1
        self._total += value
        self._events += 1

    def _drop_oldest(self) -> None:
        _, value, events = self._samples.popleft()
        self._total -= value
        self._events -= int(events)

    def _purge(self, now_ms: float) -> None:
        expire = self.num * self.window_ms
        samples = self._samples
        while samples and now_ms - samples[0][0] >= expire:
            self._drop_oldest()
        if not samples:
            self._total, self._events = 0.0, 0  # no drift from float sums

    def window_size_ms(self, now_ms: float) -> float:
        """Kafka's ``Rate.windowSize``: the span of the retained samples, at least
        ``num - 1`` full windows."""
        self._purge(now_ms)
        oldest = self._samples[0][0] if self._samples else now_ms
        elapsed = now_ms - oldest
        full = int(elapsed // self.window_ms)
        if full < self.num - 1:
            elapsed += (self.num - 1 - full) * self.window_ms
        return max(elapsed, 1.0)

    def total(self, now_ms: float) -> float:
        self._purge(now_ms)
        return self._total

    def events(self, now_ms: float) -> int:
        self._purge(now_ms)
        return self._events

    def peek(self, now_ms: float) -> tuple[float, int, float]:
        """(total, events, span ms) of the live samples without changing anything: for a
        metrics scrape, which may run on another thread."""
        expire = self.num * self.window_ms
        live = [s for s in list(self._samples) if now_ms - s[0] < expire]
        oldest = live[0][0] if live else now_ms
        elapsed = now_ms - oldest
        full = int(elapsed // self.window_ms)
        if full < self.num - 1:
            elapsed += (self.num - 1 - full) * self.window_ms
        return sum(s[1] for s in live), int(sum(s[2] for s in live)), max(elapsed, 1.0)

    def measure(self, now_ms: float) -> float:
        """Per second."""
        return self.total(now_ms) / (self.window_size_ms(now_ms) / 1000.0)


def throttle_time_ms(value: float, bound: float, window_ms: float) -> int:
    """Kafka's ``ClientQuotaManager.throttleTime``: how long until the measured rate
    ``value`` (over ``window_ms``) falls back to ``bound``."""
    if value <= bound:
        return 0
    if bound <= 0:
        return int(window_ms)
    return round((value - bound) / bound * window_ms)


@dataclass(slots=True)
class Sensor:
    """One quota entity's rate and its throttle-time statistics (for the metrics)."""

    user: str  # metric tags, unsanitized ("" = not part of the entity)
    client_id: str
    bound: float
    rate: Rate
    throttle: Rate  # throttle ms per request, averaged for kafka_server_*_throttle_time
    last_used_ms: float = 0.0
    throttled_requests: int = field(default=0)

    def throttle_avg_ms(self, now_ms: float) -> float:
        """Kafka's ``throttle-time`` metric: the average throttle of the requests in the
        window (read-only, see ``Rate.peek``)."""
        total, n, _ = self.throttle.peek(now_ms)
        return total / n if n else 0.0

    def byte_rate(self, now_ms: float) -> float:
        """Kafka's ``byte-rate`` metric (read-only)."""
        total, _, span_ms = self.rate.peek(now_ms)
        return total / (span_ms / 1000.0)


# =============================================================================== precedence
def resolve_quota(
    configs: Mapping[EntityKey, Mapping[str, float]], key: str, user: str, client_id: str
) -> tuple[float, str, str] | None:
    """(bound, user tag, client-id tag) of the first of KIP-55's eight levels that sets
    ``key`` for sanitized ``user`` and ``client_id``; None when no level does. Pure."""
    levels: tuple[tuple[EntityKey, str, str], ...] = (
        ((user, client_id), user, client_id),
        ((user, DEFAULT), user, client_id),
        ((user, None), user, ""),
        ((DEFAULT, client_id), user, client_id),
        ((DEFAULT, DEFAULT), user, client_id),
        ((DEFAULT, None), user, ""),
        ((None, client_id), "", client_id),
        ((None, DEFAULT), "", client_id),
    )
    for entity, utag, ctag in levels:
        values = configs.get(entity)
        if values is not None:
            bound = values.get(key)
            if bound is not None:
                return bound, utag, ctag
    return None


# =============================================================================== managers
class ClientQuotaManager:
    """One quota type (produce, fetch, request): sensors by metric tags, resolved per
    (user, client-id) once and cached until the configuration changes."""

    def __init__(
        self, key: str, window_s: int, num: int, max_throttle_ms: int | None = None
    ) -> None:
        self.key = key
        # Kafka's ClientRequestQuotaManager caps a request-time throttle at one window.
        self.max_throttle_ms = max_throttle_ms
        self.window_ms = window_s * 1000
        self.num = num
        self.active = False  # some entity sets this quota
        self._configs: Mapping[EntityKey, Mapping[str, float]] = {}
        self.sensors: dict[tuple[str, str], Sensor] = {}
        self._resolved: dict[tuple[str, str], Sensor | None] = {}

    def configure(self, configs: Mapping[EntityKey, Mapping[str, float]]) -> None:
        self._configs = configs
        self.active = any(self.key in v for v in configs.values())
        self._resolved.clear()
        # Existing sensors keep their rate: the next request of each (user, client-id)
        # resolves again and sets the new bound (an alter applies to the live rate, as
        # Kafka's updateQuotaMetricConfigs does).
        if not self.active:
            self.sensors.clear()

    def sensor(self, user: str, client_id: str, now_ms: float) -> Sensor | None:
        """The sensor of a request by ``user`` (principal name) and ``client_id``."""
        ident = (user, client_id)
        try:
            return self._resolved[ident]
        except KeyError:
            pass
        found = resolve_quota(self._configs, self.key, sanitize(user), sanitize(client_id))
        sensor = None
        if found is not None:
            bound, utag, ctag = found
            tags = (user if utag else "", client_id if ctag else "")
            sensor = self.sensors.get(tags)
            if sensor is not None:
                sensor.bound = bound
            else:
                if len(self.sensors) >= MAX_SENSORS:
                    self._expire(now_ms)
                sensor = Sensor(
                    tags[0],
                    tags[1],
                    bound,
                    Rate(self.window_ms, self.num),
                    Rate(self.window_ms, self.num),
                )
                self.sensors[tags] = sensor
        if len(self._resolved) >= MAX_SENSORS:
            self._resolved.clear()
        self._resolved[ident] = sensor
        return sensor

    def _expire(self, now_ms: float) -> None:
        idle = [t for t, s in self.sensors.items() if now_ms - s.last_used_ms > SENSOR_IDLE_MS]
        for t in idle or list(self.sensors)[: len(self.sensors) // 2]:
            del self.sensors[t]
        self._resolved.clear()

    def record(self, user: str, client_id: str, value: float, now_ms: float) -> int:
        """Record ``value`` (bytes) and return the throttle time in ms (0: within)."""
        sensor = self.sensor(user, client_id, now_ms)
        if sensor is None:
            return 0
        return self.record_on(sensor, value, now_ms)

    def record_on(self, sensor: Sensor, value: float, now_ms: float) -> int:
        sensor.last_used_ms = now_ms
        rate = sensor.rate
        rate.record(value, now_ms)
        window = rate.window_size_ms(now_ms)  # purges: the running total is the live one
        measured = rate._total / (window / 1000.0)
        delay = throttle_time_ms(measured, sensor.bound, window)
        if self.max_throttle_ms is not None and delay > self.max_throttle_ms:
            delay = self.max_throttle_ms
        sensor.throttle.record(delay, now_ms)
        if delay:
            sensor.throttled_requests += 1
        return delay

    def unrecord(self, sensor: Sensor, value: float, now_ms: float) -> None:
        """Kafka's ``unrecordQuotaSensor``: a throttled fetch is answered without its
        records, so their bytes were not sent."""
        sensor.rate.record(-value, now_ms)

    def max_value_in_window(self, user: str, client_id: str, now_ms: float) -> float:
        """Kafka's ``getMaxValueInQuotaWindow``: the bound times one window, which caps a
        fetch's size (a single response cannot be many windows' worth)."""
        sensor = self.sensor(user, client_id, now_ms)
        if sensor is None:
            return math.inf
        return sensor.bound * self.window_ms / 1000.0


class QuotaManager:
    """The broker's quota managers and the configuration they share."""

    # quota.window.size.seconds / quota.window.num; defaults from the table.
    def __init__(
        self,
        window_s: int = broker_default("quota.window.size.seconds"),
        num: int = broker_default("quota.window.num"),
    ) -> None:
        self.produce = ClientQuotaManager(PRODUCER_BYTE_RATE, window_s, num)
        self.fetch = ClientQuotaManager(CONSUMER_BYTE_RATE, window_s, num)
        self.request = ClientQuotaManager(
            REQUEST_PERCENTAGE, window_s, num, max_throttle_ms=window_s * 1000
        )
        self.active = False  # the one check on the hot path
        self.configs: dict[EntityKey, dict[str, float]] = {}

    def set_entity(self, entity: EntityKey, config: Mapping[str, str]) -> None:
        """Replace one entity's quotas (its znode's config: other keys, e.g. SCRAM
        credentials of a user, are not quotas and are ignored)."""
        values: dict[str, float] = {}
        for k, v in config.items():
            if k in QUOTA_KEYS:
                try:
                    values[k] = float(v)
                except ValueError:
                    logger.warning("ignoring quota %s=%r of %s: not a number", k, v, entity)
        if values:
            self.configs[entity] = values
        else:
            self.configs.pop(entity, None)
        self._apply()

    def replace_all(self, configs: Mapping[EntityKey, Mapping[str, str]]) -> None:
        self.configs = {}
        for entity, config in configs.items():
            values = {k: float(v) for k, v in config.items() if k in QUOTA_KEYS and _is_number(v)}
            if values:
                self.configs[entity] = values
        self._apply()

    def _apply(self) -> None:
        for m in (self.produce, self.fetch, self.request):
            m.configure(self.configs)
        self.active = self.produce.active or self.fetch.active or self.request.active
        logger.info("client quotas: %d entities configured", len(self.configs))


def _is_number(v: str) -> bool:
    try:
        float(v)
    except ValueError:
        return False
    return True
