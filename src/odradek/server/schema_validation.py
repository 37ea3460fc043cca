"""Broker-side schema id validation: Confluent Server's ``confluent.value.schema.validation``
and ``confluent.key.schema.validation`` topic configs (issue 27).

A produce to a validating topic is accepted only if every record's value (key) carries a
schema id in Confluent's wire format (magic byte 0, then the id) that the schema
registry named by the broker's ``confluent.schema.registry.url`` has registered under the
subject the topic's ``confluent.*.subject.name.strategy`` gives. Null values (tombstones)
and null keys pass. As in Confluent Server, the payload itself is not decoded against the
schema: only the id is checked.

Otherwise the partition's whole batch is refused with INVALID_RECORD, an error message
and ``record_errors`` naming each offending record (KIP-467), so the client fails those
records with INVALID_RECORD. A registry that cannot be asked (unreachable, HTTP 5xx, no
answer within ``LOOKUP_TIMEOUT_S``) refuses the batch with REQUEST_TIMED_OUT, which
clients retry: the registry is unknown to be down for good, and failing open would let
unvalidated records in.

Cost: the records are walked once (``odradek.storage.schema_ids``), and each schema id's
subjects are cached for ``CACHE_TTL_S`` (bounded to ``CACHE_MAX_IDS`` ids), so the
registry sees one lookup per id and TTL, not one per produce. A miss never blocks the
event loop: the produce waits (in order, like a KIP-890 verification) for an aiohttp
request, and concurrent misses of one id share it.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import re
import ssl
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

import numpy as np

from odradek.errors import ErrorCode, InvalidRecordsError, KafkaError
from odradek.storage.schema_ids import (
    INDEX,
    KEY,
    NOT_FRAMED,
    NULL,
    OUT_OF_RANGE,
    VALUE,
    column_ids,
)

if TYPE_CHECKING:
    from odradek.storage.log_types import LogConfig

__all__ = [
    "SchemaIdValidator",
    "IdInfo",
    "subject_for",
    "record_name",
    "check_records",
    "LOOKUP_TIMEOUT_S",
    "CACHE_TTL_S",
    "TOPIC_NAME",
    "RECORD_NAME",
    "TOPIC_RECORD_NAME",
    "NEGATIVE_TTL_S",
    "MAX_RECORD_ERRORS",
]

logger = logging.getLogger(__name__)

# Confluent's SubjectNameStrategy classes (the values of confluent.*.subject.name.strategy).
_PREFIX = "io.confluent.kafka.serializers.subject."
TOPIC_NAME: Final = _PREFIX + "TopicNameStrategy"
RECORD_NAME: Final = _PREFIX + "RecordNameStrategy"
TOPIC_RECORD_NAME: Final = _PREFIX + "TopicRecordNameStrategy"

CACHE_TTL_S: Final = 300.0  # a known id's subjects (deleting a subject takes this long)
NEGATIVE_TTL_S: Final = 2.0  # an id the registry does not know (it may be registered soon)
CACHE_MAX_IDS: Final = 10_000
LOOKUP_TIMEOUT_S: Final = 5.0  # upper bound of a produce's wait for the registry
MAX_RECORD_ERRORS: Final = 1000  # records a refusal names in record_errors (KIP-467)

# The validator's name in Confluent Server's message, so a search for it finds this too.
_VALIDATOR = "io.confluent.kafka.schemaregistry.validator.RecordSchemaValidator"


@dataclass(frozen=True, slots=True)
class IdInfo:
    """What the registry says of one schema id: the subjects it is registered under and
    the schema's full name (for the record name strategies; None if it has none)."""

    subjects: frozenset[str]
    record_name: str | None


def record_name(schema_type: str, schema: str) -> str | None:
    """The name Confluent's RecordNameStrategy uses: an Avro named type's full name, a
    JSON Schema's ``title``, a protobuf file's package + first message."""
    if schema_type == "PROTOBUF":
        msg = re.search(r"^\s*message\s+(\w+)", schema, re.MULTILINE)
        if msg is None:
            return None
        pkg = re.search(r"^\s*package\s+([\w.]+)\s*;", schema, re.MULTILINE)
        return f"{pkg.group(1)}.{msg.group(1)}" if pkg else msg.group(1)
    try:
        parsed = json.loads(schema)
    except ValueError:
        return None
    if not isinstance(parsed, dict):
        return None
    if schema_type == "JSON":
        title = parsed.get("title")
        return title if isinstance(title, str) else None
    name = parsed.get("name")
    if not isinstance(name, str):
        return None
    ns = parsed.get("namespace")
    return f"{ns}.{name}" if isinstance(ns, str) and ns and "." not in name else name


def subject_for(strategy: str, topic: str, is_key: bool, info: IdInfo) -> str | None:
    """The subject ``info``'s id must be registered under (None: the strategy needs a
    record name the schema does not have)."""
    if strategy == TOPIC_NAME:
        return f"{topic}-key" if is_key else f"{topic}-value"
    if info.record_name is None:
        return None
    if strategy == RECORD_NAME:
        return info.record_name
    return f"{topic}-{info.record_name}"


