"""A test network of Linux network namespaces, and the faults a partition test injects.

    with Network() as net:
        ns = net.node("namesrv")                  # a namespace, a veth into the bridge, an address
        proc = net.run(ns, [sys.executable, "-m", "rocketq.cli", "namesrv", "--host", ns.addr])
        net.cut(a, b)                             # a and b cannot reach each other
        net.cut(a, b, both=False)                 # a cannot send to b; b can still send to a
        net.lossy(a, b, share=0.3)                # 30 % of the packets between them are dropped
        net.link_down(a)                          # a's cable is pulled
        net.heal(a, b); net.heal(a); net.heal_all()

Every network has its own bridge and a private /24 of 10.213.0.0/16 that no route of the
machine uses; the bridge is not connected to anything else and nothing is forwarded off it,
so the nodes reach each other and the bridge's own address (the test process, outside every
namespace, talks to them through it) and nothing more.

Faults are nftables rules in the namespaces (one ``inet`` table per namespace, rewritten as a
whole, atomically, on each change): a cut drops a node's packets to the other node's address
in its output hook; packet loss is ``numgen random mod 100 < N drop`` there; a link taken down
is the host end of the node's veth set down (the node keeps its address; it loses carrier).

Cleanup. Every name this module makes starts with ``rqn`` and the creating process's pid in
hex, so parallel test workers never clash and leftovers can be told apart. Closing a network
(its ``with`` block ending, an exception included) SIGKILLs every process in its namespaces
(by the pids the kernel lists for each namespace, so their children too), deletes the
namespaces (their nft tables and the inner veth ends go with them), the host veth ends and
the bridge. An ``atexit`` hook closes the networks a process leaves open, and each new
network first sweeps what processes that died without cleaning up (SIGKILL, a crash) left:
namespaces and links whose pid is no longer running.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import ipaddress
import os
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import weakref
from dataclasses import dataclass, field

PREFIX = "rqn"
#: The networks are /24s of this range; the third octet tells them apart.
SUPERNET = ipaddress.ip_network("10.213.0.0/16")
TABLE = "rqfault"

_TAG = f"{PREFIX}{os.getpid():x}"
_NS_RE = re.compile(rf"^{PREFIX}([0-9a-f]+)-")
_LINK_RE = re.compile(rf"^{PREFIX}([0-9a-f]+)[rvp][0-9a-z]+$")
_counter = 0
_counter_lock = threading.Lock()
_open: weakref.WeakSet[Network] = weakref.WeakSet()


class Unavailable(RuntimeError):
    """This machine (or this user) cannot make network namespaces, veths, bridges or nft
    rules; the reason says what is missing."""


def _next() -> str:
    global _counter
    with _counter_lock:
        _counter += 1
        return f"{_counter:x}"


def sh(*argv: str, check: bool = True, stdin: str | None = None) -> str:
    """Run a command; its output, or CalledProcessError with its stderr."""
    done = subprocess.run(argv, input=stdin, capture_output=True, text=True, timeout=30)
    if check and done.returncode != 0:
        raise subprocess.CalledProcessError(done.returncode, argv, done.stdout, done.stderr)
    return done.stdout


def unavailable() -> str | None:
    """Why namespaces and nft rules cannot be used here, or None when they can."""
    if os.name != "posix" or not os.path.exists("/proc/self/ns/net"):
        return "network namespaces are Linux-only"
    if os.geteuid() != 0:
        return "network namespaces, veths and nft rules need root"
    for tool, package in (("ip", "iproute2"), ("nft", "nftables")):
        if shutil.which(tool) is None:
            return f"the {tool!r} command is missing (Debian package {package}; make test-deps)"
    return None


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, killed but not yet reaped, does not)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False


def _kill_namespace(ns: str) -> None:
    """SIGKILL every process the kernel lists in namespace ``ns``, then delete it."""
    for _ in range(3):
        pids = [int(p) for p in sh("ip", "netns", "pids", ns, check=False).split()]
        if not pids:
            break
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    sh("ip", "netns", "del", ns, check=False)


def sweep() -> list[str]:
    """Remove the namespaces and links of processes that are gone (names with this module's
    prefix and a pid no longer running); the names removed."""
    removed = []
    for line in sh("ip", "netns", "list", check=False).splitlines():
        name = line.split()[0] if line.strip() else ""
        m = _NS_RE.match(name)
        if m and not _alive(int(m.group(1), 16)):
            _kill_namespace(name)
            removed.append(name)
    for line in sh("ip", "-o", "link", "show", check=False).splitlines():
        parts = line.split(":")
        if len(parts) < 2:
            continue
        name = parts[1].strip().split("@")[0]
        m = _LINK_RE.match(name)
        if m and not _alive(int(m.group(1), 16)):
            sh("ip", "link", "del", name, check=False)
            removed.append(name)
    return removed


@dataclass
class Node:
    """A namespace on the network: its name in the test, the namespace, its address, and the
    host end of its veth."""

    name: str
    ns: str
    addr: str
    veth: str

    def __str__(self) -> str:
        return f"{self.name} ({self.addr})"


@dataclass(frozen=True)
class Fault:
    """One rule: packets from ``src`` to ``dst`` are dropped (``share`` percent of them, at
    random, when below 100)."""

    src: str
    dst: str
    share: int = 100


@dataclass(eq=False)
class Network:
    """A bridge, its /24, the nodes on it, the processes started in them and the faults in
    force. A context manager; :meth:`close` is safe to call more than once."""

    nodes: dict[str, Node] = field(default_factory=dict)
    procs: list[subprocess.Popen] = field(default_factory=list)
    faults: set[Fault] = field(default_factory=set)
    down: set[str] = field(default_factory=set)
    bridge: str = ""
    subnet: ipaddress.IPv4Network | None = None
    _closed: bool = False

    # ------------------------------------------------------------------ lifecycle

    def __enter__(self) -> Network:
        if self.bridge:
            raise RuntimeError("a Network is entered once")
        reason = unavailable()
        if reason:
            raise Unavailable(reason)
        sweep()
        self.bridge = f"{_TAG}r{_next()}"
        _open.add(self)
        try:
            self._make_bridge()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _make_bridge(self) -> None:
        # One process at a time picks a /24 and puts it on its bridge, so two test workers
        # never pick the same one; the lock file is the machine's, the /24 then shows as a
        # route the next one skips.
        lock = os.path.join(tempfile.gettempdir(), f"{PREFIX}-subnets.lock")
        with open(lock, "a") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            try:
                sh("ip", "link", "add", self.bridge, "type", "bridge")
            except subprocess.CalledProcessError as exc:
                raise Unavailable(f"cannot make a bridge: {exc.stderr.strip()}") from None
            used = sh("ip", "-4", "route", "show", "table", "all") + sh("ip", "-4", "addr")
            for subnet in SUPERNET.subnets(new_prefix=24):
                if subnet.network_address.packed[2] == 0:
                    continue
                prefix = str(subnet.network_address).rsplit(".", 1)[0] + "."
                if prefix not in used:
                    break
            else:
                raise Unavailable(f"every /24 of {SUPERNET} is in use")
            self.subnet = subnet
            sh("ip", "addr", "add", f"{self.host}/24", "dev", self.bridge)
            sh("ip", "link", "set", self.bridge, "up")

    @property
    def host(self) -> str:
        """The bridge's own address: how the test process reaches the nodes."""
        assert self.subnet is not None
        return str(self.subnet.network_address + 254)

    def close(self) -> None:
        """Kill every process, delete every namespace, veth and the bridge."""
        if self._closed:
            return
        self._closed = True
        for proc in self.procs:
            # Not yet reaped, so the pid is still this process's child, never a stranger.
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
        for node in self.nodes.values():
            _kill_namespace(node.ns)
            sh("ip", "link", "del", node.veth, check=False)
        for proc in self.procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(10)
            for stream in (proc.stdin, proc.stdout, proc.stderr):
                if stream is not None:
                    with contextlib.suppress(OSError):
                        stream.close()
        if self.bridge:
            sh("ip", "link", "del", self.bridge, check=False)
        _open.discard(self)

    # ------------------------------------------------------------------ nodes and processes

    def node(self, name: str) -> Node:
        """A new namespace joined to the bridge, with the next address, loopback up and an
        empty fault table."""
        if name in self.nodes:
            raise ValueError(f"there already is a node {name!r}")
        if not re.fullmatch(r"[A-Za-z0-9_.-]{1,40}", name):
            raise ValueError(f"a node name is letters, digits, '_', '.', '-': {name!r}")
        assert self.subnet is not None
        k = _next()
        ns = f"{_TAG}-{self.bridge[len(_TAG):]}-{name}"
        node = Node(name, ns, str(self.subnet.network_address + len(self.nodes) + 1),
                    f"{_TAG}v{k}")
        self.nodes[name] = node  # from here on close() removes it, whatever fails next
        peer = f"{_TAG}p{k}"
        sh("ip", "netns", "add", ns)
        sh("ip", "link", "add", node.veth, "type", "veth", "peer", "name", peer)
        sh("ip", "link", "set", peer, "netns", ns)
        sh("ip", "-n", ns, "link", "set", peer, "name", "eth0")
        sh("ip", "-n", ns, "addr", "add", f"{node.addr}/24", "dev", "eth0")
        sh("ip", "-n", ns, "link", "set", "eth0", "up")
        sh("ip", "-n", ns, "link", "set", "lo", "up")
        sh("ip", "link", "set", node.veth, "master", self.bridge, "up")
        self._apply(node)
        return node

    def run(self, node: Node, argv: list[str], **popen) -> subprocess.Popen:
        """Start ``argv`` inside ``node``'s namespace (``ip netns exec`` execs it, so the pid
        is the program's), in a session of its own; killed when the network closes."""
        popen.setdefault("start_new_session", True)
        proc = subprocess.Popen(["ip", "netns", "exec", node.ns, *argv], **popen)
        self.procs.append(proc)
        return proc

    def exec(self, node: Node, *argv: str) -> str:
        """Run a short command inside ``node``'s namespace; its output."""
        return sh("ip", "netns", "exec", node.ns, *argv)

    # ------------------------------------------------------------------ faults

    def cut(self, a: Node, b: Node, both: bool = True) -> None:
        """Drop every packet from ``a`` to ``b`` (and from ``b`` to ``a`` when ``both``)."""
        self._add(a, b, 100, both)

    def lossy(self, a: Node, b: Node, share: float = 0.3, both: bool = True) -> None:
        """Drop ``share`` (0 to 1) of the packets from ``a`` to ``b``, at random (and the
        other way when ``both``)."""
        if not 0 <= share <= 1:
            raise ValueError(f"share is between 0 and 1, not {share}")
        self._add(a, b, round(share * 100), both)

    def link_down(self, node: Node) -> None:
        """Take ``node``'s link down: nothing in or out until it is healed."""
        sh("ip", "link", "set", node.veth, "down")
        self.down.add(node.name)

    def heal(self, *nodes: Node) -> None:
        """No nodes: every fault; one: its link and every rule that names it; two: the rules
        between them (both ways)."""
        if not nodes:
            self.heal_all()
            return
        if len(nodes) > 2:
            raise ValueError("heal() takes no node, one or two")
        names = {n.addr for n in nodes}
        gone = {f for f in self.faults
                if ({f.src, f.dst} <= names if len(nodes) == 2 else names & {f.src, f.dst})}
        self.faults -= gone
        for node in self._touched(gone):
            self._apply(node)
        if len(nodes) == 1 and nodes[0].name in self.down:
            sh("ip", "link", "set", nodes[0].veth, "up")
            self.down.discard(nodes[0].name)

    def heal_all(self) -> None:
        gone, self.faults = self.faults, set()
        for node in self._touched(gone):
            self._apply(node)
        for name in sorted(self.down):
            sh("ip", "link", "set", self.nodes[name].veth, "up")
        self.down.clear()

    def _add(self, a: Node, b: Node, share: int, both: bool) -> None:
        for src, dst in ((a, b), (b, a)) if both else ((a, b),):
            # A new rule between the same two nodes replaces the old one.
            self.faults = {f for f in self.faults if (f.src, f.dst) != (src.addr, dst.addr)}
            if share:
                self.faults.add(Fault(src.addr, dst.addr, share))
            self._apply(src)

    def _touched(self, faults: set[Fault]) -> list[Node]:
        srcs = {f.src for f in faults}
        return [n for n in self.nodes.values() if n.addr in srcs]

    def rules(self, node: Node) -> str:
        """The nft ruleset ``node`` should have now."""
        lines = []
        for f in sorted(self.faults, key=lambda f: (f.src, f.dst)):
            if f.src != node.addr:
                continue
            rand = "" if f.share >= 100 else f" numgen random mod 100 < {f.share}"
            lines.append(f"    ip daddr {f.dst}{rand} drop")
        body = "\n".join(lines)
        return (f"table inet {TABLE} {{}}\ndelete table inet {TABLE}\n"
                f"table inet {TABLE} {{\n  chain output {{\n"
                f"    type filter hook output priority 0; policy accept;\n{body}\n  }}\n}}\n")

    def _apply(self, node: Node) -> None:
        # One transaction: the old table goes and the new one comes at once.
        sh("ip", "netns", "exec", node.ns, "nft", "-f", "-", stdin=self.rules(node))


def leftovers() -> list[str]:
    """Namespaces and links of this process that still exist (for tests of the cleanup)."""
    found = [line.split()[0] for line in sh("ip", "netns", "list", check=False).splitlines()
             if line.startswith(_TAG + "-")]
    for line in sh("ip", "-o", "link", "show", check=False).splitlines():
        parts = line.split(":")
        if len(parts) > 1 and parts[1].strip().split("@")[0].startswith(_TAG):
            found.append(parts[1].strip().split("@")[0])
    return found


@atexit.register
def _close_all() -> None:
    for net in list(_open):
        with contextlib.suppress(Exception):
            net.close()
