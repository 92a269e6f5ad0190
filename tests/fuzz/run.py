"""Run one fuzz target under atheris (libFuzzer), coverage-guided over rocketq's modules.

    python -m tests.fuzz.run frames --seconds 30 --corpus /tmp/frames-corpus
    python -m tests.fuzz.run --list

The checked-in seeds (``tests/fuzz/corpus/<target>/``) are read but never written: libFuzzer
adds what it finds only to its first corpus directory, which is ``--corpus`` (a fresh
temporary one when not given). A crashing input is written to ``--artifacts`` as
``crash-<sha1>`` and the process exits non-zero; ``--seconds`` bounds the run (and
``--runs`` the number of inputs, when given). Atheris takes the process over and ends it,
so run this in a process of its own.
"""

from __future__ import annotations

import argparse
import importlib.util
import logging
import os
import sys
import tempfile
from typing import Any

#: Where the checked-in seed corpora are, one directory per target.
CORPUS_ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")
#: The modules whose code guides the fuzzer, per target: its decoder and what the decoder
#: calls. Instrumenting takes seconds per module, so each run instruments only its own.
INSTRUMENTED: dict[str, tuple[str, ...]] = {
    "frames": ("rocketq.protocol.command",),
    "header_json": ("rocketq.protocol.command",),
    "header_rocketmq": ("rocketq.protocol.command",),
    "records": ("rocketq.protocol.message",),
    "batch": ("rocketq.protocol.message",),
    "properties": ("rocketq.protocol.message",),
    "ha": ("rocketq.ha.protocol",),
    "controller": ("rocketq.controller.server", "rocketq.controller.elections",
                   "rocketq.controller.state", "rocketq.protocol.command"),
    "fastjson": ("rocketq.protocol.fastjson",),
    "sql92": ("rocketq.protocol.sql92",),
    "plain_acl": ("rocketq.acl.plain",),
    "broker_conf": ("rocketq.broker.config", "rocketq.broker.config_updates",
                    "rocketq.broker.properties", "rocketq.store.config"),
}
#: The pure codec's functions that are instrumented, one by one. ``property_value`` is left
#: out: atheris 2.3.0 rewrites its loop wrongly on Python 3.11 and the instrumented function
#: crashes the interpreter (a segmentation fault on inputs the plain function reads fine).
CODEC_INSTRUMENTED = ("frame_spans", "encode_properties", "decode_properties", "index_hashes",
                      "split_batch", "encode_batch", "record_error", "walk", "pulled")
#: The largest input libFuzzer makes (the biggest seed, a compressed 5 KB send, fits).
MAX_LEN = 8192


def seed_dir(target: str) -> str:
    """The checked-in seed corpus of ``target``."""
    return os.path.join(CORPUS_ROOT, target)


def libfuzzer_args(seconds: int, corpus: str, seeds: str, artifacts: str,
                   runs: int | None = None) -> list[str]:
    """The libFuzzer command line: bounded in time (and inputs), new inputs written to
    ``corpus`` only, crashes to ``artifacts``."""
    args = [f"-max_total_time={seconds}", f"-artifact_prefix={artifacts.rstrip(os.sep)}{os.sep}",
            f"-max_len={MAX_LEN}", "-timeout=20", "-rss_limit_mb=2048", "-print_final_stats=1"]
    if runs is not None:
        args.append(f"-runs={runs}")
    return args + [corpus] + ([seeds] if os.path.isdir(seeds) else [])


def uninstrumented(target: str) -> list[str]:
    """Every rocketq module but the target's (and the pure codec, instrumented on its own).
    atheris's import hook takes whole top-level packages only, so the others are named one
    by one to be left out; they are found on disk, without importing anything."""
    spec = importlib.util.find_spec("rocketq")
    assert spec is not None and spec.submodule_search_locations
    root = list(spec.submodule_search_locations)[0]
    wanted = INSTRUMENTED[target]
    out = ["rocketq", "rocketq.protocol._codec"]
    for directory, _dirs, files in os.walk(root):
        relative = os.path.relpath(directory, root)
        package = "rocketq" if relative == "." else \
            ".".join(["rocketq", *relative.split(os.sep)])
        for name in files:
            if not name.endswith(".py"):
                continue
            module = package if name == "__init__.py" else f"{package}.{name[:-3]}"
            if not any(module == w or module.startswith(w + ".") for w in wanted):
                out.append(module)
    return sorted(set(out))


def instrument_codec(atheris: Any) -> None:
    """Instrument the pure codec's functions in place (see CODEC_INSTRUMENTED)."""
    from rocketq.protocol import _codec

    for name in CODEC_INSTRUMENTED:
        atheris.instrument_func(getattr(_codec, name))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("target", nargs="?", help="the target's name (see --list)")
    parser.add_argument("--seconds", type=int, default=10, help="how long to fuzz")
    parser.add_argument("--runs", type=int, default=None, help="at most this many inputs")
    parser.add_argument("--corpus", default=None,
                        help="working corpus directory, written to (default: a temporary one)")
    parser.add_argument("--artifacts", default=None,
                        help="where crashing inputs are written (default: the working directory)")
    parser.add_argument("--list", action="store_true", help="print the targets' names")
    args = parser.parse_args(argv)

    import atheris

    if args.list:
        print("\n".join(INSTRUMENTED))
        return
    if args.target not in INSTRUMENTED:
        parser.error(f"unknown target {args.target!r}; one of {', '.join(INSTRUMENTED)}")
    # rocketq is imported here for the first time, so that the target's modules are
    # instrumented for coverage as they load (the compiled codec twin, being C, is not).
    with atheris.instrument_imports(include=["rocketq"], exclude=uninstrumented(args.target)):
        from tests.fuzz.targets import TARGETS
    instrument_codec(atheris)
    target = TARGETS[args.target]
    corpus = args.corpus or tempfile.mkdtemp(prefix=f"rocketq-fuzz-{args.target}-")
    os.makedirs(corpus, exist_ok=True)
    os.environ["ROCKETQ_FUZZ_SCRATCH"] = os.path.normpath(corpus) + "-scratch"
    artifacts = args.artifacts or os.getcwd()
    os.makedirs(artifacts, exist_ok=True)
    if os.path.realpath(corpus) == os.path.realpath(seed_dir(args.target)):
        parser.error("the working corpus must not be the checked-in seed directory")

    # Warnings about the fuzzed files (unknown keys) would be written for every input.
    logging.disable(logging.WARNING)

    def one_input(data: bytes) -> None:
        target(data)

    atheris.Setup([sys.argv[0], *libfuzzer_args(args.seconds, corpus, seed_dir(args.target),
                                                artifacts, args.runs)], one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
