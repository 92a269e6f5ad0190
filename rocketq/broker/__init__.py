"""The Broker: stores messages, serves producers and consumers, registers with NameServers.

``Broker`` is the assembly: it builds the parts (topic table, consumer offsets, subscription
groups, client table, stats, and the processors that serve requests over them), wires them
together, and starts and stops them in order. Each part is handed only what it uses; the
store, which ``start()`` opens, is handed as a callable that returns it (``StoreSlot``), and
the parts that write from the event loop are handed one ``put`` callable
(``StoreSlot.put_messages``). ``processors`` routes each request code to the part that
serves it; ``housekeeping`` saves the tables and expires silent clients.

Which part serves which request code: ``processors.py``.
"""

from __future__ import annotations

import asyncio
import logging
import os
from typing import Any

from ..remoting import RemotingClient, RemotingServer, cancel_tasks
from ..store import MessageStore, MessageStoreConfig
from ..store.lock import StoreLock
from .admin.acl import AclRequests
from .admin.consumer_calls import ConsumerCalls
from .admin.message_queries import MessageQueries
from .admin.requests import AdminRequests
from .client_requests import ClientRequests, notify_consumers
from .clients import ClientTable
from .config import BrokerConfig, complete_configs, load_broker_conf
from .config_updates import load_overrides
from .housekeeping import Housekeeping
from .offsets.requests import OffsetLog, OffsetRequests
from .offsets.table import ConsumerOffsets
from .pop import PopRequests, PopService
from .processors import Processors, handler_table
from .pull import PullProcessor
from .replication.registration import Registration
from .replication.roles import Roles
from .schedule.delay import DelayDelivery
from .schedule.timer import TimerWheel
from .security import access_control, outgoing_tls, own_credentials, server_tls
from .send import SendProcessor
from .send_back import SendBack
from .stats import Stats
from .stats import runtime_info as _runtime_info
from .store_writer import StoreSlot, send_refusal
from .subscription_groups import SubscriptionGroupTable
from .topics import TopicTable
from .transactions.half_messages import Transactions
from .transactions.sink import SinkCommits

log = logging.getLogger("rocketq.broker")

DEFAULT_PORT = 10911

__all__ = ["Broker", "BrokerConfig", "DEFAULT_PORT", "load_broker_conf"]


