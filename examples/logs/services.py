"""Services writing their log lines to the ``AppLogs`` topic with rocketq's producer: the
level as the tag, the service as the key, stamped with the time each line is written.

    python -m examples.logs.services --namesrv 127.0.0.1:9876 --seconds 30 --rate 20
"""

from __future__ import annotations

import argparse
import threading

from rocketq import Message, Producer

from .lines import LOG_TOPIC, live

SERVICES = ("checkout", "payments", "search")


def run(namesrv: str, service: str, seconds: float, rate: float,
        topic: str = LOG_TOPIC) -> int:
    """One service writing ``rate`` lines per second for ``seconds``; returns how many."""
    with Producer(f"logs-{service}", namesrv=namesrv) as producer:
        def send(text: str, level: str) -> None:
            producer.send(Message(topic, text.encode(), tags=level, keys=[service]))

        return live(service, seconds, rate, send)


def run_all(namesrv: str, seconds: float, rate: float,
            services: tuple[str, ...] = SERVICES) -> dict[str, int]:
    """The services side by side, each in its thread; lines sent per service."""
    sent: dict[str, int] = {}
    threads = [threading.Thread(target=lambda s=s: sent.__setitem__(
        s, run(namesrv, s, seconds, rate))) for s in services]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sent


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--namesrv", default="127.0.0.1:9876")
    parser.add_argument("--seconds", type=float, default=30)
    parser.add_argument("--rate", type=float, default=20, help="lines per second per service")
    args = parser.parse_args(argv)
    for service, n in run_all(args.namesrv, args.seconds, args.rate).items():
        print(f"{service}: {n} lines", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
