"""Crash recovery benchmark: a process writing to a store is SIGKILLed after about 100 MB,
then a broker is restarted on that store and timed until it answers.

    python benchmarks/recovery_bench.py            # a table
    python benchmarks/recovery_bench.py --json     # one JSON object
    python benchmarks/recovery_bench.py --rate-mb-s 25   # a writer at a steady pace

Each run fills a fresh store (the default 1 GiB CommitLog file, ASYNC_FLUSH unless --flush
says otherwise) from a child process that appends batches with MessageStore and keeps
appending until it is killed with SIGKILL. Then ``rocketq broker`` starts on the same store
(a NameServer runs for the whole benchmark) and the time from spawning it to its first answer
(GET_MAX_OFFSET of every queue, with every reported message dispatched) is the recovery time:
interpreter start, opening the store, the crash scan from the last checkpoint and the rebuild
of ConsumeQueue and index entries, and the start of the server. At full speed the writer
fills 100 MB before the store's first checkpoint (written each second), so the whole log is
scanned again: the worst case. With ``--rate-mb-s`` only what came after the last checkpoint is.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import selectors
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

TOPIC = "RecoveryBench"
QUEUES = 8
BATCH = 64
REPORT_EVERY = 4 << 20  # the writer reports its CommitLog end every 4 MB
WRITER_MAX_S = 300.0  # a writer never runs longer than this
LOG_LIMIT = 900 << 20  # stay inside the first 1 GiB CommitLog file


# ---------------------------------------------------------------------------- child: writer
def run_writer(root: str, flush: str, body_size: int, rate_mb_s: float) -> int:
    """Append until killed (or a bound is reached), at most ``rate_mb_s`` MB/s if that is
    not 0; print ``commitlog_end messages`` lines."""
    from rocketq.store import MessageStore, MessageStoreConfig, StoreMessage

    store = MessageStore(MessageStoreConfig(storePathRootDir=root, flushDiskType=flush))
    body = os.urandom(body_size)
    count = 0
    next_report = REPORT_EVERY
    started = time.monotonic()
    deadline = started + WRITER_MAX_S
    while time.monotonic() < deadline and store.commitlog.max_offset < LOG_LIMIT:
        born = int(time.time() * 1000)
        batch = [StoreMessage(TOPIC, body, (count + i) % QUEUES, born_timestamp=born,
                              properties=f"UNIQ_KEY\x01{count + i:032X}\x02KEYS\x01k{count + i}"
                                         f"\x02WAIT\x01true\x02".encode())
                 for i in range(BATCH)]
        store.put_messages(batch)
        count += BATCH
        end = store.commitlog.max_offset
        if rate_mb_s > 0:
            ahead = end / (rate_mb_s * 1e6) - (time.monotonic() - started)
            if ahead > 0:
                time.sleep(ahead)
        if end >= next_report:
            # Appended (in the page cache at least), so it survives a SIGKILL of this process.
            print(f"{end} {count}", flush=True)
            next_report = end + REPORT_EVERY
    store.close()
    return 0


# ---------------------------------------------------------------------------- parent
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def stop(proc: subprocess.Popen | None, sig: int = signal.SIGINT) -> None:
    if proc is None:
        return
    try:
        if proc.poll() is None:
            proc.send_signal(sig)
        proc.wait(20)
    except subprocess.TimeoutExpired:
        pass
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


def wait_text(proc: subprocess.Popen, path: str, text: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with open(path) as fh:
            if text in fh.read():
                return
        if proc.poll() is not None:
            break
        time.sleep(0.01)
    raise RuntimeError(f"{proc.args} did not print {text!r}")


def fill_and_kill(root: str, target: int, flush: str, body_size: int, rate_mb_s: float
                  ) -> tuple[int, int, float]:
    """Run the writer until it reports ``target`` bytes, then SIGKILL it mid-write. Returns
    the last reported CommitLog end and message count, and how long the fill took."""
    proc = subprocess.Popen([sys.executable, __file__, "--writer", root, "--flush", flush,
                             "--body-size", str(body_size), "--rate-mb-s", str(rate_mb_s)],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    end = count = 0
    t0 = time.monotonic()
    try:
        assert proc.stdout is not None
        with selectors.DefaultSelector() as sel:
            sel.register(proc.stdout, selectors.EVENT_READ)
            while end < target and time.monotonic() - t0 < WRITER_MAX_S:
                if not sel.select(timeout=1.0):
                    if proc.poll() is not None:
                        break
                    continue
                line = proc.stdout.readline()
                if not line:
                    break
                end, count = map(int, line.split())
        proc.send_signal(signal.SIGKILL)  # still appending: the kill lands mid-write
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(30)
    if proc.returncode != -signal.SIGKILL:
        raise RuntimeError(f"the writer ended with {proc.returncode} before it was killed")
    if end < target:
        raise RuntimeError(f"the writer reached only {end} bytes")
    return end, count, time.monotonic() - t0


async def first_answer(addr: str, proc: subprocess.Popen, timeout: float = 60
                       ) -> tuple[float, int]:
    """Ask every queue's max offset until the broker answers; the answer time and the sum."""
    from rocketq.protocol.codes import RequestCode
    from rocketq.protocol.command import RemotingCommand
    from rocketq.remoting import RemotingClient
    from rocketq.remoting.connection import RemotingError

    client = RemotingClient(connect_timeout=1.0)
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                total = 0
                for q in range(QUEUES):
                    r = await client.invoke(addr, RemotingCommand.request(
                        RequestCode.GET_MAX_OFFSET, {"topic": TOPIC, "queueId": q}), 5.0)
                    total += int(r.ext_fields["offset"])
                return time.monotonic(), total
            except (OSError, RemotingError, TimeoutError):
                await asyncio.sleep(0.005)
        raise RuntimeError(f"the broker at {addr} did not answer (exit code {proc.poll()})")
    finally:
        await client.close()


