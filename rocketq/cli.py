"""The ``rocketq`` command."""

from __future__ import annotations

import argparse

from . import __version__


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="rocketq", description="rocketq: a RocketMQ-compatible message queue in Python.")
    parser.add_argument("--version", action="version", version=f"rocketq {__version__}")
    return parser


def main(argv: list[str] | None = None) -> int:
    build_parser().parse_args(argv)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
