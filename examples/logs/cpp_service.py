"""A service writing its log lines with the C++ RocketMQ client (``pip install
rocketmq==0.4.4``, the Python binding of rocketmq-client-cpp) instead of rocketq's: the
pipeline cannot tell, as the topic cannot.

    python examples/logs/cpp_service.py NAMESRV SERVICE SECONDS RATE
"""

import sys
from pathlib import Path

from rocketmq.client import Message, Producer

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from examples.logs.lines import LOG_TOPIC, live  # noqa: E402


def main() -> None:
    namesrv, service, seconds, rate = sys.argv[1], sys.argv[2], float(sys.argv[3]), \
        float(sys.argv[4])
    producer = Producer(f"logs-{service}")
    producer.set_namesrv_addr(namesrv)
    producer.start()

    def send(text: str, level: str) -> None:
        m = Message(LOG_TOPIC)
        m.set_keys(service)
        m.set_tags(level)
        m.set_body(text.encode())
        producer.send_sync(m)

    try:
        n = live(service, seconds, rate, send)
    finally:
        producer.shutdown()
    print(f"{service}: {n} lines sent with the C++ client", flush=True)


if __name__ == "__main__":
    main()
