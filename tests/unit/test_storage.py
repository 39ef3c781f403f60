import os
from pathlib import Path

import pytest

from logbus.protocol.records import encode_batch, parse_batches
from logbus.storage.config import CONFIG_KEYS, InvalidConfigError, LogConfig
from logbus.storage.log import OffsetOutOfRangeError, PartitionLog
from logbus.storage.log_manager import (
    CLEAN_SHUTDOWN_MARKER,
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    LogManager,
    parse_partition_dir,
    read_checkpoint,
)
from logbus.storage.segment import LogSegment


def batch(n: int = 3, ts: int = 1000, size: int = 10) -> bytes:
    return encode_batch([b"v" * size] * n, timestamps=[ts] * n)


def append(plog: PartitionLog, n: int = 3, ts: int = 1000, size: int = 10):
    data = batch(n, ts, size)
    return plog.append(data, parse_batches(data))


def offsets(data: bytes) -> list[tuple[int, int]]:
    return [(h.base_offset, h.last_offset) for h in parse_batches(data)]


def log_file(plog: PartitionLog, i: int = -1) -> Path:
    return plog.segments[i].log_path


SMALL = LogConfig(segment_bytes=1000, index_interval_bytes=100)


@pytest.fixture
def tdir(tmp_path: Path) -> Path:
    return tmp_path / "events.dc1-0"


# -- config ------------------------------------------------------------------------------


def test_config_defaults_and_kafka_names():
    d = LogConfig().to_kafka_dict()
    assert d["segment.bytes"] == "1073741824"
    assert d["retention.ms"] == "604800000"
    assert d["flush.messages"] == "9223372036854775807"
    assert d["unclean.leader.election.enable"] == "false"
    assert d["cleanup.policy"] == "delete"
    assert set(d) == set(CONFIG_KEYS)
    assert all(k.doc and k.type in ("int", "long", "string", "boolean") for k in CONFIG_KEYS.values())


def test_config_overrides():
    c = LogConfig.from_overrides(
        LogConfig(),
        {"segment.bytes": "2048", "message.timestamp.type": "LogAppendTime",
         "unclean.leader.election.enable": "true", "retention.ms": "-1"},
    )  # fmt: skip
    assert c.segment_bytes == 2048 and c.log_append_time and c.unclean_leader_election_enable
    assert c.retention_ms == -1
    assert c.overrides_against(LogConfig()) == {
        "segment.bytes": "2048", "message.timestamp.type": "LogAppendTime",
        "unclean.leader.election.enable": "true", "retention.ms": "-1",
    }  # fmt: skip
    # layered: topic overrides on top of broker defaults
    c2 = LogConfig.from_overrides(c, {"segment.ms": "10"})
    assert c2.segment_bytes == 2048 and c2.segment_ms == 10


@pytest.mark.parametrize(
    "key,value,words",
    [
        ("no.such.key", "1", "unknown"),
        ("segment.bytes", "13", "minimum 14"),
        ("segment.bytes", "abc", "integer"),
        ("segment.bytes", "3000000000", "32-bit"),
        ("retention.ms", "-2", "minimum"),
        ("cleanup.policy", "compact", "compaction"),
        ("cleanup.policy", "compact,delete", "compaction"),
        ("message.timestamp.type", "Whenever", "CreateTime"),
        ("unclean.leader.election.enable", "yes", "true or false"),
        ("min.insync.replicas", "0", "minimum 1"),
        ("flush.messages", "0", "minimum 1"),
    ],
)
def test_config_errors(key, value, words):
    with pytest.raises(InvalidConfigError) as e:
        LogConfig.from_overrides(LogConfig(), {key: value})
    assert e.value.key == key and words in str(e.value)
    assert e.value.error_code == 40


def test_config_direct_construction_validates():
    with pytest.raises(InvalidConfigError):
        LogConfig(segment_bytes=1)


# -- append and read ---------------------------------------------------------------------


