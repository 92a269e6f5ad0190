"""Every decoder fuzzed for a few seconds under atheris, and its seed corpus replayed.

The replay runs each checked-in seed through its target in this process: quick, the same
every time, and it needs no atheris. The fuzzing runs each target in a process of its own
(atheris takes the process over and ends it), coverage-guided from the seeds, for
``ROCKETQ_FUZZ_SECONDS`` seconds (2 by default); it passes when the process exits 0 and wrote
no crashing input. New inputs go to a temporary working corpus, never to the seeds. Longer
runs: ``benchmarks/fuzz.py``.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from rocketq.protocol import codec

from .run import CORPUS_ROOT, INSTRUMENTED, seed_dir
from .targets import TARGETS

pytestmark = pytest.mark.fuzz

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SECONDS = int(os.environ.get("ROCKETQ_FUZZ_SECONDS", "2"))


def _seeds(target: str) -> list[str]:
    directory = seed_dir(target)
    return sorted(os.path.join(directory, name) for name in os.listdir(directory))


def _listing(directory: str) -> dict[str, int]:
    return {name: os.path.getsize(os.path.join(directory, name))
            for name in os.listdir(directory)}


def test_every_target_has_a_small_seed_corpus_and_instrumented_modules():
    assert sorted(os.listdir(CORPUS_ROOT)) == sorted(TARGETS) == sorted(INSTRUMENTED)
    total = 0
    for target in TARGETS:
        files = _seeds(target)
        assert 1 <= len(files) <= 40, (target, len(files))
        total += sum(os.path.getsize(f) for f in files)
    assert total < 128 * 1024, total


@pytest.mark.parametrize("target", list(TARGETS))
def test_seed_corpus_replays(target):
    """Each seed meets its decoder's contract (the fuzzer starts from sound inputs)."""
    for path in _seeds(target):
        with open(path, "rb") as f:
            TARGETS[target](f.read())


@pytest.mark.parametrize("target", list(TARGETS))
def test_fuzz(target, tmp_path):
    pytest.importorskip("atheris")
    corpus, artifacts = tmp_path / "corpus", tmp_path / "artifacts"
    seeds_before = _listing(seed_dir(target))
    env = dict(os.environ)  # ROCKETQ_NO_EXTENSIONS, if set, reaches the fuzzed codec
    proc = subprocess.run(
        [sys.executable, "-m", "tests.fuzz.run", target, "--seconds", str(SECONDS),
         "--corpus", str(corpus), "--artifacts", str(artifacts)],
        cwd=ROOT, env=env, capture_output=True, text=True, errors="replace",
        timeout=SECONDS + 120)
    crashes = {p.name: p.read_bytes() for p in artifacts.iterdir()} if artifacts.exists() \
        else {}
    assert proc.returncode == 0 and not crashes, (
        f"{target} (codec compiled: {codec.COMPILED}) exited {proc.returncode}; "
        f"crashing inputs {crashes!r}\n" + "\n".join(proc.stderr.splitlines()[-40:]))
    assert "Done" in proc.stderr and "runs in" in proc.stderr, proc.stderr[-2000:]
    assert _listing(seed_dir(target)) == seeds_before, "the fuzzer wrote into the seeds"
