"""Apache Kafka's jars for the tests, fetched from Maven Central into a cache outside the repository
(``$MCS_KAFKA_CACHE``, default ``~/.cache/multicluster-source``): the broker's with ``kafka-pom.xml``,
MirrorMaker 2's with ``mm2-pom.xml``, Spark's own Kafka source (for the Spark benchmark) with
``spark-kafka-pom.xml``."""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import threading
from pathlib import Path

KAFKA_VERSION = "4.1.1"
KAFKA_MAIN_JAR = f"kafka_2.13-{KAFKA_VERSION}.jar"
CACHE_ENV = "MCS_KAFKA_CACHE"

MM2_MAIN_JAR = f"connect-mirror-{KAFKA_VERSION}.jar"

SPARK_KAFKA_VERSION = "4.2.0"
"""Spark's Kafka source (``spark-sql-kafka-0-10_2.13``): the newest Maven Central has."""
SPARK_KAFKA_MAIN_JAR = f"spark-sql-kafka-0-10_2.13-{SPARK_KAFKA_VERSION}.jar"

_POM = Path(__file__).with_name("kafka-pom.xml")
_MM2_POM = Path(__file__).with_name("mm2-pom.xml")
_SPARK_KAFKA_POM = Path(__file__).with_name("spark-kafka-pom.xml")


def kafka_cache_dir(kind: str = "kafka", version: str = KAFKA_VERSION) -> Path:
    """Where the jars of ``version`` are cached (``$MCS_KAFKA_CACHE``/<kind>-<version>; kind ``kafka`` for
    the broker, ``mm2`` for MirrorMaker 2, ``spark-kafka`` for Spark's Kafka source)."""
    base = os.environ.get(CACHE_ENV) or str(Path.home() / ".cache" / "multicluster-source")
    return Path(base).expanduser() / f"{kind}-{version}"


_fetch_lock = threading.Lock()


def ensure_kafka_libs(timeout: float = 900.0) -> Path:
    """Return the directory of Kafka's jars, fetching them with Maven first if the cache is not complete.

    A marker file holding the pom's digest tells a complete cache; an exclusive file lock makes concurrent
    fetches (threads or processes) wait for one another instead of writing the same files.
    """
    return _ensure_libs("kafka", _POM, KAFKA_MAIN_JAR, timeout)


def ensure_mm2_libs(timeout: float = 900.0) -> Path:
    """Return the directory of MirrorMaker 2's jars (``connect-mirror`` with its runtime tree and an SLF4J
    binding), fetched like :func:`ensure_kafka_libs`."""
    return _ensure_libs("mm2", _MM2_POM, MM2_MAIN_JAR, timeout)


def ensure_spark_kafka_libs(timeout: float = 900.0) -> list[Path]:
    """Return the jars of Spark's own Kafka source (:data:`SPARK_KAFKA_VERSION`, with kafka-clients,
    commons-pool2 and the token provider; pyspark ships the rest), fetched like :func:`ensure_kafka_libs`:
    what ``spark.jars`` of a session needs for ``format("kafka")``."""
    libs = _ensure_libs(
        "spark-kafka", _SPARK_KAFKA_POM, SPARK_KAFKA_MAIN_JAR, timeout, version=SPARK_KAFKA_VERSION
    )
    return sorted(libs.glob("*.jar"))


def _ensure_libs(kind: str, pom: Path, main_jar: str, timeout: float, version: str = KAFKA_VERSION) -> Path:
    cache = kafka_cache_dir(kind, version)
    libs, marker = cache / "libs", cache / "COMPLETE"
    digest = hashlib.sha256(pom.read_bytes()).hexdigest()

    def complete() -> bool:
        return marker.is_file() and marker.read_text().strip() == digest and (libs / main_jar).is_file()

    if complete():
        return libs
    cache.mkdir(parents=True, exist_ok=True)
    with _fetch_lock, open(cache / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            if not complete():
                _fetch(cache, libs, marker, digest, timeout, pom, main_jar)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    return libs


def _fetch(
    cache: Path, libs: Path, marker: Path, digest: str, timeout: float, pom: Path, main_jar: str
) -> None:
    mvn = shutil.which("mvn")
    if mvn is None:
        raise RuntimeError("Apache Kafka for the tests is fetched with Maven: install `mvn` (and Java 17+)")
    marker.unlink(missing_ok=True)
    staging = cache / f"libs.partial-{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    shutil.copyfile(pom, cache / "pom.xml")  # Maven writes nothing else beside its pom for this goal
    command = [
        mvn,
        "-q",
        "-B",
        "-Dstyle.color=never",
        "-f",
        str(cache / "pom.xml"),
        "dependency:copy-dependencies",
        f"-DoutputDirectory={staging}",
        "-DincludeScope=runtime",
    ]
    result = subprocess.run(
        command, cwd=cache, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout
    )
    if result.returncode != 0 or not (staging / main_jar).is_file():
        shutil.rmtree(staging, ignore_errors=True)
        output = (result.stdout + result.stderr)[-4000:]
        raise RuntimeError(f"fetching {main_jar} failed ({' '.join(command)}):\n{output}")
    shutil.rmtree(libs, ignore_errors=True)
    staging.rename(libs)
    marker.write_text(digest + "\n")