def _problem(
    topic: str, is_key: bool, sid: int, strategy: str, known: dict[int, IdInfo | None]
) -> str | None:
    """Why a field with schema id ``sid`` fails validation, None if it passes."""
    side = "key" if is_key else "value"
    if sid == OUT_OF_RANGE:
        return f"{side} schema id is above 2^31 - 1 (registry ids are positive 32-bit ints)"
    if sid == NOT_FRAMED:
        return (
            f"{side} has no schema id (Confluent wire format: magic byte 0 and a 4-byte schema id)"
        )
    info = known.get(sid)
    if info is None:
        return f"{side} schema id {sid} is not known to the schema registry"
    subject = subject_for(strategy, topic, is_key, info)
    if subject is None or subject not in info.subjects:
        return (
            f"{side} schema id {sid} is not registered under subject "
            f"{subject or '(the schema has no record name)'} "
            f"({strategy.rsplit('.', 1)[-1]})"
        )
    return None


def check_records(
    topic: str,
    partition: int,
    cfg: LogConfig,
    table: np.ndarray,
    known: dict[int, IdInfo | None],
) -> None:
    """Raise INVALID_RECORD naming the records of ``table`` (``record_schema_ids``) whose
    key or value fails validation; ``known`` holds every id of ``table`` (None: unknown
    to the registry). Judged once per distinct id, not per record: only a refusal looks
    at single records, and names at most ``MAX_RECORD_ERRORS`` of them."""
    reasons: dict[int, dict[int, str]] = {}  # column -> id -> why
    masks: dict[int, np.ndarray] = {}
    for is_key, on, col, strategy in (
        (True, cfg.key_schema_validation, KEY, cfg.key_subject_name_strategy),
        (False, cfg.value_schema_validation, VALUE, cfg.value_subject_name_strategy),
    ):
        if not on or not len(table):
            continue
        ids = table[:, col]
        why = {
            sid: reason
            for sid in column_ids(ids)
            if sid != NULL and (reason := _problem(topic, is_key, sid, strategy, known))
        }
        if why:
            reasons[col] = why
            masks[col] = np.isin(ids, list(why))
    if not masks:
        return
    failing = np.flatnonzero(np.logical_or.reduce(list(masks.values())))

    def message(row: int) -> str:
        col = KEY if KEY in masks and masks[KEY][row] else VALUE  # the key's reason first
        index = int(table[row, INDEX])
        return (
            f"Log record at batch index {index} of {topic}-{partition} is rejected by the "
            f"record interceptor {_VALIDATOR}: {reasons[col][int(table[row, col])]}"
        )

    first = message(int(failing[0]))
    more = f" (and {len(failing) - 1} more records)" if len(failing) > 1 else ""
    # KIP-467: the records named are failed, the others retried in a new batch. Past the
    # cap none is named, so the client fails the whole batch: the same verdict, without
    # a response (and a Python loop) the size of a million-record batch.
    errors: list[tuple[int, str | None]] = (
        [(int(table[row, INDEX]), message(int(row))) for row in failing]
        if len(failing) <= MAX_RECORD_ERRORS
        else []
    )
    raise InvalidRecordsError(first + more, errors)


