"""Run the whole logs example in one command: a standalone rocketq broker (unless
``--namesrv`` points at one), optionally a local Spark standalone cluster, the services, the
Spark pipeline and the alert printer; then how long alerts took.

    python -m examples.logs                          # about a minute
    python -m examples.logs --spark-workers 2        # on a local Spark standalone cluster
    python -m examples.logs --cpp-python PATH        # one service on the C++ client (PATH:
                                                     # a Python with rocketq==0.4.4's binding)

An alert's latency is from when its window closed (its end plus the 5 s watermark; the lines
are stamped as they are written) to its arrival at the printer.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import subprocess
import tempfile
import threading
from pathlib import Path
from typing import Any

from rocketq.cli import spawn_standalone

from . import alerts, pipeline, services
from .lines import LOG_TOPIC

SMALL_STORE = ("mappedFileSizeCommitLog=67108864\nmaxHashSlotNum=65536\nmaxIndexNum=262144\n"
               "mappedFileSizeConsumeQueue=600000\n")
CPP_SERVICE = "inventory"


def summary(got: list[dict[str, Any]], sent: dict[str, int]) -> dict[str, Any]:
    latencies = sorted(a["latency_s"] for a in got)
    return {"lines": sent, "alerts": len(got),
            "latency_p50_s": statistics.median(latencies) if latencies else None,
            "latency_max_s": latencies[-1] if latencies else None}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--namesrv", help="use this NameServer instead of starting a broker")
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--spark-workers", type=int, default=0,
                        help="start a Spark standalone cluster of this many workers here")
    parser.add_argument("--seconds", type=float, default=30, help="how long services write")
    parser.add_argument("--rate", type=float, default=20, help="lines per second per service")
    parser.add_argument("--cpp-python", help="a Python with the C++ client's binding "
                                             "(rocketmq==0.4.4): it runs one more service")
    parser.add_argument("--work-dir", help="checkpoint and Spark logs (default: temporary)")
    parser.add_argument("--json", action="store_true", help="end with a JSON summary line")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="rocketq-logs-") as tmp, \
            contextlib.ExitStack() as stack:
        work = Path(args.work_dir or tmp)
        work.mkdir(parents=True, exist_ok=True)
        namesrv = args.namesrv
        if namesrv is None:
            conf = Path(tmp) / "broker.conf"
            conf.write_text(SMALL_STORE)
            broker, namesrv = spawn_standalone(str(Path(tmp) / "store"), config=str(conf))
            stack.callback(lambda: (broker.terminate(), broker.wait(30)))
            print(f"standalone broker up, namesrv={namesrv}", flush=True)
        master = args.master
        if args.spark_workers:
            from rocketq.spark.standalone import StandaloneCluster

            cluster = stack.enter_context(StandaloneCluster(work / "spark",
                                                            args.spark_workers))
            master = cluster.url
            print(f"Spark standalone cluster up: {master}", flush=True)
        from rocketq import Admin

        with Admin(namesrv) as admin:
            for topic in (LOG_TOPIC, pipeline.ALERT_TOPIC):
                admin.create_topic(topic, queues=4)
        spark = pipeline.session(master)
        stack.callback(spark.stop)
        query = pipeline.start(spark, namesrv, str(work / "checkpoint"))
        stack.callback(query.stop)
        stop_printing = threading.Event()
        got: list[dict[str, Any]] = []
        printer = threading.Thread(target=lambda: got.extend(alerts.consume(
            namesrv, until=stop_printing)), daemon=True)
        printer.start()
        cpp = None
        if args.cpp_python:
            cpp = subprocess.Popen([args.cpp_python, str(Path(__file__).with_name(
                "cpp_service.py")), namesrv, CPP_SERVICE, str(args.seconds), str(args.rate)],
                stdout=subprocess.PIPE, text=True)
        sent = services.run_all(namesrv, args.seconds, args.rate)
        if cpp is not None:
            out, _ = cpp.communicate(timeout=args.seconds + 60)
            if cpp.returncode != 0:
                raise RuntimeError(f"the C++ client's service failed: {out}")
            sent[CPP_SERVICE] = int(out.split(": ", 1)[1].split()[0])
        print(f"services wrote {sum(sent.values())} lines; waiting for the last windows",
              flush=True)
        query.processAllAvailable()  # every closed window judged and its alert committed
        stop_printing.wait(3)
        stop_printing.set()
        printer.join(10)
        result = summary(got, sent)
        print(f"{result['alerts']} alerts; latency after a window closed: median "
              f"{result['latency_p50_s']} s, max {result['latency_max_s']} s", flush=True)
        if args.json:
            print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
