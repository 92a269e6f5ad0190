"""A real NameServer and Broker for your own tests: a pytest plugin, and a context manager.

With rocketq installed, pytest finds this plugin by itself (the ``pytest11`` entry point
``rocketq``) and offers two fixtures:

- ``rocketq_broker``: one broker for the whole test session (started on first use, stopped
  at the end). Tests share it, so give each test topics and groups of its own.
- ``rocketq_broker_function``: a fresh broker for one test, stopped after it.

Each is a :class:`LocalBroker`: ``namesrv`` is the address clients take, and its helpers
create topics and groups and read back what a topic holds::

    def test_order_is_published(rocketq_broker):
        rocketq_broker.create_topic("Orders", queues=2)
        publish_order(rocketq_broker.namesrv, 17)             # the code under test
        [message] = rocketq_broker.messages("Orders")
        assert message.body == b'{"id": 17}'

Without pytest, or for another scope or settings, :func:`broker` starts one::

    with rocketq.testing.broker(grpc=True) as b:    # b.namesrv, b.grpc_endpoint, ...
        ...

To change what the fixture starts, override it in a ``conftest.py``::

    @pytest.fixture(scope="session")
    def rocketq_broker():
        with rocketq.testing.broker(grpc=True, conf={"maxMessageSize": 65536}) as b:
            yield b

The servers run in a child process on free 127.0.0.1 ports, with their files in a
temporary directory: a test's event loop, threads, patched clocks or forks never meet
them. The child goes away with the test process, even one killed with SIGKILL (it watches
a pipe from it, and on Linux also asks the kernel for a signal when it dies), and takes its
directory with it. Importing this module costs next to nothing: pytest loads it in every
run of every project where rocketq is installed (``-p no:rocketq`` leaves it out).
Without pytest installed, :func:`broker` works as well; the fixtures are then not defined.
"""

from __future__ import annotations

import json
import os
import select
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

try:
    import pytest
except ImportError:  # a test extra only: broker() serves code that runs without it
    pytest = None  # type: ignore[assignment]

if TYPE_CHECKING:
    from .client import ReceivedMessage
    from .protocol import RemotingCommand

#: Seconds a broker may take to start (it takes under one; a loaded CI machine is slower).
START_TIMEOUT = 30.0
#: Seconds a broker may take to stop before it is killed.
STOP_TIMEOUT = 10.0
#: Seconds a created topic may take to reach the NameServer's routes.
ROUTE_TIMEOUT = 5.0
#: The group :meth:`LocalBroker.messages` pulls with (the one RocketMQ keeps for tools, which
#: every broker has), so that reading back creates no group of its own.
READER_GROUP = "TOOLS_CONSUMER"

#: The child's program: the servers of ``rocketq._testing_server``, from the same rocketq as
#: this process's (one imported from a checkout, say, is put first on the child's path).
_CHILD = """import os, sys
here = sys.argv[1]
if here not in map(os.path.realpath, sys.path):
    sys.path.insert(0, here)
from rocketq._testing_server import main
sys.exit(main(sys.argv[2:]))
"""

_live: weakref.WeakSet[LocalBroker] = weakref.WeakSet()
_fork_hook: list[bool] = []


class BrokerStartError(RuntimeError):
    """The test broker did not start; the message says why (its log's last lines)."""


