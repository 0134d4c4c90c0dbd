"""The embedded Spark session, for when the caller brings none.

Library code never builds a session on its own initiative when one is given (delta-spark's and chispa's
habit): :class:`~deltalog.store.Store` takes ``spark=``; only when it is ``None`` and a Spark job is
about to run does it ask :func:`local_session` for the embedded default, a local session with the UI off
and few shuffle partitions. Nothing here needs delta-spark's JARs: Delta commits go through delta-rs.
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

#: Settings of the embedded session; ``conf/`` and ``Store(spark_conf=...)`` may override any of them.
DEFAULT_SPARK_CONF: dict[str, str] = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.shuffle.partitions": "4",
    "spark.default.parallelism": "2",
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    # The cleaner's offset map lives on the driver (24 bytes an entry: 120 MB at Kafka's default capacity of
    # 5,033,164 keys), and pass 1's tasks send their partial maps there through collect() (32 bytes an entry
    # each), so leave the driver room for both.
    "spark.driver.memory": "4g",
    "spark.driver.maxResultSize": "2g",
    "spark.driver.extraJavaOptions": "-Dio.netty.tryReflectionSetAccessible=true",
}


def local_session(master: str | None = None, conf: dict[str, Any] | None = None,
                  app_name: str = "deltalog") -> SparkSession:
    """Get or create the embedded local session (``local[2]`` unless ``DELTALOG_SPARK_MASTER`` says else)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    builder = SparkSession.builder.appName(app_name).master(
        master or os.environ.get("DELTALOG_SPARK_MASTER", "local[2]")
    )
    for k, v in {**DEFAULT_SPARK_CONF, **(conf or {})}.items():
        builder = builder.config(k, str(v))
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel(os.environ.get("DELTALOG_SPARK_LOG_LEVEL", "ERROR"))
    return session
