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
- ``offset_requests``: consumer offsets and queue offsets (ConsumerManageProcessor);
- ``message_queries``: messages by offset id and by key (QueryMessageProcessor);
- ``admin_requests``: topics, broker config, runtime info, stats (AdminBrokerProcessor);
- ``consumer_calls``: reset offsets, calls to consumers (AdminBrokerProcessor, Broker2Client);
- ``subscription_groups``: subscription group admin (AdminBrokerProcessor);
- ``transaction``: END_TRANSACTION and transaction checks (EndTransactionProcessor);
- ``registration``: REGISTER_BROKER / UNREGISTER_BROKER to the NameServers.
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
from ..store.config import SYNC_MASTER
from .admin_requests import AdminRequests, guard_admin_fields
from .client_requests import ClientRequests, notify_consumers
from .clients import ClientTable
from .config import BrokerConfig, load_broker_conf, load_overrides
from .consumer_calls import ConsumerCalls
from .delay import DelayDelivery
from .message_queries import MessageQueries
from .offset_requests import OffsetRequests
from .offsets import ConsumerOffsets
from .pull import PullProcessor
from .registration import Registration
from .send import SendProcessor
from .send_back import SendBack
from .slave_sync import SlaveSync
from .stats import Stats
from .stats import runtime_info as _runtime_info
from .store_writer import StoreWriter
from .subscription_groups import SubscriptionGroupTable, subscription_group_handlers
from .timer import TimerWheel
from .topics import TopicTable
from .transaction import Transactions

log = logging.getLogger("rocketq.broker")

DEFAULT_PORT = 10911

__all__ = ["Broker", "BrokerConfig", "DEFAULT_PORT", "load_broker_conf"]

Handler = Callable[[Connection, RemotingCommand], Any]


