"""`make example`: it installs what the clickstream example needs and no more, and the Parquet
output the example names when it ends is still there to read."""

from __future__ import annotations

import pathlib
import shutil
import subprocess

import pytest

from examples.clickstream import __main__ as command

ROOT = pathlib.Path(__file__).resolve().parent.parent.parent


def test_make_example_installs_the_spark_extra_not_the_dev_tools(tmp_path):
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    plan = subprocess.run(["make", "-n", "-B", "example", f"VENV={tmp_path / 'venv'}"],
                          cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert plan.returncode == 0, plan.stderr
    installs = [line for line in plan.stdout.splitlines() if "pip install" in line]
    assert any("'.[spark]'" in line for line in installs), plan.stdout
    assert not any("dev" in line for line in installs), plan.stdout


class _Frame:
    def __init__(self, path: str) -> None:
        self.rows = len(list(pathlib.Path(path).iterdir()))

    def count(self) -> int:
        return self.rows


class _Spark:
    """Spark, at the edge of the command: what it reads back is the directory's files."""

    class read:  # noqa: N801 - spark.read.parquet(path)
        parquet = staticmethod(_Frame)

    def stop(self) -> None:
        pass


class _Query:
    def stop(self) -> None:
        pass


def test_the_parquet_output_the_example_names_is_kept(servers, monkeypatch, capsys):
    def start(spark, namesrv, checkpoint, parquet):
        pathlib.Path(parquet).mkdir(parents=True)
        (pathlib.Path(parquet) / "part-0.parquet").write_bytes(b"PAR1")
        return _Query()

    monkeypatch.setattr(command.pipeline, "session", lambda master: _Spark())
    monkeypatch.setattr(command.pipeline, "start", start)
    monkeypatch.setattr(command.printer, "consume", lambda namesrv, seconds: None)
    monkeypatch.setattr(command.generator, "publish", lambda *args: None)
    assert command.main(["--namesrv", servers.namesrv, "--events", "1"]) == 0
    out = capsys.readouterr().out
    named = pathlib.Path(out.split("window results in ", 1)[1].split()[0])
    try:
        assert named.name == "click-stats.parquet"
        assert (named / "part-0.parquet").is_file()
    finally:
        shutil.rmtree(named.parent, ignore_errors=True)
