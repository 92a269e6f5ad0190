from __future__ import annotations

import os
import sys

import pytest


@pytest.fixture(scope="session")
def spark(tmp_path_factory):
    """One local SparkSession for all Spark tests (starting one takes several seconds)."""
    pyspark = pytest.importorskip("pyspark.sql")
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    log_conf = tmp_path_factory.mktemp("spark") / "log4j2.properties"
    log_conf.write_text("rootLogger.level = error\nrootLogger.appenderRef.stdout.ref = console\n"
                        "appender.console.type = Console\nappender.console.name = console\n"
                        "appender.console.layout.type = PatternLayout\n")
    java_opts = (f"-Dlog4j.configurationFile=file:{log_conf} -XX:TieredStopAtLevel=1 "
                 "-XX:+UseSerialGC")
    # local[2, 2]: two threads, and a failed task is tried once more (as on a cluster).
    session = (pyspark.SparkSession.builder.master("local[2,2]").appName("rocketq-tests")
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.shuffle.partitions", "1")
               .config("spark.driver.extraJavaOptions", java_opts)
               .config("spark.driver.bindAddress", "127.0.0.1")
               .getOrCreate())
    yield session
    session.stop()


@pytest.fixture(scope="session")
def spark_standalone(tmp_path_factory):
    """A Spark standalone cluster (a master and two one-core workers, separate JVMs) for the
    cluster tests; their drivers run in their own processes (a process has one SparkContext,
    and this worker's is the ``spark`` fixture's local one)."""
    from rocketq.spark.standalone import StandaloneCluster

    with StandaloneCluster(tmp_path_factory.mktemp("spark-standalone"), workers=2) as cluster:
        yield cluster


@pytest.fixture(scope="session")
def rocketq_cluster(tmp_path_factory):
    """``rocketq cluster`` with two broker groups, each a master and a slave."""
    from .clusters import RocketqCluster

    cluster = RocketqCluster(tmp_path_factory.mktemp("rocketq-cluster")).start()
    try:
        yield cluster
    finally:
        cluster.stop()
