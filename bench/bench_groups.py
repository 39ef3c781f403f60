"""Consumer-group throughput and rebalance times of one logbus broker with the librdkafka client.

1. Produces N 100-byte records (default 2,000,000) to a 16-partition topic.
2. Baseline, measured in the same run: one assign()-based consumer reads all 16 partitions.
3. A group of 4 consumer processes (range assignor, auto-commit) reads the same data: records/s
   from the first record to the last, and from subscribe() (including the group forming).
4. While records keep flowing (a background producer, 2000 records/s), one member close()s (it
   sends LeaveGroup): the time until the 3 others own all 16 partitions, and until each of the
   leaver's partitions has been consumed again by its new owner.
5. The same when a member is SIGKILLed: here the broker notices only when the member's session
   times out (session.timeout.ms = 6000, the broker's minimum), so the figure is dominated by it.

Run: python bench/bench_groups.py [--records N] [--json]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from brokerproc import BrokerProcess  # noqa: E402

PARTITIONS = 16
MEMBERS = 4
SESSION_TIMEOUT_MS = 6000
CONSUMER_TUNING = {"queued.min.messages": 1_000_000, "queued.max.messages.kbytes": 1_048_576}


def produce(bootstrap: str, topic: str, count: int, size: int = 100) -> float:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": 1, "linger.ms": 5, "batch.size": 1_000_000, "log_level": 4,
                         "queue.buffering.max.messages": 1_000_000, "queue.buffering.max.kbytes": 1_048_576,
                         "delivery.report.only.error": True})
    errors = [0]

    def on_delivery(err, _msg):
        if err is not None:
            errors[0] += 1

    value = b"v" * size
    start = time.perf_counter()
    for i in range(count):
        while True:
            try:
                producer.produce(topic, value, partition=i % PARTITIONS, on_delivery=on_delivery)
                break
            except BufferError:
                producer.poll(0.01)
    if producer.flush(300) or errors[0]:
        raise SystemExit(f"{errors[0]} records failed")
    return time.perf_counter() - start


def baseline_consume(bootstrap: str, topic: str, count: int) -> float:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-baseline", "enable.auto.commit": False, **CONSUMER_TUNING})
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
    got, first = 0, None
    deadline = time.monotonic() + 600
    while got < count and time.monotonic() < deadline:
        msgs = consumer.consume(num_messages=100_000, timeout=1.0)
        if msgs and first is None:
            first = time.perf_counter()
        got += sum(1 for m in msgs if m.error() is None)
    elapsed = time.perf_counter() - (first or time.perf_counter())
    consumer.close()
    if got < count:
        raise SystemExit(f"baseline consumed {got} of {count}")
    return elapsed


def member(idx: int, bootstrap: str, topic: str, group: str, events, leave, stop) -> None:
    """A group member in its own process; reports assignments and consumed batches on `events`."""
    owned: set[int] = set()

    def on_assign(c, partitions):
        owned.update(tp.partition for tp in partitions)
        events.put(("assign", idx, time.monotonic(), sorted(owned)))

    def on_revoke(c, partitions):
        owned.difference_update(tp.partition for tp in partitions)
        events.put(("assign", idx, time.monotonic(), sorted(owned)))

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                  "session.timeout.ms": SESSION_TIMEOUT_MS, "heartbeat.interval.ms": 1000, **CONSUMER_TUNING})
    c.subscribe([topic], on_assign=on_assign, on_revoke=on_revoke, on_lost=on_revoke)
    events.put(("subscribed", idx, time.monotonic(), None))
    while not stop.is_set():
        if leave.is_set():
            events.put(("leaving", idx, time.monotonic(), None))
            c.close()
            events.put(("left", idx, time.monotonic(), None))
            return
        msgs = c.consume(num_messages=10_000, timeout=0.1)
        if msgs:
            parts = sorted({m.partition() for m in msgs if m.error() is None})
            events.put(("batch", idx, time.monotonic(), (sum(1 for m in msgs if m.error() is None), parts)))
    c.close()


class Group:
    def __init__(self, bootstrap: str, topic: str, group: str) -> None:
        ctx = mp.get_context("spawn")  # no fork after librdkafka threads exist in this process
        self.events = ctx.Queue()
        self.stop = ctx.Event()
        self.leave = [ctx.Event() for _ in range(MEMBERS)]
        self.procs = [ctx.Process(target=member, args=(i, bootstrap, topic, group, self.events, self.leave[i], self.stop), daemon=True)
                      for i in range(MEMBERS)]
        self.owned: dict[int, set[int]] = {i: set() for i in range(MEMBERS)}
        self.consumed = 0
        self.first_batch: float | None = None
        self.last_batch: float | None = None
        self.subscribed: list[float] = []
        self.log: list[tuple] = []

    def start(self) -> None:
        for p in self.procs:
            p.start()

    def pump(self, timeout: float = 0.1) -> None:
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            try:
                kind, idx, t, data = self.events.get(timeout=max(remaining, 0.001))
            except Exception:  # queue.Empty
                return
            self.log.append((kind, idx, t, data))
            if kind == "assign":
                self.owned[idx] = set(data)
            elif kind == "subscribed":
                self.subscribed.append(t)
            elif kind == "batch":
                self.consumed += data[0]
                self.first_batch = self.first_batch or t
                self.last_batch = t
            elif kind in ("leaving", "left"):
                pass

    def wait(self, cond, timeout: float, what: str) -> float:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.pump(0.05)
            if cond():
                return time.monotonic()
        raise SystemExit(f"not within {timeout:g} s: {what}")

    def rebalance_after(self, gone: int, t0: float, alive: list[int], timeout: float) -> tuple[float, float]:
        """Seconds from t0 until `alive` own all partitions, and until each of `gone`'s partitions was consumed again."""
        moved = set(self.owned[gone])
        self.owned[gone] = set()
        t_owned = self.wait(lambda: set().union(*(self.owned[i] for i in alive)) == set(range(PARTITIONS))
                            and sum(len(self.owned[i]) for i in alive) == PARTITIONS, timeout, "the others own every partition")
        resumed: set[int] = set()

        def all_resumed() -> bool:
            for kind, idx, t, data in self.log:
                if kind == "batch" and idx in alive and t > t0:
                    resumed.update(p for p in data[1] if p in moved)
            self.log.clear()
            return resumed == moved

        t_resumed = self.wait(all_resumed, timeout, "the moved partitions are consumed again")
        return t_owned - t0, t_resumed - t0

    def shutdown(self) -> None:
        self.stop.set()
        for p in self.procs:
            p.join(timeout=15)
            if p.is_alive():
                p.kill()


