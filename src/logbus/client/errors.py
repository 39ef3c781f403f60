"""Errors of the failover producer: each says what went wrong and what was (not) accepted."""

from __future__ import annotations


class FailoverProducerError(Exception):
    """Base class of the failover producer's errors."""


class ClusterUnreachableError(FailoverProducerError):
    """The bootstrap servers did not answer a Metadata request in time (raised at start)."""


class UnknownTopicError(FailoverProducerError):
    """The cluster does not know the topic; the record was not accepted."""


class RecordTooLargeError(FailoverProducerError):
    """The record is larger than the topic's max.message.bytes; the record was not accepted."""


class ProducerClosedError(FailoverProducerError):
    """produce() after close(); the record was not accepted."""


class ProduceTimeoutError(FailoverProducerError):
    """The message counter stayed at its limit for the whole timeout; the record was not accepted."""


class DeliveryFailedError(FailoverProducerError):
    """An accepted record was not delivered: a permanent error, a give-up timeout, or close()."""

    def __init__(self, message: str, record=None, code: int | None = None) -> None:
        super().__init__(message)
        self.record = record
        self.code = code