def test_append_assigns_offsets_and_reads_back(tdir):
    plog = PartitionLog.open(tdir, LogConfig())
    assert (plog.log_start_offset, plog.log_end_offset) == (0, 0)
    r1 = append(plog, 3, ts=10)
    r2 = append(plog, 2, ts=30)
    r3 = append(plog, 1, ts=20)
    assert (r1.base_offset, r1.last_offset, r2.base_offset, r3.last_offset) == (0, 2, 3, 5)
    assert r1.log_append_time == -1 and r2.max_timestamp == 30
    assert plog.log_end_offset == 6
    assert offsets(plog.read(0, 10**6)) == [(0, 2), (3, 4), (5, 5)]
    assert offsets(plog.read(4, 10**6)) == [(3, 4), (5, 5)]  # batch containing the offset
    assert plog.read(6, 10**6) == b""
    assert plog.max_timestamp() == (30, 3)
    plog.close()


def test_read_out_of_range(tdir):
    plog = PartitionLog.open(tdir, LogConfig())
    append(plog)
    with pytest.raises(OffsetOutOfRangeError):
        plog.read(4, 100)
    with pytest.raises(OffsetOutOfRangeError):
        plog.read(-1, 100)
    plog.close()


def test_read_respects_max_bytes_max_offset_and_kip74(tdir):
    plog = PartitionLog.open(tdir, LogConfig())
    for _ in range(5):
        append(plog, 2, size=100)
    one = len(batch(2, size=100))
    assert offsets(plog.read(0, one * 2 + 5)) == [(0, 1), (2, 3)]
    assert offsets(plog.read(0, one * 2)) == [(0, 1), (2, 3)]
    assert offsets(plog.read(0, 10**6, max_offset=4)) == [(0, 1), (2, 3)]
    assert offsets(plog.read(0, 10**6, max_offset=5)) == [(0, 1), (2, 3), (4, 5)]
    assert plog.read(4, 10**6, max_offset=4) == b""
    # KIP-74: first batch larger than max_bytes comes back whole
    assert offsets(plog.read(2, 10)) == [(2, 3)]
    assert plog.read(2, 10, min_one_batch=False) == b""
    plog.close()


def test_read_across_segments(tdir):
    plog = PartitionLog.open(tdir, SMALL)
    for i in range(40):
        append(plog, 2, ts=1000 + i, size=20)
    assert len(plog.segments) > 2
    data = plog.read(0, 10**7)
    got = offsets(data)
    assert got == [(i, i + 1) for i in range(0, 80, 2)]
    # starting in the middle of the second segment, limited by the high watermark
    seg2 = plog.segments[1]
    got = offsets(plog.read(seg2.base_offset + 1, 10**7, max_offset=70))
    assert got[0][0] <= seg2.base_offset + 1 <= got[0][1]
    assert got[-1] == (68, 69)
    # a budget spanning a segment boundary returns whole batches from both segments
    b0 = plog.segments[1].base_offset
    got = offsets(plog.read(b0 - 2, 3 * len(batch(2, size=20))))
    assert got == [(b0 - 2, b0 - 1), (b0, b0 + 1), (b0 + 2, b0 + 3)]
    plog.close()


def test_sparse_index_used_for_reads(tdir):
    cfg = LogConfig(index_interval_bytes=200)
    plog = PartitionLog.open(tdir, cfg)
    for i in range(200):
        append(plog, 1, ts=i, size=50)
    seg = plog.active_segment
    assert len(seg._index_rel) > 10
    for off in (0, 1, 57, 120, 199):
        assert offsets(plog.read(off, 1))[0] == (off, off)
    plog.close()


def test_log_append_time(tdir):
    cfg = LogConfig(message_timestamp_type="LogAppendTime")
    plog = PartitionLog.open(tdir, cfg)
    plog.clock = lambda: 777_000
    r = append(plog, 2, ts=5)
    assert (r.log_append_time, r.max_timestamp, r.offset_of_max_timestamp) == (777_000, 777_000, 0)
    [h] = parse_batches(plog.read(0, 10**6))  # CRC valid after the rewrite
    assert h.timestamp_type == 1 and h.max_timestamp == 777_000
    plog.close()


# -- rolling -----------------------------------------------------------------------------


def test_roll_by_size(tdir):
    plog = PartitionLog.open(tdir, SMALL)
    for _ in range(30):
        append(plog, 2, size=20)
    assert all(s.size <= 1000 for s in plog.segments)
    assert [s.base_offset for s in plog.segments][0] == 0
    bases = [s.base_offset for s in plog.segments]
    assert bases == sorted(bases) and len(bases) >= 3
    assert plog.recovery_point == bases[-1]  # rolled segments are flushed
    plog.close()


