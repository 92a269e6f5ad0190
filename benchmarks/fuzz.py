"""Decoder fuzzing for longer: every fuzz target of ``tests/fuzz`` (or one) under atheris for
``--seconds`` each, one after the other, and what each run did.

    python benchmarks/fuzz.py --seconds 60                  # a table
    python benchmarks/fuzz.py --seconds 30 --target frames  # one target
    python benchmarks/fuzz.py --seconds 30 --json           # one JSON object

Each target runs in its own process (``python -m tests.fuzz.run``), starting from its
checked-in seeds and writing what it finds to a working corpus in a temporary directory, never
to the seeds. Per target: inputs run, inputs per second, the coverage libFuzzer counted
(``cov``: edges of rocketq's Python code reached; ``ft``: features, edges with hit counts),
the working corpus at the end, and crashes. A crash stops that target's run; its input is
kept under ``--artifacts`` (printed at the end) to become a regression test. The codec
fuzzed is the one ``rocketq.protocol.codec`` loads: compiled, or the pure twin when
``ROCKETQ_NO_EXTENSIONS=1`` is set.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from rocketq.protocol import codec  # noqa: E402
from tests.fuzz.targets import TARGETS  # noqa: E402

_PROGRESS = re.compile(r"^#(\d+)\s+\w+\s+cov: (\d+) ft: (\d+) corp: (\d+)/(\S+)", re.M)
_STAT = re.compile(r"^stat::(\w+):\s+(\d+)", re.M)


def parse_output(text: str) -> dict[str, Any]:
    """The figures libFuzzer printed: the last progress line and the final stats."""
    out: dict[str, Any] = {"runs": 0, "exec_per_sec": 0, "cov": None, "ft": None,
                           "corpus_units": None, "corpus_size": None}
    progress = _PROGRESS.findall(text)
    if progress:
        runs, cov, ft, units, size = progress[-1]
        out.update(runs=int(runs), cov=int(cov), ft=int(ft), corpus_units=int(units),
                   corpus_size=size)
    stats = dict(_STAT.findall(text))
    if "number_of_executed_units" in stats:
        out["runs"] = int(stats["number_of_executed_units"])
    if "average_exec_per_sec" in stats:
        out["exec_per_sec"] = int(stats["average_exec_per_sec"])
    if "new_units_added" in stats:
        out["new_units"] = int(stats["new_units_added"])
    return out


def fuzz(target: str, seconds: int, workdir: str, artifacts: str) -> dict[str, Any]:
    """Run one target for ``seconds``; its figures and the crashing inputs it wrote."""
    corpus = os.path.join(workdir, "corpus", target)
    crashes_dir = os.path.join(artifacts, target)
    os.makedirs(crashes_dir, exist_ok=True)
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "tests.fuzz.run", target, "--seconds", str(seconds),
         "--corpus", corpus, "--artifacts", crashes_dir],
        cwd=ROOT, capture_output=True, text=True, errors="replace", timeout=seconds + 300)
    result = parse_output(proc.stderr)
    crashes = sorted(os.path.join(crashes_dir, f) for f in os.listdir(crashes_dir)
                     if f.startswith(("crash-", "timeout-", "oom-", "leak-")))
    result.update(target=target, seconds=round(time.monotonic() - started, 1),
                  exit_code=proc.returncode, crashes=len(crashes), crash_files=crashes)
    if proc.returncode != 0:
        tail = [line for line in proc.stderr.splitlines()
                if "Error" in line or "Exception" in line or "Assertion" in line]
        result["error"] = tail[-1] if tail else f"exit code {proc.returncode}"
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=int, default=60, help="fuzzing time per target")
    parser.add_argument("--target", choices=list(TARGETS), action="append",
                        help="only this target (may be repeated); default: all")
    parser.add_argument("--artifacts", default=None,
                        help="where crashing inputs are kept (default: a temporary directory)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)

    targets = args.target or list(TARGETS)
    artifacts = args.artifacts or tempfile.mkdtemp(prefix="rocketq-fuzz-artifacts-")
    results = []
    with tempfile.TemporaryDirectory(prefix="rocketq-fuzz-") as workdir:
        for target in targets:
            results.append(fuzz(target, args.seconds, workdir, artifacts))
            if not args.json:
                print(f"  {target}: {results[-1]['runs']} runs, "
                      f"{results[-1]['crashes']} crashes", file=sys.stderr)
    total_crashes = sum(r["crashes"] for r in results)
    failed = [r["target"] for r in results if r["exit_code"] != 0]
    if args.json:
        print(json.dumps({"seconds_per_target": args.seconds,
                          "codec": "compiled" if codec.COMPILED else "pure",
                          "targets": results, "crashes": total_crashes, "failed": failed,
                          "artifacts": artifacts}, indent=2))
    else:
        header = f"{'target':<16} {'secs':>6} {'runs':>10} {'exec/s':>8} {'cov':>6} " \
                 f"{'ft':>7} {'corpus':>12} {'crashes':>8}"
        print(header)
        print("-" * len(header))
        for r in results:
            corpus = (f"{r['corpus_units']}/{r['corpus_size']}"
                      if r["corpus_units"] is not None else "-")
            print(f"{r['target']:<16} {r['seconds']:>6} {r['runs']:>10} "
                  f"{r['exec_per_sec']:>8} {r['cov'] if r['cov'] is not None else '-':>6} "
                  f"{r['ft'] if r['ft'] is not None else '-':>7} {corpus:>12} "
                  f"{r['crashes']:>8}")
        for r in results:
            if r["exit_code"] != 0:
                print(f"\n{r['target']}: {r.get('error')}")
                for path in r["crash_files"]:
                    print(f"  input: {path}")
        print(f"\n{total_crashes} crashes; inputs kept under {artifacts}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
