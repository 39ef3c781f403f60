"""Idempotent producer state of a partition log: sequence rules, duplicates, snapshots, recovery."""


import pytest

from logbus.broker.producer_ids import BLOCK_SIZE, ProducerIdAllocator
from logbus.protocol.records import encode_batch, parse_batches
from logbus.storage.config import LogConfig
from logbus.storage.log import PartitionLog
from logbus.storage.producer_state import (
    INT32_MAX,
    ProducerEntry,
    ProducerStateError,
    ProducerStateManager,
)

SMALL = LogConfig(segment_bytes=600, index_interval_bytes=100)


def pbatch(pid: int, epoch: int, seq: int, n: int = 2, ts: int = 1000) -> bytes:
    return encode_batch([b"v%d" % i for i in range(n)], timestamps=[ts] * n, producer_id=pid, producer_epoch=epoch, base_sequence=seq)


def append(plog: PartitionLog, data: bytes):
    return plog.append(data, parse_batches(data))


def code_of(plog: PartitionLog, data: bytes) -> int:
    with pytest.raises(ProducerStateError) as info:
        append(plog, data)
    return info.value.error_code


@pytest.fixture
def plog(tmp_path):
    p = PartitionLog.open(tmp_path / "t-0", SMALL)
    yield p
    p.close()


def test_in_sequence_batches_append_and_duplicates_get_the_original_offset(plog):
    assert append(plog, pbatch(7, 0, 0)).base_offset == 0
    assert append(plog, pbatch(7, 0, 2)).base_offset == 2
    end = plog.log_end_offset
    size = plog.size_bytes
    again = append(plog, pbatch(7, 0, 0))
    assert again.duplicate and again.base_offset == 0 and again.last_offset == 1
    again = append(plog, pbatch(7, 0, 2))
    assert again.duplicate and again.base_offset == 2
    assert plog.log_end_offset == end and plog.size_bytes == size
    assert append(plog, pbatch(7, 0, 4)).base_offset == 4


def test_only_the_last_five_batches_are_recognised(plog):
    for i in range(7):
        append(plog, pbatch(1, 0, 2 * i))
    assert append(plog, pbatch(1, 0, 4)).duplicate  # 3rd of 7: among the last 5
    assert code_of(plog, pbatch(1, 0, 2)) == 45  # 2nd of 7: too old to be recognised


def test_gap_and_overlap_are_out_of_order(plog):
    append(plog, pbatch(1, 0, 0, n=3))
    assert code_of(plog, pbatch(1, 0, 5)) == 45
    assert code_of(plog, pbatch(1, 0, 2)) == 45  # overlaps the last batch without matching it
    assert plog.log_end_offset == 3


def test_epochs(plog):
    append(plog, pbatch(1, 3, 0))
    assert code_of(plog, pbatch(1, 2, 2)) == 47
    assert code_of(plog, pbatch(1, 4, 2)) == 45  # a new epoch starts at 0
    assert append(plog, pbatch(1, 4, 0)).base_offset == 2
    assert code_of(plog, pbatch(1, 3, 2)) == 47  # the old epoch is fenced now


def test_unknown_producer(plog, tmp_path):
    assert code_of(plog, pbatch(9, 0, 5)) == 45  # nothing was ever removed: a true gap
    append(plog, pbatch(9, 0, 0))
    while len(plog.segments) < 3:
        append(plog, encode_batch([b"x" * 100]))
    plog.maybe_increment_log_start_offset(plog.segments[1].base_offset)
    plog.enforce_retention(0)
    assert 9 not in plog.producer_state.producers  # its batches are gone
    assert code_of(plog, pbatch(9, 0, 2)) == 59
    assert code_of(plog, pbatch(10, 0, 2)) == 59
    assert not append(plog, pbatch(9, 0, 0)).duplicate


def test_sequence_wraps_to_zero(plog):
    append(plog, pbatch(1, 0, 0))
    plog.producer_state.producers[1].batches.append((INT32_MAX - 1, INT32_MAX, 2, 2, 0))
    assert append(plog, pbatch(1, 0, 0, n=1)).base_offset == 2
    assert code_of(plog, pbatch(1, 0, 5)) == 45


def test_wrapping_batch_last_sequence(plog):
    plog.producer_state.producers[1] = ProducerEntry(1, 0, [(0, INT32_MAX - 2, 0, 0, 0)])
    append(plog, pbatch(1, 0, INT32_MAX - 1, n=4))  # INT32_MAX-1 .. 1
    assert plog.producer_state.producers[1].last_seq == 1
    assert append(plog, pbatch(1, 0, 2)).base_offset == 4


def test_all_or_nothing_within_one_append(plog):
    append(plog, pbatch(1, 0, 0))
    data = pbatch(1, 0, 2) + pbatch(1, 0, 9)
    assert code_of(plog, data) == 45
    assert plog.log_end_offset == 2
    data = pbatch(1, 0, 2) + pbatch(1, 0, 4) + pbatch(2, 0, 0)
    r = append(plog, data)
    assert r.base_offset == 2 and r.last_offset == 7
    assert plog.producer_state.producers[1].last_seq == 5
    assert append(plog, pbatch(1, 0, 2) + pbatch(1, 0, 4)).duplicate
    assert code_of(plog, pbatch(1, 0, 4) + pbatch(1, 0, 6)) == 45  # a retry mixed with new data


def test_non_idempotent_batches_are_untouched(plog):
    append(plog, encode_batch([b"a", b"b"]))
    append(plog, encode_batch([b"a", b"b"]))
    assert plog.log_end_offset == 4 and not plog.producer_state.producers


