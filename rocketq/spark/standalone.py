"""A Spark standalone cluster on this machine, from PySpark's own distribution: a master and
workers as separate JVM processes, each worker with its own work directory, its executors'
Python workers on this interpreter. It is what the connector's cluster tests and the logs
example run on, and a way to try a pipeline on a cluster without installing Spark::

    python -m rocketq.spark.standalone --workers 2        # prints spark://127.0.0.1:PORT

    with StandaloneCluster(workers=2, directory="spark-cluster") as cluster:
        spark = SparkSession.builder.master(cluster.url).getOrCreate()

A real deployment starts the same classes with Spark's ``sbin/start-master.sh`` and
``sbin/start-worker.sh``; see docs/spark.md.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

MASTER = "org.apache.spark.deploy.master.Master"
WORKER = "org.apache.spark.deploy.worker.Worker"


def spark_home() -> Path:
    """PySpark's directory: its ``bin/spark-class`` and ``jars/`` are a Spark distribution."""
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class StandaloneCluster:
    """A master on ``spark://127.0.0.1:<port>`` and ``workers`` workers of ``cores`` cores
    and ``memory`` each, started as child processes; :meth:`stop` (or leaving the ``with``
    block) ends them. Logs are in ``directory``: ``master.log``, ``worker-N.log``, and each
    worker's executors under ``worker-N/``."""

    def __init__(self, directory: str | os.PathLike[str], workers: int = 2, cores: int = 1,
                 memory: str = "1g", python: str | None = None) -> None:
        if workers < 1 or cores < 1:
            raise ValueError("a cluster needs at least one worker with at least one core")
        self.directory = Path(directory)
        self.workers, self.cores, self.memory = workers, cores, memory
        self.python = python or sys.executable
        self.port = _free_port()
        self.ui_port = _free_port()
        self.url = f"spark://127.0.0.1:{self.port}"
        self.procs: list[subprocess.Popen[bytes]] = []

    def env(self) -> dict[str, str]:
        """The environment of the master, the workers and so their executors."""
        env = dict(os.environ)
        env.update(SPARK_HOME=str(spark_home()), SPARK_LOCAL_IP="127.0.0.1",
                   SPARK_LOCAL_HOSTNAME="127.0.0.1", PYSPARK_PYTHON=self.python,
                   SPARK_NO_DAEMONIZE="1", SPARK_CONF_DIR=str(self.directory / "conf"))
        return env

    def _spawn(self, args: list[str], log: str) -> subprocess.Popen[bytes]:
        with open(self.directory / log, "ab") as out:
            proc = subprocess.Popen(
                [str(spark_home() / "bin" / "spark-class"), *args], stdout=out,
                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=self.env(),
                start_new_session=True)
        self.procs.append(proc)
        return proc

    def start(self, timeout: float = 90.0) -> StandaloneCluster:
        """Start the master and the workers; return once every worker is registered ALIVE."""
        self.directory.mkdir(parents=True, exist_ok=True)
        conf = self.directory / "conf"
        conf.mkdir(exist_ok=True)
        (conf / "log4j2.properties").write_text(
            "rootLogger.level = warn\nrootLogger.appenderRef.stdout.ref = console\n"
            "appender.console.type = Console\nappender.console.name = console\n"
            "appender.console.layout.type = PatternLayout\n"
            "appender.console.layout.pattern = %d{HH:mm:ss} %p %c{1}: %m%n\n")
        try:
            self._spawn([MASTER, "--host", "127.0.0.1", "--port", str(self.port),
                         "--webui-port", str(self.ui_port)], "master.log")
            self._wait(lambda: self.state() is not None, timeout, "the master")
            for n in range(self.workers):
                work = self.directory / f"worker-{n}"
                work.mkdir(exist_ok=True)
                self._spawn([WORKER, "--host", "127.0.0.1", "--port", str(_free_port()),
                             "--webui-port", str(_free_port()), "--cores", str(self.cores),
                             "--memory", self.memory, "--work-dir", str(work), self.url],
                            f"worker-{n}.log")
            self._wait(lambda: len(self.alive_workers()) == self.workers, timeout,
                       f"{self.workers} workers")
        except BaseException:
            self.stop()
            raise
        return self

    def _wait(self, check: Any, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for proc in self.procs:
                if proc.poll() is not None:
                    raise RuntimeError(f"a Spark process exited with {proc.returncode} before "
                                       f"{what} were up; see the logs in {self.directory}")
            if check():
                return
            time.sleep(0.3)
        raise TimeoutError(f"{what} not up after {timeout:.0f} s; see {self.directory}")

    def state(self) -> dict[str, Any] | None:
        """The master's state as its web UI serves it (``/json/``), None if not answering."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.ui_port}/json/",
                                        timeout=2) as r:
                return json.loads(r.read())  # type: ignore[no-any-return]
        except (OSError, ValueError):
            return None

    def alive_workers(self) -> list[dict[str, Any]]:
        state = self.state() or {}
        return [w for w in state.get("workers", []) if w.get("state") == "ALIVE"]

    def stop(self) -> None:
        """Stop the workers (and with them their executors), then the master."""
        for proc in reversed(self.procs):
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in reversed(self.procs):
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        self.procs.clear()

    def __enter__(self) -> StandaloneCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def executor_pid(pid: int) -> int | None:
    """The executor JVM (``CoarseGrainedExecutorBackend``) that process ``pid`` (a task's
    Python worker) runs under, found by walking up its parents; None if it has none."""
    while pid > 1:
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            return None
        if b"CoarseGrainedExecutorBackend" in cmdline:
            return pid
        pid = int(stat.rsplit(")", 1)[1].split()[1])
    return None


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m rocketq.spark.standalone",
                                description="run a Spark standalone master and workers from "
                                            "PySpark's distribution until Ctrl-C")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--cores", type=int, default=1, help="cores per worker")
    p.add_argument("--memory", default="1g", help="memory per worker")
    p.add_argument("--dir", default="spark-cluster", help="logs and work directories")
    args = p.parse_args(argv)
    with StandaloneCluster(args.dir, args.workers, args.cores, args.memory) as cluster:
        print(f"master {cluster.url} (web UI http://127.0.0.1:{cluster.ui_port}); "
              f"{args.workers} workers; Ctrl-C stops all", flush=True)
        try:
            signal.sigwait({signal.SIGINT, signal.SIGTERM})
        except KeyboardInterrupt:
            pass


if __name__ == "__main__":
    main()
