"""The clients of a partition test, run inside their own namespaces; each writes what it does
to a history file (JSON lines, see history.py) until SIGTERM.

    python client.py produce NAMESRV TOPIC HISTORY [--process NAME] [--queues N]
    python client.py consume NAMESRV TOPIC HISTORY [--process NAME] [--group GROUP]

``produce`` creates the topic on every master (if it is not there yet), then sends one message
after another without pause, each body a number that counts up (the message id is the
client's unique id). ``consume`` reads the topic from its first message with one consumer
group.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
import threading
import time

if __package__ in (None, ""):  # run as a script: history.py sits beside it
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from history import Recorder
else:
    from .history import Recorder

HALT = threading.Event()


async def create_topic(namesrv: str, topic: str, queues: int) -> None:
    from rocketq.client.instance import ClientInstance
    from rocketq.protocol.codes import RequestCode
    from rocketq.protocol.command import RemotingCommand

    instance = ClientInstance(namesrv)
    try:
        route = None
        while route is None and not HALT.is_set():
            try:
                route = await instance.fetch_route("TBW102")
            except Exception:
                await asyncio.sleep(0.2)
        for addrs in (route.broker_addrs.values() if route else []):
            if 0 in addrs:
                await instance.remoting.invoke(addrs[0], RemotingCommand.request(
                    RequestCode.UPDATE_AND_CREATE_TOPIC,
                    {"topic": topic, "readQueueNums": queues, "writeQueueNums": queues,
                     "perm": 6}), 5)
    finally:
        await instance.remoting.close()


def outcome_of(exc: BaseException) -> str:
    """``failed`` when the send certainly stored nothing, else ``unknown``."""
    from rocketq import BrokerError, MessageValidationError, NameServerError, NoMasterError
    from rocketq.remoting import ConnectFailedError, ConnectTimeoutError

    certain = (BrokerError, MessageValidationError, NameServerError, NoMasterError,
               ConnectFailedError, ConnectTimeoutError)
    return "failed" if isinstance(exc, certain) else "unknown"


def produce(args: argparse.Namespace, rec: Recorder) -> None:
    from rocketq import Message, Producer, SendStatus
    from rocketq.client.unique_ids import unique_ids
    from rocketq.protocol.message import decode_offset_msg_id
    from rocketq.remoting import run

    run(create_topic(args.namesrv, args.topic, args.queues))
    # No retries: a retried send may be stored twice, which is not what this client tests.
    with Producer(f"{args.process}-group", namesrv=args.namesrv, send_timeout=args.timeout,
                  retries=0) as producer:
        i = 0
        while not HALT.is_set():
            body = f"{args.process}-{i}"
            msg = Message(args.topic, body.encode())
            # The id is set here, so a send that fails still names the message it was.
            msg_id = msg.properties["UNIQ_KEY"] = unique_ids.next()
            start = time.time()
            try:
                r = producer.send(msg)
            except Exception as exc:  # the outcome is what is recorded
                rec.record("send", msg_id, start, outcome=outcome_of(exc), body=body,
                           topic=args.topic, error=f"{type(exc).__name__}: {exc}"[:200])
                time.sleep(0.05)  # a broker that refuses is not asked again at once
            else:
                ok = r.status is SendStatus.SEND_OK
                host, port, position = decode_offset_msg_id(r.offset_msg_id)
                rec.record("send", r.msg_id, start, outcome="ok" if ok else "unknown",
                           body=body, topic=args.topic, broker=r.queue.broker_name,
                           writer=f"{host}:{port}", queue=r.queue.queue_id,
                           offset=r.queue_offset, position=position,
                           error="" if ok else r.status.name)
            i += 1


def consume(args: argparse.Namespace, rec: Recorder) -> None:
    from rocketq import PullConsumer

    with PullConsumer(args.group, namesrv=args.namesrv, from_where="first",
                      auto_commit_interval=1.0) as consumer:
        consumer.subscribe(args.topic)
        consumer.start()
        while not HALT.is_set():
            try:
                batch = consumer.poll(0.5)
            except Exception:
                time.sleep(0.1)
                continue
            now = time.time()
            for m in batch:
                rec.record("read", m.msg_id, now, now, body=m.body.decode(errors="replace"),
                           topic=m.topic, broker=m.broker_name, group=args.group,
                           queue=m.queue_id, offset=m.queue_offset)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mode", choices=["produce", "consume"])
    parser.add_argument("namesrv")
    parser.add_argument("topic")
    parser.add_argument("history", help="the JSON-lines file to append to")
    parser.add_argument("--process", default=None, help="this client's name in the history")
    parser.add_argument("--group", default="partition-readers", help="consumer group")
    parser.add_argument("--queues", type=int, default=4, help="queues of the topic")
    parser.add_argument("--timeout", type=float, default=3.0, help="send timeout, seconds")
    args = parser.parse_args(argv)
    args.process = args.process or args.mode
    signal.signal(signal.SIGTERM, lambda *_: HALT.set())
    with Recorder(args.history, args.process) as rec:
        print(f"{args.process} started", flush=True)
        (produce if args.mode == "produce" else consume)(args, rec)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
