"""Print the pipeline's alerts as they arrive on the ``LogAlerts`` topic, each with how long
after its window closed (window end plus the watermark's 5 s) it arrived.

    python -m examples.logs.alerts --namesrv 127.0.0.1:9876
"""

from __future__ import annotations

import argparse
import json
import threading
import time
from datetime import datetime
from typing import Any

from rocketq import ConsumeResult, PushConsumer

from .pipeline import ALERT_TOPIC

HEADER = f"{'window':<21} {'service':<10} {'errors':>6} {'lines':>6} {'after close':>12}"
WATERMARK_S = 5.0


def closed_at(alert: dict[str, Any]) -> float:
    """When the alert's window could first be judged: its end plus the watermark delay."""
    end = datetime.fromisoformat(alert["window_end"].replace("Z", "+00:00"))
    return end.timestamp() + WATERMARK_S


def consume(namesrv: str, seconds: float | None = None, count: int | None = None,
            topic: str = ALERT_TOPIC, group: str = "log-alert-printer",
            until: threading.Event | None = None) -> list[dict[str, Any]]:
    """Print alerts until ``count`` arrived, ``seconds`` passed or ``until`` is set; returns
    them, each with ``latency_s``: arrival minus :func:`closed_at`."""
    got: list[dict[str, Any]] = []
    done = until or threading.Event()
    lock = threading.Lock()

    def on_messages(messages: list[Any]) -> ConsumeResult:
        now = time.time()
        with lock:
            for m in messages:
                alert = json.loads(m.body)
                alert["latency_s"] = round(now - closed_at(alert), 3)
                got.append(alert)
                print(f"{alert['window_start']:<21} {alert['service']:<10} "
                      f"{alert['errors']:>6} {alert['lines']:>6} "
                      f"{alert['latency_s']:>11.1f}s", flush=True)
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
    parser.add_argument("--topic", default=ALERT_TOPIC)
    parser.add_argument("--seconds", type=float, default=None)
    args = parser.parse_args(argv)
    try:
        consume(args.namesrv, args.seconds, topic=args.topic)
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
