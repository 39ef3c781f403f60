"""Kafka error codes (from kio) and the exception handlers raise to answer one."""

from kio.schema.errors import ErrorCode

__all__ = ["ErrorCode", "KafkaProtocolError"]


class KafkaProtocolError(Exception):
    """A request that must be answered with a Kafka error code."""

    def __init__(self, code: ErrorCode, message: str = "") -> None:
        super().__init__(message or code.name)
        self.code = code
        self.message = message
