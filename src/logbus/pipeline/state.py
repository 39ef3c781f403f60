"""The stateful step of the delivery job: batch-transaction commit filter and (source, seqno) dedup.

One Spark stateful operator (applyInPandasWithState) keyed by a group key:

- `t:<txn>` for records of a batch transaction and its commit marker (lb.txn, lb.commit). The records are
  held until the marker arrives; a record is kept only if the marker's bus timestamp is at most
  `commit_window` after its own (Logbroker's 60 s window). Records whose marker never comes are dropped
  when the group's state expires, and logged. Repeats of a (source, seqno) within the transaction are dropped.
- `s:<source>` for every other record with lb.source / lb.seqno: a seqno seen before is a repeat (a failover
  may have written the record to two partitions) and is dropped.
- `p:<topic>-<partition>` for records with neither: they pass straight through, with no state.

Both remember what they saw for `dedup_window`: an entry is forgotten only when that much processing time
has passed since it was seen AND the group's bus time has moved that far past it (or four windows of
processing time have passed), so a job that falls behind does not forget early. Timeouts are on processing time (no event-time watermark), so no record is
ever dropped as "late". The batch timestamp Spark uses is stored in its offset log, so a micro-batch
re-run after a crash makes exactly the same decisions from the same state.
"""

from __future__ import annotations

import io
import json
import logging
import warnings
from typing import Iterator

import numpy as np
import pandas as pd
import pyarrow as pa

log = logging.getLogger("logbus.pipeline")

STATE_SCHEMA = (
    "pending binary, marker_ts long, sources string, src_idx binary, seqnos binary, seen_ms binary, ts_ms binary, max_ts long"
)

# Columns that go through the stateful step (and into the lake), in this order.
LAKE_COLUMNS = [
    ("topic", "string"),
    ("partition", "int"),
    ("offset", "long"),
    ("timestamp", "timestamp"),
    ("key", "binary"),
    ("value", "binary"),
    ("headers", "string"),
    ("source", "string"),
    ("seqno", "long"),
    ("created", "timestamp"),
    ("host", "string"),
    ("file", "string"),
    ("type", "string"),
    ("txn", "string"),
    ("origin", "string"),
    ("src", "string"),
]
LAKE_SCHEMA = ", ".join(f"{n} {t}" for n, t in LAKE_COLUMNS)
_NAMES = [n for n, _ in LAKE_COLUMNS]


def _arr(b: bytes | None) -> np.ndarray:
    return np.frombuffer(b, dtype=np.int64).copy() if b else np.empty(0, dtype=np.int64)


