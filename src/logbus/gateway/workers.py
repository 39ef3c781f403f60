"""`logbus gateway --workers N`: one gateway on N cores.

One gateway process is one event loop, so about one core. With `workers` > 1 the `logbus gateway` process is a
supervisor that starts N worker processes (the same command, with LOGBUS_GATEWAY_WORKER_INDEX set) and does
nothing else:

- every worker listens on the gateway's address with SO_REUSEPORT, so the kernel spreads new connections over
  them, and on a port of its own where the other workers reach it (`Peers`: a request for a session held by
  another worker is forwarded there);
- every worker is a gateway of its own in the shared state store (`<gateway_id>-w<i>`, files in
  `<data_dir>/worker-<i>`): fencing, ownership and recovery work between workers exactly as between gateways on
  several hosts. They share the batch-transaction directory and, for /metrics, a multiprocess metrics directory;
- a worker that exits is started again after a pause (1 s, doubling while it keeps dying early, up to 30 s);
  SIGTERM or SIGINT is passed on to every worker, which finishes its writes in flight, and the supervisor waits.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import signal
import subprocess
import sys
import time

from prometheus_client.multiprocess import mark_process_dead

from logbus.gateway.config import GatewayConfig

WORKER_ENV = "LOGBUS_GATEWAY_WORKER_INDEX"
_PR_SET_PDEATHSIG = 1
_EARLY_EXIT_S = 10.0     # a worker that dies sooner than this after its start is restarted more slowly


class _Worker:
    def __init__(self, index: int) -> None:
        self.index = index
        self.proc: subprocess.Popen | None = None
        self.started = 0.0
        self.restart_at = 0.0
        self.delay = 1.0


def _end_with_parent() -> None:
    """In the worker, before it runs: a SIGTERM when the supervisor dies, even by SIGKILL (Linux prctl)."""
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


def run_workers(config: GatewayConfig, argv: list[str]) -> int:
    """Start `config.workers` workers running `logbus <argv>`, keep them running until SIGTERM/SIGINT; returns the
    exit status."""
    try:
        lock = config.lock_data_dir()   # noqa: F841 - held until this process ends
    except RuntimeError as e:
        print(f"logbus gateway: {e}", file=sys.stderr)
        return 1
    metrics_dir = config.data_dir.resolve() / "metrics"
    shutil.rmtree(metrics_dir, ignore_errors=True)   # counters start at zero with the gateway, as in one process
    metrics_dir.mkdir(parents=True)
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(metrics_dir)}
    workers = [_Worker(i) for i in range(config.workers)]
    stopping = []
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda signum, frame: stopping.append(signum))

    def start(w: _Worker) -> None:
        w.proc = subprocess.Popen([sys.executable, "-m", "logbus.cli", *argv], env={**env, WORKER_ENV: str(w.index)},
                                  preexec_fn=_end_with_parent)
        w.started = time.monotonic()

    for w in workers:
        start(w)
    print(f"logbus gateway listening on {config.url} with {config.workers} workers "
          f"(pids {', '.join(str(w.proc.pid) for w in workers)})", flush=True)
    while not stopping:
        now = time.monotonic()
        for w in workers:
            if w.proc is not None and w.proc.poll() is not None:
                code = w.proc.returncode
                mark_process_dead(w.proc.pid, str(metrics_dir))
                early = now - w.started < _EARLY_EXIT_S
                if not early:
                    w.delay = 1.0
                w.restart_at = now + w.delay
                print(f"logbus gateway: worker {w.index} (pid {w.proc.pid}) exited with {code}; "
                      f"starting it again in {w.delay:.0f} s", file=sys.stderr, flush=True)
                if early:
                    w.delay = min(w.delay * 2, 30.0)   # the next pause, should it die early again
                w.proc = None
            elif w.proc is None and now >= w.restart_at:
                start(w)
        time.sleep(0.2)
    for w in workers:
        if w.proc is not None and w.proc.poll() is None:
            w.proc.send_signal(signal.SIGTERM)
    # each worker drains its writes within about the delivery timeout
    deadline = time.monotonic() + config.delivery_timeout_ms / 1000 + 20
    status = 0
    for w in workers:
        if w.proc is None:
            continue
        try:
            code = w.proc.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            w.proc.kill()
            code = w.proc.wait()
        status = status or (code if code > 0 else 0)
    return status


def worker_index() -> int | None:
    """The index of this process when a supervisor started it as a worker."""
    value = os.environ.get(WORKER_ENV)
    return int(value) if value is not None else None

