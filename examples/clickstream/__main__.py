"""Run the whole clickstream example in one command: a standalone rocketq broker (unless
``--namesrv`` points at one), the generator, the Spark pipeline and the printer.

    python -m examples.clickstream               # about a minute on a laptop
"""

from __future__ import annotations

import argparse
import tempfile
import threading
import time
from pathlib import Path

from rocketq.cli import spawn_standalone

from . import generator, pipeline, printer

SMALL_STORE = ("mappedFileSizeCommitLog=67108864\nmaxHashSlotNum=65536\nmaxIndexNum=262144\n"
               "mappedFileSizeConsumeQueue=600000\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--namesrv", help="use this NameServer instead of starting a broker")
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--events", type=int, default=1500)
    parser.add_argument("--rate", type=float, default=100, help="events per second")
    parser.add_argument("--work-dir", help="where checkpoint and Parquet go (default: a new "
                                           "directory under the system's temporary one, "
                                           "kept after the run)")
    args = parser.parse_args(argv)
    # The broker's store goes with the run; the Parquet output it names stays for reading.
    with tempfile.TemporaryDirectory(prefix="rocketq-clickstream-broker-") as tmp:
        work = Path(args.work_dir or tempfile.mkdtemp(prefix="rocketq-clickstream-"))
        work.mkdir(parents=True, exist_ok=True)
        broker = None
        namesrv = args.namesrv
        if namesrv is None:
            conf = Path(tmp) / "broker.conf"
            conf.write_text(SMALL_STORE)
            broker, namesrv = spawn_standalone(str(Path(tmp) / "store"), config=str(conf))
            print(f"standalone broker up, namesrv={namesrv}", flush=True)
        try:
            from rocketq import Admin

            with Admin(namesrv) as admin:
                for topic in ("Clicks", pipeline.RESULT_TOPIC):
                    admin.create_topic(topic, queues=4)
            spark = pipeline.session(args.master)
            query = pipeline.start(spark, namesrv, str(work / "checkpoint"),
                                   str(work / "click-stats.parquet"))
            shown = threading.Thread(target=printer.consume, args=(namesrv,),
                                     kwargs={"seconds": args.events / args.rate + 30},
                                     daemon=True)
            shown.start()
            generator.publish(namesrv, args.events, int(time.time() * 1000), 50, args.rate)
            print(f"published {args.events} click events; waiting for the last windows",
                  flush=True)
            shown.join()
            query.stop()
            rows = spark.read.parquet(str(work / "click-stats.parquet")).count()
            print(f"{rows} window results in {work / 'click-stats.parquet'} (kept: read it "
                  f"with spark.read.parquet, delete {work} when done)", flush=True)
            spark.stop()
        finally:
            if broker is not None:
                broker.terminate()
                broker.wait(30)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
