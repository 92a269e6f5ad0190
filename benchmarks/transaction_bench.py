"""Transactional sends (half message + commit) against plain sends, same broker, same run.

    python benchmarks/transaction_bench.py            # a table
    python benchmarks/transaction_bench.py --json     # one JSON object
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import tempfile
import time

from e2e_bench import BODY, create_topic, start_broker

from rocketq.aio import LocalTransactionState, Message, Producer, TransactionProducer
from rocketq.remoting import run


class Commit:
    def execute_local_transaction(self, message: Message, arg: object) -> LocalTransactionState:
        return LocalTransactionState.COMMIT

    def check_local_transaction(self, message: object) -> LocalTransactionState:
        return LocalTransactionState.COMMIT


async def plain(namesrv: str, count: int, window: int) -> float:
    async with Producer("bench-plain", namesrv=namesrv) as producer:
        await producer.send(Message("BenchTx", BODY))

        async def worker() -> None:
            for _ in range(count // window):
                await producer.send(Message("BenchTx", BODY))

        t0 = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(window)))
        return (count // window) * window / (time.perf_counter() - t0)


async def transactional(namesrv: str, count: int, window: int) -> float:
    producer = TransactionProducer("bench-tx", Commit(), namesrv=namesrv)
    await producer.start()
    try:
        await producer.send_message_in_transaction(Message("BenchTx", BODY))

        async def worker() -> None:
            for _ in range(count // window):
                await producer.send_message_in_transaction(Message("BenchTx", BODY))

        t0 = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(window)))
        return (count // window) * window / (time.perf_counter() - t0)
    finally:
        await producer.shutdown()


async def main_async(namesrv: str, count: int, window: int) -> dict[str, float]:
    await create_topic(namesrv, "BenchTx", 8)
    plain_rate = await plain(namesrv, count, window)
    tx_rate = await transactional(namesrv, count, window)
    return {"plain_send_msgs_s": round(plain_rate), "transactional_send_msgs_s": round(tx_rate),
            "transactional_to_plain_ratio": round(tx_rate / plain_rate, 3)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--count", type=int, default=20_000)
    parser.add_argument("--window", type=int, default=64, help="sends in flight")
    args = parser.parse_args(argv)
    data = tempfile.mkdtemp(prefix="rocketq-tx-bench-")
    proc, namesrv = start_broker(data)
    try:
        result = run(main_async(namesrv, args.count, args.window))
    finally:
        proc.terminate()
        proc.wait(30)
        shutil.rmtree(data, ignore_errors=True)
    if args.json:
        print(json.dumps(result))
    else:
        print(f"rocketq transactional sends, 128-byte messages, {args.window} in flight")
        for key, value in result.items():
            print(f"  {key:<30} {value:>12,}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
