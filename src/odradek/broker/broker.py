"""A broker process: wires storage, ZooKeeper metadata, the controller and the server.

Start-up follows Kafka's order: recover local logs, bind the listener (not yet serving),
connect to ZooKeeper and register ``/brokers/ids/N``, load metadata, start the
controller election, then start serving requests.

Listeners (issue 14): one ``SocketServer`` per entry of ``listeners``, sharing the
connection quotas and the request queue; each TLS listener gets its SSL context, each
connection a ``Session`` (principal from the client certificate, or a SASL
authenticator). Every advertised listener is registered in ``/brokers/ids/N``; followers
connect to leaders on ``inter.broker.listener.name`` with its protocol. With
``authorizer.class.name`` the ACL authorizer loads and follows ``/kafka-acl``; with a
SCRAM listener the credential cache follows ``/config/users`` -- both before serving. Shutdown reverses it and flushes
every log so the next start needs no recovery scan.
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import hmac
import logging
import socket
import ssl
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from kazoo.client import KazooClient

from odradek.broker import stall_detector
from odradek.broker.heap import HeapFreezer
from odradek.broker.metrics import BrokerMetrics
from odradek.broker.settings import BrokerSettings
from odradek.config import (
    BrokerConfig,
    ConfigError,
    log_config_for_topic,
    parse_connection_overrides,
)
from odradek.controller.controlled_shutdown import request_controlled_shutdown
from odradek.controller.controller import Controller
from odradek.coordinator.group_coordinator import GroupCoordinator  # consumer groups (issue 4)
from odradek.coordinator.producer_ids import ProducerIdManager
from odradek.coordinator.transaction_coordinator import TransactionCoordinator
from odradek.log_manager.flusher import Flusher
from odradek.log_manager.log_cleaner import (  # compaction (REQ-R25)
    CleanerSettings,
    LogCleanerManager,
)
from odradek.metadata.image import MetadataImage
from odradek.metadata.store import MetadataStore
from odradek.metrics.http_listener import MetricsListener, parse_listener_url
from odradek.replication.isr_store import ZkIsrStore
from odradek.replication.replica_manager import RECOVERY_POINT_CHECKPOINT, ReplicaManager
from odradek.replication.settings import ReplicaManagerSettings
from odradek.replication.trace import RecordTracer
from odradek.security import listener_config as lc
from odradek.security.client_security import ClientSecurity
from odradek.security.principal import ANONYMOUS, principal_from_certificate
from odradek.security.sasl_server import SaslServerAuthenticator
from odradek.server.authorizer import Authorizer, CredentialCache, parse_super_users
from odradek.server.client_quotas import QuotaManager
from odradek.server.context import RequestContext
from odradek.server.dispatch import RequestDispatcher
from odradek.server.network import ConnectionLimits, RequestQueue
from odradek.server.quota_follower import QuotaFollower
from odradek.server.schema_validation import SchemaIdValidator
from odradek.server.session import Session
from odradek.server.socket_server import ConnectionQuotas, SocketServer
from odradek.storage.log import LogConfig
from odradek.zk import znodes
from odradek.zk.acls import parse_zk_auth
from odradek.zk.admin_gateway import ZkAdminGateway
from odradek.zk.client import connect_zk
from odradek.zk.kafka_zk_client import KafkaZkClient

logger = logging.getLogger(__name__)


CONTROLLED_SHUTDOWN_TIMEOUT_S = 15.0  # how long a stopping broker waits for the controller
# With a metrics.listener, the stall detector runs at this threshold unless
# ODRADEK_LOOP_STALL_MS says otherwise (its figures are exported).
METRICS_STALL_THRESHOLD_MS = 250.0
# How long a starting broker waits for the image to name a controller before it serves
# (``_await_controller``): an election takes milliseconds unless a stale /controller
# waits for its session to expire.
_CONTROLLER_WAIT_S = 10.0
_LOG_CONFIG_FIELDS = {f.name for f in dataclasses.fields(LogConfig)}
T = TypeVar("T")


async def _in_own_thread(name: str, fn: Callable[..., T], *args: Any) -> T:
    """Run a blocking ``fn`` in a new daemon thread and await its result."""
    loop = asyncio.get_running_loop()
    fut: asyncio.Future[T] = loop.create_future()

    def run() -> None:
        try:
            result = fn(*args)
        except BaseException as e:  # noqa: BLE001 - handed to the awaiting coroutine
            loop.call_soon_threadsafe(_settle, fut, None, e)
        else:
            loop.call_soon_threadsafe(_settle, fut, result, None)

    threading.Thread(target=run, name=name, daemon=True).start()
    return await fut


def _settle(fut: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
    if fut.done():
        return
    if error is not None:
        fut.set_exception(error)
    else:
        fut.set_result(result)


def _resolve_overrides(settings: BrokerSettings) -> dict[str, int]:
    """max.connections.per.ip.overrides with host names resolved (Kafka resolves them with
    InetAddress.getByName once, when the config is loaded)."""
    out: dict[str, int] = {}
    for host, count in parse_connection_overrides(
        settings.max_connections_per_ip_overrides
    ).items():
        try:
            out[str(socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)[0][4][0])] = count
        except OSError:
            logger.warning("max.connections.per.ip.overrides: cannot resolve %s; ignored", host)
    return out


class Broker:
    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self.settings = settings = config.settings(BrokerSettings)
        self.broker_id = config.broker_id
        self.image = MetadataImage()
        self._log_configs: dict[tuple[tuple[str, str], ...], LogConfig] = {}
        host, port = config.advertised_endpoint()
        self.advertised_host, self.advertised_port = host, port
        self.replicas = ReplicaManager(
            self.broker_id,
            Path(config.log_dirs[0]),
            self.log_config_for,
            ReplicaManagerSettings.from_config(config),
            source_ip=host,
            isr_store=ZkIsrStore(lambda: self.zkc, self._topic_id, self.broker_id),
            tracer=RecordTracer(settings.trace_records_every, self.broker_id),
        )
        # Flush policy, odradek.ack.fsync group commit, recovery-point checkpoints
        # (issue 5): fsyncs run in the flusher's thread, never on the event loop.
        self.flusher = Flusher(
            logs=self.replicas.logs.all_logs,
            on_flushed=self.replicas.on_log_flushed,
            recovery_points=self.replicas.logs.recovery_points,
            checkpoint_path=Path(config.log_dirs[0]) / RECOVERY_POINT_CHECKPOINT,
            scheduler_interval_ms=settings.log_flush_scheduler_interval_ms,
            checkpoint_interval_ms=settings.log_flush_offset_checkpoint_interval_ms,
        )
        self.replicas.flusher = self.flusher
        self.cleaner = LogCleanerManager(
            self.replicas, Path(config.log_dirs[0]), config.settings(CleanerSettings)
        )
        self.zk: KazooClient | None = None
        self.zkc: KafkaZkClient | None = None  # batched znode I/O over self.zk
        self.store: MetadataStore | None = None
        self.controller: Controller | None = None
        self.groups = GroupCoordinator(self.broker_id, config, self.replicas, self)
        self.producer_ids: ProducerIdManager | None = None
        # Transactions (issue 18): __transaction_state, markers to partition leaders.
        self.txns = TransactionCoordinator(
            self.broker_id, config, self.replicas, self.groups, self, source_ip=host
        )
        # Handlers see this narrow view, not the broker (the ZooKeeper client and producer
        # ids are filled in once connected, before the listener starts serving).
        self.context = RequestContext(
            broker_id=self.broker_id,
            config=config,
            replicas=self.replicas,
            groups=self.groups,
            producer_ids=None,
            admin=None,
            metadata=self,
            txns=self.txns,
        )
        # Client quotas (KIP-13): followed from /config/users and /config/clients.
        self.context.quotas = QuotaManager(
            settings.quota_window_size_seconds, settings.quota_window_num
        )
        self.quota_follower: QuotaFollower | None = None
        # Broker-side schema id validation (issue 27): the registry topics with
        # confluent.value/key.schema.validation are checked against.
        if settings.schema_registry_urls:
            self.context.schema_ids = SchemaIdValidator(
                list(settings.schema_registry_urls),
                user_info=settings.schema_registry_user_info,
                cafile=settings.schema_registry_cafile,
            )
        # Metrics (issue 15): only with a metrics.listener; otherwise no request timing
        # and no per-topic counters, so a broker without metrics pays nothing for them.
        listener = settings.metrics_listener
        self.metrics_address = parse_listener_url(listener) if listener else None
        self.metrics: BrokerMetrics | None = None
        self.metrics_listener: MetricsListener | None = None
        if self.metrics_address is not None:
            self.metrics = BrokerMetrics(self)
            self.replicas.topic_stats = self.metrics.topics
        self.dispatcher = RequestDispatcher(
            self.context, self.metrics.requests if self.metrics else None
        )
        self.stall_detector: stall_detector.StallDetector | None = None
        self.heap: HeapFreezer | None = None  # set by the broker process (broker/main.py)
        self.stopping = False
        self._limits = ConnectionLimits(
            max_frame_bytes=settings.socket_request_max_bytes,
            stamp_arrivals=self.metrics is not None,
            max_unauthenticated_frame_bytes=settings.sasl_server_max_receive_size,
            authentication_timeout_s=settings.authentication_timeout_ms / 1000,
        )
        self._quotas = ConnectionQuotas(
            settings.max_connections, settings.max_connections_per_ip, _resolve_overrides(settings)
        )
        self._request_queue = RequestQueue(settings.queued_max_requests)
        # One SocketServer per listener, made in start() once the settings are checked.
        self.socket_servers: dict[str, SocketServer] = {}
        self._image_waiters: list[asyncio.Future[None]] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self.stopped = asyncio.Event()

    # ------------------------------------------------------------------ configs
    def _topic_id(self, topic: str) -> uuid.UUID | None:
        info = self.image.topics.get(topic)
        return info.topic_id if info is not None else None

    def log_config_for(self, topic: str) -> LogConfig:
        """The topic's LogConfig (a copy: logs own theirs). Built once per distinct set of
        topic overrides: building one parses every broker default (~1 ms), which a
        broker applying its first image at 3,000 partitions paid 3,000 times (issue 13)."""
        info = self.image.topics.get(topic)
        overrides = info.configs if info else {}
        key = tuple(sorted(overrides.items()))
        cached = self._log_configs.get(key)
        if cached is None:
            values = log_config_for_topic(self.config, overrides)  # KafkaError: not cached
            cached = LogConfig(**{k: v for k, v in values.items() if k in _LOG_CONFIG_FIELDS})
            if len(self._log_configs) >= 4096:  # bound it: overrides are per topic
                self._log_configs.clear()
            self._log_configs[key] = cached
        return copy.copy(cached)

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        # Honest listeners (issue 11): a listener Odradek cannot speak stops the broker
        # before anything is bound, never is served as plaintext.
        problems = lc.listener_security_errors(self.config)
        if problems:
            raise ConfigError("listeners", "; ".join(problems))
        self.stall_detector = stall_detector.maybe_start(  # ODRADEK_LOOP_STALL_MS
            self._loop, METRICS_STALL_THRESHOLD_MS if self.metrics else None
        )
        if self.metrics is not None and self.metrics_address is not None:
            # Before the logs load: a scrape during a long recovery already answers.
            self.metrics_listener = MetricsListener(
                *self.metrics_address, self.metrics.render_async
            )
            await self.metrics_listener.start()
        self._make_socket_servers()
        t0 = time.monotonic()
        self.replicas.load_logs()
        self.flusher.start()
        self.cleaner.start(self._loop)  # log compaction threads (REQ-R25)
        logger.info("logs loaded in %.2f s", time.monotonic() - t0)
        for spec in lc.listeners(self.config):
            self.socket_servers[spec.name].bind(spec.host, spec.port)
        session_s = self.settings.zookeeper_session_timeout_ms / 1000
        self.zk = await asyncio.to_thread(
            connect_zk,
            self.config.zookeeper_connect,
            source_ip=self.advertised_host,
            session_timeout_s=session_s,
            timeout_s=self.settings.zookeeper_connection_timeout() / 1000,
            auth=parse_zk_auth(self.settings.zookeeper_auth),
            secure_acls=self.settings.zookeeper_set_acl,
        )
        if self.metrics is not None and self.zk is not None:
            self.zk.add_listener(self.metrics.zk_session.on_state)
        registration = self._registration()
        self.zkc = self._zk_client()
        # The store and the controller run on their own threads: one client each.
        self.store = MetadataStore(self._zk_client(), self.broker_id, registration, self._publish)
        self.producer_ids = ProducerIdManager(self.zk, self.broker_id)
        self.controller = Controller(self._zk_client(), self.broker_id, self.config)
        self.context.admin = ZkAdminGateway(self.zk)
        self.context.producer_ids = self.producer_ids
        self.store.listeners.append(self.controller.on_event)
        # A stale registration from our own previous (killed) session lasts at most one
        # session timeout.
        await asyncio.to_thread(self.store.start, session_s * 2 + 5)
        await self._start_security()
        self.quota_follower = QuotaFollower(self.zk, self._loop, self.context.quotas)
        await asyncio.to_thread(self.quota_follower.start)
        self.controller.start()
        self.groups.start()  # consumer groups (issue 4)
        self.txns.start()  # transactions (issue 18)
        await self._await_controller(min(session_s, _CONTROLLER_WAIT_S))
        for server in self.socket_servers.values():
            server.start_serving()
        self._tasks.append(asyncio.create_task(self._checkpoint_loop()))
        self._tasks.append(asyncio.create_task(self._isr_loop()))
        self._tasks.append(asyncio.create_task(self._retention_loop()))
        logger.info(
            "broker %d serving on %s (advertised %s)",
            self.broker_id,
            ", ".join(f"{s} ({s.protocol})" for s in lc.listeners(self.config)),
            ", ".join(str(s) for s in lc.advertised_listeners(self.config)),
        )

    async def _await_controller(self, timeout_s: float) -> None:
        """Serve only once the image names a registered controller (bounded).

        A Kafka broker learns the cluster from the controller's UpdateMetadata, so its
        Metadata never lists brokers without a controller. Ours reads ZooKeeper and could:
        a broker that started just before the first election answered Metadata with
        ``controller_id=-1``, and librdkafka's admin client then waits for a broker state
        change that may never come before sending CreateTopics to the controller (seen in
        CI: the first CreateTopics of a fresh cluster timed out after 30 s). After the
        bound the broker serves anyway: a cluster without a controller must still answer
        produce and fetch (REQ-R12 failover does not wait for this broker)."""
        deadline = time.monotonic() + timeout_s
        while True:
            image = self.context.image
            if image.controller_id in image.brokers:
                return
            left = deadline - time.monotonic()
            if left <= 0:
                logger.warning("no controller known after %.1f s: serving anyway", timeout_s)
                return
            await self.wait_for_image(min(left, 0.5))

    # ------------------------------------------------------------------ listeners
    def _make_socket_servers(self) -> None:
        config = self.config
        for spec in lc.listeners(config):
            ctx: ssl.SSLContext | None = (
                lc.server_ssl_context(config, spec.name) if spec.tls else None
            )
            self.socket_servers[spec.name] = SocketServer(
                (
                    self.dispatcher.dispatch_metered
                    if self.metrics is not None
                    else self.dispatcher.dispatch
                ),
                self._limits,
                self._quotas,
                self._request_queue,
                idle_ms=self.settings.connections_max_idle_ms,
                name=spec.name,
                ssl_context=ctx,
                session_factory=self._session_factory(spec),
            )
        inter = lc.inter_broker_listener(config)
        self.replicas.fetchers.listener = inter
        self.replicas.fetchers.security = ClientSecurity.for_inter_broker(config)

    def _session_factory(self, spec: lc.ListenerSpec) -> Any:
        config = self.config
        mechanisms = lc.enabled_mechanisms(config, spec.name) if spec.sasl else ()
        plain_users: dict[str, str] = {}
        if "PLAIN" in mechanisms:
            jaas = lc.jaas_entry(config, spec.name, "PLAIN")
            plain_users = jaas.plain_users if jaas is not None else {}

        def plain_check(user: str, password: str) -> bool:
            expected = plain_users.get(user)
            # compare_digest: the time taken does not reveal how much of it matched
            return expected is not None and hmac.compare_digest(
                expected.encode(), password.encode()
            )

        def scram_lookup(mechanism: str, user: str) -> Any:
            cache = self.context.credentials
            return cache.lookup(mechanism, user) if cache is not None else None

        reauth_ms = self.settings.connections_max_reauth_ms

        def factory(ip: str, ssl_object: ssl.SSLObject | None) -> Session:
            if spec.sasl:
                return Session(
                    spec.name,
                    spec.protocol,
                    ip,
                    None,
                    SaslServerAuthenticator(
                        mechanisms,
                        scram_lookup=scram_lookup,
                        plain_check=plain_check,
                        max_reauth_ms=reauth_ms,
                    ),
                )
            principal = ANONYMOUS
            if ssl_object is not None:
                principal = principal_from_certificate(ssl_object.getpeercert(binary_form=True))
            return Session(spec.name, spec.protocol, ip, principal)

        return factory

    def _registration(self) -> znodes.BrokerRegistration:
        adv = lc.advertised_listeners(self.config)
        return znodes.BrokerRegistration(
            self.broker_id,
            self.advertised_host,
            self.advertised_port,
            tuple(str(s) for s in adv),
            listener_security_protocol_map={s.name: s.protocol for s in adv},
        )

    async def _start_security(self) -> None:
        """The authorizer and the SCRAM credential cache, loaded before serving."""
        assert self.zk is not None and self._loop is not None
        config, settings = self.config, self.settings
        if settings.authorizer_class_name:
            auth = Authorizer(
                self.zk,
                self._loop,
                super_users=parse_super_users(settings.super_users),
                allow_if_no_acl=settings.allow_everyone_if_no_acl_found,
            )
            await asyncio.to_thread(auth.start)
            self.context.authorizer = auth
        scram = any(
            m.startswith("SCRAM-")
            for s in lc.listeners(config)
            if s.sasl
            for m in lc.enabled_mechanisms(config, s.name)
        )
        if scram or settings.authorizer_class_name:
            creds = CredentialCache(self.zk, self._loop)
            await asyncio.to_thread(creds.start)
            self.context.credentials = creds
        await asyncio.sleep(0)  # the loads scheduled with call_soon_threadsafe run first

    @property
    def socket_server(self) -> SocketServer:
        """The first listener's server (single-listener callers and tests)."""
        return next(iter(self.socket_servers.values()))

    def _zk_client(self) -> KafkaZkClient:
        assert self.zk is not None
        return KafkaZkClient(
            self.zk,
            max_ops=self.settings.zookeeper_multi_max_ops,
            max_in_flight=self.settings.zookeeper_max_in_flight_requests,
        )

    async def shutdown(self) -> None:
        """Stop serving, leave ZooKeeper (so failover starts at once), flush the logs.

        Every step is bounded: a step that hangs is logged and skipped, so a SIGTERM
        never leaves a broker that holds its ZooKeeper session but serves nothing.
        """
        logger.info("broker %d shutting down", self.broker_id)
        self.stopping = True
        # Followers stop fetching first: a fetch that reached a leader after the controller
        # dropped us from its ISR would put us straight back in (and leave a dead broker in
        # the ISR until replica.lag.time.max.ms passes). Dropping every partition from the
        # fetchers does that at once; their tasks are stopped after the controller has
        # answered (Kafka's order), not before: that took 5 s at 10,000 partitions.
        self.replicas.quiesce_fetchers()
        if self.settings.controlled_shutdown_enable and self.zk is not None and self.store:
            # REQ-R13 / Kafka's controlled shutdown: while we still serve, the controller
            # moves leadership of our partitions to other ISR members and drops us from
            # the ISRs, so clients switch leaders without waiting for a session timeout.
            t0 = time.monotonic()
            # Its own thread, not asyncio.to_thread: the default executor may hold a queue
            # of ISR writes (thousands after a restart at scale) this must not wait behind.
            moved = await _in_own_thread(
                "controlled-shutdown",
                request_controlled_shutdown,
                self.zk,
                self.broker_id,
                CONTROLLED_SHUTDOWN_TIMEOUT_S,
            )
            logger.info(
                "controlled shutdown %s in %.2f s",
                "completed" if moved else "timed out",
                time.monotonic() - t0,
            )
        await self._bounded("stop replica fetchers", self.replicas.stop_fetchers())
        for server in self.socket_servers.values():
            server.close()
        if self.context.schema_ids is not None:
            await self._bounded("close the schema registry client", self.context.schema_ids.close())
        for t in self._tasks:
            t.cancel()
        if self.controller is not None:
            await self._bounded("stop the controller", asyncio.to_thread(self.controller.stop))
        if self.store is not None:
            await self._bounded("stop the metadata thread", asyncio.to_thread(self.store.stop))
        if self.zk is not None:
            zk = self.zk
            await self._bounded(
                "close the ZooKeeper session", asyncio.to_thread(lambda: (zk.stop(), zk.close()))
            )
        self.groups.stop()  # consumer groups (issue 4)
        self.txns.stop()
        await self._bounded("stop the log cleaner", asyncio.to_thread(self.cleaner.stop))
        self.flusher.stop()  # the clean shutdown below flushes every log itself
        self.replicas.shutdown()
        if self.metrics_listener is not None:
            self.metrics_listener.close()
        if self.stall_detector is not None:
            self.stall_detector.stop()
        self.stopped.set()
        logger.info("broker %d stopped", self.broker_id)

    async def _bounded(self, what: str, aw: Any, timeout_s: float = 5.0) -> None:
        try:
            async with asyncio.timeout(timeout_s):  # not wait_for: see fetcher._run
                await aw
        except TimeoutError:
            logger.warning("shutdown: could not %s within %.0f s; continuing", what, timeout_s)
        except Exception:
            logger.exception("shutdown: %s failed; continuing", what)

    async def _checkpoint_loop(self) -> None:
        while True:
            # replica.high.watermark.checkpoint.interval.ms, as Kafka's ReplicaManager
            await asyncio.sleep(self.settings.replica_high_watermark_checkpoint_interval_ms / 1000)
            try:
                await asyncio.to_thread(self.replicas.logs.capture_checkpoints())
            except Exception:
                logger.exception("high-watermark checkpoint failed")

    async def _isr_loop(self) -> None:
        """REQ-R6: look for lagging ISR members every replica.lag.time.max.ms / 2."""
        interval = min(max(self.replicas.settings.replica_lag_time_max_ms / 2000, 0.1), 5.0)
        while True:
            await asyncio.sleep(interval)
            try:
                self.replicas.check_isr()
            except Exception:
                logger.exception("ISR check failed")

    async def _retention_loop(self) -> None:
        """REQ-R24: delete old segments every log.retention.check.interval.ms (Kafka's
        kafka-log-retention task), on the loop: the decision is metadata only and the
        unlinks are deferred by file.delete.delay.ms. Pending unlinks are also checked
        every second so the delay is honoured when the check interval is long."""
        interval_s = max(self.settings.log_retention_check_interval_ms, 1) / 1000
        tick_s = min(interval_s, 1.0)
        next_check = time.monotonic() + interval_s
        while True:
            await asyncio.sleep(tick_s)
            try:
                if time.monotonic() >= next_check:
                    next_check = time.monotonic() + interval_s
                    self.replicas.logs.run_retention()
                else:
                    self.replicas.logs.run_pending_deletions()
                # Deleted replicas: their descriptors are closed here, their directories
                # removed (5-6 ms each) in a worker thread, never on the loop.
                removal = self.replicas.logs.release_deleted()
                if removal is not None:
                    await asyncio.to_thread(removal)
            except Exception:
                logger.exception("retention check failed")

    # ------------------------------------------------------------------ metadata
    def _publish(self, image: MetadataImage) -> None:
        """Called from the metadata thread."""
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._apply_image, image)

    def _apply_image(self, image: MetadataImage) -> None:
        self.image = image
        try:
            self.replicas.apply_image(image)
        except Exception:
            logger.exception("applying metadata failed")
        try:  # consumer groups (issue 4): load/unload __consumer_offsets partitions
            self.groups.on_metadata(image)
        except Exception:
            logger.exception("group coordinator: applying metadata failed")
        try:  # transactions (issue 18): load/unload __transaction_state partitions
            self.txns.on_metadata(image)
        except Exception:
            logger.exception("transaction coordinator: applying metadata failed")
        waiters, self._image_waiters = self._image_waiters, []
        for fut in waiters:
            if not fut.done():
                fut.set_result(None)

    async def wait_for_image(self, timeout_s: float) -> None:
        if timeout_s <= 0:
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._image_waiters.append(fut)
        try:
            async with asyncio.timeout(timeout_s):  # not wait_for: see fetcher._run
                await fut
        except TimeoutError:
            pass
