"""Message store benchmark: disk bandwidth, append (ASYNC_FLUSH and SYNC_FLUSH group commit)
and pull-read throughput, measured in one run on this machine, with the compiled inner loops
and with their pure-Python twins side by side.

    python benchmarks/store_bench.py                # a table
    python benchmarks/store_bench.py --json         # one JSON object
    python benchmarks/store_bench.py --rounds 3     # alternate compiled and pure three times

Messages are 128-byte bodies with the properties a RocketMQ client sends (UNIQ_KEY, WAIT), so
the dispatcher builds ConsumeQueue units and index entries for each, as a broker does.

Each measurement runs in a child process: one with the compiled modules (the environment's
``ROCKETQ_NO_EXTENSIONS`` removed) and one with ``ROCKETQ_NO_EXTENSIONS=1``, alternating
round after round so that a shared machine's drift falls on both. The JSON object carries
the compiled figures under their plain keys (``async_append_msgs_s``, ...), the pure ones
under ``<key>_pure``, ``compiled`` (whether the compiled modules really ran; each one's in
``compiled_modules``) and, with more than one round, ``spread``: each key's ``[min, max]``
over the rounds; the figures themselves are the medians.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import importlib.util
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from rocketq.broker.store_writer import StoreWriter
from rocketq.store import MessageStore, MessageStoreConfig, StoreMessage

BODY_SIZE = 128
QUEUES = 8
TOPIC = "BenchmarkTopic"


def make_messages(count: int) -> list[StoreMessage]:
    body = os.urandom(BODY_SIZE)
    born = int(time.time() * 1000)
    return [StoreMessage(TOPIC, body, i % QUEUES, born_timestamp=born,
                         properties=f"UNIQ_KEY\x01{i:032X}\x02WAIT\x01true\x02".encode())
            for i in range(count)]


def disk_write_mb_s(directory: str, size_mb: int) -> float:
    """Sequential write bandwidth of a plain file, fsync included."""
    path = os.path.join(directory, "raw-disk-test")
    chunk = os.urandom(1 << 20)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        t0 = time.perf_counter()
        for _ in range(size_mb):
            os.write(fd, chunk)
        os.fsync(fd)
        elapsed = time.perf_counter() - t0
    finally:
        os.close(fd)
        os.unlink(path)
    return size_mb / elapsed


def config(root: str, flush: str) -> MessageStoreConfig:
    return MessageStoreConfig(storePathRootDir=root, flushDiskType=flush,
                              mappedFileSizeCommitLog=1 << 30)


def bench_async(root: str, count: int, batch: int) -> dict[str, float]:
    store = MessageStore(config(root, "ASYNC_FLUSH"))
    try:
        messages = make_messages(count)
        record_size = store.put_message(messages[0]).size
        t0 = time.perf_counter()
        if batch <= 1:
            put = store.put_message
            for m in messages[1:]:
                put(m)
        else:
            puts = store.put_messages
            for i in range(1, count, batch):
                puts(messages[i:i + batch])
        append_s = time.perf_counter() - t0
        store.wait_dispatched(timeout=600)
        total_s = time.perf_counter() - t0
        return {
            "msgs_s": (count - 1) / append_s,
            "mb_s": (count - 1) * record_size / append_s / 1e6,
            "with_dispatch_msgs_s": (count - 1) / total_s,
        }
    finally:
        store.close()


def bench_sync(root: str, writers: int, seconds: float) -> float:
    store = MessageStore(config(root, "SYNC_FLUSH"))
    store_writer = StoreWriter(store)
    body = os.urandom(BODY_SIZE)

    async def writer(n: int, deadline: float) -> int:
        done = 0
        while time.perf_counter() < deadline:
            await store_writer.put_message(StoreMessage(
                TOPIC, body, n % QUEUES, properties=f"UNIQ_KEY\x01{n:08X}{done:024X}\x02".encode()))
            done += 1
        return done

    async def main() -> float:
        t0 = time.perf_counter()
        counts = await asyncio.gather(*(writer(n, t0 + seconds) for n in range(writers)))
        return sum(counts) / (time.perf_counter() - t0)

    try:
        return asyncio.run(main())
    finally:
        store.close()
        store_writer.close()


def bench_read(root: str, count: int, pull_size: int) -> float:
    store = MessageStore(config(root, "ASYNC_FLUSH"))
    try:
        messages = make_messages(count)
        for i in range(0, count, 256):
            store.put_messages(messages[i:i + 256])
        store.wait_dispatched(timeout=600)
        got = 0
        t0 = time.perf_counter()
        for queue_id in range(QUEUES):
            offset = 0
            while True:
                result = store.get_messages(TOPIC, queue_id, offset, pull_size)
                if not result.message_count:
                    break
                result.data()  # the PULL_MESSAGE body, as a broker would send it
                got += result.message_count
                offset = result.next_begin_offset
                result.release()
        elapsed = time.perf_counter() - t0
        assert got == count, (got, count)
        return got / elapsed
    finally:
        store.close()


# Modules with a compiled twin that the store's hot paths use; each says which one runs in
# its ``COMPILED``. A module that is not there yet is skipped.
TWINNED_MODULES = ("rocketq.protocol.codec", "rocketq.store.records")

# The order of the table and of the JSON object's plain keys.
KEYS = ("disk_write_mb_s", "async_append_msgs_s", "async_append_mb_s",
        "async_append_ratio_to_disk", "async_append_with_dispatch_msgs_s",
        "async_append_single_msgs_s", "async_append_single_mb_s", "sync_append_1_msgs_s",
        "sync_append_64_msgs_s", "sync_group_commit_speedup", "read_msgs_s")
DECIMALS = {"disk_write_mb_s": 1, "async_append_mb_s": 1, "async_append_single_mb_s": 1,
            "async_append_ratio_to_disk": 3, "sync_group_commit_speedup": 1}


def compiled_modules() -> dict[str, bool]:
    """For each twinned module present, whether its compiled twin runs in this process."""
    found = {}
    for name in TWINNED_MODULES:
        if importlib.util.find_spec(name) is None:
            continue
        flag = getattr(importlib.import_module(name), "COMPILED", None)
        if flag is not None:
            found[name] = bool(flag)
    return found


def measure(args: argparse.Namespace) -> dict[str, float]:
    """Every measurement once, in this process, in a fresh temporary directory."""
    base = tempfile.mkdtemp(prefix="rocketq-store-bench-", dir=args.dir)
    try:
        def fresh(name: str) -> str:
            path = os.path.join(base, name)
            shutil.rmtree(path, ignore_errors=True)
            return path

        def done(name: str) -> None:
            shutil.rmtree(os.path.join(base, name), ignore_errors=True)

        disk = disk_write_mb_s(base, args.disk_mb)
        single = bench_async(fresh("async1"), max(args.count // 4, 1000), 1)
        done("async1")
        batched = bench_async(fresh("async"), args.count, args.batch)
        done("async")
        sync_1 = bench_sync(fresh("sync1"), 1, args.sync_seconds)
        done("sync1")
        sync_64 = bench_sync(fresh("sync64"), 64, args.sync_seconds)
        done("sync64")
        read = bench_read(fresh("read"), args.count, 32)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    return {
        "disk_write_mb_s": disk,
        "async_append_msgs_s": batched["msgs_s"],
        "async_append_mb_s": batched["mb_s"],
        "async_append_ratio_to_disk": batched["mb_s"] / disk,
        "async_append_with_dispatch_msgs_s": batched["with_dispatch_msgs_s"],
        "async_append_single_msgs_s": single["msgs_s"],
        "async_append_single_mb_s": single["mb_s"],
        "sync_append_1_msgs_s": sync_1,
        "sync_append_64_msgs_s": sync_64,
        "sync_group_commit_speedup": sync_64 / sync_1 if sync_1 else 0.0,
        "read_msgs_s": read,
    }


def child_argv(args: argparse.Namespace) -> list[str]:
    argv = [sys.executable, os.path.abspath(__file__), "--child", "--count", str(args.count),
            "--batch", str(args.batch), "--sync-seconds", str(args.sync_seconds),
            "--disk-mb", str(args.disk_mb)]
    return argv + (["--dir", args.dir] if args.dir else [])


def run_child(args: argparse.Namespace, pure: bool) -> tuple[dict[str, float], dict[str, bool]]:
    """One round of :func:`measure` in a child process, compiled or pure; its figures and
    which modules ran compiled there."""
    env = dict(os.environ)
    env.pop("ROCKETQ_NO_EXTENSIONS", None)
    if pure:
        env["ROCKETQ_NO_EXTENSIONS"] = "1"
    done = subprocess.run(child_argv(args), env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"the {'pure' if pure else 'compiled'} run failed "
                         f"(exit {done.returncode}):\n{done.stderr[-4000:]}")
    # The last line is the child's answer; anything the store logged comes before it.
    answer = json.loads(done.stdout.strip().splitlines()[-1])
    modules = answer.pop("_compiled_modules")
    if pure and any(modules.values()):
        raise SystemExit(f"ROCKETQ_NO_EXTENSIONS=1 did not force pure modules: {modules}")
    return answer, modules


def summarize(rounds: list[dict[str, float]], compiled: bool) -> dict:
    """The JSON object: each key's median over the rounds, rounded as the keys always were,
    ``compiled`` and, with more than one round, ``spread``."""
    def rounded(key: str, value: float) -> float | int:
        places = DECIMALS.get(key.removesuffix("_pure"))
        return round(value, places) if places is not None else round(value)

    result: dict = {}
    for suffix in ("", "_pure"):
        for key in KEYS:
            result[key + suffix] = rounded(key, statistics.median(r[key + suffix] for r in rounds))
    result["compiled"] = compiled
    result["rounds"] = len(rounds)
    if len(rounds) > 1:
        result["spread"] = {key: [rounded(key, min(r[key] for r in rounds)),
                                  rounded(key, max(r[key] for r in rounds))]
                            for key in result if key in rounds[0]}
    return result


ROWS = (
    ("disk_write_mb_s", "raw disk sequential write, fsync'd (MB/s)"),
    ("async_append_msgs_s", "ASYNC_FLUSH append, batches of {batch} (msgs/s)"),
    ("async_append_mb_s", "  same, MB/s"),
    ("async_append_ratio_to_disk", "  same, share of the raw disk"),
    ("async_append_with_dispatch_msgs_s", "  until ConsumeQueue + index caught up (msgs/s)"),
    ("async_append_single_msgs_s", "ASYNC_FLUSH append, one call per message (msgs/s)"),
    ("sync_append_1_msgs_s", "SYNC_FLUSH, 1 writer (msgs/s)"),
    ("sync_append_64_msgs_s", "SYNC_FLUSH, 64 concurrent writers (msgs/s)"),
    ("sync_group_commit_speedup", "  group commit: 64 writers / 1 writer"),
    ("read_msgs_s", "pull read, 32 per call, raw records (msgs/s)"),
)


def table(result: dict, args: argparse.Namespace, modules: dict[str, bool]) -> str:
    """The JSON object as a table: compiled and pure side by side, with the spread of each
    when there were several rounds."""
    spread = result.get("spread", {})

    def cell(key: str) -> str:
        places = DECIMALS.get(key.removesuffix("_pure"), 0)
        text = f"{result[key]:,.{places}f}"
        if key in spread:
            low, high = spread[key]
            text += f" [{low:,.{places}f}-{high:,.{places}f}]"
        return text

    names = [name.format(batch=args.batch) for _, name in ROWS]
    compiled_cells = [cell(key) for key, _ in ROWS]
    pure_cells = [cell(key + "_pure") for key, _ in ROWS]
    state = ", ".join(f"{name} {'compiled' if flag else 'pure'}"
                      for name, flag in modules.items()) or "no twinned module found"
    heading = ("compiled" if result["compiled"] else
               "compiled (partly)" if any(modules.values()) else "compiled (none built)")
    widths = (max(map(len, names)), max(map(len, compiled_cells + [heading])),
              max(map(len, pure_cells + ["pure Python"])))
    lines = [
        f"rocketq store benchmark: {BODY_SIZE}-byte message bodies, {args.count:,} messages, "
        f"{os.cpu_count()} cores, Python {sys.version.split()[0]}",
        f"first column: {state}; figures are medians of {result['rounds']} round(s)"
        + (", [min-max]" if spread else ""),
        f"  {'':<{widths[0]}}  {heading:>{widths[1]}}  {'pure Python':>{widths[2]}}",
    ]
    for name, compiled_cell, pure_cell in zip(names, compiled_cells, pure_cells, strict=True):
        lines.append(f"  {name:<{widths[0]}}  {compiled_cell:>{widths[1]}}  "
                     f"{pure_cell:>{widths[2]}}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--count", type=int, default=1_000_000,
                        help="messages for the ASYNC_FLUSH and read runs (default 1,000,000)")
    parser.add_argument("--batch", type=int, default=64,
                        help="messages per append call in the batched run (default 64)")
    parser.add_argument("--sync-seconds", type=float, default=3.0,
                        help="duration of each SYNC_FLUSH run (default 3 s)")
    parser.add_argument("--disk-mb", type=int, default=512, help="size of the raw disk test")
    parser.add_argument("--rounds", type=int, default=1,
                        help="compiled and pure runs to alternate (default 1 of each)")
    parser.add_argument("--dir", default=None, help="where to write (default: a temp dir)")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args.child:  # one run, in this process, as the parent set the environment
        answer = dict(measure(args), _compiled_modules=compiled_modules())
        print(json.dumps(answer))
        return 0

    rounds: list[dict[str, float]] = []
    modules: dict[str, bool] = {}
    for _ in range(max(args.rounds, 1)):
        compiled_figures, modules = run_child(args, pure=False)
        pure_figures, _ = run_child(args, pure=True)
        rounds.append(compiled_figures | {f"{k}_pure": v for k, v in pure_figures.items()})
    result = summarize(rounds, bool(modules) and all(modules.values()))
    result["compiled_modules"] = modules
    print(json.dumps(result) if args.json else table(result, args, modules))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