class Broker:
    """A broker over a MessageStore. ``await start()``, ``await stop()``."""

    def __init__(self, config: BrokerConfig | None = None,
                 store_config: MessageStoreConfig | None = None, *,
                 store_lock: StoreLock | None = None) -> None:
        """``store_lock``: the lock on ``storePathRootDir``, when the caller took it first
        (``StoreSlot``); taken here otherwise, before the tables below write their files
        under ``config/``. Raises StoreLockedError when another broker holds it."""
        config, store_config = complete_configs(config, store_config)
        self.config = config
        self.store_config = store_config
        self.config_dir = os.path.join(store_config.storePathRootDir, "config")
        load_overrides(config, store_config)  # updateBrokerConfig changes of an earlier run
        #: The store, its writer once ``start()`` has opened them, and the store root's lock.
        self.store_slot = StoreSlot(store_config.storePathRootDir, store_lock)
        lock = self.store_slot.take_lock(self._lock_owner())
        try:
            self._assemble(config, store_config)
        except BaseException:
            if store_lock is None:
                lock.release()
            raise

    def _assemble(self, config: BrokerConfig, store_config: MessageStoreConfig) -> None:
        """The broker's parts and tables (some write their files at once), once the store
        root's lock is held."""
        #: The ACL every request passes first (aclEnable), and TLS for the ports.
        self.acl = access_control(config, self.config_dir)
        self.tls = server_tls(config)
        self._outgoing_tls = outgoing_tls(config)
        inner = own_credentials(config, self.acl)
        self.namesrv_client = RemotingClient(signer=inner.sign if inner else None,
                                             ssl=self._outgoing_tls)
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
        store, put = self.store_slot.opened, self.store_slot.put_messages
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
            self.offsets, config.offsetLogEnable, lambda: self.store_slot.writer))
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
            config, store_config, store=store, writer=lambda: self.store_slot.writer,
            address=lambda: self.address, registration=self.registration,
            namesrv_client=self.namesrv_client, tls=self.tls, outgoing_tls=self._outgoing_tls,
            topics=self.topics, offsets=self.offsets, schedule=self.schedule,
            subscription_groups=self.subscription_groups, pull=self.pull, pop=self.pop,
            master_loops=(self.schedule.run, self.transactions.run, self.timer.run))
        self.housekeeping = Housekeeping(config, self.config_dir, self.offsets, self.schedule,
                                         self.transactions, self.timer, self.clients)
        #: Request code -> the part that serves it.
        self.processors = Processors(handler_table(
            self.send, self.pull, self.transactions, self.schedule, self.subscription_groups,
            self.offsets, (self.roles, self.client_requests, self.send_back,
                           self.offset_requests, self.message_queries, self.admin,
                           self.consumer_calls, self.sinks, self.pop_requests,
                           self.acl_requests)), lambda: self.store, self.clients)
        #: Request code -> handler, and one request served (what the remoting tests use).
        self._handlers, self.handle = self.processors.handlers, self.processors.handle
        handle = self.handle
        self.server = RemotingServer(self.acl.guard(handle) if self.acl else handle,
                                     "0.0.0.0" if config.brokerIP1 != "127.0.0.1"
                                     else "127.0.0.1", config.listenPort,
                                     on_close=self.processors.connection_closed, tls=self.tls)

    @property
    def store(self) -> MessageStore | None:
        """The message store, None until ``start()`` has opened it."""
        return self.store_slot.store

    # ================================================================== lifecycle
    @property
    def address(self) -> str:
        return self.config.broker_addr

    @property
    def store_lock(self) -> StoreLock | None:
        """The store root's lock: held from construction until the store closes."""
        return self.store_slot.lock

    def _lock_owner(self) -> str:
        cfg = self.config
        return (f"broker {cfg.brokerName} of cluster {cfg.brokerClusterName}, id "
                f"{cfg.brokerId}, at {cfg.broker_addr}")

    async def start(self) -> None:
        self.loop = asyncio.get_running_loop()
        lock = self.store_slot.take_lock(self._lock_owner())  # first: a second broker stops
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
        store = await self.store_slot.open(self.store_config, self.offsets.committed, lock,
                                           self.loop)
        await asyncio.to_thread(self.offset_requests.log.attach, store)  # type: ignore
        self.pull.start(self.loop)
        await asyncio.to_thread(self.transactions.load)
        await self.roles.start()
        await self.server.start()
        if self.acl is not None:
            self.acl.start_watching()
        self.registration.start()
        if self.roles.replicas is not None:
            await self.roles.replicas.start()
        else:
            await self.registration.register_at_start()
        self._tasks = [self.loop.create_task(self.registration.run()),
                       self.loop.create_task(self.housekeeping.run()),
                       self.loop.create_task(self.stats.run())]
        log.info("broker %s (cluster %s) listening on %s, store at %s, NameServers %s",
                 self.config.brokerName, self.config.brokerClusterName, self.address,
                 self.store_config.storePathRootDir, ",".join(self.config.namesrv_addrs))

    # ================================================================== roles' parts
    #: Read-only views of the role's parts (``Roles``): the master's HA port (in controller
    #: mode open from the start), a slave's link to its master and its copy of the master's
    #: metadata, and in controller mode the link to the controller.
    ha_server = property(lambda self: self.roles.ha_server)
    ha_client = property(lambda self: self.roles.ha_client)
    slave_sync = property(lambda self: self.roles.slave_sync)
    replicas = property(lambda self: self.roles.replicas)

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
        self.housekeeping.save_all()
        await self.store_slot.close()
        log.info("broker %s stopped", self.config.brokerName)

    # ================================================================== NameServers
    async def register_all(self) -> None:
        """Register with every NameServer now."""
        await self.registration.register_all()

    # ================================================================== parts' views
    def runtime_info(self) -> dict[str, str]:
        """The GET_BROKER_RUNTIME_INFO table: stats, store, work waiting, sends refused."""
        return _runtime_info(self.stats, self.store,  # type: ignore[arg-type]
                             self.send.queued, self.pull.held, self.schedule.offsets,
                             send_refusal(self.config, self.store_slot.writer),  # type: ignore[arg-type]
                             self.roles.master_epoch())
