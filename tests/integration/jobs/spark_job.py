"""A Spark driver for the kill -9 test: the stream of a metadata file into parquet, 50 records a batch.

Usage: spark_job.py METADATA_FILE OUT_DIR CHECKPOINT_DIR follow|available-now
``follow`` runs micro-batches until it is killed; ``available-now`` reads what there is and exits.
"""

from __future__ import annotations

import sys

from pyspark.sql import SparkSession

from multicluster_source.spark import register


def main() -> None:
    metadata, out, checkpoint, mode = sys.argv[1:5]
    spark = (
        SparkSession.builder.master("local[2]")
        .appName("multicluster-source-kill-test")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    df = (
        spark.readStream.format("multicluster-kafka")
        .option("metadataFile", metadata)
        .option("streamIds", "s")
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", "50")
        .load()
    )
    writer = df.writeStream.format("parquet").option("path", out).option("checkpointLocation", checkpoint)
    query = writer.trigger(availableNow=True).start() if mode == "available-now" else writer.start()
    query.awaitTermination()
    spark.stop()


if __name__ == "__main__":
    main()