def test_roll_by_time_uses_first_batch_timestamp(tdir):
    plog = PartitionLog.open(tdir, LogConfig(segment_ms=1000))
    append(plog, ts=10_000)
    append(plog, ts=10_900)
    assert len(plog.segments) == 1
    append(plog, ts=11_001)
    assert len(plog.segments) == 2 and plog.active_segment.base_offset == 6
    plog.close()


def test_roll_by_index_full(tdir):
    plog = PartitionLog.open(tdir, LogConfig(index_interval_bytes=0, segment_index_bytes=40))
    for i in range(20):
        append(plog, 1, ts=i)
    assert len(plog.segments) > 2
    assert offsets(plog.read(0, 10**6)) == [(i, i) for i in range(20)]
    plog.close()


# -- timestamps --------------------------------------------------------------------------


def test_offset_for_timestamp(tdir):
    plog = PartitionLog.open(tdir, SMALL)
    tss = [100, 200, 150, 300, 300, 400] * 5
    for i, ts in enumerate(tss):
        append(plog, 2, ts=ts + i * 1000, size=20)
    assert len(plog.segments) > 1
    for i, ts in enumerate(tss):
        t = ts + i * 1000
        assert plog.offset_for_timestamp(t) == (2 * i, t)
        assert plog.offset_for_timestamp(t - 1) == (2 * i, t)
    assert plog.offset_for_timestamp(0) == (0, 100)
    assert plog.offset_for_timestamp(10**9) is None
    assert plog.max_timestamp() == (29_400, 58)
    plog.close()


def test_offset_for_timestamp_non_monotonic(tdir):
    plog = PartitionLog.open(tdir, LogConfig(index_interval_bytes=0))
    for ts in (50, 10, 40, 60, 20, 70):
        append(plog, 1, ts=ts)
    assert plog.offset_for_timestamp(45) == (0, 50)
    assert plog.offset_for_timestamp(55) == (3, 60)
    assert plog.offset_for_timestamp(65) == (5, 70)
    assert plog.max_timestamp() == (70, 5)
    plog.close()


# -- recovery ----------------------------------------------------------------------------


def fill(tdir, cfg=SMALL, n=12, **kw) -> PartitionLog:
    plog = PartitionLog.open(tdir, cfg, **kw)
    for i in range(n):
        append(plog, 2, ts=1000 + i, size=30)
    return plog


def crash(plog: PartitionLog) -> None:
    """Close the descriptors without sealing or flushing anything."""
    for seg in plog.segments:
        for fd in (seg._log_fd, seg._index_fd, seg._timeindex_fd):
            os.close(fd)
        seg._log_fd = -1


def test_reopen_after_clean_close(tdir):
    plog = fill(tdir)
    end, nseg = plog.log_end_offset, len(plog.segments)
    plog.close()
    plog = PartitionLog.open(tdir, SMALL, recovery_point=end)
    assert plog.log_end_offset == end and len(plog.segments) == nseg
    assert plog.recovery_point == end
    assert offsets(plog.read(0, 10**6))[-1] == (end - 2, end - 1)
    assert plog.max_timestamp() == (1011, end - 2)
    assert append(plog).base_offset == end
    plog.close()


@pytest.mark.parametrize("tail", [b"\x00", b"garbage!" * 3, "half"])
def test_torn_tail_is_truncated(tdir, tail):
    plog = fill(tdir)
    end = plog.log_end_offset
    path, good_size = log_file(plog), plog.active_segment.size
    crash(plog)
    if tail == "half":
        tail = batch(2, size=30)[:40]
    with open(path, "ab") as f:
        f.write(tail)
    plog = PartitionLog.open(tdir, SMALL, recovery_point=0)
    assert plog.log_end_offset == end
    assert path.stat().st_size == good_size
    assert offsets(plog.read(0, 10**6))[-1] == (end - 2, end - 1)
    assert append(plog).base_offset == end
    assert offsets(plog.read(end, 10**6)) == [(end, end + 2)]
    plog.close()