class LocalBroker:
    """A NameServer and a Broker in a child process, for tests (see :func:`broker`).

    Attributes:
        namesrv: the NameServer's address, ``"127.0.0.1:port"``, what clients take.
        broker_address: the broker's remoting address, ``"127.0.0.1:port"``.
        broker_name: the broker's name (``brokerName``, ``broker-a`` unless ``conf`` says).
        grpc_endpoint: the RocketMQ 5.x gRPC endpoint, ``"127.0.0.1:port"``, or None
            without ``grpc=True``.
        data_dir: the store's directory (deleted when the broker stops).
        pid: the child process's id.
        start_seconds: how long the start took, from spawning to serving.

    The helpers are blocking calls over RocketMQ's protocol that take milliseconds; they may
    be called from any thread, and from async tests.
    """

    namesrv: str
    broker_address: str
    broker_name: str
    grpc_endpoint: str | None
    data_dir: str
    pid: int
    start_seconds: float

    def __init__(self, *, grpc: bool = False, conf: Mapping[str, Any] | None = None) -> None:
        """Start the servers and return once they serve; see :func:`broker`."""
        self._lock = threading.Lock()
        self._sockets: dict[str, tuple[socket.socket, Any]] = {}
        self._owner = os.getpid()
        self._root = tempfile.mkdtemp(prefix="rocketq-test-")
        began = time.monotonic()
        try:
            self._proc = self._spawn({"root": self._root, "parent": os.getpid(),
                                      "grpc": grpc, "conf": dict(conf or {})})
            ready = self._ready()
        except BaseException:
            self._reap()
            raise
        self.start_seconds = time.monotonic() - began
        self.namesrv = ready["namesrv"]
        self.broker_address = ready["broker"]
        self.broker_name = ready["broker_name"]
        port = ready["grpc_port"]
        self.grpc_endpoint = f"127.0.0.1:{port}" if port else None
        self.data_dir = ready["data_dir"]
        self.pid = ready["pid"]
        _live.add(self)
        if not _fork_hook:
            # A fork of the test process (multiprocessing, say) would hold the pipe open
            # after the test process died: the fork lets go of it at once.
            os.register_at_fork(after_in_child=_forget_all)
            _fork_hook.append(True)

    def _spawn(self, settings: dict[str, Any]) -> subprocess.Popen[bytes]:
        # The broker is not the code under test: warnings made errors for the tests are not
        # its to raise.
        env = {k: v for k, v in os.environ.items() if k != "PYTHONWARNINGS"}
        here = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))
        with open(os.path.join(self._root, "broker.log"), "wb") as log:
            return subprocess.Popen(
                [sys.executable, "-c", _CHILD, here, json.dumps(settings, default=str)],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, cwd=self._root,
                env=env, start_new_session=True)  # Ctrl-C reaches pytest, which stops it

    def _ready(self) -> dict[str, Any]:
        """The child's first line, once it serves; BrokerStartError when it fails."""
        assert self._proc.stdout is not None
        fd = self._proc.stdout.fileno()
        data = b""
        deadline = time.monotonic() + START_TIMEOUT
        while b"\n" not in data:
            left = deadline - time.monotonic()
            if left <= 0:
                raise BrokerStartError(f"the test broker did not start within "
                                       f"{START_TIMEOUT:.0f} s{self._log_tail()}")
            if select.select([fd], [], [], left)[0]:
                chunk = os.read(fd, 65536)
                if not chunk:
                    break
                data += chunk
        self._proc.stdout.close()
        try:
            ready = json.loads(data.split(b"\n", 1)[0])
        except ValueError:
            ready = {"error": "it exited"}
        if "error" in ready:
            raise BrokerStartError(f"the test broker did not start: {ready['error']}"
                                   f"{self._log_tail()}")
        return ready

    def _log_tail(self) -> str:
        try:
            with open(os.path.join(self._root, "broker.log"), "rb") as fh:
                fh.seek(0, os.SEEK_END)
                fh.seek(max(0, fh.tell() - 4000))
                text = fh.read().decode(errors="replace").strip()
        except OSError:
            return ""
        return f"\n--- its log ---\n{text}" if text else ""

    # -------------------------------------------------------------------- lifecycle
    @property
    def running(self) -> bool:
        """Whether the child process still runs."""
        proc = self._proc
        return proc is not None and proc.poll() is None

    def stop(self) -> None:
        """Stop the servers, wait for the child to leave and delete its directory. Calling it
        again does nothing."""
        with self._lock:
            for sock, _ in self._sockets.values():
                sock.close()
            self._sockets.clear()
        self._reap()
        _live.discard(self)

    def _reap(self) -> None:
        proc, self._proc = getattr(self, "_proc", None), None
        if os.getpid() != self._owner:
            return  # a fork's copy: the broker and its files are the parent's
        if proc is not None:
            if proc.stdout is not None:
                proc.stdout.close()
            if proc.stdin is not None:
                try:
                    proc.stdin.close()  # its end of input: the child stops
                except OSError:
                    pass
            try:
                proc.wait(STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        shutil.rmtree(self._root, ignore_errors=True)

    def __enter__(self) -> LocalBroker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        grpc = f", grpc {self.grpc_endpoint}" if self.grpc_endpoint else ""
        state = "" if self.running else ", stopped"
        return f"<LocalBroker namesrv {self.namesrv}, broker {self.broker_address}{grpc}{state}>"

    # -------------------------------------------------------------------- helpers
    def create_topic(self, topic: str, queues: int = 4, *, message_type: str | None = None,
                     order: bool = False) -> None:
        """Create ``topic`` (or change it) with ``queues`` read and write queues, and wait
        until the NameServer's route has it. ``message_type`` (NORMAL, FIFO, DELAY,
        TRANSACTION or MIXED) is RocketMQ 5's ``message.type``: what 5.x clients may send
        to it; ``order`` is RocketMQ's ordered-topic flag. Raises rocketq.ClientError when
        the broker refuses (a bad name, say)."""
        from .protocol import RemotingCommand, RequestCode

        fields: dict[str, Any] = {
            "topic": topic, "defaultTopic": "TBW102", "readQueueNums": queues,
            "writeQueueNums": queues, "perm": 6, "topicFilterType": "SINGLE_TAG",
            "topicSysFlag": 0, "order": order}
        if message_type is not None:
            fields["attributes"] = f"+message.type={message_type.upper()}"
        self._ask(self.broker_address, RemotingCommand.request(
            RequestCode.UPDATE_AND_CREATE_TOPIC, fields), f"creating topic {topic}")
        # The broker registers the change with the NameServer after it answers.
        deadline = time.monotonic() + ROUTE_TIMEOUT
        while self._route_queues(topic) != queues:
            if time.monotonic() > deadline:
                from .errors import ClientError

                raise ClientError(f"topic {topic} did not reach the NameServer's routes "
                                  f"within {ROUTE_TIMEOUT:.0f} s")
            time.sleep(0.01)

    def _route_queues(self, topic: str) -> int | None:
        """The write queues of ``topic`` in the NameServer's route, None without one."""
        from .protocol import RemotingCommand, RequestCode, ResponseCode, fastjson

        r = self._call(self.namesrv, RemotingCommand.request(
            RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic}))
        if r.code != ResponseCode.SUCCESS or not r.body:
            return None
        for queue in fastjson.loads(r.body).get("queueDatas") or ():
            if queue.get("brokerName") == self.broker_name:
                return int(queue.get("writeQueueNums", 0))
        return None

    def create_group(self, group: str, *, fifo: bool = False,
                     retry_max_times: int | None = None) -> None:
        """Create consumer group ``group`` (or replace its settings): ``fifo`` makes it a
        FIFO group for POP consumers (RocketMQ 5's ``consumeMessageOrderly``),
        ``retry_max_times`` the attempts before its dead-letter queue (16 when None). A
        broker creates groups by itself on first use; this is for groups that need other
        settings. Raises rocketq.ClientError when the broker refuses."""
        from .protocol import RemotingCommand, RequestCode

        config: dict[str, Any] = {"groupName": group, "consumeMessageOrderly": fifo}
        if retry_max_times is not None:
            config["retryMaxTimes"] = retry_max_times
        self._ask(self.broker_address, RemotingCommand.request(
            RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
            body=json.dumps(config).encode()), f"creating group {group}")

    def messages(self, topic: str) -> list[ReceivedMessage]:
        """Every message ``topic``'s queues hold now, in the order they were stored (by
        CommitLog offset), as consumers receive them (``rocketq.ReceivedMessage``: ``body``,
        ``tags``, ``keys``, ``properties``, ...); [] for a topic the broker does not know.
        Delayed and transactional messages show once they are delivered or committed. Reading
        commits no offset: a consumer group still gets them all."""
        from .client.pulled import pulled_messages
        from .protocol import RemotingCommand, RequestCode, ResponseCode

        config = self._call(self.broker_address, RemotingCommand.request(
            RequestCode.GET_TOPIC_CONFIG, {"topic": topic}))
        if config.code == ResponseCode.TOPIC_NOT_EXIST:
            return []
        _check(config, f"reading topic {topic}")
        queues = int(json.loads(config.body)["topicConfig"]["readQueueNums"])
        out: list[ReceivedMessage] = []
        for queue_id in range(queues):
            offset = 0
            while True:
                r = self._call(self.broker_address, RemotingCommand.request(
                    RequestCode.PULL_MESSAGE, {
                        "consumerGroup": READER_GROUP, "topic": topic, "queueId": queue_id,
                        "queueOffset": offset, "maxMsgNums": 32, "sysFlag": _SUBSCRIPTION,
                        "commitOffset": 0, "suspendTimeoutMillis": 0, "subscription": "*",
                        "subVersion": 0, "expressionType": "TAG"}))
                moved = int(r.ext_fields.get("nextBeginOffset", offset))
                if r.code == ResponseCode.SUCCESS:
                    out.extend(pulled_messages(r.body, self.broker_name))
                elif r.code not in _PULL_MISSES:
                    _check(r, f"reading topic {topic}")
                if moved <= offset and r.code != ResponseCode.SUCCESS:
                    break
                offset = moved
        out.sort(key=lambda m: m.commitlog_offset)
        return out

    def _ask(self, addr: str, cmd: RemotingCommand, what: str) -> RemotingCommand:
        return _check(self._call(addr, cmd), what)

    def _call(self, addr: str, cmd: RemotingCommand, timeout: float = 10.0
              ) -> RemotingCommand:
        """One request and its response over a blocking connection kept per address."""
        from .protocol import FLAG_RESPONSE, FrameDecoder
        from .protocol.command import encode

        if self._proc is None:
            raise RuntimeError("the test broker is stopped")
        with self._lock:
            conn = self._sockets.get(addr)
            if conn is None:
                host, port = addr.rsplit(":", 1)
                sock = socket.create_connection((host, int(port)), timeout)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                conn = self._sockets[addr] = (sock, FrameDecoder())
            sock, decoder = conn
            try:
                sock.settimeout(timeout)
                sock.sendall(encode(cmd))
                while True:
                    data = sock.recv(1 << 16)
                    if not data:
                        raise ConnectionResetError(f"{addr} closed the connection")
                    for frame in decoder.feed(data):
                        if frame.flag & FLAG_RESPONSE and frame.opaque == cmd.opaque:
                            return frame
            except BaseException:
                del self._sockets[addr]
                sock.close()
                raise


