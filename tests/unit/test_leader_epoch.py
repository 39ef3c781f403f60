"""The leader-epoch cache and follower appends: what OffsetForLeaderEpoch and truncation rely on."""

from logbus.protocol.records import encode_batch, parse_batches
from logbus.storage.config import LogConfig
from logbus.storage.leader_epoch import LeaderEpochCache
from logbus.storage.log import PartitionLog


def test_end_offsets_by_epoch(tmp_path):
    cache = LeaderEpochCache(tmp_path)
    cache.assign(0, 0)
    cache.assign(2, 10)
    cache.assign(5, 30)
    cache.assign(4, 40)  # older epoch: ignored
    assert cache.end_offset_for(0, 50) == (0, 10)
    assert cache.end_offset_for(1, 50) == (0, 10)  # epoch 1 never led here: epoch 0 ended at 10
    assert cache.end_offset_for(3, 50) == (2, 30)
    assert cache.end_offset_for(5, 50) == (5, 50)
    assert cache.end_offset_for(9, 50) == (5, 50)
    cache.truncate_from_end(30)
    assert cache.entries == [(0, 0), (2, 10)]
    cache.truncate_from_start(12)
    assert cache.entries == [(2, 12)]
    assert LeaderEpochCache(tmp_path).entries == [(2, 12)], "the checkpoint survives a reopen"


def test_leader_stamps_epochs_and_follower_copies_them(tmp_path):
    leader = PartitionLog.open(tmp_path / "l-0", LogConfig())
    for epoch in (0, 0, 3):
        data = encode_batch([b"a", b"b"])
        leader.append(data, parse_batches(data), leader_epoch=epoch)
    assert leader.leader_epochs.entries == [(0, 0), (3, 4)]
    copied = leader.read(0, 1 << 20)
    batches = parse_batches(copied)
    assert [b.partition_leader_epoch for b in batches] == [0, 0, 3]

    follower = PartitionLog.open(tmp_path / "f-0", LogConfig())
    follower.append_as_follower(copied, batches)
    assert follower.log_end_offset == 6 and follower.leader_epochs.entries == [(0, 0), (3, 4)]
    follower.truncate_to(4)
    assert follower.leader_epochs.entries == [(0, 0)]
    follower.close()

    (tmp_path / "l-0" / "leader-epoch-checkpoint").unlink()
    leader.close()
    reopened = PartitionLog.open(tmp_path / "l-0", LogConfig(), recovery_point=6)
    assert reopened.leader_epochs.entries == [(0, 0), (3, 4)], "rebuilt from batch headers"
