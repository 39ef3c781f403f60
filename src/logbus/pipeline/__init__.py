"""The delivery pipeline on Spark: the `logbus` PySpark data source and the `logbus deliver` job.

Everything here reads the bus through confluent-kafka only, so it works against Apache Kafka too.
"""

import os
import sys


def prepare_spark_environment() -> None:
    """Before a SparkSession starts: Python workers run this interpreter (the one logbus is
    installed in, e.g. a virtual environment that is not activated), unless PYSPARK_PYTHON says
    otherwise; pandas' FutureWarnings in those workers are noise."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYTHONWARNINGS", "ignore::FutureWarning")
