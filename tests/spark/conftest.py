"""One local SparkSession for the whole test session (JVM start-up is the slow part)."""

from __future__ import annotations

import os
import sys

import pytest


@pytest.fixture(scope="session")
def spark():
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    session = (
        SparkSession.builder.master("local[2]").appName("headrace-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.memory", "1g")
        .config("spark.driver.extraJavaOptions", "-XX:+UseSerialGC -XX:TieredStopAtLevel=1")
        .config("spark.python.worker.reuse", "true")
        .getOrCreate()
    )
    from headrace.spark_bridge.datasource import register

    register(session)
    yield session
    session.stop()


@pytest.fixture(scope="session")
def standalone(tmp_path_factory):
    """A Spark standalone cluster (a master and two workers) shared by every test; jobs run on it as
    driver processes of their own (spark-submit, headrace commands), never in this process."""
    from standalone import StandaloneCluster

    cluster = StandaloneCluster(tmp_path_factory.mktemp("standalone"))
    try:
        yield cluster.start()
    finally:
        cluster.stop()
