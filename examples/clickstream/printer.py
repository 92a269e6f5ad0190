"""Print the pipeline's window results as they arrive on the ``ClickStats`` topic.

    python -m examples.clickstream.printer --namesrv 127.0.0.1:9876
"""

from __future__ import annotations

import argparse
import json
import threading
from typing import Any

from rocketq import ConsumeResult, PushConsumer

HEADER = f"{'window':<21} {'page':<10} {'events':>7} {'purchases':>9} {'revenue':>10}"


def line(stats: dict[str, Any]) -> str:
    return (f"{stats['window_start']:<21} {stats['page']:<10} {stats['events']:>7} "
            f"{stats['purchases']:>9} {stats['revenue_cents'] / 100:>10.2f}")


def consume(namesrv: str, seconds: float | None = None, count: int | None = None,
            topic: str = "ClickStats", group: str = "clickstream-printer") -> list[dict]:
    """Print results until ``count`` arrived or ``seconds`` passed; returns them."""
    got: list[dict[str, Any]] = []
    done = threading.Event()
    lock = threading.Lock()

    def on_messages(messages: list[Any]) -> ConsumeResult:
        with lock:
            for m in messages:
                stats = json.loads(m.body)
                got.append(stats)
                print(line(stats), flush=True)
            if count is not None and len(got) >= count:
                done.set()
        return ConsumeResult.SUCCESS

    print(HEADER, flush=True)
    consumer = PushConsumer(group, namesrv=namesrv, from_where="first")
    consumer.subscribe(topic)
    consumer.register(on_messages)
    with consumer:
        consumer.start()
        done.wait(seconds)
    return got


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--namesrv", default="127.0.0.1:9876")
    parser.add_argument("--topic", default="ClickStats")
    parser.add_argument("--seconds", type=float, default=None)
    parser.add_argument("--count", type=int, default=None)
    args = parser.parse_args(argv)
    try:
        consume(args.namesrv, args.seconds, args.count, args.topic)
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
