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
- ``subscription_groups``, ``acl_requests``: groups, ACL accounts (AdminBrokerProcessor);
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
from ..remoting import Connection, RemotingClient, RemotingError, RemotingServer, cancel_tasks
from ..store import BatchMessage, MessageStore, MessageStoreConfig, PutResult, StoreMessage
from ..store.config import SLAVE, SYNC_MASTER
from ..store.lock import StoreLock
from .acl_requests import AclRequests
from .admin_requests import AdminRequests, guard_admin_fields
from .client_requests import ClientRequests, notify_consumers
from .clients import ClientTable
from .config import BrokerConfig, load_broker_conf, load_overrides
from .consumer_calls import ConsumerCalls
from .message_queries import MessageQueries
from .offset_requests import OffsetLog, OffsetRequests
from .offsets import ConsumerOffsets
from .pop import PopRequests, PopService
from .pull import PullProcessor
from .registration import DuplicateBrokerError, Registration
from .replicas import ReplicasManager, Role, consistent_point
from .schedule.delay import DelayDelivery
from .schedule.timer import TimerWheel
from .security import access_control, inner_credentials, outgoing_tls, tls_settings
from .send import SendProcessor
from .send_back import SendBack
from .slave_sync import SlaveSync
from .stats import Stats
from .stats import runtime_info as _runtime_info
from .store_writer import StoreWriter, send_refusal
from .subscription_groups import SubscriptionGroupTable, subscription_group_handlers
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
        #: Replication: the master's HA port, or the slave's link to its master.
        self.ha_server: HAServer | None = None
        self.ha_client: HAClient | None = None
        #: A slave's copy of its master's metadata.
        self.slave_sync: SlaveSync | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self._tasks: list[asyncio.Task[Any]] = []
        #: A master's delay, timer and transaction loops; a slave's metadata copy.
        self._role_tasks: list[asyncio.Task[Any]] = []
        self._slave_task: asyncio.Task[Any] | None = None
        #: Controller mode: the broker's link to the controller.
        self.replicas: ReplicasManager | None = None
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
            # What a slave copies from its master (slave_sync.py; offsets: offset_requests).
            RequestCode.GET_ALL_DELAY_OFFSET: lambda conn, cmd: cmd.response(
                body=orjson.dumps(self.schedule.wrapper())),
            RequestCode.GET_BROKER_EPOCH_CACHE: self.epoch_cache,
            RequestCode.NOTIFY_BROKER_ROLE_CHANGED: self._role_changed,
        }
        for part in (self.client_requests, self.send_back, self.offset_requests,
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
        controlled = self.config.enableControllerMode
        if controlled:
            # Fenced, and not in the routes, until the controller says which role this
            # broker has.
            self.store.set_role(SLAVE)
            self.registration.paused = True
            self._writer.may_write = self._lease_valid
            # The HA port is open from the start, so the controller can tell slaves where
            # it is the moment this broker is elected; it serves them only once it is.
            await self._open_ha_port()
            assert self.ha_server is not None
            self.ha_server.serving = False
            self.replicas = ReplicasManager(
                self.config, self.store_config.storePathRootDir, lambda: self.address,
                lambda: self.registration.ha_server_addr,
                self._become_master, self._become_slave, self._use_sync_state_set,
                lambda: self.store.commitlog.max_offset, self._in_sync, self.namesrv_client)
            self.replicas.lease_gained = self.registration.soon
            self.registration.may_register_as_master = self._lease_valid
        elif self.store_config.is_slave:
            self._start_slave_side(
                lambda: self.store_config.haMasterAddress or self.registration.master_ha_addr)
        else:
            await self._start_master_side()
        await self.server.start()
        if self.acl is not None:
            self.acl.start_watching()
        self.registration.start()
        if self.replicas is not None:
            await self.replicas.start()
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

    # ================================================================== roles
    async def _start_master_side(self) -> None:
        """Serve slaves, and run what only a master runs: delayed, timer and transaction
        deliveries (a slave's come from its master's log)."""
        assert self.loop is not None and self.store is not None and self._writer is not None
        await self._open_ha_port()
        assert self.ha_server is not None
        self.ha_server.serving = True
        waits = self.store_config.brokerRole == SYNC_MASTER or self.replicas is not None
        self._writer.replicas = self.ha_server if waits else None
        if not self._role_tasks:
            self._role_tasks = [self.loop.create_task(self.schedule.run()),
                                self.loop.create_task(self.transactions.run()),
                                self.loop.create_task(self.timer.run())]
        if not self.pop.running:
            await self.pop.start()

    async def _open_ha_port(self) -> None:
        assert self.store is not None
        if self.ha_server is None:
            ha_server = HAServer(self.store, self.config.brokerIP1,
                                 self.store_config.haListenPort, tls=self.tls)
            try:
                await ha_server.start()
            except OSError as exc:
                # Say which of the broker's ports it was: by default the one after listenPort.
                raise OSError(exc.errno, exc.strerror, f"{exc.filename or ha_server.port} "
                              "(the HA port, haListenPort)") from None
            self.ha_server = ha_server
            self.store_config.haListenPort = self.ha_server.port
            self.registration.ha_server_addr = self.ha_server.address

    async def _stop_master_side(self, closing: bool = False) -> None:
        await cancel_tasks(self._role_tasks)
        self._role_tasks = []
        await self.pop.stop()
        if self._writer is not None:
            self._writer.replicas = None
        if self.ha_server is not None:
            if self.replicas is not None and not closing:
                self.ha_server.drop_links()  # demoted: the port stays for a next election
            else:
                await self.ha_server.stop()
                self.ha_server = None

    def _start_slave_side(self, master_ha_addr: Callable[[], str],
                          hello: int | None = None) -> None:
        """Follow a master's log and copy its metadata."""
        assert self.loop is not None and self.store is not None
        # A controller-mode slave may hear of its master before that one serves: retry soon.
        retry = min(5.0, self.store_config.haSendHeartbeatInterval / 1000)
        self.ha_client = HAClient(self.store, master_ha_addr,
                                  retry if hello is None else min(retry, 0.3), hello=hello,
                                  ssl=self._outgoing_tls)
        self.ha_client.start()
        client = self.ha_client
        self.registration.ha_client = lambda: self.ha_client
        self.pull.slave_serves = lambda: (self.config.slaveReadEnable
                                          or client.connected_to is None)
        # Controller mode copies every 3 s, as RocketMQ 5 does: a slave may become master at
        # any moment, and its consumer offsets are then what groups continue from.
        self.slave_sync = SlaveSync(
            self.namesrv_client, lambda: self.registration.master_addr, self.topics,
            self.offsets, self.schedule, self.subscription_groups,
            interval=10.0 if hello is None else 3.0)
        self._slave_task = self.loop.create_task(self.slave_sync.run())

    async def _stop_slave_side(self) -> None:
        if self._slave_task is not None:
            await cancel_tasks([self._slave_task])
            self._slave_task = None
        self.slave_sync = None
        if self.ha_client is not None:
            await self.ha_client.stop()
            self.ha_client = None
        self.pull.slave_serves = None

    def _lease_valid(self) -> bool:
        return self.replicas is not None and self.replicas.lease_valid()

    def _in_sync(self) -> set[int]:
        if self.ha_server is None:
            return set()
        return self.ha_server.in_sync(self.store_config.haMaxTimeSlaveNotCatchup / 1000)

    async def _become_master(self, role: Role) -> None:
        """Controller mode: this broker is its group's master from ``role.master_epoch``."""
        assert self.store is not None and self.replicas is not None
        assert self._writer is not None
        self._writer.role_changes += 1
        await self._stop_slave_side()
        # All this log holds is the group's now: dispatched before appends take queue
        # offsets from the ConsumeQueues.
        self.store.limit_dispatch(None)
        self.store.set_role(SYNC_MASTER)
        self.config.brokerId = 0
        # The NameServers give id 0 to the registration of the highest epoch.
        self.topics.next_version(role.master_epoch)
        await self._start_master_side()
        assert self.ha_server is not None
        # Consumers see no message a failover could take back: dispatch stops at the
        # confirmOffset, and moves on as replicas acknowledge.
        self.ha_server.on_confirm = self.store.dispatch_more
        self._use_sync_state_set(role.sync_state_set)
        # Topics the old master created since the last metadata copy: their queues are in
        # the replicated log; routed at once, producers need not wait for a copy that will
        # never come.
        for topic in sorted(self.store.queues.topics()):
            if self.topics.get(topic) is None:
                self.topics.learn(topic, self.store.queues.queue_ids(topic))
        self.registration.paused = False
        await self.registration.register_all()

    def _use_sync_state_set(self, members: set[int]) -> None:
        """Controller mode, master: whose acknowledgements sends wait for (``members``, this
        master included)."""
        assert self.store is not None and self.replicas is not None
        if self.ha_server is None:
            return
        others = members - {self.replicas.broker_id}
        cfg = self.store_config
        needed = len(others) if cfg.allAckInSyncStateSet else min(len(others),
                                                                  cfg.inSyncReplicas - 1)
        self.ha_server.set_sync_members(others, needed)
        self.store.limit_dispatch(self.ha_server.confirm_offset if needed else None)

    async def _become_slave(self, role: Role) -> None:
        """Controller mode: follow ``role``'s master, after cutting any tail of this log
        that the master does not share."""
        assert self.store is not None and self.replicas is not None
        assert self._writer is not None
        self._writer.role_changes += 1
        await self._stop_master_side()
        await self._stop_slave_side()
        self.store.set_role(SLAVE)
        self.config.brokerId = self.replicas.broker_id
        self.topics.next_version(role.master_epoch)
        try:
            theirs, their_end = await self.replicas.master_epochs(role)
        except (RemotingError, OSError, ValueError, KeyError) as exc:  # asked again later
            raise RemotingError(f"not following master {role.master_addr} unchecked: "
                                f"cannot read its epochs ({exc})") from exc
        else:
            mine = self.replicas.epochs.entries
            end = self.store.commitlog.max_offset
            keep = consistent_point(mine, end, theirs, their_end) if mine else min(end,
                                                                                  their_end)
            if keep < end:
                log.warning("cutting %d bytes this log does not share with master %s",
                            end - keep, role.master_addr)
                self.store.truncate(keep)
            self.replicas.epochs.replace(theirs)
        # Read at each connect: a master that restarted keeps its epoch, not its HA port.
        self._start_slave_side(lambda: role.master_ha_addr, hello=self.replicas.broker_id)
        # Consumers reading from this slave see no message a failover could take back
        # either: it dispatches up to the confirmOffset its master sends.
        client = self.ha_client
        assert client is not None
        self.store.limit_dispatch(lambda: client.confirm_offset)
        self.registration.master_addr = role.master_addr
        self.registration.paused = False
        await self.registration.register_all()

    def _role_changed(self, conn: Connection, cmd: RemotingCommand) -> None:
        """NOTIFY_BROKER_ROLE_CHANGED, pushed by a controller after an election (oneway)."""
        if self.replicas is not None:
            self.replicas.notified(conn, cmd)

    def epoch_cache(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """GET_BROKER_EPOCH_CACHE: this broker's epochs and CommitLog end."""
        if self.replicas is None or self.store is None:
            return cmd.response(ResponseCode.SYSTEM_ERROR,
                                remark="this broker is not in controller mode")
        return cmd.response(body=orjson.dumps({
            "clusterName": self.config.brokerClusterName,
            "brokerName": self.config.brokerName, "brokerId": self.replicas.broker_id,
            "epochList": [{"epoch": e, "startOffset": o}
                          for e, o in self.replicas.epochs.entries],
            "maxOffset": self.store.commitlog.max_offset}))

    async def stop(self) -> None:
        """Unregister, stop serving, persist offsets, flush and close the store cleanly."""
        await cancel_tasks(self._tasks)
        self._tasks = []
        if self.replicas is not None:
            await self.replicas.stop()
        await self._stop_master_side(closing=True)
        await self._stop_slave_side()
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
        if self.replicas is not None and self.replicas.role is not None:
            # Controller mode (not in RocketMQ's table): the epoch this broker's role is from.
            table["masterEpoch"] = str(self.replicas.role.master_epoch)
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
