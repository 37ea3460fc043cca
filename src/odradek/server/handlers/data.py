"""Produce, Fetch and ListOffsets: the hot path (REQ-R3, R7, R8, R16, R17, R26).

Produce and Fetch responses are encoded by the hand-written encoders in
``odradek.protocol`` (no kio on the hot path); record batches are never decompressed.
A handler returns the encoded response (``bytes`` or a list of parts for the writer),
``None`` for no response (acks=0), or a coroutine when it must wait (delayed operations).

Authorization (issue 14, Kafka's KafkaApis): Produce needs WRITE on each topic; a
consumer's Fetch READ, a follower's Fetch and OffsetForLeaderEpoch CLUSTER_ACTION on the
cluster; ListOffsets and a consumer's OffsetForLeaderEpoch DESCRIBE. A topic the
principal may not use gets TOPIC_AUTHORIZATION_FAILED (CLUSTER_AUTHORIZATION_FAILED for
a follower) and is neither written nor read. Each topic is checked once per request.
A produce of transactional records also needs WRITE on its TransactionalId, else every
partition gets TRANSACTIONAL_ID_AUTHORIZATION_FAILED (as in Kafka, also when the
request names no transactional id).

Client quotas (KIP-13, ``odradek.server.client_quotas``): a Produce's record bytes and a
consumer Fetch's response bytes are recorded on the client's quota sensor when a quota
is configured (one boolean otherwise); over it, the answer carries ``throttle_time_ms``
and the connection is muted that long. A throttled Fetch is answered without records.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any

from odradek.errors import ErrorCode, InvalidRecordsError, KafkaError
from odradek.log_limiter import LogLimiter
from odradek.protocol import list_offsets_v0
from odradek.protocol.codec import RequestHeaderInfo
from odradek.protocol.fetch_response import PartitionFetchResult, encode_fetch_response
from odradek.protocol.produce_response import PartitionProduceResult, encode_produce_response
from odradek.protocol.responses import part, response
from odradek.replication.delayed import DelayedFetch, DelayedProduce
from odradek.replication.fetch_serving import FetchEntry, FetchParams
from odradek.replication.fetch_session import FetchContext, FetchKind
from odradek.replication.replica_manager import ProduceEntry
from odradek.replication.txn_verification import TxnVerification, VerificationGuards
from odradek.security.acl import AclOperation, ResourceType
from odradek.server.network import CloseConnection, InOrder
from odradek.server.schema_validation import LOOKUP_TIMEOUT_S, check_records
from odradek.storage.batch import (
    ATTRIBUTES_OFFSET,
    BATCH_HEADER_SIZE,
    CURRENT_MAGIC,
    MAGIC_OFFSET,
    TRANSACTIONAL_BIT,
    BatchHeader,
)
from odradek.storage.schema_ids import distinct_ids, record_schema_ids

if TYPE_CHECKING:
    import numpy as np

    from odradek.server.context import RequestContext
    from odradek.storage.log_types import LogConfig

logger = logging.getLogger(__name__)
_SCHEMA_LOG = LogLimiter(burst=5, interval_s=60.0)  # a bad producer must not fill the disk

Result = bytes | list[Any] | None | Coroutine[Any, Any, Any] | InOrder

LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2
MAX_TIMESTAMP = -3  # KIP-734 (ListOffsets v7)


# =============================================================================== Produce
def handle_produce(ctx: RequestContext, header: RequestHeaderInfo, req: Any) -> Result:
    acks = int(req.acks)
    # Client quotas (KIP-13): one boolean while none is configured.
    throttle_ms = _produce_throttle(ctx, header, req) if ctx.quotas.produce.active else 0
    tid = getattr(req, "transactional_id", None)  # Produce v3+
    if _transactional_id_denied(ctx, req, tid):
        return _refuse_all(
            header, req, acks, ErrorCode.transactional_id_authorization_failed, throttle_ms
        )
    results: list[tuple[str, list[PartitionProduceResult]]] = []
    entries: list[ProduceEntry] = []
    denied = 0
    for topic in req.topic_data:
        presults: list[PartitionProduceResult] = []
        results.append((topic.name, presults))
        allowed = ctx.authorize(AclOperation.WRITE, ResourceType.TOPIC, topic.name)
        for pd in topic.partition_data:
            res = PartitionProduceResult(index=pd.index, error_code=0, base_offset=-1)
            presults.append(res)
            if allowed:
                entries.append(ProduceEntry(topic.name, pd.records, res))
            else:
                res.error_code = int(ErrorCode.topic_authorization_failed)
                denied += 1
    timeout_s = req.timeout.total_seconds()
    # Broker-side schema id validation (issue 27): only topics that ask for it pay.
    checks = _schema_checks(ctx, entries) if entries else None
    if checks is not None:
        # (checks may be empty: every validating entry already failed, e.g. no registry)
        missing = _validate_cached(ctx, checks) if checks else None
        if missing:
            # In order, as a KIP-890 verification: the producer's next batches must not
            # be appended before this one while its schema ids are looked up.
            return InOrder(
                _validated_produce(
                    ctx,
                    header,
                    results,
                    entries,
                    checks,
                    missing,
                    tid,
                    acks,
                    timeout_s,
                    denied,
                    throttle_ms,
                )
            )
        denied += _drop_failed(entries)
    return _verify_and_append(
        ctx, header, results, entries, tid, acks, timeout_s, denied, throttle_ms
    )


def _verify_and_append(
    ctx: RequestContext,
    header: RequestHeaderInfo,
    results: list[tuple[str, list[PartitionProduceResult]]],
    entries: list[ProduceEntry],
    tid: str | None,
    acks: int,
    timeout_s: float,
    denied: int,
    throttle_ms: int,
) -> Result:
    # Transactional batches (KIP-98) are appended like idempotent ones; the partition's
    # producer state opens the transaction and holds the LSO at its first offset until
    # the coordinator's marker closes it. One that would open a transaction on a
    # partition is first verified with the coordinator (KIP-890): the replica manager
    # gives each transactional append its guard, and its append requires one.
    guards: VerificationGuards = {}
    if tid and entries:
        verifications = _start_verification(ctx, entries)
        for v in verifications:
            guards.update(v.guards)
        if any(v.pending for v in verifications):
            # In order: the connection starts no other request until this one is
            # appended, so a producer's next batches cannot overtake it.
            return InOrder(
                _verified_produce(
                    ctx,
                    header,
                    results,
                    entries,
                    verifications,
                    guards,
                    tid,
                    acks,
                    timeout_s,
                    denied,
                    throttle_ms,
                )
            )
    return _append(ctx, header, results, entries, acks, timeout_s, denied, throttle_ms, guards)


# ---------------------------------------------------------------- schema id validation
# (entry, its topic's config, its records' ids: odradek.storage.schema_ids' table)
SchemaCheck = tuple[ProduceEntry, "LogConfig", "np.ndarray"]


def _schema_checks(ctx: RequestContext, entries: list[ProduceEntry]) -> list[SchemaCheck] | None:
    """The entries whose topic validates schema ids, with their records' ids (walked
    once); None if no entry's topic does. A partition this broker does not lead is left
    to the append's error. An entry that cannot be validated fails here (its result
    carries the error)."""
    parts = ctx.replicas.partitions
    checks: list[SchemaCheck] | None = None
    for e in entries:
        p = parts.get((e.topic, e.result.index))
        if p is None or e.records is None or not p.is_leader:
            continue  # the append answers (NOT_LEADER_OR_FOLLOWER, ...) without a lookup
        cfg = p.log.config
        if not (cfg.value_schema_validation or cfg.key_schema_validation):
            continue
        if checks is None:
            checks = []
        try:
            if ctx.schema_ids is None:
                raise KafkaError(
                    ErrorCode.invalid_record,
                    f"schema id validation is on for topic {e.topic} but the "
                    f"broker has no confluent.schema.registry.url",
                )
            rows = record_schema_ids(
                e.records, cfg.key_schema_validation, cfg.value_schema_validation
            )
        except KafkaError as err:
            _fail(e, err)
            continue
        checks.append((e, cfg, rows))
    return checks


def _validate_cached(ctx: RequestContext, checks: list[SchemaCheck]) -> set[int]:
    """Validate each check whose ids are all cached (failures land in its result); the
    ids still to look up (their checks wait for ``_validated_produce``)."""
    validator = ctx.schema_ids
    assert validator is not None
    missing_all: set[int] = set()
    for e, cfg, rows in checks:
        ids = distinct_ids(rows, cfg.key_schema_validation, cfg.value_schema_validation)
        known, missing = validator.cached(ids)
        if not missing:
            try:
                check_records(e.topic, e.result.index, cfg, rows, known)
                continue
            except KafkaError as err:
                # Refused on what the cache says: ask the registry again if that is
                # old news (the id may have been registered under this subject since).
                missing = validator.refreshable(ids)
                if not missing:
                    _fail(e, err)
                    continue
        missing_all |= missing
    return missing_all


async def _validated_produce(
    ctx: RequestContext,
    header: RequestHeaderInfo,
    results: list[tuple[str, list[PartitionProduceResult]]],
    entries: list[ProduceEntry],
    checks: list[SchemaCheck],
    missing: set[int],
    tid: str | None,
    acks: int,
    timeout_s: float,
    denied: int,
    throttle_ms: int,
) -> Any:
    validator = ctx.schema_ids
    assert validator is not None
    lookup_error: KafkaError | None = None
    try:
        await validator.lookup(missing, min(timeout_s, LOOKUP_TIMEOUT_S))
    except KafkaError as err:
        lookup_error = err
    except Exception as err:  # an answer the client did not expect: logged, retriable
        logger.exception("schema registry lookup of ids %s failed", sorted(missing))
        lookup_error = KafkaError(
            ErrorCode.request_timed_out, f"schema registry lookup failed: {err!r}"[:300]
        )
    for e, cfg, rows in checks:
        if e.result.error_code:
            continue
        ids = distinct_ids(rows, cfg.key_schema_validation, cfg.value_schema_validation)
        known, still = validator.cached(ids)
        try:
            if still:  # the lookup failed: retriable, the registry may come back
                raise lookup_error or KafkaError(
                    ErrorCode.request_timed_out, "schema registry lookup failed"
                )
            check_records(e.topic, e.result.index, cfg, rows, known)
        except KafkaError as err:
            _fail(e, err)
    denied += _drop_failed(entries)
    result = _verify_and_append(
        ctx, header, results, entries, tid, acks, timeout_s, denied, throttle_ms
    )
    if isinstance(result, InOrder):
        result = result.coro
    if isinstance(result, Coroutine):
        return await result
    return result


def _fail(e: ProduceEntry, err: KafkaError) -> None:
    res = e.result
    res.error_code = int(err.code)
    res.error_message = err.message or None
    res.base_offset = -1
    if isinstance(err, InvalidRecordsError):
        res.record_errors = err.record_errors
    _SCHEMA_LOG.log(
        logger, logging.INFO, err.code, "produce to %s-%d rejected: %s", e.topic, res.index, err
    )


def _drop_failed(entries: list[ProduceEntry]) -> int:
    """Remove the entries that failed validation (their results keep the error); how
    many were removed."""
    before = len(entries)
    entries[:] = [e for e in entries if not e.result.error_code]
    return before - len(entries)


def _produce_throttle(ctx: RequestContext, header: RequestHeaderInfo, req: Any) -> int:
    """Record the request's record bytes on its producer quota; the throttle time (ms),
    for which the connection is muted after the response (KIP-219)."""
    nbytes = 0
    for topic in req.topic_data:
        for pd in topic.partition_data:
            if pd.records is not None:
                nbytes += len(pd.records)
    session = ctx.session
    delay = ctx.quotas.produce.record(
        session.principal_or_anonymous.name,
        header.client_id or "",
        nbytes,
        time.monotonic() * 1000.0,
    )
    if delay:
        session.throttle(delay)
    return delay


def _transactional_id_denied(ctx: RequestContext, req: Any, tid: str | None) -> bool:
    """Kafka's KafkaApis.handleProduceRequest: a produce whose records are transactional
    needs WRITE on its TransactionalId, and needs a transactional id at all (a
    transactional batch no coordinator knows of would hold the partition's LSO for
    good). As in Kafka's RequestUtils.hasTransactionalRecords, each partition's first
    batch tells; it is only looked at when the id is missing or not authorized. The
    first batch is the only one: the append refuses records holding more (INVALID_RECORD,
    Kafka's ProduceRequest.validateRecords), so no transactional batch hides behind a
    plain one."""
    if tid and ctx.authorize(AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, tid):
        return False
    for topic in req.topic_data:
        for pd in topic.partition_data:
            r = pd.records
            if (
                r is not None
                and len(r) > ATTRIBUTES_OFFSET + 1
                and r[MAGIC_OFFSET] == CURRENT_MAGIC
                and r[ATTRIBUTES_OFFSET + 1] & TRANSACTIONAL_BIT
            ):
                return True
    return False


def _refuse_all(
    header: RequestHeaderInfo, req: Any, acks: int, code: ErrorCode, throttle_ms: int = 0
) -> Result:
    """Kafka's ProduceRequest.getErrorResponse: every partition gets ``code``."""
    if acks == 0:
        raise CloseConnection(f"acks=0 produce refused: {code.name}")
    results = [
        (
            topic.name,
            [
                PartitionProduceResult(index=pd.index, error_code=int(code), base_offset=-1)
                for pd in topic.partition_data
            ],
        )
        for topic in req.topic_data
    ]
    return encode_produce_response(header.api_version, header.correlation_id, results, throttle_ms)


def _append(
    ctx: RequestContext,
    header: RequestHeaderInfo,
    results: list[tuple[str, list[PartitionProduceResult]]],
    entries: list[ProduceEntry],
    acks: int,
    timeout_s: float,
    denied: int,
    throttle_ms: int = 0,
    guards: VerificationGuards | None = None,
) -> Result:
    op = ctx.replicas.append_records(
        entries, acks, timeout_s, ctx.image, verification_guards=guards
    )
    if acks == 0:
        if denied or any(e.result.error_code for e in entries):
            # Kafka: with acks=0 the client gets no response, so the only way to tell it
            # something went wrong is to close the connection (it then refreshes metadata).
            raise CloseConnection("acks=0 produce failed")
        return None
    if op is None or op.completed:
        return encode_produce_response(
            header.api_version, header.correlation_id, results, throttle_ms
        )
    return _delayed_produce(header, results, op, throttle_ms)


def _only_batch(records: Any) -> BatchHeader | None:
    """The header of a produce's v2 batch if it is the only one, unvalidated (the
    append validates it, and refuses records that are not exactly one batch)."""
    if records is None or len(records) < BATCH_HEADER_SIZE:
        return None
    h = BatchHeader.unpack(records, 0)
    return h if h.magic == 2 and h.size == len(records) else None


def _start_verification(ctx: RequestContext, entries: list[ProduceEntry]) -> list[TxnVerification]:
    """KIP-890: the verifications of the request's transactional appends, one per
    producer id and epoch (empty when verification is off)."""
    appends: list[tuple[tuple[str, int], int, int]] = []
    for e in entries:
        h = _only_batch(e.records)
        if h is None or not h.is_transactional or h.is_control or h.producer_id < 0:
            continue
        appends.append(((e.topic, e.result.index), h.producer_id, h.producer_epoch))
    return ctx.replicas.start_txn_verification(appends) if appends else []


async def _verified_produce(
    ctx: RequestContext,
    header: RequestHeaderInfo,
    results: list[tuple[str, list[PartitionProduceResult]]],
    entries: list[ProduceEntry],
    verifications: list[TxnVerification],
    guards: VerificationGuards,
    tid: str,
    acks: int,
    timeout_s: float,
    denied: int,
    throttle_ms: int,
) -> Any:
    answers = await asyncio.gather(
        *(v.verify(ctx.txns.verifier, tid, timeout_s) for v in verifications)
    )
    failed = {tp: code for answer in answers for tp, code in answer.items()}
    for e in entries:
        code = failed.get((e.topic, e.result.index))
        if code is None:
            continue
        guards.pop((e.topic, e.result.index), None)
        e.result.error_code = int(code)
        e.result.base_offset = -1
        if code is ErrorCode.invalid_txn_state:
            e.result.error_message = "Partition was not added to the transaction"
    remaining = [e for e in entries if not e.result.error_code]
    failed_any = len(remaining) < len(entries)
    result = _append(
        ctx,
        header,
        results,
        remaining,
        acks,
        timeout_s,
        denied + int(failed_any),
        throttle_ms,
        guards,
    )
    if isinstance(result, Coroutine):
        return await result
    return result


async def _delayed_produce(
    header: RequestHeaderInfo,
    results: list[tuple[str, list[PartitionProduceResult]]],
    op: DelayedProduce,
    throttle_ms: int = 0,
) -> bytes:
    await op.done  # the purgatory fills in each pending partition's answer (REQ-R7, R8)
    return encode_produce_response(header.api_version, header.correlation_id, results, throttle_ms)


# =============================================================================== Fetch
def handle_fetch(ctx: RequestContext, header: RequestHeaderInfo, req: Any) -> Result:
    version = header.api_version
    # Kafka (KafkaApis.handleFetchRequest): the broker's fetch.max.bytes caps the
    # request's max_bytes and min_bytes, for consumers and followers alike (one fetch
    # with max_bytes=2^31-1 used to return 125 MB).
    cap = ctx.settings.fetch_max_bytes
    replica_id = int(req.replica_id)
    quota: FetchQuota | None = None
    if replica_id < 0 and ctx.quotas.fetch.active:
        quota = _fetch_quota(ctx, header)
        if quota is not None:
            # Kafka's getMaxValueInQuotaWindow: one response is at most a window's worth.
            cap = min(
                cap,
                max(
                    1,
                    int(
                        quota.manager.max_value_in_window(quota.user, quota.client_id, quota.now_ms)
                    ),
                ),
            )
    params = FetchParams(
        replica_id=replica_id,
        max_wait_s=req.max_wait.total_seconds(),
        min_bytes=min(int(req.min_bytes), cap),
        max_bytes=min(int(getattr(req, "max_bytes", 0x7FFFFFFF)), cap),
        isolation_level=int(getattr(req, "isolation_level", 0)),
    )
    requested: list[tuple[str, list[FetchEntry]]] = []
    for t in req.topics:
        entries: list[FetchEntry] = []
        requested.append((t.topic, entries))
        for fp in t.partitions:
            entries.append(
                FetchEntry(
                    t.topic,
                    int(fp.fetch_offset),
                    int(fp.partition_max_bytes),
                    int(getattr(fp, "current_leader_epoch", -1)),
                    int(getattr(fp, "log_start_offset", -1)),
                    PartitionFetchResult(
                        index=fp.partition,
                        error_code=0,
                        high_watermark=-1,
                        last_stable_offset=-1,
                        log_start_offset=-1,
                        records=None,
                    ),
                )
            )
    # A follower's fetch needs CLUSTER_ACTION on the cluster, a consumer's READ per topic.
    # Checked before the session cache sees the fetch: a follower's new session retires
    # that follower's older ones, so a client merely claiming a replica id must not be
    # taken for the follower (it could force broker N's fetcher back to full fetches).
    cluster_ok = replica_id >= 0 and ctx.authorize_cluster(AclOperation.CLUSTER_ACTION)
    # KIP-227: v7+ fetches may name a session; older ones are always sessionless.
    fctx = ctx.replicas.fetch_sessions.new_context(
        int(getattr(req, "session_id", 0)),
        int(getattr(req, "session_epoch", -1)),
        requested,
        ((f.topic, f.partitions) for f in getattr(req, "forgotten_topics_data", ())),
        follower=cluster_ok,
        now_ms=time.time_ns() // 1_000_000,
        replica_id=replica_id,
    )
    if fctx.kind is FetchKind.ERROR:
        return encode_fetch_response(version, header.correlation_id, [], error_code=fctx.error_code)
    # Every partition of the fetch (with a session: of the session) is checked, and the
    # denied ones are answered with the error instead of being read.
    denial = int(
        ErrorCode.cluster_authorization_failed
        if replica_id >= 0
        else ErrorCode.topic_authorization_failed
    )
    readable: list[tuple[str, list[FetchEntry]]] = []
    for topic, entries in fctx.topics_to_read():
        allowed = (
            cluster_ok
            if replica_id >= 0
            else ctx.authorize(AclOperation.READ, ResourceType.TOPIC, topic)
        )
        if allowed:
            readable.append((topic, entries))
        else:
            for e in entries:
                e.result.error_code = denial
    # A follower's session with nothing to read now still waits (up to max_wait) for any
    # of its partitions to change: answering at once would make an idle follower spin.
    if not readable and (fctx.follower_session is None or not cluster_ok):
        return _encode_fetch(header, fctx, quota)
    op = ctx.replicas.fetch_messages(params, readable, ctx.image, fctx)
    if op is None or op.completed:
        return _encode_fetch(header, fctx, quota)
    return _delayed_fetch(header, fctx, op, quota)


class FetchQuota:
    """A consumer fetch's quota sensor and the session to mute if it is over."""

    __slots__ = ("manager", "sensor", "session", "user", "client_id", "now_ms")

    def __init__(
        self, manager: Any, sensor: Any, session: Any, user: str, client_id: str, now_ms: float
    ) -> None:
        self.manager = manager
        self.sensor = sensor
        self.session = session
        self.user = user
        self.client_id = client_id
        self.now_ms = now_ms

    def throttle(self, nbytes: int) -> int:
        """Kafka's handleFetchRequest: record the response's bytes; over the quota the
        response goes out without its records (their bytes are unrecorded) and the
        connection is muted for the throttle time."""
        now_ms = time.monotonic() * 1000.0
        delay: int = self.manager.record_on(self.sensor, nbytes, now_ms)
        if delay:
            self.manager.unrecord(self.sensor, nbytes, now_ms)
            self.session.throttle(delay)
        return delay


def _fetch_quota(ctx: RequestContext, header: RequestHeaderInfo) -> FetchQuota | None:
    session = ctx.session
    user = session.principal_or_anonymous.name
    client_id = header.client_id or ""
    now_ms = time.monotonic() * 1000.0
    sensor = ctx.quotas.fetch.sensor(user, client_id, now_ms)
    if sensor is None:
        return None
    return FetchQuota(ctx.quotas.fetch, sensor, session, user, client_id, now_ms)


async def _delayed_fetch(
    header: RequestHeaderInfo, fctx: FetchContext, op: DelayedFetch, quota: FetchQuota | None = None
) -> list[Any]:
    """REQ-R17: answered when data arrives (or the HW moves) on any partition of the
    fetch -- with a session, any partition of the session, named or not -- or after
    max_wait (the purgatory re-reads every partition at completion)."""
    await op.done
    return _encode_fetch(header, fctx, quota)


# Below this many record bytes in a whole response, the records are read (from the page
# cache) into the response instead of being sent with sendfile: one pread and one write
# cost less than a write for the header, a sendfile and a write for the rest -- three
# syscalls and three TCP segments on a TCP_NODELAY socket, each waking the reader. A
# replica fetch at low rates carries a few hundred bytes. Larger responses stay zero-copy
# (REQ-R26).
SMALL_RESPONSE_BYTES = 16 * 1024


def _encode_fetch(
    header: RequestHeaderInfo, fctx: FetchContext, quota: FetchQuota | None = None
) -> list[Any]:
    # An incremental response carries only the partitions with news (KIP-227).
    topics = fctx.response_topics()
    slices = [e.result for _, entries in topics for e in entries if e.result.records is not None]
    throttle_ms = 0
    if quota is not None:
        throttle_ms = quota.throttle(sum(_records_size(r.records) for r in slices))
        if throttle_ms:
            for r in slices:
                r.records = None
            slices = []
    if slices and sum(r.records.size for r in slices) <= SMALL_RESPONSE_BYTES:
        for r in slices:
            r.records = r.records.read_bytes()
    return encode_fetch_response(
        header.api_version,
        header.correlation_id,
        [(t, [e.result for e in entries]) for t, entries in topics],
        session_id=fctx.session_id,
        throttle_time_ms=throttle_ms,
    )


def _records_size(records: Any) -> int:
    size = getattr(records, "size", None)  # a FileSlice, else bytes
    return int(size) if size is not None else len(records)


# =============================================================================== ListOffsets
def legacy_offsets(p: Any, timestamp: int, max_num_offsets: int) -> list[int]:
    """ListOffsets v0 (Kafka's ``legacyFetchOffsetsBefore``, as a consumer sees it):
    latest (-1) → the HW, then the base offsets of the segments below it, newest first;
    earliest (-2) → the log start offset; a timestamp → the base offsets of the segments
    whose records are all older, newest first. At most ``max_num_offsets``."""
    hw = p.high_watermark
    log = p.log
    bases = [max(s.base_offset, log.log_start_offset) for s in log.segments]
    if timestamp == LATEST_TIMESTAMP:
        offsets = [hw] + [b for b in reversed(bases) if b < hw]
    elif timestamp == EARLIEST_TIMESTAMP:
        offsets = [log.log_start_offset]
    elif timestamp < 0:
        raise KafkaError(ErrorCode.invalid_request, f"timestamp {timestamp}")
    else:
        offsets = [
            max(s.base_offset, log.log_start_offset)
            for s in reversed(log.segments)
            if s.base_offset < hw and s.max_timestamp <= timestamp
        ]
    return list(dict.fromkeys(offsets))[: max(0, max_num_offsets)]


def _list_offsets_v0(ctx: RequestContext, header: RequestHeaderInfo, req: Any) -> bytes:
    image = ctx.image
    topics: list[tuple[str, list[tuple[int, int, list[int]]]]] = []
    for t in req.topics:
        parts: list[tuple[int, int, list[int]]] = []
        # DESCRIBE on the topic, as for every other version (Kafka's
        # handleListOffsetRequestV0): without it nothing about the log is answered.
        allowed = ctx.authorize(AclOperation.DESCRIBE, ResourceType.TOPIC, t.name)
        for lp in t.partitions:
            if not allowed:
                parts.append((lp.partition_index, int(ErrorCode.topic_authorization_failed), []))
                continue
            try:
                p = ctx.replicas.leader_partition(t.name, lp.partition_index, image)
                parts.append(
                    (lp.partition_index, 0, legacy_offsets(p, lp.timestamp, lp.max_num_offsets))
                )
            except KafkaError as e:
                parts.append((lp.partition_index, int(e.code), []))
        topics.append((t.name, parts))
    return list_offsets_v0.encode_response(header.correlation_id, topics)


def handle_list_offsets(ctx: RequestContext, header: RequestHeaderInfo, req: Any) -> Any:
    v = header.api_version
    if v == 0:
        return _list_offsets_v0(ctx, header, req)
    image = ctx.image
    topics = []
    for t in req.topics:
        parts = []
        allowed = ctx.authorize(AclOperation.DESCRIBE, ResourceType.TOPIC, t.name)
        for lp in t.partitions:
            kw: dict[str, Any] = dict(
                partition_index=lp.partition_index,
                error_code=ErrorCode.none,
                timestamp=-1,
                offset=-1,
                leader_epoch=-1,
            )
            if not allowed:
                kw["error_code"] = ErrorCode.topic_authorization_failed
                parts.append(part(2, v, "ListOffsetsPartitionResponse", **kw))
                continue
            try:
                p = ctx.replicas.leader_partition(
                    t.name, lp.partition_index, image, int(getattr(lp, "current_leader_epoch", -1))
                )
                ts = int(lp.timestamp)
                kw["leader_epoch"] = p.leader_epoch
                # KIP-207, for clients only (a follower's replica_id is >= 0): a new
                # leader whose HW still lags its epoch's start must not answer "latest"
                # (or a lookup past what it can serve) lower than its predecessor did.
                lagging = (
                    p.lagging_epoch_start() if int(getattr(req, "replica_id", -1)) < 0 else None
                )
                if ts == LATEST_TIMESTAMP:
                    _refuse_if_lagging(p, lagging)
                    # Consumers see only committed records: "latest" is the HW (REQ-R16),
                    # the LSO for read_committed ones (KIP-98).
                    kw["offset"] = (
                        p.last_stable_offset
                        if int(getattr(req, "isolation_level", 0)) == 1
                        else p.high_watermark
                    )
                elif ts == EARLIEST_TIMESTAMP:
                    kw["offset"] = p.log.log_start_offset
                elif ts == MAX_TIMESTAMP:
                    found = p.log.offset_of_max_timestamp()
                    if found is not None and found[0] < p.high_watermark:
                        kw["offset"], kw["timestamp"] = found
                    else:
                        _refuse_if_lagging(p, lagging)
                elif ts < 0:
                    raise KafkaError(ErrorCode.invalid_request, f"timestamp {ts}")
                else:
                    found = p.log.offset_for_timestamp(ts)
                    if found is not None and found[0] < p.high_watermark:
                        kw["offset"], kw["timestamp"] = found
                    else:
                        _refuse_if_lagging(p, lagging)
            except KafkaError as e:
                kw["error_code"] = e.code
            parts.append(part(2, v, "ListOffsetsPartitionResponse", **kw))
        topics.append(part(2, v, "ListOffsetsTopicResponse", name=t.name, partitions=tuple(parts)))
    return response(2, v, topics=tuple(topics))


def _refuse_if_lagging(p: Any, epoch_start: int | None) -> None:
    if epoch_start is not None:
        raise KafkaError(
            ErrorCode.offset_not_available,
            f"Failed to fetch offsets for partition {p.name} with leader epoch "
            f"{p.leader_epoch} as this partition's high watermark ({p.high_watermark}) is "
            f"lagging behind the start offset from the beginning of this epoch "
            f"({epoch_start}).",
        )


# =============================================================================== OffsetsForLeaderEpoch
def handle_offset_for_leader_epoch(ctx: RequestContext, header: RequestHeaderInfo, req: Any) -> Any:
    """REQ-R19: where does epoch E end on the leader? (KIP-101, KIP-279, KIP-320)."""
    v = header.api_version
    image = ctx.image
    topics = []
    replica_id = int(getattr(req, "replica_id", -1))
    for t in req.topics:
        parts = []
        if replica_id >= 0:
            denial = ErrorCode.cluster_authorization_failed
            allowed = ctx.authorize_cluster(AclOperation.CLUSTER_ACTION)
        else:
            denial = ErrorCode.topic_authorization_failed
            allowed = ctx.authorize(AclOperation.DESCRIBE, ResourceType.TOPIC, t.topic)
        for rp in t.partitions:
            kw: dict[str, Any] = dict(
                error_code=ErrorCode.none, partition=rp.partition, leader_epoch=-1, end_offset=-1
            )
            if not allowed:
                kw["error_code"] = denial
                parts.append(part(23, v, "EpochEndOffset", **kw))
                continue
            try:
                epoch, end = ctx.replicas.last_offset_for_leader_epoch(
                    t.topic,
                    rp.partition,
                    int(getattr(rp, "current_leader_epoch", -1)),
                    int(rp.leader_epoch),
                    int(getattr(req, "replica_id", -1)),
                    image,
                )
                kw.update(leader_epoch=epoch, end_offset=end)
            except KafkaError as e:
                kw["error_code"] = e.code
            parts.append(part(23, v, "EpochEndOffset", **kw))
        topics.append(
            part(23, v, "OffsetForLeaderTopicResult", topic=t.topic, partitions=tuple(parts))
        )
    return response(23, v, throttle_time=0, topics=tuple(topics))
