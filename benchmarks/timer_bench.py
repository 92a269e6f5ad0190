"""Cost of pending timer messages: 1,000,000 messages due at random times over 3 days.

    python benchmarks/timer_bench.py [--pending N] [--json]

Appends the timer records to a real store, lets the dispatcher index them, then measures the
wheel: memory per pending message (tracemalloc), CPU to load each into the wheel, and CPU per
delivered message when a slice of them falls due.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shutil
import tempfile
import time
import tracemalloc

from rocketq.broker import Broker, load_broker_conf
from rocketq.protocol.message import encode_properties
from rocketq.protocol.topic import TIMER_TOPIC
from rocketq.store import MessageStore, StoreMessage


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pending", type=int, default=1_000_000)
    parser.add_argument("--deliver", type=int, default=20_000,
                        help="how many of them to let fall due and deliver")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    root = tempfile.mkdtemp(prefix="rocketq-timer-bench-")
    try:
        broker = Broker(*load_broker_conf({"storePathRootDir": root, "listenPort": 0,
                                           "messageIndexEnable": "false"}))
        store = broker.store = MessageStore(broker.store_config)
        now = int(time.time() * 1000)
        rng = random.Random(1)
        body = os.urandom(128)
        dues = sorted(now + rng.randrange(60_000, 3 * 86_400_000) for _ in range(args.pending))
        rng.shuffle(dues)
        batch = []
        for due in dues:
            props = encode_properties({"REAL_TOPIC": "Later", "REAL_QID": "0",
                                       "TIMER_OUT_MS": str(due)}).encode()
            batch.append(StoreMessage(TIMER_TOPIC, body, 0, properties=props,
                                      born_timestamp=now))
            if len(batch) == 1024:
                store.put_messages(batch)
                batch = []
        if batch:
            store.put_messages(batch)
        store.wait_dispatched(timeout=600)
        timer = broker.timer
        cpu = time.process_time()
        loaded = timer.load_new()
        load_cpu = time.process_time() - cpu
        # Memory, measured on a second load (tracemalloc slows the first one down).
        timer.buckets, timer.seconds, timer.loaded, timer.pending = {}, [], 0, 0
        tracemalloc.start()
        before = tracemalloc.take_snapshot()
        timer.load_new()
        after = tracemalloc.take_snapshot()
        tracemalloc.stop()
        wheel_bytes = sum(s.size_diff for s in after.compare_to(before, "filename"))
        cut = sorted(dues)[args.deliver - 1]
        cpu = time.process_time()
        delivered = asyncio.run(timer.deliver_due(now_ms=cut + 999 - (cut + 999) % 1000))
        deliver_cpu = time.process_time() - cpu
        store.close()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    result = {
        "pending_messages": loaded,
        "wheel_bytes_per_pending": round(wheel_bytes / loaded, 1),
        "load_us_per_pending": round(load_cpu / loaded * 1e6, 2),
        "delivered_messages": delivered,
        "deliver_us_per_message": round(deliver_cpu / max(delivered, 1) * 1e6, 1),
    }
    if args.json:
        print(json.dumps(result))
    else:
        print(f"rocketq timer wheel, {loaded:,} messages pending over 3 days")
        for key, value in result.items():
            print(f"  {key:<26} {value:>14,}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