class Broker:
    """A broker over a MessageStore. ``await start()``, ``await stop()``."""

    def __init__(self, config: BrokerConfig | None = None,
                 store_config: MessageStoreConfig | None = None) -> None:
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
        self.server = RemotingServer(self.handle, "0.0.0.0" if config.brokerIP1 != "127.0.0.1"
                                     else "127.0.0.1", config.listenPort,
                                     on_close=self._connection_closed)
        self.namesrv_client = RemotingClient()
        self.store: MessageStore | None = None  # type: ignore[assignment]
        self._writer: StoreWriter | None = None
        #: Replication: the master's HA port, or the slave's link to its master.
        self.ha_server: HAServer | None = None
        self.ha_client: HAClient | None = None
        #: A slave's copy of its master's metadata.
        self.slave_sync: SlaveSync | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self._tasks: list[asyncio.Task[Any]] = []

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
        self.send = SendProcessor(config, store_config, store, put, self.topics,
                                  self.subscription_groups, self.clients, self.stats, changed)
        self.send_back = SendBack(config, store_config, store, put, self.topics,
                                  self.subscription_groups, changed, self.schedule.wake)
        self.pull = PullProcessor(config, store, self.topics, self.subscription_groups,
                                  self.clients, self.offsets, self.stats)
        self.client_requests = ClientRequests(config, self.clients, self.subscription_groups,
                                              self.topics, changed)
        #: (group, topic, queue id) -> (client id, last lock time): orderly consumption.
        self.queue_locks = self.client_requests.queue_locks
        self.offset_requests = OffsetRequests(self.offsets, store)
        self.message_queries = MessageQueries(store)
        self.admin = AdminRequests(config, store_config, store, self.topics, self.offsets,
                                   self.clients, changed, self.runtime_info)
        self.consumer_calls = ConsumerCalls(self.topics, self.offsets, self.clients,
                                            config.brokerName, store)
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
            # What a slave copies from its master (slave_sync.py).
            RequestCode.GET_ALL_CONSUMER_OFFSET: lambda conn, cmd: cmd.response(
                body=orjson.dumps(self.offsets.wrapper())),
            RequestCode.GET_ALL_DELAY_OFFSET: lambda conn, cmd: cmd.response(
                body=orjson.dumps(self.schedule.wrapper())),
        }
        for part in (self.client_requests, self.send_back, self.offset_requests,
                     self.message_queries, self.admin, self.consumer_calls):
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

    async def start(self) -> None:
        self.loop = asyncio.get_running_loop()
        port = self.server.bind()
        self.config.listenPort = port
        self.store_config.listenPort = port
        # Opening the store may scan files after a crash: keep the loop free meanwhile.
        self.store = await asyncio.to_thread(MessageStore, self.store_config)
        self.store.dispatch_via(self.loop.call_soon)
        self.pull.start(self.loop)
        await asyncio.to_thread(self.transactions.load)
        slave = self.store_config.is_slave
        if slave:
            self.ha_client = HAClient(
                self.store,
                lambda: self.store_config.haMasterAddress or self.registration.master_ha_addr,
                min(5.0, self.store_config.haSendHeartbeatInterval / 1000))
            self.ha_client.start()
            client = self.ha_client
            self.pull.slave_serves = lambda: (self.config.slaveReadEnable
                                              or client.connected_to is None)
            self.slave_sync = SlaveSync(
                self.namesrv_client, lambda: self.registration.master_addr, self.topics,
                self.offsets, self.schedule, self.subscription_groups)
        else:
            self.ha_server = HAServer(self.store, self.config.brokerIP1,
                                      self.store_config.haListenPort)
            await self.ha_server.start()
            self.store_config.haListenPort = self.ha_server.port
            self.registration.ha_server_addr = self.ha_server.address
        self._writer = StoreWriter(
            self.store, self.ha_server if self.store_config.brokerRole == SYNC_MASTER else None)
        await self.server.start()
        self.registration.start()
        await self.registration.register_all()  # routes exist by the time start() returns
        self._tasks = [self.loop.create_task(self.registration.run()),
                       self.loop.create_task(self._housekeeping()),
                       self.loop.create_task(self.stats.run())]
        if self.slave_sync is not None:
            self._tasks.append(self.loop.create_task(self.slave_sync.run()))
        if not slave:  # a slave's delay, timer and transaction state comes from its master
            self._tasks += [self.loop.create_task(self.schedule.run()),
                            self.loop.create_task(self.transactions.run()),
                            self.loop.create_task(self.timer.run())]
        log.info("broker %s (cluster %s) listening on %s, store at %s, NameServers %s",
                 self.config.brokerName, self.config.brokerClusterName, self.address,
                 self.store_config.storePathRootDir, ",".join(self.config.namesrv_addrs))

    async def stop(self) -> None:
        """Unregister, stop serving, persist offsets, flush and close the store cleanly."""
        await cancel_tasks(self._tasks)
        self._tasks = []
        await self.registration.unregister_all()
        await self.namesrv_client.close()
        self.pull.stop()
        if self.ha_client is not None:
            await self.ha_client.stop()
        if self.ha_server is not None:
            await self.ha_server.stop()
        await self.server.stop()
        self.offsets.persist(force=True)
        self.schedule.persist()
        self.transactions.persist()
        self.timer.persist()
        if self.store is not None:
            self.store.dispatch_via(None)
            await asyncio.to_thread(self.store.close)
            if self._writer is not None:
                self._writer.close()
        log.info("broker %s stopped", self.config.brokerName)

    async def _housekeeping(self) -> None:
        """Persist offsets and delivery progress, expire silent clients; until cancelled."""
        cfg = self.config
        last_expire = time.monotonic()
        while True:
            await asyncio.sleep(cfg.flushConsumerOffsetInterval / 1000)
            await asyncio.to_thread(self.offsets.persist)
            await asyncio.to_thread(self.schedule.persist)
            self.timer.persist()
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
        """The GET_BROKER_RUNTIME_INFO table, from the stats, the store, and the sends,
        pulls and delayed messages waiting."""
        return _runtime_info(self.stats, self.store, self.send.queued,  # type: ignore[arg-type]
                             self.pull.held, self.schedule.offsets)

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