def test_transactional_batches_are_refused(plog):
    data = encode_batch([b"a"], attributes=0x10, producer_id=1, producer_epoch=0, base_sequence=0)
    assert code_of(plog, data) == 48


def test_state_survives_clean_close(tmp_path):
    path = tmp_path / "t-0"
    plog = PartitionLog.open(path, SMALL)
    for i in range(20):
        append(plog, pbatch(5, 1, 2 * i))
    end = plog.log_end_offset
    plog.close()
    snaps = sorted(p.name for p in path.glob("*.snapshot"))
    assert f"{end:020d}.snapshot" in snaps and len(snaps) > 1  # one per roll plus the close
    plog = PartitionLog.open(path, SMALL, recovery_point=end)
    assert plog.producer_state.producers[5].epoch == 1
    assert append(plog, pbatch(5, 1, 38)).duplicate
    assert append(plog, pbatch(5, 1, 40)).base_offset == end
    plog.close()


def test_state_rebuilt_after_crash_from_snapshot_and_headers(tmp_path):
    path = tmp_path / "t-0"
    plog = PartitionLog.open(path, SMALL)
    for i in range(20):
        append(plog, pbatch(5, 0, 2 * i))
        append(plog, pbatch(6, 2, 3 * i, n=3))
    end = plog.log_end_offset
    # a crash: no close, no snapshot at the end; the last roll's snapshot is older
    for seg in plog.segments:
        seg.flush()
    snaps = sorted(int(p.stem) for p in path.glob("*.snapshot"))
    assert snaps and snaps[-1] < end
    plog2 = PartitionLog.open(path, SMALL, recovery_point=0)
    assert plog2.producer_state.producers[5].last_seq == 39
    assert plog2.producer_state.producers[6].epoch == 2
    assert append(plog2, pbatch(6, 2, 57, n=3)).duplicate
    assert append(plog2, pbatch(5, 0, 40)).base_offset == end
    plog2.close()


def test_corrupt_snapshot_is_ignored_and_rebuilt(tmp_path):
    path = tmp_path / "t-0"
    plog = PartitionLog.open(path, SMALL)
    for i in range(10):
        append(plog, pbatch(5, 0, 2 * i))
    end = plog.log_end_offset
    plog.close()
    snap = path / f"{end:020d}.snapshot"
    raw = bytearray(snap.read_bytes())
    raw[-1] ^= 0xFF
    snap.write_bytes(bytes(raw))
    plog = PartitionLog.open(path, SMALL, recovery_point=end)
    assert not snap.exists()
    assert plog.producer_state.producers[5].last_seq == 19
    plog.close()


def test_no_snapshot_rebuilds_from_the_log_start(tmp_path):
    path = tmp_path / "t-0"
    plog = PartitionLog.open(path, SMALL)
    for i in range(10):
        append(plog, pbatch(5, 0, 2 * i))
    plog.close()
    for p in path.glob("*.snapshot"):
        p.unlink()
    plog = PartitionLog.open(path, SMALL, recovery_point=plog.log_end_offset)
    assert plog.producer_state.producers[5].last_seq == 19
    plog.close()


def test_truncation_rebuilds_state(tmp_path):
    path = tmp_path / "t-0"
    plog = PartitionLog.open(path, SMALL)
    for i in range(20):
        append(plog, pbatch(5, 0, 2 * i))
    plog.truncate_to(11)  # batches are 2 records: the one holding 10..11 goes
    assert plog.log_end_offset == 10
    assert plog.producer_state.producers[5].last_seq == 9
    assert all(int(p.stem) <= 10 for p in path.glob("*.snapshot"))
    assert append(plog, pbatch(5, 0, 10)).base_offset == 10
    plog.truncate_to(0)
    assert not plog.producer_state.producers
    plog.close()


def test_retention_deletes_old_snapshots(tmp_path):
    path = tmp_path / "t-0"
    plog = PartitionLog.open(path, SMALL)
    for i in range(30):
        append(plog, pbatch(5, 0, 2 * i))
    plog.maybe_increment_log_start_offset(plog.segments[-2].base_offset)
    plog.enforce_retention(0)
    first = plog.segments[0].base_offset
    assert all(int(p.stem) >= first for p in path.glob("*.snapshot"))
    assert 5 in plog.producer_state.producers  # its last batches are still in the log
    plog.close()


def test_snapshot_round_trip(tmp_path):
    ps = ProducerStateManager(tmp_path)
    data = pbatch(3, 1, 0) + pbatch(4, 0, 7, n=1)
    batches = parse_batches(data)
    ps.update(batches)
    ps.write_snapshot(42)
    ps2 = ProducerStateManager(tmp_path)
    assert ps2.load_latest_snapshot(100) == 42
    assert {k: (e.epoch, list(e.batches)) for k, e in ps2.producers.items()} == {
        k: (e.epoch, list(e.batches)) for k, e in ps.producers.items()
    }
    assert ps2.load_latest_snapshot(41) is None and not ps2.producers
    (tmp_path / "00000000000000000050.snapshot.tmp").write_bytes(b"partial")
    assert ps2.snapshot_offsets() == [42]
    assert not (tmp_path / "00000000000000000050.snapshot.tmp").exists()


def test_allocator_hands_out_blocks_and_bumps_only_its_own():
    blocks = iter([100, 5000])
    a = ProducerIdAllocator(lambda count: next(blocks), block_size=10)
    ids = [a.allocate() for _ in range(12)]
    assert ids == list(range(100, 110)) + [5000, 5001]
    assert a.issued(105) and a.issued(5001) and not a.issued(5002) and not a.issued(99)
    assert BLOCK_SIZE >= 100
