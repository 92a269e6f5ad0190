"""Write with the Spark sink again and again and check every row: each run's rows must all be
in the topic, once each with ``exactlyOnce``, at least once without.

    .venv/bin/python benchmarks/sink_loop.py --runs 50 --rows 100000 [--json]

Starts ``rocketq standalone`` (async flush) in a temporary directory and one local[2] Spark
session; runs alternate at-least-once and exactly-once. Each run's rows carry the run number
and the row number in their body; after ``save()`` returns, the topic's queues are read back
over the run's offset range (Spark's batch reader, with the offsets taken before and after)
and every row number is counted. A run that misses rows stops the loop and reports which
ones, per queue, with the queue's offsets, so the cause can be looked for.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from e2e_bench import create_topic, start_broker  # noqa: E402
from spark_bench import spark_session  # noqa: E402

TOPICS = {False: "SinkLoop", True: "SinkLoopExactlyOnce"}


def offsets(namesrv: str, topic: str) -> dict[str, int]:
    from rocketq.spark import broker_io

    return {f"{broker}:{queue_id}": high for (_t, broker, _a, queue_id), (_low, high)
            in broker_io.queue_offsets(namesrv, [topic]).items()}


def settled_offsets(namesrv: str, topic: str, before: dict[str, int], rows: int
                    ) -> dict[str, int]:
    """The queues' ends once they reach ``rows`` more than ``before`` or stop growing (the
    broker dispatches the last appends after it answers them)."""
    deadline = time.monotonic() + 30
    last, still_since = None, time.monotonic()
    while time.monotonic() < deadline:
        now = offsets(namesrv, topic)
        if sum(now.values()) - sum(before.values()) >= rows:
            return now
        if now != last:
            last, still_since = now, time.monotonic()
        elif time.monotonic() - still_since > 3:
            return now
        time.sleep(0.05)
    return offsets(namesrv, topic)


def one_run(spark, namesrv: str, run: int, rows: int, exactly_once: bool) -> dict:
    from pyspark.sql import functions as F

    topic = TOPICS[exactly_once]
    before = offsets(namesrv, topic)
    df = spark.range(0, rows, numPartitions=2).select(
        F.concat(F.lit(f"{run}-"), F.col("id").cast("string"), F.lit("-"),
                 F.expr("repeat('x', 100)")).alias("body"))
    t0 = time.perf_counter()
    (df.write.format("rocketq").option("namesrv", namesrv).option("topic", topic)
     .option("exactlyOnce", str(exactly_once).lower()).mode("append").save())
    seconds = time.perf_counter() - t0
    after = settled_offsets(namesrv, topic, before, rows)
    read = (spark.read.format("rocketq").option("namesrv", namesrv).option("topic", topic)
            .option("startingOffsets", json.dumps({topic: before}))
            .option("endingOffsets", json.dumps({topic: after})).load()
            .selectExpr("queue_id", "queue_offset",
                        "substring_index(cast(body as string), '-', 2) as head").collect())
    seen: Counter[int] = Counter()
    where: dict[int, tuple[int, int]] = {}
    foreign = 0
    for row in read:
        run_text, _, number = row.head.partition("-")
        if run_text != str(run):
            foreign += 1
            continue
        seen[int(number)] += 1
        where[int(number)] = (row.queue_id, row.queue_offset)
    missing = [n for n in range(rows) if n not in seen]
    duplicated = sum(c - 1 for c in seen.values() if c > 1)
    ok = not missing and not foreign and (duplicated == 0 or not exactly_once)
    return {"run": run, "exactly_once": exactly_once, "rows": rows, "read": len(read),
            "missing": len(missing), "missing_first": missing[:20], "duplicated": duplicated,
            "foreign": foreign, "stored": sum(after.values()) - sum(before.values()),
            "offsets_before": before, "offsets_after": after,
            "rows_s": round(rows / seconds), "ok": ok}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--queues", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=1800, help="stop after this long")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)

    results: list[dict] = []
    started = time.monotonic()
    with tempfile.TemporaryDirectory() as data_dir:
        proc, namesrv = start_broker(data_dir)
        try:
            for topic in TOPICS.values():
                asyncio.run(create_topic(namesrv, topic, args.queues))
            spark = spark_session()
            try:
                for run in range(args.runs):
                    if time.monotonic() - started > args.seconds:
                        break
                    result = one_run(spark, namesrv, run, args.rows, run % 2 == 1)
                    results.append(result)
                    if not args.json:
                        mode = "exactly once " if result["exactly_once"] else "at least once"
                        print(f"run {run:3d} {mode} {result['rows_s']:>7,} rows/s "
                              f"missing {result['missing']} duplicated {result['duplicated']}",
                              file=sys.stderr)
                    if not result["ok"]:
                        break
            finally:
                spark.stop()
        finally:
            proc.terminate()
            proc.wait(30)
    failed = [r for r in results if not r["ok"]]
    summary = {"runs": len(results), "failed_runs": len(failed), "rows_per_run": args.rows,
               "rows_checked": sum(r["read"] for r in results),
               "at_least_once_duplicates": sum(r["duplicated"] for r in results
                                               if not r["exactly_once"]),
               "failure": failed[0] if failed else None}
    if args.json:
        print(json.dumps(summary))
    else:
        print(f"{'runs':>6} {'failed':>7} {'rows checked':>13} {'dups (at least once)':>21}")
        print(f"{summary['runs']:>6} {summary['failed_runs']:>7} {summary['rows_checked']:>13,} "
              f"{summary['at_least_once_duplicates']:>21}")
        if failed:
            print(json.dumps(failed[0], indent=1))
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
