"""The `logbus` data source for Spark (Spark 4's Python Data Source API).

    spark.dataSource.register(LogbusDataSource)
    df = (spark.readStream.format("logbus")
          .option("bootstrap.servers", "127.0.0.1:9092")
          .option("subscribe", "dc1.acme.web.access")
          .option("startingOffsets", "earliest")
          .option("maxOffsetsPerTrigger", 100000)
          .load())

Offsets are per topic-partition, in Spark's Kafka JSON form ({"topic": {"0": 23}}), and live in Spark's
checkpoint. A range [start, end) of a partition is read with assign() and explicit offsets, so a retried
task returns the same rows. New partitions are picked up at every micro-batch, from their earliest offset.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Iterator

from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxBytes,
    ReadMaxRows,
    ReadMinRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from logbus.pipeline.kafka_io import OffsetReader, SourceError, read_range, report_data_loss
from logbus.pipeline.options import (
    TP,
    OptionError,
    SourceOptions,
    from_json_offsets,
    parse_options,
    rate_limit,
    split_range,
    to_json_offsets,
)

log = logging.getLogger("logbus.pipeline")

SCHEMA = (
    "topic string, partition int, offset long, timestamp timestamp, timestampType int, key binary, value binary, "
    "headers array<struct<key:string,value:binary>>, source string, seqno long, created timestamp, host string, "
    "file string, type string, txn string, commit boolean, origin string, src string, malformed string"
)


@dataclass(frozen=True)
class OffsetRange(InputPartition):
    """Records [start, end) of one topic-partition: one Spark task."""

    topic: str
    partition: int
    start: int
    end: int

    def __init__(self, topic: str, partition: int, start: int, end: int) -> None:  # InputPartition has its own __init__
        object.__setattr__(self, "topic", topic)
        object.__setattr__(self, "partition", partition)
        object.__setattr__(self, "start", start)
        object.__setattr__(self, "end", end)
        object.__setattr__(self, "value", f"{topic}-{partition}[{start},{end})")


def _ranges(start: dict[TP, int], end: dict[TP, int], min_partitions: int | None) -> list[OffsetRange]:
    ranges = [(tp, start[tp], end[tp]) for tp in sorted(end) if tp in start and end[tp] > start[tp]]
    total = sum(e - s for _, s, e in ranges)
    out: list[OffsetRange] = []
    for (topic, part), s, e in ranges:
        pieces = 1
        if min_partitions and total > 0 and len(ranges) < min_partitions:
            pieces = max(1, round(min_partitions * (e - s) / total))
        for a, b in split_range(s, e, pieces):
            out.append(OffsetRange(topic, part, a, b))
    return out


class LogbusDataSource(DataSource):
    """spark.read / spark.readStream .format("logbus"): records of the bus with their lb.* header fields."""

    @classmethod
    def name(cls) -> str:
        return "logbus"

    def schema(self) -> str:
        return SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        return LogbusBatchReader(_options(self.options, streaming=False))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return LogbusStreamReader(_options(self.options, streaming=True))


def _options(options, streaming: bool) -> SourceOptions:
    try:
        return parse_options(dict(options), streaming=streaming)
    except OptionError as e:
        raise SourceError(str(e)) from None


class LogbusBatchReader(DataSourceReader):
    """A batch query: every partition from startingOffsets (default earliest) to endingOffsets (default latest)."""

    def __init__(self, opts: SourceOptions) -> None:
        self.opts = opts
        reader = OffsetReader(opts)
        tps = reader.partitions()
        start = reader.resolve(tps, opts.starting, "earliest", opts.timestamp_strategy)
        end = reader.resolve(tps, opts.ending, "latest", "latest")
        earliest = reader.offsets(tps, "earliest")
        for tp in tps:
            if start[tp] < earliest[tp]:
                report_data_loss(opts, f"startingOffsets for {tp[0]}-{tp[1]} is {start[tp]}, but the log starts at {earliest[tp]}",
                                 topic=tp[0], partition=tp[1], start=start[tp], end=earliest[tp])
                start[tp] = earliest[tp]
            if end[tp] < start[tp]:
                raise SourceError(f"endingOffsets {end[tp]} of {tp[0]}-{tp[1]} is before its starting offset {start[tp]}")
        self.ranges = _ranges(start, end, opts.min_partitions)

    def partitions(self) -> list[InputPartition]:
        return list(self.ranges)

    def read(self, partition: InputPartition) -> Iterator:
        p: OffsetRange = partition  # type: ignore[assignment]
        yield from read_range(self.opts, p.topic, p.partition, p.start, p.end)


class LogbusStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """A streaming query: micro-batches of offset ranges, limited by maxOffsetsPerTrigger / maxBytesPerTrigger."""

    def __init__(self, opts: SourceOptions) -> None:
        self.opts = opts
        self._reader: OffsetReader | None = None
        self._latest: dict[TP, int] | None = None
        self._available_now_target: dict[TP, int] | None = None
        self._bytes_per_record: float | None = None
        self._bytes_sampled_at = 0.0

    @property
    def reader(self) -> OffsetReader:
        if self._reader is None:
            self._reader = OffsetReader(self.opts)
        return self._reader

    # -- offsets

    def initialOffset(self) -> dict:
        tps = self.reader.partitions()
        start = self.reader.resolve(tps, self.opts.starting, "latest", self.opts.timestamp_strategy)
        return to_json_offsets(start)

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.opts.max_offsets_per_trigger:
            return ReadMaxRows(self.opts.max_offsets_per_trigger)
        if self.opts.max_bytes_per_trigger:
            return ReadMaxBytes(self.opts.max_bytes_per_trigger)
        if self.opts.min_offsets_per_trigger:
            return ReadMinRows(self.opts.min_offsets_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        tps = self.reader.partitions()
        self._available_now_target = self.reader.offsets(tps, "latest")

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        begin = from_json_offsets(start)
        if self._available_now_target is not None:
            latest = dict(self._available_now_target)
            tps = sorted(latest)
        else:
            tps = self.reader.partitions()
            latest = self.reader.offsets(tps, "latest")
        self._latest = latest
        begin = self._reconcile(begin, tps, latest)
        if isinstance(limit, ReadMaxRows):
            end = rate_limit(begin, latest, limit.max_rows)
        elif isinstance(limit, ReadMaxBytes):
            per = self._record_bytes(tps, begin, latest)
            end = rate_limit(begin, latest, max(1, int(limit.max_bytes / per))) if per else dict(latest)
        elif isinstance(limit, ReadMinRows):
            available = sum(max(0, latest[tp] - begin.get(tp, latest[tp])) for tp in latest)
            end = dict(latest) if available >= limit.min_rows else dict(begin)
        else:
            end = dict(latest)
        # Never go backwards, never drop a partition that is still being read.
        for tp, off in begin.items():
            end[tp] = max(end.get(tp, off), off)
        return to_json_offsets(end)

    def _reconcile(self, begin: dict[TP, int], tps: list[TP], latest: dict[TP, int]) -> dict[TP, int]:
        """New partitions start at earliest; deleted partitions and deleted ranges are data loss."""
        begin = dict(begin)
        current = set(tps)
        gone = [tp for tp in begin if tp not in current]
        for tp in gone:
            report_data_loss(self.opts, f"{tp[0]}-{tp[1]} is gone (topic or partition deleted) at offset {begin[tp]}",
                             topic=tp[0], partition=tp[1], start=begin[tp], end=None)
            del begin[tp]
        new = [tp for tp in tps if tp not in begin]
        earliest = self.reader.offsets(sorted(set(tps)), "earliest")
        for tp in new:
            begin[tp] = earliest[tp]
            if earliest[tp] != 0:
                log.warning("logbus source: new partition %s-%d starts at offset %d, not 0", tp[0], tp[1], earliest[tp])
        for tp in tps:
            if begin[tp] < earliest[tp]:
                report_data_loss(self.opts, f"offsets [{begin[tp]}, {earliest[tp]}) of {tp[0]}-{tp[1]} were deleted before they were read",
                                 topic=tp[0], partition=tp[1], start=begin[tp], end=earliest[tp])
                begin[tp] = earliest[tp]
            if latest[tp] < begin[tp]:
                report_data_loss(self.opts, f"the log of {tp[0]}-{tp[1]} ends at {latest[tp]}, before offset {begin[tp]} already read "
                                 "(truncated or recreated); reading it again from its start",
                                 topic=tp[0], partition=tp[1], start=latest[tp], end=begin[tp])
                begin[tp] = earliest[tp]
        return begin

    def _record_bytes(self, tps: list[TP], begin: dict[TP, int], latest: dict[TP, int]) -> float | None:
        now = time.monotonic()
        if self._bytes_per_record is None or now - self._bytes_sampled_at > 60:
            sampled = self.reader.sample_record_bytes(tps, begin, latest)
            if sampled:
                self._bytes_per_record = sampled
                self._bytes_sampled_at = now
        return self._bytes_per_record

    def reportLatestOffset(self) -> dict | None:
        return to_json_offsets(self._latest) if self._latest is not None else None

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        begin = from_json_offsets(start)
        stop = from_json_offsets(end)
        missing = [tp for tp in stop if tp not in begin]
        if missing:
            # Partitions that appeared in this batch: they start where their log starts (Spark's rule).
            begin.update(self.reader.offsets(sorted(missing), "earliest"))
        return _ranges(begin, stop, self.opts.min_partitions)

    def read(self, partition: InputPartition) -> Iterator:
        p: OffsetRange = partition  # type: ignore[assignment]
        yield from read_range(self.opts, p.topic, p.partition, p.start, p.end)

    def commit(self, end: dict) -> None:
        pass  # offsets live in Spark's checkpoint; nothing is committed to the cluster

    def stop(self) -> None:
        if self._reader is not None:
            self._reader.close()


def register(spark, name: str = "logbus") -> str:
    """Make format(name) — "logbus" by default — available in this Spark session; returns the name.

    A second name gives a second, independent registration of the same source. Streaming queries that run at the
    same time in local mode need one each: Spark's Python runner adds variables to the environment map of the
    source's Python function when the function's first task starts, and in local mode that task runs in the
    driver's JVM; another query serializing its own tasks with the same map at that moment writes a task that
    cannot be read back (java.io.OptionalDataException, every retry alike)."""
    if name == "logbus":
        spark.dataSource.register(LogbusDataSource)
    else:
        spark.dataSource.register(type(f"LogbusDataSource[{name}]", (LogbusDataSource,), {"name": classmethod(lambda cls: name)}))
    return name
