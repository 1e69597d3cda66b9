"""A local Spark session for the Spark source's tests (``local[2]``, the format registered), shared by a
test module: a session takes seconds to start. Spark's Python workers are started by its JVM with the JVM's
environment, so what they need (this virtualenv's Python, the repository on ``PYTHONPATH``, the test
secret) is set before the session starts."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

__all__ = ["SECRET", "SECRET_ENV", "spark_session"]

SECRET_ENV = "MCS_SPARK_TEST_CLIENT_ID"
SECRET = "client-id-from-the-environment-5f3a"


@contextmanager
def spark_session() -> Iterator[Any]:
    """One local Spark session with the format ``multicluster-kafka`` registered; stopped on exit."""
    from pyspark.sql import SparkSession

    from multicluster_source.spark import register

    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    root = str(Path(__file__).resolve().parents[2])
    os.environ["PYTHONPATH"] = os.pathsep.join([root, *filter(None, [os.environ.get("PYTHONPATH")])])
    os.environ[SECRET_ENV] = SECRET
    session = (
        SparkSession.builder.master("local[2]")
        .appName("multicluster-source-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.host", "127.0.0.1")  # large task results are fetched from the block manager
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    register(session)
    try:
        yield session
    finally:
        session.stop()
