"""SIGKILL a SYNC_FLUSH writer again and again around file rollovers, and check every
ConsumeQueue unit against the record it points at after each recovery.

Each round starts a writer process on the same store (it recovers what the last round left),
lets it report a random number of durable appends (single messages on four queues, groups of
messages on a fifth, files of 64 KiB so the CommitLog and the ConsumeQueues roll over every
few hundred records), and kills it with SIGKILL. A checker process then opens the store
(recovery again), and checks:

- every unit of every queue: its offset and size are those of a whole, CRC-checked record of
  that topic, queue and queue offset (never a file's blank filler, never a cut record);
- queue offsets are dense and the records of a queue are in the order they were written;
- every append a writer was told is durable is there, at the offset it was told, with its
  body.

Rounds alternate the compiled codec and its pure-Python twin (``ROCKETQ_NO_EXTENSIONS=1``),
for the writer and the checker alike. Bounded by ``--rounds`` and ``--seconds``.

    python benchmarks/crash_loop.py --rounds 100 [--seconds 600] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time

TOPIC = "Crash"
FILE_SIZE = 64 * 1024
CQ_FILE_SIZE = 20 * 50  # 50 units a file


def store_config(root: str):
    from rocketq.store import MessageStoreConfig

    return MessageStoreConfig(storePathRootDir=root, mappedFileSizeCommitLog=FILE_SIZE,
                              maxMessageSize=16 * 1024, mappedFileSizeConsumeQueue=CQ_FILE_SIZE,
                              flushDiskType="SYNC_FLUSH", maxHashSlotNum=1024, maxIndexNum=4096,
                              flushIntervalConsumeQueue=50)


def body_of(round_no: int, queue_id: int, seq: int) -> bytes:
    head = b"r%d-q%d-s%d-" % (round_no, queue_id, seq)
    return head + b"p" * ((round_no * 7 + seq * 13) % 700)


# ---------------------------------------------------------------------------- the writer
async def write(root: str, round_no: int) -> None:
    """Append until killed; print ``round queue seq offset`` for each durable append."""
    from rocketq.broker.store_writer import StoreWriter
    from rocketq.store import MessageStore, PutStatus, StoreMessage

    store = MessageStore(store_config(root))
    writer = StoreWriter(store)
    out = sys.stdout

    async def singles(queue_id: int) -> None:
        seq = 0
        while True:
            r = await writer.put_message(StoreMessage.create(
                TOPIC, body_of(round_no, queue_id, seq), queue_id,
                keys=f"r{round_no}q{queue_id}s{seq}", tags=f"t{seq % 3}"))
            if r.status is PutStatus.PUT_OK:
                out.write(f"{round_no} {queue_id} {seq} {r.commitlog_offset}\n")
                out.flush()
            seq += 1

    async def groups(queue_id: int) -> None:
        seq = 0
        while True:
            n = 1 + seq % 7
            results = await writer.put_messages([StoreMessage.create(
                TOPIC, body_of(round_no, queue_id, seq + i), queue_id) for i in range(n)])
            for i, r in enumerate(results):
                if r.status is PutStatus.PUT_OK:
                    out.write(f"{round_no} {queue_id} {seq + i} {r.commitlog_offset}\n")
            out.flush()
            seq += n

    await asyncio.gather(*(singles(q) for q in range(4)), groups(4))


# ---------------------------------------------------------------------------- the checker
def check(store, durable_path: str) -> dict:
    """Check an opened (recovered) store; returns the problems found and counts."""
    from rocketq.protocol.message import BLANK_MAGIC, SIZE_AND_MAGIC, decode_record

    problems: list[str] = []
    store.wait_dispatched()
    units_checked = 0
    found: dict[int, tuple[int, int, bytes]] = {}  # commitlog offset -> (q, qoff, body)
    for (topic, queue_id), cq in sorted(store.consume_queues.items()):
        last_phys = -1
        for qoff in range(cq.min_offset, cq.max_offset):
            unit = cq.unit(qoff)
            if unit is None or unit[1] == 0:
                problems.append(f"{topic}/{queue_id}: hole at queue offset {qoff}")
                continue
            phys, size, _ = unit
            units_checked += 1
            if phys <= last_phys:
                problems.append(f"{topic}/{queue_id}@{qoff}: offset {phys} not after "
                                f"{last_phys}")
            last_phys = phys
            view = store.commitlog.view(phys, size)
            raw = view.tobytes() if view is not None else None
            if raw is None:
                problems.append(f"{topic}/{queue_id}@{qoff}: no record at {phys}")
                continue
            total, magic = SIZE_AND_MAGIC.unpack_from(raw, 0)
            if magic == BLANK_MAGIC:
                problems.append(f"{topic}/{queue_id}@{qoff}: unit points at a filler "
                                f"({phys})")
                continue
            if total != size:
                problems.append(f"{topic}/{queue_id}@{qoff}: unit size {size}, record "
                                f"at {phys} is {total}")
                continue
            try:
                rec = decode_record(raw[:size], check_crc=True)
            except Exception as exc:  # any failure is what this loop looks for
                problems.append(f"{topic}/{queue_id}@{qoff}: record at {phys}: {exc!r}")
                continue
            if (rec.topic, rec.queue_id, rec.queue_offset, rec.commitlog_offset) != (
                    topic, queue_id, qoff, phys):
                problems.append(f"{topic}/{queue_id}@{qoff}: record at {phys} is "
                                f"{rec.topic}/{rec.queue_id}@{rec.queue_offset} "
                                f"(offset {rec.commitlog_offset})")
                continue
            found[phys] = (queue_id, qoff, bytes(rec.body))
    durable = 0
    with open(durable_path) as fh:
        for line in fh:
            parts = line.split()
            if len(parts) != 4:
                continue  # a line cut by the kill
            round_no, queue_id, seq, offset = map(int, parts)
            durable += 1
            got = found.get(offset)
            if got is None:
                problems.append(f"durable r{round_no} q{queue_id} s{seq} at {offset} lost")
            elif got[0] != queue_id or got[2] != body_of(round_no, queue_id, seq):
                problems.append(f"durable r{round_no} q{queue_id} s{seq} at {offset}: "
                                f"another body there ({got[2][:24]!r})")
    return {"problems": problems[:50], "problem_count": len(problems),
            "units": units_checked, "durable": durable,
            "commitlog_files": len(store.commitlog.files.files),
            "end": store.commitlog.max_offset}


def _emit(result: dict) -> int:
    sys.stdout.write(json.dumps(result) + "\n")
    sys.stdout.flush()
    return 0


# ---------------------------------------------------------------------------- the loop
def run_round(root: str, durable_path: str, round_no: int, pure: bool,
              rng: random.Random) -> dict:
    env = dict(os.environ)
    env.pop("ROCKETQ_NO_EXTENSIONS", None)
    if pure:
        env["ROCKETQ_NO_EXTENSIONS"] = "1"
    wanted = rng.randint(1, 600)
    # One round in five is killed on a timer instead, often before its first append: while
    # it recovers what the last round left, cuts a torn tail or creates files.
    timer = rng.uniform(0.05, 0.6) if rng.random() < 0.2 else None
    proc = subprocess.Popen([sys.executable, __file__, "--child-write", root, str(round_no)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    got = 0
    deadline = time.monotonic() + (timer if timer is not None else 60)
    with open(durable_path, "a") as out:
        try:
            while got < wanted and time.monotonic() < deadline:
                if timer is not None:
                    ready, _, _ = select.select([proc.stdout], [], [],
                                                max(0.0, deadline - time.monotonic()))
                    if not ready:
                        break
                line = proc.stdout.readline()
                if not line:
                    break
                out.write(line)
                got += 1
        finally:
            proc.send_signal(signal.SIGKILL)
            rest, err = proc.communicate(timeout=30)
        out.write(rest)
        got += rest.count("\n")
    if proc.returncode != -signal.SIGKILL:
        return {"round": round_no, "pure": pure, "durable_this_round": got,
                "problem_count": 1, "problems": [f"writer exited {proc.returncode}: "
                                                 f"{err[-1500:]}"]}
    checked = subprocess.run([sys.executable, __file__, "--child-check", root, durable_path],
                             capture_output=True, text=True, env=env, timeout=120)
    try:
        result = json.loads(checked.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
        result = {"problem_count": 1, "problems": [f"checker failed: {checked.stderr[-1500:]}"]}
    result.update(round=round_no, pure=pure, durable_this_round=got)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=100)
    parser.add_argument("--seconds", type=float, default=1800)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--keep", action="store_true", help="keep the store of a failed run")
    parser.add_argument("--child-write", nargs=2, metavar=("ROOT", "ROUND"),
                        help=argparse.SUPPRESS)
    parser.add_argument("--child-check", nargs=2, metavar=("ROOT", "DURABLE"),
                        help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child_write:
        asyncio.run(write(args.child_write[0], int(args.child_write[1])))
        return
    if args.child_check:
        from rocketq.store import MessageStore

        store = MessageStore(store_config(args.child_check[0]))
        _emit(check(store, args.child_check[1]))
        if random.random() < 0.5:
            store.close()
        else:  # the next writer then recovers from this checker's crash too
            os._exit(0)
        return

    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    rng = random.Random(seed)
    work = tempfile.mkdtemp(prefix="rocketq-crash-loop-")
    root, durable_path = os.path.join(work, "store"), os.path.join(work, "durable.txt")
    started = time.monotonic()
    rounds: list[dict] = []
    try:
        for round_no in range(args.rounds):
            if time.monotonic() - started > args.seconds:
                break
            result = run_round(root, durable_path, round_no, round_no % 2 == 1, rng)
            rounds.append(result)
            if not args.json:
                print(f"round {round_no:4d} {'pure' if result['pure'] else 'compiled':8s} "
                      f"+{result['durable_this_round']:4d} durable, "
                      f"{result.get('units', 0):6d} units, "
                      f"{result.get('commitlog_files', 0):3d} files: "
                      f"{result['problem_count']} problem(s)", file=sys.stderr)
            if result["problem_count"]:
                for p in result["problems"][:10]:
                    print("   ", p, file=sys.stderr)
                break
    finally:
        failed = any(r["problem_count"] for r in rounds)
        if failed and args.keep:
            print(f"store kept in {work}", file=sys.stderr)
        else:
            shutil.rmtree(work, ignore_errors=True)
    summary = {
        "seed": seed, "rounds": len(rounds),
        "failed_rounds": sum(1 for r in rounds if r["problem_count"]),
        "durable": sum(r["durable_this_round"] for r in rounds),
        "units_checked_last": rounds[-1].get("units", 0) if rounds else 0,
        "commitlog_files_last": rounds[-1].get("commitlog_files", 0) if rounds else 0,
        "seconds": round(time.monotonic() - started, 1),
        "problems": next((r["problems"] for r in rounds if r["problem_count"]), []),
    }
    if args.json:
        print(json.dumps(summary))
    else:
        print(f"\n{'rounds':>8} {'failed':>7} {'durable':>8} {'units':>7} {'files':>6} "
              f"{'seconds':>8}  seed")
        print(f"{summary['rounds']:>8} {summary['failed_rounds']:>7} {summary['durable']:>8} "
              f"{summary['units_checked_last']:>7} {summary['commitlog_files_last']:>6} "
              f"{summary['seconds']:>8}  {seed}")
    sys.exit(1 if summary["failed_rounds"] else 0)


if __name__ == "__main__":
    main()
