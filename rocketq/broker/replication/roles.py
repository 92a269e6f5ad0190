"""The broker's role, master or slave, and the switching between them (RocketMQ's
BrokerController.changeToMaster / changeToSlave, and the ReplicasManager's callbacks).

A master opens its HA port for slaves and runs what only a master runs: the delayed, timer and
transaction deliveries and POP (a slave's come from its master's log). A slave follows its
master's log (``HAClient``) and copies its metadata (``SlaveSync``). Outside controller mode
the role is the one ``brokerRole`` sets, for the broker's life. In controller mode the broker
starts fenced, takes no writes while its lease is out, and switches each time the controller
gives it a role of a higher ``masterEpoch``: as master it waits for the SyncStateSet's
acknowledgements and lets consumers see only what they confirmed; as slave it first cuts its
CommitLog back to the last offset it agrees on with the new master.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import Callable, Coroutine, Sequence
from typing import TYPE_CHECKING, Any, Protocol

import orjson

from ...ha import HAClient, HAServer
from ...protocol import RemotingCommand, RequestCode, ResponseCode
from ...remoting import Connection, RemotingClient, RemotingError, cancel_tasks
from ...remoting.tls import TlsSettings
from ...store import MessageStore, MessageStoreConfig
from ...store.config import SLAVE, SYNC_MASTER
from ..config import BrokerConfig
from .epochs import consistent_point
from .registration import Registration
from .replicas import ReplicasManager, Role
from .slave_sync import SlaveSync

if TYPE_CHECKING:
    from ..offsets.table import ConsumerOffsets
    from ..pull import PullProcessor
    from ..schedule.delay import DelayDelivery
    from ..store_writer import StoreWriter
    from ..subscription_groups import SubscriptionGroupTable
    from ..topics import TopicTable

log = logging.getLogger("rocketq.broker")

Handler = Callable[[Connection, RemotingCommand], Any]


class MasterService(Protocol):
    """A part that serves only while this broker is master (POP)."""

    running: bool

    async def start(self) -> None: ...

    async def stop(self) -> None: ...


class Roles:
    """The master side, the slave side, and in controller mode the switch between them.

    Handed what the roles use: the store and the store writer as callables (both exist once
    the broker starts), the registration, the tables a slave copies, the pull processor (a
    slave's decides whether it serves reads), and the master-only parts: ``master_loops`` run
    as tasks while master, ``pop`` is started and stopped with them."""

    def __init__(self, config: BrokerConfig, store_config: MessageStoreConfig, *,
                 store: Callable[[], MessageStore], writer: Callable[[], StoreWriter | None],
                 address: Callable[[], str], registration: Registration,
                 namesrv_client: RemotingClient, tls: TlsSettings,
                 outgoing_tls: ssl.SSLContext | None, topics: TopicTable,
                 offsets: ConsumerOffsets, schedule: DelayDelivery,
                 subscription_groups: SubscriptionGroupTable, pull: PullProcessor,
                 pop: MasterService,
                 master_loops: Sequence[Callable[[], Coroutine[Any, Any, None]]]) -> None:
        self.config = config
        self.store_config = store_config
        self._store = store
        self._writer = writer
        self._address = address
        self.registration = registration
        self.namesrv_client = namesrv_client
        self.tls = tls
        self._outgoing_tls = outgoing_tls
        self.topics = topics
        self.offsets = offsets
        self.schedule = schedule
        self.subscription_groups = subscription_groups
        self.pull = pull
        self.pop = pop
        self.master_loops = master_loops
        #: Replication: the master's HA port, or the slave's link to its master.
        self.ha_server: HAServer | None = None
        self.ha_client: HAClient | None = None
        #: A slave's copy of its master's metadata.
        self.slave_sync: SlaveSync | None = None
        #: A master's delay, timer and transaction loops; a slave's metadata copy.
        self._role_tasks: list[asyncio.Task[Any]] = []
        self._slave_task: asyncio.Task[Any] | None = None
        #: Controller mode: the broker's link to the controller.
        self.replicas: ReplicasManager | None = None

    def handlers(self) -> dict[int, Handler]:
        return {RequestCode.GET_BROKER_EPOCH_CACHE: self.epoch_cache,
                RequestCode.NOTIFY_BROKER_ROLE_CHANGED: self.role_changed}

    async def start(self) -> None:
        """Take the role the config gives, once the store is open: in controller mode fenced,
        until the controller gives one (``replicas.start()``, once the broker serves)."""
        store, writer = self._store(), self._writer()
        assert writer is not None
        if self.config.enableControllerMode:
            # Fenced, and not in the routes, until the controller says which role this
            # broker has.
            store.set_role(SLAVE)
            self.registration.paused = True
            writer.may_write = self.lease_valid
            # The HA port is open from the start, so the controller can tell slaves where
            # it is the moment this broker is elected; it serves them only once it is.
            await self._open_ha_port()
            assert self.ha_server is not None
            self.ha_server.serving = False
            self.replicas = ReplicasManager(
                self.config, self.store_config.storePathRootDir, self._address,
                lambda: self.registration.ha_server_addr,
                self._become_master, self._become_slave, self._use_sync_state_set,
                lambda: store.commitlog.max_offset, self._in_sync, self.namesrv_client)
            self.replicas.lease_gained = self.registration.soon
            self.registration.may_register_as_master = self.lease_valid
        elif self.store_config.is_slave:
            self._start_slave_side(
                lambda: self.store_config.haMasterAddress or self.registration.master_ha_addr)
        else:
            await self._start_master_side()

    async def stop(self) -> None:
        """Leave the controller, stop serving slaves and following a master."""
        if self.replicas is not None:
            await self.replicas.stop()
        await self._stop_master_side(closing=True)
        await self._stop_slave_side()

    async def _start_master_side(self) -> None:
        """Serve slaves, and run what only a master runs: delayed, timer and transaction
        deliveries (a slave's come from its master's log)."""
        writer = self._writer()
        assert writer is not None
        await self._open_ha_port()
        assert self.ha_server is not None
        self.ha_server.serving = True
        waits = self.store_config.brokerRole == SYNC_MASTER or self.replicas is not None
        writer.replicas = self.ha_server if waits else None
        if not self._role_tasks:
            loop = asyncio.get_running_loop()
            self._role_tasks = [loop.create_task(run()) for run in self.master_loops]
        if not self.pop.running:
            await self.pop.start()

    async def _open_ha_port(self) -> None:
        if self.ha_server is None:
            ha_server = HAServer(self._store(), self.config.brokerIP1,
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
        writer = self._writer()
        if writer is not None:
            writer.replicas = None
        if self.ha_server is not None:
            if self.replicas is not None and not closing:
                self.ha_server.drop_links()  # demoted: the port stays for a next election
            else:
                await self.ha_server.stop()
                self.ha_server = None

    def _start_slave_side(self, master_ha_addr: Callable[[], str],
                          hello: int | None = None) -> None:
        """Follow a master's log and copy its metadata."""
        # A controller-mode slave may hear of its master before that one serves: retry soon.
        retry = min(5.0, self.store_config.haSendHeartbeatInterval / 1000)
        self.ha_client = HAClient(self._store(), master_ha_addr,
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
        self._slave_task = asyncio.get_running_loop().create_task(self.slave_sync.run())

    async def _stop_slave_side(self) -> None:
        if self._slave_task is not None:
            await cancel_tasks([self._slave_task])
            self._slave_task = None
        self.slave_sync = None
        if self.ha_client is not None:
            await self.ha_client.stop()
            self.ha_client = None
        self.pull.slave_serves = None

    def lease_valid(self) -> bool:
        """Controller mode: whether this broker holds a master's lease (it writes only then)."""
        return self.replicas is not None and self.replicas.lease_valid()

    def _in_sync(self) -> set[int]:
        if self.ha_server is None:
            return set()
        return self.ha_server.in_sync(self.store_config.haMaxTimeSlaveNotCatchup / 1000)

    async def _become_master(self, role: Role) -> None:
        """Controller mode: this broker is its group's master from ``role.master_epoch``."""
        store, writer = self._store(), self._writer()
        assert self.replicas is not None and writer is not None
        writer.role_changes += 1
        await self._stop_slave_side()
        # All this log holds is the group's now: dispatched before appends take queue
        # offsets from the ConsumeQueues.
        store.limit_dispatch(None)
        store.set_role(SYNC_MASTER)
        self.config.brokerId = 0
        # The NameServers give id 0 to the registration of the highest epoch.
        self.topics.next_version(role.master_epoch)
        await self._start_master_side()
        assert self.ha_server is not None
        # Consumers see no message a failover could take back: dispatch stops at the
        # confirmOffset, and moves on as replicas acknowledge.
        self.ha_server.on_confirm = store.dispatch_more
        self._use_sync_state_set(role.sync_state_set)
        # Topics the old master created since the last metadata copy: their queues are in
        # the replicated log; routed at once, producers need not wait for a copy that will
        # never come.
        for topic in sorted(store.queues.topics()):
            if self.topics.get(topic) is None:
                self.topics.learn(topic, store.queues.queue_ids(topic))
        self.registration.paused = False
        await self.registration.register_all()

    def _use_sync_state_set(self, members: set[int]) -> None:
        """Controller mode, master: whose acknowledgements sends wait for (``members``, this
        master included)."""
        assert self.replicas is not None
        if self.ha_server is None:
            return
        others = members - {self.replicas.broker_id}
        cfg = self.store_config
        needed = len(others) if cfg.allAckInSyncStateSet else min(len(others),
                                                                  cfg.inSyncReplicas - 1)
        self.ha_server.set_sync_members(others, needed)
        self._store().limit_dispatch(self.ha_server.confirm_offset if needed else None)

    async def _become_slave(self, role: Role) -> None:
        """Controller mode: follow ``role``'s master, after cutting any tail of this log
        that the master does not share."""
        store, writer = self._store(), self._writer()
        assert self.replicas is not None and writer is not None
        writer.role_changes += 1
        await self._stop_master_side()
        await self._stop_slave_side()
        store.set_role(SLAVE)
        self.config.brokerId = self.replicas.broker_id
        self.topics.next_version(role.master_epoch)
        try:
            theirs, their_end = await self.replicas.master_epochs(role)
        except (RemotingError, OSError, ValueError, KeyError) as exc:  # asked again later
            raise RemotingError(f"not following master {role.master_addr} unchecked: "
                                f"cannot read its epochs ({exc})") from exc
        else:
            mine = self.replicas.epochs.entries
            end = store.commitlog.max_offset
            keep = consistent_point(mine, end, theirs, their_end) if mine else min(end,
                                                                                  their_end)
            if keep < end:
                log.warning("cutting %d bytes this log does not share with master %s",
                            end - keep, role.master_addr)
                store.truncate(keep)
            self.replicas.epochs.replace(theirs)
        # Read at each connect: a master that restarted keeps its epoch, not its HA port.
        self._start_slave_side(lambda: role.master_ha_addr, hello=self.replicas.broker_id)
        # Consumers reading from this slave see no message a failover could take back
        # either: it dispatches up to the confirmOffset its master sends.
        client = self.ha_client
        assert client is not None
        store.limit_dispatch(lambda: client.confirm_offset)
        self.registration.master_addr = role.master_addr
        self.registration.paused = False
        await self.registration.register_all()

    def role_changed(self, conn: Connection, cmd: RemotingCommand) -> None:
        """NOTIFY_BROKER_ROLE_CHANGED, pushed by a controller after an election (oneway)."""
        if self.replicas is not None:
            self.replicas.notified(conn, cmd)

    def epoch_cache(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """GET_BROKER_EPOCH_CACHE: this broker's epochs and CommitLog end."""
        store = self._store()
        if self.replicas is None or store is None:
            return cmd.response(ResponseCode.SYSTEM_ERROR,
                                remark="this broker is not in controller mode")
        return cmd.response(body=orjson.dumps({
            "clusterName": self.config.brokerClusterName,
            "brokerName": self.config.brokerName, "brokerId": self.replicas.broker_id,
            "epochList": [{"epoch": e, "startOffset": o}
                          for e, o in self.replicas.epochs.entries],
            "maxOffset": store.commitlog.max_offset}))

    def master_epoch(self) -> int | None:
        """Controller mode: the epoch this broker's role is from (None before it has one)."""
        if self.replicas is None or self.replicas.role is None:
            return None
        return self.replicas.role.master_epoch
