"""Clients on confluent-kafka: the failover producer and the consume-then-produce relay.

Nothing here imports `logbus.broker` or `logbus.storage`: it works against any Kafka-protocol cluster.
"""

from logbus.client.errors import (ClusterUnreachableError, DeliveryFailedError, FailoverProducerError,
                                  ProducerClosedError, ProduceTimeoutError, RecordTooLargeError, UnknownTopicError)
from logbus.client.failover import Delivery, FailoverProducer, Record
from logbus.client.settings import FailoverSettings

__all__ = [
    "ClusterUnreachableError", "Delivery", "DeliveryFailedError", "FailoverProducer", "FailoverProducerError",
    "FailoverSettings", "ProduceTimeoutError", "ProducerClosedError", "Record", "RecordTooLargeError",
    "UnknownTopicError",
]
