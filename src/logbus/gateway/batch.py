"""Batch transactions, Logbroker's older write API: store, commit_request, commit.

- `store` keeps a chunk in local durable temporary storage: `<txn_dir>/<txn_id>/<n>.chunk` (a JSON header
  line, then the data), written to a temporary name, fsync'd, renamed, and the directory fsync'd. The workers of
  a gateway share `txn_dir` (default `<data_dir>/txn`), and a transaction's calls are serialised by a file lock. A transaction
  id may be given by the client (letters, digits, '_' and '-') or is made up by the gateway.
- `commit_request` writes every stored chunk, in order, to one partition of the topic (an online one, chosen by the
  transaction id) with `lb.txn` = the transaction id. Each record also carries `lb.source` / `lb.seqno`: the
  client's when it gave them, else `txn:<id>` and the chunk number, so a chunk written twice (a commit_request
  retried after a crash between the writes and the local state change) is a repeat the pipeline drops.
- `commit` writes a small marker record (empty value, `lb.txn`, `lb.commit` = "") to the same partition.
  A commit after `txn_window_ms` since the commit request is refused (the readers would drop the records anyway).

Readers (the read API here, and the pipeline) deliver a transaction's records only when its marker is in the
partition at most `txn_window_ms` (bus time) after them; a transaction without a marker is never delivered.
The local files of a committed transaction are removed; its small state file stays, so a repeated call gets the
same answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import os
import re
import secrets
import shutil
import time
from pathlib import Path
from typing import Any

from logbus.gateway.errors import GatewayError
from logbus.gateway.kafka import stable_hash
from logbus.gateway.store import TopicRecord

_TXN_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


def _fsync_write(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    dfd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


class BatchTransactions:
    def __init__(self, gw: Any) -> None:
        self.gw = gw
        self.root = gw.config.txn_root
        self.root.mkdir(parents=True, exist_ok=True)
        self._locks: dict[str, asyncio.Lock] = {}

    @contextlib.asynccontextmanager
    async def _locked(self, txn_id: str):
        """One call at a time per transaction: within this process (an asyncio lock), and among the workers that
        share the directory (an flock on `<txn_id>.lock`, taken off the event loop)."""
        if not _TXN_ID.match(txn_id or ""):
            raise GatewayError(400, "bad_request", "txn_id must be 1-64 letters, digits, '_' or '-'")
        async with self._locks.setdefault(txn_id, asyncio.Lock()):
            fd = os.open(self.root / f"{txn_id}.lock", os.O_CREAT | os.O_RDWR, 0o644)
            try:
                await self.gw.run_blocking(fcntl.flock, fd, fcntl.LOCK_EX)
                yield
            finally:
                os.close(fd)   # closing the descriptor releases the flock

    def _dir(self, txn_id: str) -> Path:
        return self.root / txn_id

    def _meta(self, txn_id: str) -> dict | None:
        p = self._dir(txn_id) / "state.json"
        if not p.exists():
            return None
        return json.loads(p.read_text())

    def _save_meta(self, txn_id: str, meta: dict) -> None:
        _fsync_write(self._dir(txn_id) / "state.json", json.dumps(meta).encode())

    def _owned(self, txn_id: str, tenant: str | None) -> dict:
        if not _TXN_ID.match(txn_id or ""):
            raise GatewayError(400, "bad_request", "txn_id must be 1-64 letters, digits, '_' or '-'")
        meta = self._meta(txn_id)
        if meta is None:
            raise GatewayError(404, "unknown_transaction", f"no transaction {txn_id!r} on this gateway")
        if tenant is not None and meta["tenant"] != tenant:
            raise GatewayError(403, "forbidden", "the transaction belongs to another tenant")
        return meta

    async def store(self, tenant: str, topic: TopicRecord, txn_id: str | None, data: bytes, source: str | None,
                    seqno: int | None, created_ms: int, host: str, file: str, type_: str) -> dict:
        if txn_id is None:
            txn_id = secrets.token_hex(12)
        async with self._locked(txn_id):   # checks the id
            d = self._dir(txn_id)
            meta = self._meta(txn_id)
            if meta is None:
                d.mkdir(parents=True, exist_ok=True)
                meta = {"txn_id": txn_id, "tenant": tenant, "topic": topic.logical, "physical": topic.physical,
                        "state": "open", "chunks": 0, "bytes": 0, "created_ms": int(time.time() * 1000)}
            elif meta["tenant"] != tenant:
                raise GatewayError(403, "forbidden", "the transaction belongs to another tenant")
            elif meta["physical"] != topic.physical:
                raise GatewayError(409, "conflict", f"transaction {txn_id!r} belongs to topic {meta['topic']}")
            elif meta["state"] != "open":
                raise GatewayError(409, "conflict", f"transaction {txn_id!r} is {meta['state']}: no more chunks can be stored")
            n = meta["chunks"] + 1
            header = {"source": source, "seqno": seqno, "created": created_ms, "host": host, "file": file, "type": type_}
            await self.gw.run_blocking(_fsync_write, d / f"{n:08d}.chunk", json.dumps(header).encode() + b"\n" + data)
            meta["chunks"] = n
            meta["bytes"] += len(data)
            await self.gw.run_blocking(self._save_meta, txn_id, meta)
            self.gw.metrics.txn.labels("store").inc()
            return {"txn_id": txn_id, "chunk": n, "state": "open"}

    async def commit_request(self, tenant: str, txn_id: str) -> dict:
        async with self._locked(txn_id):
            meta = self._owned(txn_id, tenant)
            if meta["state"] != "open":
                return self._answer(meta)
            if meta["chunks"] == 0:
                raise GatewayError(409, "conflict", f"transaction {txn_id!r} has no stored chunks")
            gw = self.gw
            topic = meta["physical"]
            th = await gw.run_blocking(gw.health.ensure, topic)
            online = th.online_partitions() or sorted(th.partitions)
            partition = online[stable_hash(txn_id) % len(online)]
            d = self._dir(txn_id)
            futures = []
            for n in range(1, meta["chunks"] + 1):
                raw = await gw.run_blocking((d / f"{n:08d}.chunk").read_bytes)
                line, _, data = raw.partition(b"\n")
                h = json.loads(line)
                source = h["source"] or f"txn:{txn_id}"
                seqno = h["seqno"] if h["seqno"] is not None else n
                headers = [("lb.source", source.encode()), ("lb.seqno", str(seqno).encode()),
                           ("lb.created", str(h["created"]).encode()), ("lb.host", h["host"].encode()),
                           ("lb.file", h["file"].encode()), ("lb.type", h["type"].encode()),
                           ("lb.origin", gw.config.dc.encode()), ("lb.txn", txn_id.encode())]
                futures.append(await gw.producer.produce(topic, partition, data, headers, int(time.time() * 1000)))
            try:
                results = await asyncio.gather(*futures)
            except Exception as e:  # some records may be in the bus: a retried commit_request writes them again
                raise GatewayError(503, "not_written", f"commit_request failed ({e}); retry it") from None
            meta.update(state="requested", partition=partition, first_offset=results[0][1], last_offset=results[-1][1],
                        requested_ms=int(time.time() * 1000))
            await gw.run_blocking(self._save_meta, txn_id, meta)
            gw.metrics.txn.labels("commit_request").inc()
            return self._answer(meta)

    async def commit(self, tenant: str, txn_id: str) -> dict:
        async with self._locked(txn_id):
            meta = self._owned(txn_id, tenant)
            if meta["state"] == "committed":
                return self._answer(meta)
            if meta["state"] != "requested":
                raise GatewayError(409, "conflict", f"transaction {txn_id!r} is {meta['state']}: call commit_request first")
            gw = self.gw
            if int(time.time() * 1000) - meta["requested_ms"] > gw.config.txn_window_ms:
                raise GatewayError(409, "window_passed", f"the commit window of {gw.config.txn_window_ms} ms after commit_request has passed; the transaction will not be delivered")
            headers = [("lb.txn", txn_id.encode()), ("lb.commit", b""), ("lb.origin", gw.config.dc.encode())]
            try:
                p, offset = await (await gw.producer.produce(meta["physical"], meta["partition"], b"", headers, int(time.time() * 1000)))
            except Exception as e:
                raise GatewayError(503, "not_written", f"commit marker not written ({e}); retry commit") from None
            meta.update(state="committed", commit_offset=offset, committed_ms=int(time.time() * 1000))
            await gw.run_blocking(self._save_meta, txn_id, meta)
            d = self._dir(txn_id)
            for f in d.glob("*.chunk"):
                f.unlink()
            gw.metrics.txn.labels("commit").inc()
            return self._answer(meta)

    async def abort(self, tenant: str, txn_id: str) -> dict:
        async with self._locked(txn_id):
            meta = self._owned(txn_id, tenant)
            if meta["state"] == "committed":
                raise GatewayError(409, "conflict", f"transaction {txn_id!r} is committed")
            await self.gw.run_blocking(shutil.rmtree, self._dir(txn_id), True)
            self._locks.pop(txn_id, None)
            return {"txn_id": txn_id, "state": "aborted"}

    def describe(self, tenant: str | None, txn_id: str) -> dict:
        return self._answer(self._owned(txn_id, tenant))

    @staticmethod
    def _answer(meta: dict) -> dict:
        keys = ("txn_id", "topic", "state", "chunks", "bytes", "partition", "first_offset", "last_offset", "commit_offset")
        return {k: meta[k] for k in keys if k in meta}