def _ts_ms(series: pd.Series) -> np.ndarray:
    """Bus timestamps as int64 ms (NaT, which Kafka never sends, as 0)."""
    s = pd.to_datetime(series, utc=True)
    ns = s.astype("int64").to_numpy()
    return np.where(s.isna().to_numpy(), 0, ns // 1_000_000)


def _concat(frames: list[pd.DataFrame]) -> pd.DataFrame:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # all-NA columns (e.g. no lb.host anywhere) are fine
        return pd.concat(frames, ignore_index=True)


def _to_ipc(df: pd.DataFrame) -> bytes:
    table = pa.Table.from_pandas(df, preserve_index=False)
    sink = io.BytesIO()
    with pa.ipc.new_stream(sink, table.schema) as w:
        w.write_table(table)
    return sink.getvalue()


def _from_ipc(b: bytes) -> pd.DataFrame:
    return pa.ipc.open_stream(io.BytesIO(b)).read_all().to_pandas()


class GroupLogic:
    """The function given to applyInPandasWithState, with its windows in ms."""

    def __init__(self, commit_window_ms: int, dedup_window_ms: int) -> None:
        self.commit_window_ms = int(commit_window_ms)
        self.dedup_window_ms = int(dedup_window_ms)

    def __call__(self, key: tuple, pdfs: Iterator[pd.DataFrame], state) -> Iterator[pd.DataFrame]:
        gkey = key[0]
        if gkey.startswith("p:"):
            # No transaction and no (source, seqno): nothing to hold or compare; straight through.
            for p in pdfs:
                if len(p):
                    yield p[_NAMES]
            return
        now = state.getCurrentProcessingTimeMs()
        if state.exists:
            pending_b, marker_ts, sources_j, idx_b, seq_b, seen_b, ts_b, max_ts = state.get
        else:
            pending_b, marker_ts, sources_j, idx_b, seq_b, seen_b, ts_b, max_ts = None, None, None, None, None, None, None, 0
        seen = _Seen(json.loads(sources_j) if sources_j else [], _arr(idx_b), _arr(seq_b), _arr(seen_b), _arr(ts_b))
        max_ts = max_ts or 0

        if state.hasTimedOut:
            rows = pd.DataFrame(columns=_NAMES + ["commit"])
        else:
            frames = [p for p in pdfs if len(p)]
            rows = _concat(frames) if len(frames) > 1 else (frames[0] if frames else pd.DataFrame(columns=_NAMES + ["commit"]))
        if len(rows):
            rows = rows.sort_values(["timestamp", "topic", "partition", "offset"], kind="stable", ignore_index=True)
            max_ts = max(max_ts, int(_ts_ms(rows["timestamp"]).max()))

        out: pd.DataFrame | None = None
        pending = _from_ipc(pending_b) if pending_b else None
        if gkey.startswith("t:"):
            markers = rows[rows["commit"].astype(bool)] if len(rows) else rows
            data = rows[~rows["commit"].astype(bool)][_NAMES] if len(rows) else rows.reindex(columns=_NAMES)
            if len(markers):
                first_marker = int(_ts_ms(markers["timestamp"]).min())
                marker_ts = first_marker if marker_ts is None else min(marker_ts, first_marker)
            if pending is not None and len(pending):
                data = _concat([pending, data]) if len(data) else pending
            if marker_ts is not None:
                if len(data):
                    late = (marker_ts - _ts_ms(data["timestamp"])) > self.commit_window_ms
                    if late.any():
                        log.warning("transaction %s: %d record(s) written more than %d ms before the commit marker were dropped",
                                    gkey[2:], int(late.sum()), self.commit_window_ms)
                    data = data[~late]
                out = seen.dedup(data, now)
                pending = None
            else:
                pending = data if len(data) else None
        else:
            if len(rows):
                out = seen.dedup(rows[_NAMES], now)

        # Forget what is older than the dedup window, in processing time and in this group's bus time.
        seen.forget(now, max_ts, self.dedup_window_ms)
        if pending is not None and state.hasTimedOut and marker_ts is None:
            log.warning("transaction %s: %d record(s) without a commit marker within the window were dropped",
                        gkey[2:], len(pending))
            pending = None

        if pending is None and not len(seen) and (marker_ts is None or state.hasTimedOut):
            if state.exists:
                state.remove()
        else:
            state.update((
                _to_ipc(pending) if pending is not None else None,
                marker_ts,
                json.dumps(seen.sources),
                seen.src_idx.tobytes(),
                seen.seqnos.tobytes(),
                seen.seen_ms.tobytes(),
                seen.ts_ms.tobytes(),
                int(max_ts),
            ))
            state.setTimeoutDuration(self.dedup_window_ms)
        if out is not None and len(out):
            yield out


class _Seen:
    """The (source, seqno) pairs a group has seen, with when (processing time) and their bus time; exact, no hashing."""

    def __init__(self, sources: list[str], src_idx: np.ndarray, seqnos: np.ndarray, seen_ms: np.ndarray, ts_ms: np.ndarray) -> None:
        self.sources = sources
        self.src_idx, self.seqnos, self.seen_ms, self.ts_ms = src_idx, seqnos, seen_ms, ts_ms

    def __len__(self) -> int:
        return len(self.seqnos)

    def dedup(self, data: pd.DataFrame, now: int) -> pd.DataFrame | None:
        """Rows whose (source, seqno) was not seen before (rows without one always pass); remembers the new ones."""
        if not len(data):
            return None
        has = (data["seqno"].notna() & data["source"].notna()).to_numpy()
        if not has.any():
            return data
        keyed = data[has]
        index = {s: i for i, s in enumerate(self.sources)}
        for s in keyed["source"].unique():
            if s not in index:
                index[s] = len(self.sources)
                self.sources.append(s)
        idx = keyed["source"].map(index).to_numpy(dtype=np.int64)
        sq = keyed["seqno"].to_numpy(dtype=np.int64)
        pairs = pd.MultiIndex.from_arrays([idx, sq])
        first = ~pairs.duplicated(keep="first")
        if len(self.seqnos):
            fresh = first & ~pairs.isin(pd.MultiIndex.from_arrays([self.src_idx, self.seqnos]))
        else:
            fresh = first
        kept = keyed[fresh]
        self.src_idx = np.concatenate([self.src_idx, idx[fresh]])
        self.seqnos = np.concatenate([self.seqnos, sq[fresh]])
        self.seen_ms = np.concatenate([self.seen_ms, np.full(int(fresh.sum()), now, dtype=np.int64)])
        self.ts_ms = np.concatenate([self.ts_ms, _ts_ms(keyed["timestamp"])[fresh]])
        return _concat([data[~has], kept]) if (~has).any() else kept

    def forget(self, now: int, max_ts: int, window_ms: int) -> None:
        if not len(self.seqnos):
            return
        age = now - self.seen_ms
        # Bus time keeps an entry while the job is behind, but never past four windows of processing time.
        keep = (age < window_ms) | (((max_ts - self.ts_ms) < window_ms) & (age < 4 * window_ms))
        if not keep.all():
            self.src_idx, self.seqnos = self.src_idx[keep], self.seqnos[keep]
            self.seen_ms, self.ts_ms = self.seen_ms[keep], self.ts_ms[keep]
            used = np.unique(self.src_idx)
            if len(used) < len(self.sources):
                remap = np.full(len(self.sources), -1, dtype=np.int64)
                remap[used] = np.arange(len(used))
                self.sources = [self.sources[i] for i in used]
                self.src_idx = remap[self.src_idx]
