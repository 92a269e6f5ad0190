"""What an installed rocketq carries besides its modules."""

from __future__ import annotations

import pathlib
import tomllib

ROOT = pathlib.Path(__file__).resolve().parent.parent


def test_the_package_ships_its_type_hints():
    """PEP 561: ``rocketq/py.typed`` marks the package as typed, and the packaging config
    puts it in wheels and sdists, so type checkers read the hints of an installed rocketq."""
    assert (ROOT / "rocketq" / "py.typed").is_file()
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "py.typed" in config["tool"]["setuptools"]["package-data"]["rocketq"]
