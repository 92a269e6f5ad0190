"""The ``fuzz`` marker: the decoder fuzzing tests (``-m fuzz`` runs them alone)."""

from __future__ import annotations


def pytest_configure(config) -> None:
    config.addinivalue_line(
        "markers", "fuzz: coverage-guided fuzzing of the decoders (atheris), a few seconds "
                   "per decoder")
