"""The Broker: stores messages, serves producers and consumers, registers with NameServers.

``Broker`` is the facade: it builds the parts (topic table, consumer offsets, subscription
groups, client table, stats, and the processors that serve requests over them), routes each
request code to the part that handles it, and owns the lifecycle. Each part is handed only what
it uses; the store, which ``start()`` opens, is handed as a callable that returns it, and
the parts that write from the event loop are handed one ``put`` callable (``_put_messages``).

Where requests go (RocketMQ's processors in brackets):

- ``send``: SEND_MESSAGE and its variants (SendMessageProcessor);
- ``send_back``: CONSUMER_SEND_MSG_BACK (SendMessageProcessor.consumerSendMsgBack);
- ``pull``: PULL_MESSAGE, LITE_PULL_MESSAGE, long polling (PullMessageProcessor);
- ``client_requests``: heartbeats, client and queue-lock requests (ClientManageProcessor);
- ``offset_requests`` (``offsets/``): consumer and queue offsets (ConsumerManageProcessor);
- ``message_queries``: messages by offset id and by key (QueryMessageProcessor);
- ``admin``, ``consumer_calls``, ``acl_requests`` and the group requests (all in ``admin/``):
  topics, config, stats, consumers' offsets and calls, groups, ACL (AdminBrokerProcessor);
- ``transactions/``: END_TRANSACTION and transaction checks (EndTransactionProcessor), and
  the exactly-once sinks' prepare and commit;
- ``pop/``: POP receive, ack and change of invisible time (PopMessageProcessor and kin);
- ``schedule/``: delay levels and the timer wheel (ScheduleMessageService, TimerMessageStore);
- ``registration`` (``replication/``): REGISTER_BROKER / UNREGISTER_BROKER to the NameServers;
- ``roles`` (``replication/``): master or slave, and in controller mode the switch between
  them (NOTIFY_BROKER_ROLE_CHANGED, GET_BROKER_EPOCH_CACHE).
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Callable, Sequence
from typing import Any

import orjson

from ..ha import HAClient, HAServer
from ..protocol import RemotingCommand, RequestCode, ResponseCode
from ..remoting import Connection, RemotingClient, RemotingServer, cancel_tasks
from ..store import BatchMessage, MessageStore, MessageStoreConfig, PutResult, StoreMessage
from ..store.lock import StoreLock
from .admin.acl import AclRequests
from .admin.consumer_calls import ConsumerCalls
from .admin.groups import subscription_group_handlers
from .admin.message_queries import MessageQueries
from .admin.requests import AdminRequests, guard_admin_fields
from .client_requests import ClientRequests, notify_consumers
from .clients import ClientTable
from .config import BrokerConfig, load_broker_conf, load_overrides
from .offsets.requests import OffsetLog, OffsetRequests
from .offsets.table import ConsumerOffsets
from .pop import PopRequests, PopService
from .pull import PullProcessor
from .replication.registration import DuplicateBrokerError, Registration
from .replication.replicas import ReplicasManager
from .replication.roles import Roles
from .replication.slave_sync import SlaveSync
from .schedule.delay import DelayDelivery
from .schedule.timer import TimerWheel
from .security import access_control, inner_credentials, outgoing_tls, tls_settings
from .send import SendProcessor
from .send_back import SendBack
from .stats import Stats
from .stats import runtime_info as _runtime_info
from .store_writer import StoreWriter, send_refusal
from .subscription_groups import SubscriptionGroupTable
from .topics import TopicTable
from .transactions.half_messages import Transactions
from .transactions.sink import SinkCommits

log = logging.getLogger("rocketq.broker")

DEFAULT_PORT = 10911

__all__ = ["Broker", "BrokerConfig", "DEFAULT_PORT", "load_broker_conf"]

Handler = Callable[[Connection, RemotingCommand], Any]


class Broker:
    """A broker over a MessageStore. ``await start()``, ``await stop()``."""

    def __init__(self, config: BrokerConfig | None = None,
                 store_config: MessageStoreConfig | None = None, *,
                 store_lock: StoreLock | None = None) -> None:
        """``store_lock``: the lock on ``storePathRootDir``, when the caller took it before
        anything else (``rocketq broker`` does, so that a second broker on the same store
        reads no file of it); it is taken here otherwise, before the tables below write
        their files under ``config/``. Raises StoreLockedError when another broker holds it.
        """
        if config is None:
            config, default_store = load_broker_conf({})
            store_config = store_config or default_store
        elif store_config is None:
            # The store writes the broker's address into records and shares its size limit.
            _, store_config = load_broker_conf({
                "brokerIP1": config.brokerIP1, "listenPort": config.listenPort,
                "maxMessageSize": config.maxMessageSize})
        self.config = config
        self.store_config = store_config
        self.config_dir = os.path.join(store_config.storePathRootDir, "config")
        load_overrides(config, store_config)  # updateBrokerConfig changes of an earlier run
        #: The store root's lock: held from here, released when the store closes.
        self.store_lock = store_lock
        took = store_lock is None
        lock = self.lock_store()
        try:
            self._assemble(config, store_config)
        except BaseException:
            if took:
                lock.release()
            raise

    def _assemble(self, config: BrokerConfig, store_config: MessageStoreConfig) -> None:
        """The broker's parts and tables (some write their files at once), once the store
        root's lock is held."""
        #: The ACL every request passes first (aclEnable), and TLS for the ports.
        self.acl = access_control(config, self.config_dir)
        self.tls = tls_settings(config)
        if self.tls.enabled:
            _ = self.tls.server_context  # a certificate that cannot be loaded fails here
        self._outgoing_tls = outgoing_tls(config)
        self.server = RemotingServer(self.acl.guard(self.handle) if self.acl else self.handle,
                                     "0.0.0.0" if config.brokerIP1 != "127.0.0.1"
                                     else "127.0.0.1", config.listenPort,
                                     on_close=self._connection_closed, tls=self.tls)
        inner = inner_credentials(config, self.acl)
        if self.acl is not None and inner is None:
            log.warning("ACL is on but the broker has no credentials of its own: NameServers "
                        "that check requests will refuse its registration (add an admin "
                        "account to %s, or set innerClientAuthenticationCredentials)",
                        self.acl.path)
        self.namesrv_client = RemotingClient(signer=inner.sign if inner else None,
                                             ssl=self._outgoing_tls)
        self.store: MessageStore | None = None  # type: ignore[assignment]
        self._writer: StoreWriter | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self._tasks: list[asyncio.Task[Any]] = []
        #: Tables whose last save failed, with the error (logged once until saved again).
        self._unsaved: dict[str, str] = {}

        # The tables the processors share.
        self.topics = TopicTable(config, self.config_dir)
        self.offsets = ConsumerOffsets(self.config_dir)
        self.subscription_groups = SubscriptionGroupTable(config, self.config_dir)
        self.clients = ClientTable(notify_consumers, self.subscription_groups.notifies)
        self.stats = Stats()
        self.registration = Registration(config, self.topics, self.namesrv_client)

        # The parts, each handed what it uses.
        store, put = self._opened_store, self._put_messages
        changed = self.registration.soon
        self.schedule = DelayDelivery(self.config_dir, store_config, store, put)
        self.timer = TimerWheel(self.config_dir, store, put)
        self.transactions = Transactions(self.config_dir, config, store, put, self.topics,
                                         self.clients)
        self.sinks = SinkCommits(config, store, put, self.transactions, self.topics, self.stats)
        self.send = SendProcessor(config, store_config, store, put, self.topics,
                                  self.subscription_groups, self.clients, self.stats, changed)
        self.send_back = SendBack(config, store_config, store, put, self.topics,
                                  self.subscription_groups, changed, self.schedule.wake, self.stats)
        self.pull = PullProcessor(config, store, self.topics, self.subscription_groups,
                                  self.clients, self.offsets, self.stats)
        self.client_requests = ClientRequests(config, self.clients, self.subscription_groups,
                                              self.topics, changed)
        #: (group, topic, queue id) -> (client id, last lock time): orderly consumption.
        self.queue_locks = self.client_requests.queue_locks
        self.offset_requests = OffsetRequests(self.offsets, store, OffsetLog(
            self.offsets, config.offsetLogEnable, lambda: self._writer))
        self.message_queries = MessageQueries(store)
        self.admin = AdminRequests(config, store_config, store, self.topics, self.offsets,
                                   self.clients, changed, self.runtime_info, self.stats)
        self.consumer_calls = ConsumerCalls(self.topics, self.offsets, self.clients,
                                            config.brokerName, store)
        #: POP consumption (a master's): the 5.x consumers' model, over remoting and gRPC.
        self.pop = PopService(config, store, put, self.topics, self.subscription_groups,
                              self.offsets, changed, self.stats)
        self.pop_requests = PopRequests(self.pop, self.topics)
        self.acl_requests = AclRequests(self.acl, config, lambda: self.address)
        #: Master or slave, and in controller mode the switch between them.
        self.roles = Roles(
            config, store_config, store=store, writer=lambda: self._writer,
            address=lambda: self.address, registration=self.registration,
            namesrv_client=self.namesrv_client, tls=self.tls, outgoing_tls=self._outgoing_tls,
            topics=self.topics, offsets=self.offsets, schedule=self.schedule,
            subscription_groups=self.subscription_groups, pull=self.pull, pop=self.pop,
            master_loops=(self.schedule.run, self.transactions.run, self.timer.run))
        self._handlers = self._handler_table()

    def _handler_table(self) -> dict[int, Handler]:
        """Request code -> the handler of the part that serves it."""
        handlers: dict[int, Handler] = {
            RequestCode.SEND_MESSAGE: self.send.handle,
            RequestCode.SEND_MESSAGE_V2: self.send.handle,
            RequestCode.SEND_BATCH_MESSAGE: self.send.handle,
            RequestCode.SEND_REPLY_MESSAGE: self.send.handle,
            RequestCode.SEND_REPLY_MESSAGE_V2: self.send.handle,
            RequestCode.PULL_MESSAGE: self.pull.handle,
            RequestCode.LITE_PULL_MESSAGE: self.pull.handle,
            RequestCode.END_TRANSACTION: self.transactions.end_transaction,
            # What a slave copies from its master (SlaveSync; offsets: OffsetRequests).
            RequestCode.GET_ALL_DELAY_OFFSET: lambda conn, cmd: cmd.response(
                body=orjson.dumps(self.schedule.wrapper())),
        }
        for part in (self.roles, self.client_requests, self.send_back, self.offset_requests,
                     self.message_queries, self.admin, self.consumer_calls, self.sinks,
                     self.pop_requests, self.acl_requests):
            handlers.update(part.handlers())
        handlers.update(subscription_group_handlers(self.subscription_groups, self.offsets))
        return guard_admin_fields(handlers)  # a bad admin field: INVALID_PARAMETER

    def _opened_store(self) -> MessageStore:
        """The store, once ``start()`` has opened it."""
        return self.store  # type: ignore[return-value]

    async def _put_messages(self, messages: Sequence[StoreMessage] | BatchMessage
                            ) -> list[PutResult]:
        """Append from the event loop and, under SYNC_FLUSH, wait for the flush without
        blocking it: the one way the parts write to the store from the loop."""
        assert self._writer is not None
        return await self._writer.put_messages(messages)

    # ================================================================== lifecycle
    @property
    def address(self) -> str:
        return self.config.broker_addr

    def lock_store(self) -> StoreLock:
        """Take the store root's lock if this broker does not hold it yet. Raises
        StoreLockedError, naming the process that holds it, when another broker runs on the
        same store: it must not bind, register or write anything beside that one."""
        if self.store_lock is None or not self.store_lock.held:
            self.store_lock = StoreLock.acquire(self.store_config.storePathRootDir,
                                                self._lock_owner())
        return self.store_lock

    def _lock_owner(self) -> str:
        cfg = self.config
        return (f"broker {cfg.brokerName} of cluster {cfg.brokerClusterName}, id "
                f"{cfg.brokerId}, at {cfg.broker_addr}")

    async def start(self) -> None:
        self.loop = asyncio.get_running_loop()
        lock = self.lock_store()  # first: a second broker on this store stops here
        try:
            port = self.server.bind()
        except BaseException:
            lock.release()
            raise
        self.config.listenPort = port
        self.store_config.listenPort = port
        lock.describe(self._lock_owner())
        try:
            await self._start_serving(lock)
        except BaseException:
            # Undo what started, so that the store is closed and its lock let go: a start
            # that failed half-way (a busy HA port, a refused registration) leaves nothing
            # that keeps this store from being opened again.
            try:
                await self.stop()
            except Exception:
                log.exception("broker %s: cleaning up after a failed start",
                              self.config.brokerName)
            finally:
                lock.release()
            raise

    async def _start_serving(self, lock: StoreLock) -> None:
        """The rest of ``start``, once the store's lock is held and the port bound."""
        assert self.loop is not None
        # Opening the store may scan files after a crash: keep the loop free meanwhile.
        self.store = await asyncio.to_thread(MessageStore, self.store_config,
                                             consumer_offsets=self.offsets.committed,
                                             lock=lock)
        self.store.dispatch_via(self.loop.call_soon)
        await asyncio.to_thread(self.offset_requests.log.attach, self.store)  # type: ignore
        self.pull.start(self.loop)
        await asyncio.to_thread(self.transactions.load)
        self._writer = StoreWriter(self.store)
        await self.roles.start()
        await self.server.start()
        if self.acl is not None:
            self.acl.start_watching()
        self.registration.start()
        if self.roles.replicas is not None:
            await self.roles.replicas.start()
        else:
            await self.registration.register_all()  # routes exist once start() returns
            if self.registration.conflicts:
                # Another live broker has this name and id: this one would only be a stray
                # copy of it. Stop, rather than run outside the routes unnoticed.
                namesrv, why = next(iter(self.registration.conflicts.items()))
                raise DuplicateBrokerError(
                    f"broker {self.config.brokerName} at {self.address} not started: NameServer"
                    f" {namesrv}: {why} (if that broker is gone, the NameServer forgets it "
                    "within 120 s; start this one again then)")
        self._tasks = [self.loop.create_task(self.registration.run()),
                       self.loop.create_task(self._housekeeping()),
                       self.loop.create_task(self.stats.run())]
        log.info("broker %s (cluster %s) listening on %s, store at %s, NameServers %s",
                 self.config.brokerName, self.config.brokerClusterName, self.address,
                 self.store_config.storePathRootDir, ",".join(self.config.namesrv_addrs))

    # ================================================================== roles' parts
    @property
    def ha_server(self) -> HAServer | None:
        """The master's HA port (in controller mode open from the start)."""
        return self.roles.ha_server

    @property
    def ha_client(self) -> HAClient | None:
        """A slave's link to its master."""
        return self.roles.ha_client

    @property
    def slave_sync(self) -> SlaveSync | None:
        """A slave's copy of its master's metadata."""
        return self.roles.slave_sync

    @property
    def replicas(self) -> ReplicasManager | None:
        """Controller mode: the broker's link to the controller."""
        return self.roles.replicas

    async def stop(self) -> None:
        """Unregister, stop serving, persist offsets, flush and close the store cleanly."""
        await cancel_tasks(self._tasks)
        self._tasks = []
        await self.roles.stop()
        await self.registration.unregister_all()
        await self.namesrv_client.close()
        self.pull.stop()
        await self.server.stop()
        if self.acl is not None:
            await self.acl.stop_watching()
        for name, save in (("consumer offsets", lambda: self.offsets.persist(force=True)),
                           ("delay offsets", self.schedule.persist),
                           ("transaction progress", self.transactions.persist),
                           ("timer progress", self.timer.persist)):
            self._save(name, save)
        if self.store is not None:
            self.store.dispatch_via(None)
            await asyncio.to_thread(self.store.close)
            if self._writer is not None:
                self._writer.close()
        log.info("broker %s stopped", self.config.brokerName)

    def _save(self, name: str, save: Callable[[], None]) -> bool:
        """Run one of the tables' ``persist``; a write that fails (a full disk, a config
        directory that cannot be written) is logged, once until it works again, and the
        table stays in memory to be saved at the next round."""
        try:
            save()
        except OSError as exc:
            if name not in self._unsaved:
                log.error("cannot save the %s in %s: %s; kept in memory, and saved again "
                          "every %d ms until it works", name, self.config_dir, exc,
                          self.config.flushConsumerOffsetInterval)
            self._unsaved[name] = str(exc)
            return False
        if self._unsaved.pop(name, None) is not None:
            log.warning("the %s: saved in %s again", name, self.config_dir)
        return True

    async def _housekeeping(self) -> None:
        """Persist offsets and delivery progress, expire silent clients; until cancelled."""
        cfg = self.config
        last_expire = time.monotonic()
        while True:
            await asyncio.sleep(cfg.flushConsumerOffsetInterval / 1000)
            await asyncio.to_thread(self._save, "consumer offsets", self.offsets.persist)
            await asyncio.to_thread(self._save, "delay offsets", self.schedule.persist)
            self._save("timer progress", self.timer.persist)
            if time.monotonic() - last_expire >= 10:
                last_expire = time.monotonic()
                self.clients.expire(cfg.channelExpiredTimeout / 1000)

    # ================================================================== NameServers
    def topics_changed(self) -> None:
        """Re-register with the NameServers at once (a topic was created or changed)."""
        self.registration.soon()

    async def register_all(self) -> None:
        """Register with every NameServer now."""
        await self.registration.register_all()

    # ================================================================== parts' views
    def dead_letter_topic(self, group: str) -> str:
        """The group's dead-letter topic, created on first use."""
        return self.send_back.dead_letter_topic(group)

    def runtime_info(self) -> dict[str, str]:
        """The GET_BROKER_RUNTIME_INFO table: stats, store, work waiting, sends refused."""
        table = _runtime_info(self.stats, self.store,  # type: ignore[arg-type]
                              self.send.queued, self.pull.held, self.schedule.offsets,
                              send_refusal(self.config, self._writer))
        epoch = self.roles.master_epoch()
        if epoch is not None:
            # Controller mode (not in RocketMQ's table): the epoch this broker's role is from.
            table["masterEpoch"] = str(epoch)
        return table

    # ================================================================== dispatch
    def handle(self, conn: Connection, cmd: RemotingCommand):
        handler = self._handlers.get(cmd.code)  # type: ignore[call-overload]
        if handler is None:
            return cmd.response(ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
                                remark=f" request type {cmd.code} not supported")
        if self.store is None:
            return cmd.response(ResponseCode.SYSTEM_BUSY, remark="the broker is starting")
        return handler(conn, cmd)

    def _connection_closed(self, conn: Connection) -> None:
        self.clients.connection_closed(conn)