#: PullSysFlag.SUBSCRIPTION: the pull carries its own "*" subscription.
_SUBSCRIPTION = 0x4
#: PULL_NOT_FOUND, PULL_RETRY_IMMEDIATELY, PULL_OFFSET_MOVED: no messages at that offset
#: (the answer's nextBeginOffset says where to go on, if anywhere).
_PULL_MISSES = (19, 20, 21)


def _check(r: RemotingCommand, what: str) -> RemotingCommand:
    from .errors import ClientError

    if r.code != 0:
        raise ClientError(f"{what}: {r.remark or f'response code {r.code}'}")
    return r


def _forget_all() -> None:
    """In a forked child: close the copies of the pipes that keep test brokers alive."""
    for b in list(_live):
        proc = b._proc
        if proc is not None and proc.stdin is not None:
            try:
                proc.stdin.close()  # this copy only: the parent's stays open
            except OSError:
                pass


def broker(*, grpc: bool = False, conf: Mapping[str, Any] | None = None) -> LocalBroker:
    """Start a NameServer and a Broker on free 127.0.0.1 ports, in a temporary directory,
    and return them serving, as a :class:`LocalBroker`; use it as a context manager, or
    call ``stop()``.

    ``grpc``: also serve RocketMQ 5.x's gRPC endpoint (``grpc_endpoint``). ``conf``: broker.conf
    keys (``{"maxMessageSize": 65536}``, ``{"autoCreateTopicEnable": False}``); the ports,
    addresses and store directory are the test broker's own, and an unknown key is an error.

    Raises:
        BrokerStartError: the broker did not start (a bad ``conf`` value, say); the message
            ends with its log.
    """
    return LocalBroker(grpc=grpc, conf=conf)


__all__ = ["BrokerStartError", "LocalBroker", "broker"]

if pytest is not None:
    @pytest.fixture(scope="session")
    def rocketq_broker() -> Iterator[LocalBroker]:
        """A NameServer and Broker for the whole test session (see :func:`broker`): tests
        share it, so each should use topics and groups of its own.
        ``rocketq_broker_function`` gives a test a broker of its own."""
        with broker() as b:
            yield b

    @pytest.fixture
    def rocketq_broker_function() -> Iterator[LocalBroker]:
        """A NameServer and Broker for one test, stopped after it (see :func:`broker`)."""
        with broker() as b:
            yield b

    __all__ += ["rocketq_broker", "rocketq_broker_function"]
