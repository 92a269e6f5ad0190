"""Publish click events to rocketq: JSON bodies, the action as the tag, the user as the key.

    python -m examples.clickstream.generator --namesrv 127.0.0.1:9876 --count 2000 --rate 200

Event times are synthetic and deterministic (``--start-ms`` plus ``--step-ms`` per event), so a
run can be checked against what the pipeline computes.
"""

from __future__ import annotations

import argparse
import json
import random
import time
from collections.abc import Iterator
from typing import Any

from rocketq import Message, Producer

TOPIC = "Clicks"
PAGES = ["/", "/search", "/product", "/cart", "/checkout"]
ACTIONS = ["view", "view", "view", "click", "click", "purchase"]


def events(count: int, start_ms: int, step_ms: int, seed: int = 7) -> Iterator[dict[str, Any]]:
    """``count`` click events, one every ``step_ms`` of event time from ``start_ms``."""
    rnd = random.Random(seed)
    for i in range(count):
        action = rnd.choice(ACTIONS)
        yield {"event_id": i, "user": f"u{rnd.randrange(50)}", "page": rnd.choice(PAGES),
               "action": action, "ts": start_ms + i * step_ms,
               "amount_cents": rnd.randrange(100, 10000) if action == "purchase" else 0}


def publish(namesrv: str, count: int, start_ms: int, step_ms: int, rate: float = 0,
            topic: str = TOPIC) -> list[dict[str, Any]]:
    """Send the events (``rate`` per second, 0 for as fast as acknowledged); returns them."""
    sent = []
    began = time.monotonic()
    with Producer("clickstream-generator", namesrv=namesrv) as producer:
        for n, event in enumerate(events(count, start_ms, step_ms)):
            producer.send(Message(topic, json.dumps(event).encode(), tags=event["action"],
                                  keys=[event["user"]]))
            sent.append(event)
            if rate:
                time.sleep(max(0.0, began + (n + 1) / rate - time.monotonic()))
    return sent


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--namesrv", default="127.0.0.1:9876")
    parser.add_argument("--topic", default=TOPIC)
    parser.add_argument("--count", type=int, default=2000)
    parser.add_argument("--rate", type=float, default=200, help="events per second (0: max)")
    parser.add_argument("--start-ms", type=int, default=None,
                        help="event time of the first event (default: now)")
    parser.add_argument("--step-ms", type=int, default=50)
    args = parser.parse_args(argv)
    start = args.start_ms if args.start_ms is not None else int(time.time() * 1000)
    sent = publish(args.namesrv, args.count, start, args.step_ms, args.rate, args.topic)
    print(f"published {len(sent)} click events to {args.topic}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