def test_corrupt_byte_in_tail_batch_truncates_there(tdir):
    plog = fill(tdir)
    seg = plog.active_segment
    path = seg.log_path
    headers = parse_batches(os.pread(seg._log_fd, seg.size, 0))
    victim = headers[-2]
    crash(plog)
    with open(path, "r+b") as f:
        f.seek(victim.position + 70)
        b = f.read(1)
        f.seek(victim.position + 70)
        f.write(bytes([b[0] ^ 0x55]))
    plog = PartitionLog.open(tdir, SMALL)
    assert plog.log_end_offset == victim.base_offset
    assert path.stat().st_size == victim.position
    assert offsets(plog.read(0, 10**6))[-1][1] == victim.base_offset - 1
    assert append(plog).base_offset == victim.base_offset
    plog.close()


def test_corruption_in_unflushed_segment_drops_later_segments(tdir):
    plog = fill(tdir, n=40)
    assert len(plog.segments) >= 3
    first = plog.segments[0]
    second_base = plog.segments[1].base_offset
    crash(plog)
    with open(first.log_path, "r+b") as f:
        f.seek(first.size - 5)
        f.write(b"\xff")
    plog = PartitionLog.open(tdir, SMALL, recovery_point=0)
    assert len(plog.segments) == 1
    assert plog.log_end_offset == second_base - 2
    assert len(list(tdir.glob("*.log"))) == 1
    plog.close()


def test_trusted_segments_are_not_scanned(tdir):
    plog = fill(tdir, n=40)
    bases = [s.base_offset for s in plog.segments]
    plog.close()
    # corrupt a record byte (not the header) of the first segment, below the recovery point
    path = tdir / f"{0:020d}.log"
    with open(path, "r+b") as f:
        f.seek(80)
        f.write(b"\xff")
    plog = PartitionLog.open(tdir, SMALL, recovery_point=bases[-1])
    assert [s.base_offset for s in plog.segments] == bases
    plog.close()


@pytest.mark.parametrize("damage", ["missing", "partial", "garbage"])
def test_bad_index_is_rebuilt(tdir, damage):
    plog = fill(tdir, n=40)
    end = plog.log_end_offset
    seg0 = plog.segments[0]
    index_entries = list(zip(seg0._index_rel, seg0._index_pos))
    assert index_entries
    plog.close()
    idx = tdir / f"{0:020d}.index"
    if damage == "missing":
        idx.unlink()
        (tdir / f"{0:020d}.timeindex").unlink()
    elif damage == "partial":
        with open(idx, "ab") as f:
            f.write(b"\x01\x02\x03")
    else:
        idx.write_bytes(b"\x7f" * 16)
    plog = PartitionLog.open(tdir, SMALL, recovery_point=end)
    seg0 = plog.segments[0]
    assert list(zip(seg0._index_rel, seg0._index_pos)) == index_entries
    assert idx.stat().st_size == 8 * len(index_entries)
    assert plog.log_end_offset == end
    assert offsets(plog.read(5, 10))[0] == (4, 5)
    assert plog.offset_for_timestamp(1003) == (6, 1003)
    plog.close()


def test_orphan_index_files_removed(tdir):
    plog = fill(tdir, n=2)
    plog.close()
    (tdir / f"{500:020d}.index").write_bytes(b"")
    (tdir / "leader-epoch-checkpoint").write_text("0\n0\n")
    plog = PartitionLog.open(tdir, SMALL)
    assert not (tdir / f"{500:020d}.index").exists()
    assert (tdir / "leader-epoch-checkpoint").exists()
    plog.close()


def test_recovery_reads_in_chunks(tdir, monkeypatch):
    import logbus.storage.segment as segment_mod

    monkeypatch.setattr(segment_mod, "RECOVERY_CHUNK", 100)  # smaller than one batch
    plog = fill(tdir, cfg=LogConfig(), n=30)
    end = plog.log_end_offset
    path = log_file(plog)
    crash(plog)
    with open(path, "ab") as f:
        f.write(batch(2, size=30)[:-1])
    plog = PartitionLog.open(tdir, LogConfig())
    assert plog.log_end_offset == end
    plog.close()


def test_flush_messages_advances_recovery_point(tdir):
    plog = PartitionLog.open(tdir, LogConfig(flush_messages=5))
    append(plog, 3)
    assert plog.recovery_point == 0
    append(plog, 3)
    assert plog.recovery_point == 6
    plog.close()


