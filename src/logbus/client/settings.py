"""Settings of the failover producer, with defaults chosen so failures come back in seconds."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, Callable

from logbus.client.partitioner import KEY_HASHES, PARTITIONERS, STICKY

DELIVERY_REPORTS = ("all", "errors")


@dataclass
class FailoverSettings:
    bootstrap_servers: str = "127.0.0.1:9092"
    # Partition picking over the online partitions.
    partitioner: str = STICKY               # "sticky" (by bytes) or "round-robin"; unkeyed records only
    sticky_bytes: int = 16384               # bytes sent to one partition before moving to the next ...
    sticky_linger_ms: int = 10              # ... or this long, whichever comes first
    key_hash: str = "crc32"                 # "crc32" (librdkafka's default) or "murmur2" (the Java client's)
    # The message counter (accepted − acknowledged) and the failed buffer.
    max_pending_records: int = 10000        # input waits while this many records are unacknowledged
    max_pending_bytes: int = 32 * 1024 * 1024
    failed_buffer_records: int | None = None  # default and minimum: max_pending_records
    # Cluster view.
    metadata_refresh_s: float = 0.5         # Metadata round for the topics in use (and at once after errors)
    config_refresh_s: float = 30.0          # DescribeConfigs (min.insync.replicas, max.message.bytes)
    metadata_timeout_s: float = 5.0         # bound of one Metadata / DescribeConfigs call, and of the start check
    refused_hold_s: float = 1.0             # a partition that refused records stays out this long (doubling ...)
    refused_hold_max_s: float = 10.0        # ... up to this
    # The underlying confluent-kafka producer: short retries so refused records come back quickly.
    delivery_timeout_ms: int = 5000         # librdkafka message.timeout.ms
    request_timeout_ms: int = 4000
    retries: int = 2                        # same-partition retries inside librdkafka before a record comes back
    retry_backoff_ms: int = 100
    linger_ms: int = 5
    # "all": every record is reported (per-record on_delivery, aproduce()/send() futures); "errors":
    # librdkafka reports only failed deliveries, so fire-and-forget records cost no Python work after
    # produce(); per-record callbacks and the asyncio API are refused in that mode.
    delivery_reports: str = "all"
    producer_config: dict[str, Any] = field(default_factory=dict)   # more librdkafka settings (override the above)
    # Giving up.
    give_up_after_s: float | None = None    # a record failing this long is failed to the caller; None: keep trying
    # Provenance headers: when set, records without lb.source get lb.source=<source_id>, lb.seqno=<n>.
    source_id: str | None = None
    first_seqno: int = 0
    # Where failures of records without their own callback go (else kept; close() returns them).
    on_failure: Callable | None = None

    def __post_init__(self) -> None:
        if self.partitioner not in PARTITIONERS:
            raise ValueError(f"partitioner must be one of {', '.join(PARTITIONERS)}, not {self.partitioner!r}")
        if self.key_hash not in KEY_HASHES:
            raise ValueError(f"key_hash must be one of {', '.join(KEY_HASHES)}, not {self.key_hash!r}")
        if self.delivery_reports not in DELIVERY_REPORTS:
            raise ValueError(f"delivery_reports must be one of {', '.join(DELIVERY_REPORTS)}, not {self.delivery_reports!r}")
        if self.max_pending_records < 1 or self.max_pending_bytes < 1:
            raise ValueError("max_pending_records and max_pending_bytes must be at least 1")
        if self.failed_buffer_records is None:
            self.failed_buffer_records = self.max_pending_records
        if self.failed_buffer_records < self.max_pending_records:
            raise ValueError(
                f"failed_buffer_records ({self.failed_buffer_records}) must be at least max_pending_records "
                f"({self.max_pending_records}): every unacknowledged record may come back at once")
        for name in ("metadata_refresh_s", "metadata_timeout_s", "refused_hold_s", "refused_hold_max_s"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive")
        if not self.bootstrap_servers:
            raise ValueError("bootstrap_servers is required")

    @classmethod
    def names(cls) -> list[str]:
        return [f.name for f in fields(cls)]
