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

__all__ = ["SECRET", "SECRET_ENV", "local_session", "spark_session"]

SECRET_ENV = "MCS_SPARK_TEST_CLIENT_ID"
SECRET = "client-id-from-the-environment-5f3a"


def local_session(app_name: str) -> Any:
    """A local Spark session (``local[2]``, no UI, on 127.0.0.1) with the format registered: the tests' and
    the kill test's job's."""
    from pyspark.sql import SparkSession

    from multicluster_source.spark import register

    session = (
        SparkSession.builder.master("local[2]")
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.host", "127.0.0.1")  # large task results are fetched from the block manager
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    register(session)
    return session


@contextmanager
def spark_session() -> Iterator[Any]:
    """One local Spark session with the format ``multicluster-kafka`` registered; stopped on exit."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    root = str(Path(__file__).resolve().parents[2])
    os.environ["PYTHONPATH"] = os.pathsep.join([root, *filter(None, [os.environ.get("PYTHONPATH")])])
    os.environ[SECRET_ENV] = SECRET
    session = local_session("multicluster-source-tests")
    try:
        yield session
    finally:
        session.stop()