def test_flush_ms(tdir):
    plog = PartitionLog.open(tdir, LogConfig(flush_ms=100))
    now = [1_000_000]
    plog.clock = lambda: now[0]
    plog.flush()
    append(plog)
    assert plog.recovery_point == 0
    now[0] += 100
    assert plog.flush_if_due()
    assert plog.recovery_point == 3
    plog.close()


# -- retention, truncation, deletion ------------------------------------------------------


def test_retention_by_time(tdir):
    plog = PartitionLog.open(tdir, LogConfig(segment_bytes=600, retention_ms=1000))
    for i in range(30):
        append(plog, 2, ts=10_000 + i * 100, size=30)
    segs = plog.segments
    assert len(segs) >= 4
    # now - largest timestamp > retention.ms for the first two segments only
    cutoff = segs[1].max_timestamp + 1000 + 1
    assert cutoff - segs[2].max_timestamp <= 1000
    assert plog.enforce_retention(cutoff) == 2
    assert plog.log_start_offset == segs[2].base_offset
    assert not segs[0].log_path.exists()
    with pytest.raises(OffsetOutOfRangeError):
        plog.read(0, 100)
    assert offsets(plog.read(plog.log_start_offset, 100))[0][0] == segs[2].base_offset
    # the active segment is never deleted
    remaining = len(plog.segments)
    assert plog.enforce_retention(10**12) == remaining - 1
    assert len(plog.segments) == 1
    assert plog.log_start_offset == plog.active_segment.base_offset
    plog.close()


def test_retention_by_bytes(tdir):
    plog = PartitionLog.open(tdir, LogConfig(segment_bytes=600, retention_bytes=1500))
    for i in range(30):
        append(plog, 2, size=30)
    before = plog.size_bytes
    segs = plog.segments
    n = plog.enforce_retention(0)
    assert n >= 1
    assert plog.size_bytes <= before
    # deleting one more would have taken the log under retention.bytes
    assert plog.size_bytes - plog.segments[0].size < 1500 or len(plog.segments) == 1
    assert plog.log_start_offset == segs[n].base_offset
    plog.close()


def test_retention_respects_high_watermark(tdir):
    plog = PartitionLog.open(tdir, LogConfig(segment_bytes=600, retention_ms=0))
    for i in range(30):
        append(plog, 2, ts=1, size=30)
    assert plog.enforce_retention(10**12, high_watermark=plog.segments[1].base_offset) == 1
    plog.close()


def test_retention_infinite(tdir):
    plog = PartitionLog.open(tdir, LogConfig(segment_bytes=600, retention_ms=-1))
    for i in range(30):
        append(plog, 2, ts=1, size=30)
    assert plog.enforce_retention(10**12) == 0
    plog.close()


def test_truncate_to(tdir):
    plog = fill(tdir, n=40)
    bases = [s.base_offset for s in plog.segments]
    target = bases[1] + 4
    plog.truncate_to(target)
    assert plog.log_end_offset == target
    assert [s.base_offset for s in plog.segments] == bases[:2]
    assert offsets(plog.read(0, 10**6))[-1] == (target - 2, target - 1)
    assert plog.max_timestamp()[1] == target - 2
    assert append(plog).base_offset == target
    # truncating inside a batch removes the whole batch
    plog.truncate_to(target + 1)
    assert plog.log_end_offset == target
    # truncating to a segment's base removes that segment
    plog.truncate_to(bases[1])
    assert plog.log_end_offset == bases[1] and len(plog.segments) == 1
    plog.close()
    plog = PartitionLog.open(tdir, SMALL)
    assert plog.log_end_offset == bases[1]
    plog.close()


def test_truncate_below_log_start_starts_over(tdir):
    plog = fill(tdir, n=40)
    plog.maybe_increment_log_start_offset(30)
    plog.enforce_retention(0)
    plog.truncate_to(10)
    assert (plog.log_start_offset, plog.log_end_offset) == (10, 10)
    assert append(plog).base_offset == 10
    plog.close()


def test_open_with_log_start_offset(tdir):
    plog = fill(tdir, n=40)
    bases = [s.base_offset for s in plog.segments]
    end = plog.log_end_offset
    plog.close()
    plog = PartitionLog.open(tdir, SMALL, recovery_point=end, log_start_offset=bases[1] + 2)
    assert plog.log_start_offset == bases[1] + 2
    assert plog.segments[0].base_offset == bases[1]
    plog.close()
    plog = PartitionLog.open(tdir, SMALL, recovery_point=end, log_start_offset=end + 10)
    assert (plog.log_start_offset, plog.log_end_offset) == (end + 10, end + 10)
    plog.close()