def restart(root: str, namesrv: str, log_dir: str, run: int) -> dict[str, float]:
    port = free_port()
    conf = os.path.join(log_dir, f"broker-{run}.conf")
    with open(conf, "w") as fh:
        fh.write(f"brokerName=recovery-bench\nnamesrvAddr={namesrv}\nlistenPort={port}\n"
                 f"storePathRootDir={root}\nhaListenPort=0\n")
    err = os.path.join(log_dir, f"broker-{run}.err")
    broker = None
    try:
        with open(err, "w") as ferr:
            t0 = time.monotonic()
            broker = subprocess.Popen([sys.executable, "-m", "rocketq.cli", "broker", "-c", conf],
                                      stdout=subprocess.DEVNULL, stderr=ferr,
                                      env={"ROCKETQ_GRPC_PORT": "0", **os.environ})
        try:
            answered, messages = asyncio.run(first_answer(f"127.0.0.1:{port}", broker))
        except RuntimeError as exc:
            with open(err) as fh:
                raise RuntimeError(f"{exc}; its log ends with: {fh.read()[-2000:]}") from None
    finally:
        stop(broker)
    with open(err) as fh:
        log = fh.read()
    ready = re.search(r"ready in (\d+) ms", log)
    scan = re.search(r"scanned CommitLog from (\d+), end at (\d+)", log)
    if scan is None:
        raise RuntimeError("the broker did not recover after a crash: " + log[-2000:])
    return {"serve_s": answered - t0, "messages": messages,
            "store_open_s": int(ready.group(1)) / 1000 if ready else float("nan"),
            "scanned_mb": (int(scan.group(2)) - int(scan.group(1))) / 1e6,
            "end": int(scan.group(2))}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--runs", type=int, default=3, help="kill and restart this often")
    parser.add_argument("--mb", type=int, default=100, help="MB written before the kill")
    parser.add_argument("--body-size", type=int, default=512, help="message body bytes")
    parser.add_argument("--flush", default="ASYNC_FLUSH", choices=["ASYNC_FLUSH", "SYNC_FLUSH"],
                        help="the writer's flushDiskType (default ASYNC_FLUSH)")
    parser.add_argument("--rate-mb-s", type=float, default=0.0,
                        help="the writer's pace in MB/s (default 0: as fast as it can; the "
                             "store then checkpoints less of what it wrote before the kill)")
    parser.add_argument("--dir", default=None, help="where to write (default: a temp dir)")
    parser.add_argument("--writer", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.writer:
        return run_writer(args.writer, args.flush, args.body_size, args.rate_mb_s)

    target = args.mb * 1_000_000
    base = tempfile.mkdtemp(prefix="rocketq-recovery-bench-", dir=args.dir)
    ns = None
    rows = []
    try:
        ns_port = free_port()
        ns_out = os.path.join(base, "namesrv.out")
        with open(ns_out, "w") as fout:
            ns = subprocess.Popen([sys.executable, "-m", "rocketq.cli", "namesrv", "--port",
                                   str(ns_port)], stdout=fout, stderr=subprocess.DEVNULL)
        wait_text(ns, ns_out, "listening")
        for run in range(args.runs):
            root = os.path.join(base, f"store-{run}")
            try:
                end, count, fill_s = fill_and_kill(root, target, args.flush, args.body_size,
                                                      args.rate_mb_s)
                row = restart(root, f"127.0.0.1:{ns_port}", base, run)
                if row["end"] < end or row["messages"] < count:
                    raise RuntimeError(f"run {run}: lost data: CommitLog end {row['end']} < "
                                       f"{end} or {row['messages']} < {count} messages")
                row.update(fill_mb=end / 1e6, fill_s=fill_s, reported=count)
                rows.append(row)
            finally:
                shutil.rmtree(root, ignore_errors=True)
    finally:
        stop(ns)
        shutil.rmtree(base, ignore_errors=True)

    serve = [r["serve_s"] for r in rows]
    result = {
        "recovery_s_100mb": round(statistics.median(serve), 3),
        "recovery_s_100mb_min": round(min(serve), 3),
        "recovery_s_100mb_max": round(max(serve), 3),
        "runs": len(rows),
        "store_open_s_median": round(statistics.median(r["store_open_s"] for r in rows), 3),
        "scanned_mb_median": round(statistics.median(r["scanned_mb"] for r in rows), 1),
        "fill_mb_median": round(statistics.median(r["fill_mb"] for r in rows), 1),
        "flush": args.flush,
        "body_size": args.body_size,
        "rate_mb_s": args.rate_mb_s or None,
    }
    if args.json:
        print(json.dumps(result))
        return 0
    pace = f"{args.rate_mb_s:g} MB/s" if args.rate_mb_s else "full speed"
    print(f"rocketq crash recovery: {args.mb} MB of {args.body_size}-byte messages ({args.flush},"
          f" {pace}), 1 GiB CommitLog file, SIGKILL mid-write, {os.cpu_count()} cores, "
          f"Python {sys.version.split()[0]}")
    print(f"  {'run':>3}  {'written':>10}  {'in':>7}  {'messages':>9}  {'scanned':>10}  "
          f"{'store open':>10}  {'serving':>8}")
    for i, r in enumerate(rows):
        print(f"  {i + 1:>3}  {r['fill_mb']:>7.1f} MB  {r['fill_s']:>5.1f} s  {r['messages']:>9,}  "
              f"{r['scanned_mb']:>7.1f} MB  {r['store_open_s']:>8.3f} s  {r['serve_s']:>6.3f} s")
    print("  (scanned: CommitLog read again after the kill, from the last checkpoint; serving:"
          " from spawning the broker to its first answer)")
    print(f"  restart until the broker answers: median {result['recovery_s_100mb']:.3f} s, "
          f"min {result['recovery_s_100mb_min']:.3f} s, max {result['recovery_s_100mb_max']:.3f} s"
          f" over {len(rows)} runs")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
