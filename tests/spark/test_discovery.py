"""format("rocketq") is found by a Spark job started from any directory, not only from the
repository's root (PySpark discovers data sources with pkgutil.iter_modules)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from rocketq import Message, Producer

pytestmark = pytest.mark.slow

JOB = """
import os, sys
from pyspark.sql import SparkSession
spark = (SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false")
         .config("spark.driver.bindAddress", "127.0.0.1").getOrCreate())
rows = (spark.read.format("rocketq").option("namesrv", sys.argv[1]).option("topic", "Found")
        .load().select("body").collect())
print("ROWS", sorted(bytes(r.body).decode() for r in rows))
spark.stop()
"""


def test_a_job_in_another_directory_finds_the_rocketq_format(servers, tmp_path):
    servers.create_topic("Found", 2)
    with Producer("pg", namesrv=servers.namesrv) as producer:
        for body in ("a", "b", "c"):
            producer.send(Message("Found", body))
    job = tmp_path / "job.py"
    job.write_text(JOB)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable,
               SPARK_LOCAL_IP="127.0.0.1")
    proc = subprocess.run([sys.executable, str(job), servers.namesrv], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=240)
    assert "DATA_SOURCE_NOT_FOUND" not in proc.stderr, proc.stderr[-3000:]
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "ROWS ['a', 'b', 'c']" in proc.stdout


def test_the_installed_pandas_is_one_pyspark_supports_without_a_warning():
    # The ``spark`` extra bounds pandas below 3: with pandas 3 every Spark session warns.
    import warnings

    from pyspark.sql.pandas.utils import require_minimum_pandas_version

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        require_minimum_pandas_version()