def test_delete(tdir):
    plog = fill(tdir, n=2)
    plog.delete()
    assert not tdir.exists()


def test_segment_rejects_offsets_going_backwards(tmp_path):
    seg = LogSegment.create(tmp_path, 0, index_interval_bytes=10, segment_index_bytes=1000)
    a = encode_batch([b"x"], base_offset=0)
    b = encode_batch([b"y"], base_offset=0)  # same offset again: corrupt
    seg.append(a + b, parse_batches(a + b))
    assert seg.recover() == len(b)
    assert seg.next_offset == 1
    seg.close()


# -- log manager -------------------------------------------------------------------------


def test_parse_partition_dir():
    assert parse_partition_dir("dc1.t-n.topic-12") == ("dc1.t-n.topic", 12)
    assert parse_partition_dir("x-") is None
    assert parse_partition_dir("nodash") is None
    assert parse_partition_dir("-3") is None


def test_log_manager_lifecycle(tmp_path):
    lm = LogManager(tmp_path, LogConfig())
    a = lm.create("dc1.a-b.c", 0, SMALL)
    b = lm.create("dc1.a-b.c", 1, LogConfig())
    other = lm.create("other", 0, LogConfig())
    for _ in range(5):
        append(a)
    append(b)
    append(other)
    assert lm.get("dc1.a-b.c", 0) is a and lm.get("nope", 0) is None
    lm.checkpoint()
    rp = read_checkpoint(tmp_path / RECOVERY_POINT_CHECKPOINT)
    assert rp == {("dc1.a-b.c", 0): 0, ("dc1.a-b.c", 1): 0, ("other", 0): 0}
    assert (tmp_path / RECOVERY_POINT_CHECKPOINT).read_text().splitlines()[:2] == ["0", "3"]
    lm.close()
    assert (tmp_path / CLEAN_SHUTDOWN_MARKER).exists()
    assert read_checkpoint(tmp_path / RECOVERY_POINT_CHECKPOINT)[("dc1.a-b.c", 0)] == 15
    assert read_checkpoint(tmp_path / LOG_START_OFFSET_CHECKPOINT)[("dc1.a-b.c", 0)] == 0

    lm = LogManager(tmp_path, LogConfig())
    lm.load_all({"dc1.a-b.c": SMALL})
    assert not (tmp_path / CLEAN_SHUTDOWN_MARKER).exists()
    a = lm.get("dc1.a-b.c", 0)
    assert a.log_end_offset == 15 and a.recovery_point == 15 and a.config == SMALL
    assert lm.get("other", 0).config == LogConfig()
    assert lm.delete_topic("dc1.a-b.c") == 2
    assert lm.get("dc1.a-b.c", 0) is None
    assert sorted(p.name for p in tmp_path.iterdir() if p.is_dir()) == ["other-0"]
    cfg = LogConfig(retention_ms=5)
    lm.update_topic_config("other", cfg)
    assert lm.get("other", 0).config == cfg
    lm.flush_all()
    assert lm.get("other", 0).recovery_point == 3
    assert lm.run_retention(10**13) == 0
    lm.close()


def test_log_manager_after_crash_recovers_tail(tmp_path):
    lm = LogManager(tmp_path, SMALL)
    plog = lm.create("t", 0, SMALL)
    for _ in range(3):
        append(plog)
    plog.flush()
    lm.checkpoint()
    append(plog)
    path = log_file(plog)
    crash(plog)
    with open(path, "ab") as f:
        f.write(b"torn")
    lm = LogManager(tmp_path, SMALL)
    lm.load_all({})
    assert lm.get("t", 0).log_end_offset == 12
    assert lm.get("t", 0).recovery_point == 9
    lm.close()


def test_checkpoint_malformed_reads_empty(tmp_path):
    p = tmp_path / RECOVERY_POINT_CHECKPOINT
    p.write_text("0\n2\nt 0 5\n")
    assert read_checkpoint(p) == {}
    p.write_text("0\n1\nt 0 5\n")
    assert read_checkpoint(p) == {("t", 0): 5}