def trickle(bootstrap: str, topic: str, stop: threading.Event, rate: int = 2000) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    n, start = 0, time.monotonic()
    while not stop.is_set():
        producer.produce(topic, b"t" * 100, partition=n % PARTITIONS)
        n += 1
        producer.poll(0)
        ahead = n / rate - (time.monotonic() - start)
        if ahead > 0:
            time.sleep(ahead)
    producer.flush(30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=2_000_000)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    count = args.records
    results: dict = {"records": count, "record_bytes": 100, "partitions": PARTITIONS, "members": MEMBERS, "cpus": os.cpu_count()}
    with tempfile.TemporaryDirectory() as tmp:
        broker = BrokerProcess(Path(tmp) / "data", config_toml="group_initial_rebalance_delay_ms = 200\n").start()
        try:
            admin = AdminClient({"bootstrap.servers": broker.bootstrap, "log_level": 0})
            topic = "bench-groups"
            admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(15)
            p_s = produce(broker.bootstrap, topic, count)
            results["produce_records_s"] = round(count / p_s)
            b_s = baseline_consume(broker.bootstrap, topic, count)
            results["baseline_assign_consumer_records_s"] = round(count / b_s)

            group = Group(broker.bootstrap, topic, "bench-group")
            group.start()
            try:
                group.wait(lambda: group.consumed >= count, 600, f"the group consumed {count} records")
                results["group_consume_records_s"] = round(count / (group.last_batch - group.first_batch))
                results["group_consume_records_s_from_subscribe"] = round(count / (group.last_batch - min(group.subscribed)))
                results["group_ratio_to_baseline"] = round(results["group_consume_records_s"] / results["baseline_assign_consumer_records_s"], 3)
                group.wait(lambda: all(len(group.owned[i]) == PARTITIONS // MEMBERS for i in range(MEMBERS)), 30, "4 partitions each")

                stop = threading.Event()
                feeder = threading.Thread(target=trickle, args=(broker.bootstrap, topic, stop), daemon=True)
                feeder.start()
                time.sleep(2.0)
                group.pump(0.2)
                group.log.clear()
                t0 = time.monotonic()
                group.leave[0].set()
                owned_s, resumed_s = group.rebalance_after(0, t0, [1, 2, 3], 60)
                results["leave_close_until_owned_s"] = round(owned_s, 3)
                results["leave_close_until_consuming_s"] = round(resumed_s, 3)

                group.wait(lambda: all(len(group.owned[i]) > 0 for i in (1, 2, 3)), 30, "stable after the leave")
                time.sleep(2.0)
                group.pump(0.2)
                group.log.clear()
                t0 = time.monotonic()
                os.kill(group.procs[1].pid, signal.SIGKILL)
                owned_s, resumed_s = group.rebalance_after(1, t0, [2, 3], 60)
                results["sigkill_until_owned_s"] = round(owned_s, 3)
                results["sigkill_until_consuming_s"] = round(resumed_s, 3)
                results["session_timeout_s"] = SESSION_TIMEOUT_MS / 1000
                stop.set()
                feeder.join(timeout=30)
            finally:
                group.shutdown()
        finally:
            broker.stop()

    if args.json:
        print(json.dumps(results, indent=2))
        return
    r = results
    print(f"{r['records']:,} records of 100 B over {PARTITIONS} partitions, {MEMBERS} group members (processes), {r['cpus']} CPUs")
    print(f"produce:                                  {r['produce_records_s']:>12,} records/s")
    print(f"baseline, one assign() consumer:          {r['baseline_assign_consumer_records_s']:>12,} records/s")
    print(f"group of {MEMBERS} (first to last record):       {r['group_consume_records_s']:>12,} records/s "
          f"(x{r['group_ratio_to_baseline']} of the baseline; {r['group_consume_records_s_from_subscribe']:,}/s counting the group forming)")
    print(f"member close() (LeaveGroup): 3 others own all partitions after {r['leave_close_until_owned_s']:.3f} s, "
          f"consume the moved ones after {r['leave_close_until_consuming_s']:.3f} s")
    print(f"member SIGKILLed: 2 others own all partitions after {r['sigkill_until_owned_s']:.3f} s, "
          f"consume the moved ones after {r['sigkill_until_consuming_s']:.3f} s "
          f"(dominated by session.timeout.ms = {r['session_timeout_s']:g} s: the broker notices a dead member only then)")


if __name__ == "__main__":
    main()
