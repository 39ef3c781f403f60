"""Throughput of the produce-side batch path: parse_batches (with and without CRC) and
assign_offsets, against a plain bytes copy of the same buffer measured in the same run."""

from __future__ import annotations

import argparse
import time

from logbus.protocol.records import assign_offsets, encode_batch, parse_batches


def best_of(fn, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--total", type=int, default=1 << 20, help="buffer size in bytes")
    ap.add_argument("--record", type=int, default=1024, help="record value size")
    ap.add_argument("--records-per-batch", type=int, nargs="*", default=[1, 16])
    ap.add_argument("--repeat", type=int, default=50)
    args = ap.parse_args()

    for per_batch in args.records_per_batch:
        batch = encode_batch([b"x" * args.record] * per_batch)
        n = max(1, args.total // len(batch))
        data = batch * n
        mb = len(data) / 1e6

        copy_s = best_of(lambda: bytearray(data), args.repeat)
        parse_s = best_of(lambda: parse_batches(data), args.repeat)
        parse_nocrc_s = best_of(lambda: parse_batches(data, verify_crc=False), args.repeat)
        headers = parse_batches(data)
        assign_s = best_of(lambda: assign_offsets(data, headers, 1000), args.repeat)
        lat_s = best_of(lambda: assign_offsets(data, headers, 1000, log_append_time_ms=1), args.repeat)

        print(f"{n} batches x {per_batch} records x {args.record} B = {len(data)} bytes")
        print(f"  {'bytes copy (baseline)':34s} {copy_s * 1e6:9.1f} us {mb / copy_s:9.0f} MB/s")
        for name, s in (
            ("parse_batches (CRC)", parse_s),
            ("parse_batches (no CRC)", parse_nocrc_s),
            ("assign_offsets (CreateTime)", assign_s),
            ("assign_offsets (LogAppendTime)", lat_s),
            ("parse (no CRC) + assign", parse_nocrc_s + assign_s),
            ("parse (CRC) + assign", parse_s + assign_s),
        ):
            print(f"  {name:34s} {s * 1e6:9.1f} us {mb / s:9.0f} MB/s  {s / copy_s:6.2f}x copy")


if __name__ == "__main__":
    main()
