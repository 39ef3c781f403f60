"""The delivery pipeline on Spark: the `logbus` PySpark data source and the `logbus deliver` job.

Everything here reads the bus through confluent-kafka only, so it works against Apache Kafka too.
"""
