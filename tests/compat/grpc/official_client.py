"""Drive the official RocketMQ 5.x Python client (PyPI ``rocketmq-python-client``, import name
``rocketmq``) from the command line; run it with the python of the venv that holds the client
(tests/compat/grpc_clients.py ``official_python()``/``run_official()``).

    python official_client.py send    --endpoint 127.0.0.1:8081 --topic T [--kind normal|fifo|
                                      delay|transaction] [--count N] [--tag A] [--keys k1,k2]
                                      [--prop k=v ...] [--message-group G] [--delay-seconds S]
                                      [--tx-resolution commit|rollback|unknown] [--inflight K]
    python official_client.py receive --endpoint ... --topic T --group G --count N
                                      [--batch 32] [--invisible 15] [--no-ack]
                                      [--change-invisible S] [--ack-threads K]
    python official_client.py push    --endpoint ... --topic T --group G --count N
                                      [--fail-times K]
    common: [--access-key AK --secret-key SK] [--tls [--ca-file PEM]] [--namespace NS]
            [--timeout S] [--summary] [--sync-stdin]

It prints ONE JSON object on stdout at the end (``{"ok": true|false, ...}``: per message
entries, or only counts with ``--summary``; ``count``, ``elapsed_s``, ``msgs_s`` and ``cpu_s``,
this process's CPU time, over the measured part; ``startup_s``) and exits 0 when ok. The
client's own log goes to ~/logs/rocketmq_python/rocketmq_client.log (the helper points HOME at
a temporary directory). With ``--sync-stdin`` it writes ``@@READY`` on stderr once the
client has started, waits for a line on stdin, and writes ``@@DONE`` on stderr when the measured
part is over (before shutdown): a benchmark samples the server's CPU time at these points.

Client facts this relies on (rocketmq-python-client 5.1.2):
- ``Message.delivery_timestamp`` goes on the wire as *seconds* (``Timestamp.seconds =
  delivery_timestamp``), although received messages report it in milliseconds.
- ``Message.keys = "k"`` adds one key (the setter takes one value).
- ``SimpleConsumer.ack_async`` returns nothing, so concurrent acks use ``ack`` on threads.
- ``Producer.send_async`` returns a ``concurrent.futures.Future``; it cannot carry a
  transaction.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import sys
import threading
import time
import traceback
from typing import Any

RESULT: dict[str, Any] = {"ok": False}
_OUT_LOCK = threading.Lock()


def emit_and_exit(code: int) -> None:
    """Print the JSON result once and leave at once (the client's threads may linger)."""
    with _OUT_LOCK:
        sys.stdout.write(json.dumps(RESULT, default=str) + "\n")
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def log(text: str) -> None:
    sys.stderr.write(text + "\n")
    sys.stderr.flush()


def ready_point(args: argparse.Namespace) -> None:
    if args.sync_stdin:
        log("@@READY")
        sys.stdin.readline()


def done_point(args: argparse.Namespace) -> None:
    if args.sync_stdin:
        log("@@DONE")


def body_text(body: bytes | None) -> dict[str, Any]:
    if body is None:
        return {"body": None, "body_size": 0}
    try:
        return {"body": body.decode("utf-8"), "body_size": len(body)}
    except UnicodeDecodeError:
        return {"body_b64": base64.b64encode(body).decode(), "body_size": len(body)}


def config(args: argparse.Namespace):
    from rocketmq import ClientConfiguration, Credentials

    credentials = Credentials(args.access_key or "", args.secret_key or "")
    return ClientConfiguration(args.endpoint, credentials, args.namespace,
                               request_timeout=args.request_timeout)


# ---------------------------------------------------------------------------------- send
def build_message(args: argparse.Namespace, i: int):
    from rocketmq import Message

    msg = Message()
    msg.topic = args.topic
    msg.body = (os.urandom(args.body_size) if args.body_size
                else f"{args.body}-{i}".encode())
    if args.tag:
        msg.tag = args.tag
    for key in filter(None, (args.keys or "").split(",")):
        msg.keys = key.replace("{i}", str(i))
    for prop in args.prop or ():
        name, _, value = prop.partition("=")
        msg.add_property(name, value.replace("{i}", str(i)))
    if args.kind == "fifo":
        msg.message_group = args.message_group
    elif args.kind == "delay":
        msg.delivery_timestamp = int(time.time() + args.delay_seconds)  # seconds on the wire
    return msg


def receipt_json(receipt) -> dict[str, Any]:
    return {"message_id": receipt.message_id, "transaction_id": receipt.transaction_id,
            "offset": receipt.offset, "recall_handle": receipt.recall_handle,
            "queue": str(receipt.message_queue)}


def cmd_send(args: argparse.Namespace) -> None:
    from rocketmq import Producer, TransactionChecker, TransactionResolution

    checked: list[dict[str, Any]] = []
    checked_event = threading.Event()

    class Checker(TransactionChecker):
        def check(self, message) -> int:
            checked.append({"message_id": message.message_id, "topic": message.topic,
                            "tag": message.tag, "at": time.time()})
            if len(checked) >= args.count:
                checked_event.set()
            return (TransactionResolution.ROLLBACK if args.check_answer == "rollback"
                    else TransactionResolution.COMMIT)

    tx = args.kind == "transaction"
    producer = Producer(config(args), (args.topic,), checker=Checker() if tx else None,
                        tls_enable=args.tls)
    t0 = time.perf_counter()
    producer.startup()
    RESULT["startup_s"] = round(time.perf_counter() - t0, 4)
    sent: list[dict[str, Any]] = []
    errors: list[str] = []
    RESULT.update(sent=sent, errors=errors, checked=checked)
    try:
        ready_point(args)
        deadline = time.monotonic() + args.timeout
        t1, c1 = time.perf_counter(), time.process_time()
        if args.inflight > 0 and not tx:
            send_pipelined(args, producer, sent, errors, deadline)
        else:
            for i in range(args.count):
                if time.monotonic() > deadline:
                    errors.append(f"timeout after {i} messages")
                    break
                msg = build_message(args, i)
                if tx:
                    transaction = producer.begin_transaction()
                    receipt = producer.send(msg, transaction=transaction)
                    if args.tx_resolution == "commit":
                        transaction.commit()
                    elif args.tx_resolution == "rollback":
                        transaction.rollback()
                else:
                    receipt = producer.send(msg)
                if not args.summary:
                    entry = receipt_json(receipt)
                    entry["sent_at"] = time.time()
                    if args.kind == "delay":
                        entry["delivery_timestamp_s"] = msg.delivery_timestamp
                    sent.append(entry)
                else:
                    sent.append(None)
        elapsed = time.perf_counter() - t1
        RESULT["cpu_s"] = round(time.process_time() - c1, 4)  # this process, all threads
        done_point(args)
        if tx and args.tx_resolution == "unknown":
            checked_event.wait(args.check_wait)
            time.sleep(0.5)  # the checker's EndTransaction goes out on the client's loop
        count = len(sent)
        RESULT.update(count=count, elapsed_s=round(elapsed, 4),
                      msgs_s=round(count / elapsed, 1) if elapsed > 0 else None)
        if args.summary:
            RESULT["sent"] = count
    finally:
        producer.shutdown()


def send_pipelined(args, producer, sent, errors, deadline) -> None:
    """``send_async`` with at most ``--inflight`` sends outstanding."""
    slots = threading.Semaphore(args.inflight)
    lock = threading.Lock()
    finished = threading.Event()
    outstanding = [0]
    payload = os.urandom(args.body_size) if args.body_size else None

    def done(future) -> None:
        try:
            receipt = future.result()
            with lock:
                sent.append(None if args.summary else receipt_json(receipt))
        except Exception as e:  # noqa: BLE001
            with lock:
                errors.append(f"{type(e).__name__}: {e}")
        finally:
            slots.release()
            with lock:
                outstanding[0] -= 1
                if outstanding[0] == 0:
                    finished.set()

    from rocketmq import Message

    for i in range(args.count):
        while not slots.acquire(timeout=1.0):
            if time.monotonic() > deadline:
                break
        if time.monotonic() > deadline:
            errors.append(f"timeout after submitting {i} messages")
            break
        if payload is not None and not (args.tag or args.keys or args.prop):
            msg = Message()
            msg.topic = args.topic
            msg.body = payload
        else:
            msg = build_message(args, i)
        with lock:
            outstanding[0] += 1
            finished.clear()
        producer.send_async(msg).add_done_callback(done)
    with lock:
        if outstanding[0] == 0:
            finished.set()
    finished.wait(max(0.0, deadline - time.monotonic()) + args.request_timeout + 1)


# ---------------------------------------------------------------------------------- receive
def message_json(msg, received_at: float) -> dict[str, Any]:
    out = {"message_id": msg.message_id, "topic": msg.topic, "tag": msg.tag,
           "keys": sorted(msg.keys), "properties": dict(msg.properties),
           "delivery_attempt": msg.delivery_attempt, "message_group": msg.message_group,
           "delivery_timestamp_ms": msg.delivery_timestamp,
           "born_timestamp_ms": msg.born_timestamp, "born_host": msg.born_host,
           "message_type": msg.message_type, "receipt_handle": msg.receipt_handle,
           "corrupted": msg.corrupted, "received_at": received_at}
    out.update(body_text(msg.body))
    return out


def filter_expression(args: argparse.Namespace):
    from rocketmq import FilterExpression
    from rocketmq.grpc_protocol import FilterType

    if args.sql:
        return FilterExpression(args.sql, FilterType.SQL)
    return FilterExpression(args.tag_expr)


def cmd_receive(args: argparse.Namespace) -> None:
    from concurrent.futures import ThreadPoolExecutor

    from rocketmq import SimpleConsumer

    consumer = SimpleConsumer(config(args), args.group, {args.topic: filter_expression(args)},
                              await_duration=args.await_duration, tls_enable=args.tls)
    t0 = time.perf_counter()
    consumer.startup()
    RESULT["startup_s"] = round(time.perf_counter() - t0, 4)
    messages: list[dict[str, Any]] = []
    errors: list[str] = []
    RESULT.update(messages=messages, errors=errors)
    acks = ThreadPoolExecutor(max_workers=args.ack_threads) if args.ack_threads > 1 else None
    ack_slots = threading.Semaphore(max(1, args.ack_threads) * 2)
    received = acked = empty = 0
    lock = threading.Lock()

    def ack(msg) -> None:
        nonlocal acked
        try:
            consumer.ack(msg)
            with lock:
                acked += 1
        except Exception as e:  # noqa: BLE001
            with lock:
                errors.append(f"ack {msg.message_id}: {type(e).__name__}: {e}")
        finally:
            if acks is not None:
                ack_slots.release()

    try:
        ready_point(args)
        deadline = time.monotonic() + args.timeout
        t1, c1 = time.perf_counter(), time.process_time()
        while received < args.count and time.monotonic() < deadline:
            want = min(args.batch, args.count - received)
            try:
                batch = consumer.receive(want, args.invisible)
            except Exception as e:  # noqa: BLE001
                errors.append(f"receive: {type(e).__name__}: {e}")
                time.sleep(0.2)
                continue
            now = time.time()
            if not batch:
                empty += 1
                if args.max_empty and empty >= args.max_empty:
                    break
                continue
            for msg in batch:
                received += 1
                entry = None if args.summary else message_json(msg, now)
                if args.change_invisible is not None:
                    before = msg.receipt_handle
                    consumer.change_invisible_duration(msg, args.change_invisible)
                    if entry is not None:
                        entry["receipt_handle_before_change"] = before
                        entry["receipt_handle"] = msg.receipt_handle
                if not args.no_ack:
                    if acks is None:
                        ack(msg)
                    else:
                        ack_slots.acquire()
                        acks.submit(ack, msg)
                if entry is not None:
                    messages.append(entry)
        if acks is not None:
            acks.shutdown(wait=True)
        elapsed = time.perf_counter() - t1
        RESULT["cpu_s"] = round(time.process_time() - c1, 4)  # this process, all threads
        done_point(args)
        RESULT.update(count=received, acked=acked, empty_receives=empty,
                      elapsed_s=round(elapsed, 4),
                      msgs_s=round(received / elapsed, 1) if elapsed > 0 else None)
        if args.summary:
            RESULT["messages"] = received
    finally:
        consumer.shutdown()


# ---------------------------------------------------------------------------------- push
def cmd_push(args: argparse.Namespace) -> None:
    from rocketmq import ConsumeResult, MessageListener, PushConsumer

    messages: list[dict[str, Any]] = []
    deliveries: dict[str, int] = {}
    lock = threading.Lock()
    enough = threading.Event()
    counted = [0]

    class Listener(MessageListener):
        def consume(self, message) -> ConsumeResult:
            now = time.time()
            with lock:
                seen = deliveries.get(message.message_id, 0) + 1
                deliveries[message.message_id] = seen
                fail = seen <= args.fail_times
                if not args.summary:
                    entry = message_json(message, now)
                    entry["result"] = "FAILURE" if fail else "SUCCESS"
                    messages.append(entry)
                if not fail:
                    counted[0] += 1
                    if counted[0] >= args.count:
                        enough.set()
            return ConsumeResult.FAILURE if fail else ConsumeResult.SUCCESS

    consumer = PushConsumer(config(args), args.group, Listener(),
                            {args.topic: filter_expression(args)},
                            consumption_thread_count=args.threads, tls_enable=args.tls)
    t0 = time.perf_counter()
    consumer.startup()
    RESULT["startup_s"] = round(time.perf_counter() - t0, 4)
    RESULT.update(messages=messages)
    try:
        ready_point(args)
        t1, c1 = time.perf_counter(), time.process_time()
        enough.wait(args.timeout)
        elapsed = time.perf_counter() - t1
        RESULT["cpu_s"] = round(time.process_time() - c1, 4)  # this process, all threads
        done_point(args)
        with lock:
            RESULT.update(count=counted[0], deliveries=sum(deliveries.values()),
                          distinct=len(deliveries), elapsed_s=round(elapsed, 4),
                          msgs_s=round(counted[0] / elapsed, 1) if elapsed > 0 else None)
            if args.summary:
                RESULT["messages"] = counted[0]
            else:
                RESULT["messages"] = list(messages)
    finally:
        consumer.shutdown()


# ---------------------------------------------------------------------------------- main
def parse(argv: list[str] | None = None) -> argparse.Namespace:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--endpoint", required=True, help="host:port of the gRPC service")
    common.add_argument("--topic", required=True)
    common.add_argument("--namespace", default="")
    common.add_argument("--access-key")
    common.add_argument("--secret-key")
    common.add_argument("--tls", action="store_true", help="TLS to the endpoint")
    common.add_argument("--ca-file", help="trust this CA (GRPC_DEFAULT_SSL_ROOTS_FILE_PATH)")
    common.add_argument("--request-timeout", type=int, default=3, help="seconds")
    common.add_argument("--timeout", type=float, default=60,
                        help="bound on the measured part, seconds")
    common.add_argument("--deadline", type=float, default=None,
                        help="hard bound on the whole run (default timeout + 60 s)")
    common.add_argument("--count", type=int, default=1)
    common.add_argument("--summary", action="store_true",
                        help="counts and rates only, no per-message output")
    common.add_argument("--sync-stdin", action="store_true",
                        help="@@READY on stderr, wait for a stdin line; @@DONE when measured")
    consumer = argparse.ArgumentParser(add_help=False)
    consumer.add_argument("--group", required=True)
    consumer.add_argument("--tag-expr", default="*")
    consumer.add_argument("--sql", help="an SQL92 filter instead of --tag-expr")

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("send", parents=[common])
    p.add_argument("--kind", choices=["normal", "fifo", "delay", "transaction"], default="normal")
    p.add_argument("--tag")
    p.add_argument("--keys", help="comma-separated; {i} is the message's index")
    p.add_argument("--prop", action="append", help="k=v user property; repeatable")
    p.add_argument("--body", default="hello", help="body text; '-<i>' is appended")
    p.add_argument("--body-size", type=int, default=0, help="random body of this size instead")
    p.add_argument("--message-group", default="group-0")
    p.add_argument("--delay-seconds", type=float, default=10)
    p.add_argument("--tx-resolution", choices=["commit", "rollback", "unknown"],
                   default="commit")
    p.add_argument("--check-answer", choices=["commit", "rollback"], default="commit",
                   help="what the transaction checker answers")
    p.add_argument("--check-wait", type=float, default=30,
                   help="with unknown: seconds to wait for the server's checks")
    p.add_argument("--inflight", type=int, default=0,
                   help="send_async with this many in flight (0: blocking send)")
    p.set_defaults(func=cmd_send)
    p = sub.add_parser("receive", parents=[common, consumer])
    p.add_argument("--batch", type=int, default=32, help="max messages per receive")
    p.add_argument("--invisible", type=int, default=15, help="invisible duration, seconds")
    p.add_argument("--await-duration", type=int, default=20, help="long polling, seconds")
    p.add_argument("--no-ack", action="store_true")
    p.add_argument("--change-invisible", type=int, help="change each message's invisible "
                                                        "duration to this (seconds) first")
    p.add_argument("--ack-threads", type=int, default=1,
                   help="ack on this many threads (1: ack inline)")
    p.add_argument("--max-empty", type=int, default=0,
                   help="stop after this many empty receives (0: only at --timeout)")
    p.set_defaults(func=cmd_receive)
    p = sub.add_parser("push", parents=[common, consumer])
    p.add_argument("--fail-times", type=int, default=0,
                   help="answer FAILURE to each message's first K deliveries")
    p.add_argument("--threads", type=int, default=20, help="consumption threads")
    p.set_defaults(func=cmd_push)
    return parser.parse_args(argv)


def main() -> None:
    args = parse()
    if args.ca_file:  # before grpc is imported
        os.environ["GRPC_DEFAULT_SSL_ROOTS_FILE_PATH"] = os.path.abspath(args.ca_file)
    RESULT.update(command=args.command, endpoint=args.endpoint, topic=args.topic)
    deadline = args.deadline if args.deadline is not None else args.timeout + 60

    def overdue() -> None:
        RESULT["ok"] = False
        RESULT["error"] = f"deadline of {deadline} s exceeded"
        emit_and_exit(3)

    watchdog = threading.Timer(deadline, overdue)
    watchdog.daemon = True
    watchdog.start()
    t0 = time.perf_counter()
    try:
        import rocketmq

        RESULT["client_version"] = getattr(rocketmq, "__version__", None) or client_version()
        args.func(args)
        RESULT["ok"] = not RESULT.get("errors")
    except BaseException as e:  # noqa: BLE001
        RESULT["ok"] = False
        RESULT["error"] = f"{type(e).__name__}: {e}"
        RESULT["traceback"] = traceback.format_exc()[-4000:]
    RESULT["total_s"] = round(time.perf_counter() - t0, 4)
    emit_and_exit(0 if RESULT["ok"] else 1)


def client_version() -> str | None:
    try:
        from importlib.metadata import version

        return version("rocketmq-python-client")
    except Exception:  # noqa: BLE001
        return None


if __name__ == "__main__":
    main()