class SchemaIdValidator:
    """The broker's view of the registry: a bounded TTL cache of id -> ``IdInfo`` filled
    by asynchronous lookups (one in flight per id)."""

    def __init__(
        self,
        urls: list[str],
        *,
        ttl_s: float = CACHE_TTL_S,
        negative_ttl_s: float = NEGATIVE_TTL_S,
        max_ids: int = CACHE_MAX_IDS,
        clock: Any = time.monotonic,
        user_info: str | None = None,
        cafile: str | None = None,
    ) -> None:
        """``user_info``: ``USER:PASSWORD`` for a registry with basic authentication;
        ``cafile``: the CA of an https registry (Confluent Server's
        ``confluent.basic.auth.user.info`` and ``confluent.ssl.truststore.location``)."""
        self.urls = [u.rstrip("/") for u in urls if u.strip()]
        self._user_info = user_info
        self._cafile = cafile
        self._ttl = ttl_s
        self._negative_ttl = negative_ttl_s
        self._max = max_ids
        self._clock = clock
        # id -> (expiry, info or None for "unknown to the registry", fetched at);
        # insertion order is age order, so the oldest entry is dropped first when full.
        self._cache: dict[int, tuple[float, IdInfo | None, float]] = {}
        self._inflight: dict[int, asyncio.Future[IdInfo | None]] = {}
        self._session: Any = None  # aiohttp.ClientSession, made on first lookup
        self.lookups = 0  # registry round trips (tests and the benchmark read it)

    # ------------------------------------------------------------------ the cache
    def cached(self, ids: set[int]) -> tuple[dict[int, IdInfo | None], set[int]]:
        """(what the cache knows of ``ids``, the ids it must look up)."""
        now = self._clock()
        known: dict[int, IdInfo | None] = {}
        missing: set[int] = set()
        cache = self._cache
        for sid in ids:
            entry = cache.get(sid)
            if entry is not None and entry[0] > now:
                known[sid] = entry[1]
            else:
                missing.add(sid)
        return known, missing

    def put(self, sid: int, info: IdInfo | None) -> None:
        cache = self._cache
        cache.pop(sid, None)
        while len(cache) >= self._max:
            del cache[next(iter(cache))]
        now = self._clock()
        cache[sid] = (now + (self._ttl if info is not None else self._negative_ttl), info, now)

    def refreshable(self, ids: set[int]) -> set[int]:
        """Of ``ids`` (whose records were just refused), those fetched long enough ago
        (the negative TTL) that the registry may know better now -- an id registered
        under one more subject since -- dropped from the cache so they are asked again.
        A refusal is thus re-checked at most once per negative TTL and id, while
        accepted ids stay cached for the full TTL."""
        now = self._clock()
        stale = {
            sid
            for sid in ids
            if (e := self._cache.get(sid)) is not None and now - e[2] >= self._negative_ttl
        }
        for sid in stale:
            del self._cache[sid]
        return stale

    # ------------------------------------------------------------------ lookups
    async def lookup(self, ids: set[int], timeout_s: float) -> dict[int, IdInfo | None]:
        """Each id's info, from the registry; KafkaError REQUEST_TIMED_OUT if it cannot
        be asked within ``timeout_s``."""
        futures = {sid: self._start(sid) for sid in ids}
        try:
            async with asyncio.timeout(timeout_s):
                return {sid: await f for sid, f in futures.items()}
        except TimeoutError:
            raise KafkaError(
                ErrorCode.request_timed_out,
                f"schema registry {', '.join(self.urls)} did not answer within "
                f"{timeout_s:g} s; schema ids of this batch not validated",
            ) from None

    def _start(self, sid: int) -> asyncio.Future[IdInfo | None]:
        f = self._inflight.get(sid)
        if f is None:
            f = asyncio.ensure_future(self._fetch(sid))
            self._inflight[sid] = f
            f.add_done_callback(functools.partial(self._done, sid))
        return asyncio.shield(f)  # a timed-out produce must not cancel a shared lookup

    def _done(self, sid: int, f: asyncio.Future[IdInfo | None]) -> None:
        self._inflight.pop(sid, None)
        if not f.cancelled():
            f.exception()  # retrieved: the produce that waited may have timed out already

    async def _fetch(self, sid: int) -> IdInfo | None:
        versions = await self._get(f"/schemas/ids/{sid}/versions")
        if versions is None:
            info = None
        else:
            if not isinstance(versions, list):
                raise KafkaError(
                    ErrorCode.request_timed_out,
                    f"schema registry answered /schemas/ids/{sid}/versions with "
                    f"{type(versions).__name__}, not a list",
                )
            subjects = frozenset(
                v["subject"]
                for v in versions
                if isinstance(v, dict) and isinstance(v.get("subject"), str)
            )
            schema = await self._get(f"/schemas/ids/{sid}")
            name = None
            if isinstance(schema, dict) and isinstance(schema.get("schema"), str):
                name = record_name(schema.get("schemaType") or "AVRO", schema["schema"])
            info = IdInfo(subjects, name)
        self.put(sid, info)
        return info

    async def _get(self, path: str) -> Any:
        """The JSON answer of the first registry that answers; None for a 404; KafkaError
        REQUEST_TIMED_OUT (retriable) when none can answer."""
        import aiohttp  # noqa: PLC0415 -- only brokers with a registry URL need it

        if not self.urls:
            raise KafkaError(
                ErrorCode.invalid_record,
                "schema validation is on for this topic but the broker has no "
                "confluent.schema.registry.url",
            )
        if self._session is None or self._session.closed:
            auth = None
            if self._user_info:
                user, _, password = self._user_info.partition(":")
                auth = aiohttp.BasicAuth(user, password)
            connector = None
            if self._cafile:
                ctx = ssl.create_default_context(cafile=self._cafile)
                connector = aiohttp.TCPConnector(ssl=ctx)
            self._session = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=LOOKUP_TIMEOUT_S),
                auth=auth,
                connector=connector,
            )
        self.lookups += 1
        errors: list[str] = []
        for url in self.urls:
            try:
                async with self._session.get(url + path) as resp:
                    if resp.status == 404:
                        return None
                    if resp.status == 200:
                        return await resp.json(content_type=None)
                    errors.append(f"{url}: HTTP {resp.status}")
            except (aiohttp.ClientError, TimeoutError, ValueError) as e:
                errors.append(f"{url}: {e!r}")
        logger.warning("schema registry lookup %s failed: %s", path, "; ".join(errors))
        raise KafkaError(
            ErrorCode.request_timed_out, "schema registry unreachable (" + "; ".join(errors) + ")"
        )

    async def close(self) -> None:
        for f in list(self._inflight.values()):
            f.cancel()
        if self._session is not None:
            await self._session.close()
            self._session = None
