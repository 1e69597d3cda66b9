"""A Spark driver for the kill -9 test: the stream of a metadata file into parquet, 50 records a batch.

Usage: spark_job.py METADATA_FILE OUT_DIR CHECKPOINT_DIR follow|available-now
``follow`` runs micro-batches until it is killed; ``available-now`` reads what there is and exits.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # tests/, for the harness's session

from harness.spark import local_session


def main() -> None:
    metadata, out, checkpoint, mode = sys.argv[1:5]
    spark = local_session("multicluster-source-kill-test")
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
