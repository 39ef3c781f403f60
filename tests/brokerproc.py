"""Start real logbus broker processes on free loopback ports for the tests."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until(predicate, timeout: float, what: str):
    """Poll `predicate` until it returns something truthy (returned) or `timeout` s pass (TimeoutError);
    an exception counts as "not yet", since a cluster may be between states."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            last = predicate()
            if last:
                return last
        except Exception as e:
            last = e
        time.sleep(0.2)
    raise TimeoutError(f"{what} not reached within {timeout}s (last: {last!r})")


class ServiceProcess:
    """A logbus server process started by a test: `kill()` is SIGKILL, `stop()` is SIGTERM (clean shutdown)."""

    proc: subprocess.Popen | None = None
    log_path: Path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def kill(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=10)

    def stop(self, timeout: float = 30.0) -> int:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.kill()
        return self.proc.returncode if self.proc else 0

    def alive(self) -> bool:
        return bool(self.proc) and self.proc.poll() is None


class BrokerProcess(ServiceProcess):
    """One `logbus broker` process."""

    def __init__(self, data_dir: Path, port: int | None = None, config_toml: str | None = None, extra_args: list[str] | None = None) -> None:
        self.data_dir = Path(data_dir)
        self.port = port or free_port()
        self.config_toml = config_toml
        self.extra_args = extra_args or []
        self.proc: subprocess.Popen | None = None
        self.log_path = self.data_dir.parent / f"broker-{self.port}.log"

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, timeout: float = 30.0) -> "BrokerProcess":
        args = [sys.executable, "-m", "logbus.cli", "broker", "--listen", self.bootstrap, "--data-dir", str(self.data_dir)]
        if self.config_toml is not None:
            cfg = self.data_dir.parent / f"broker-{self.port}.toml"
            cfg.write_text(self.config_toml)
            args += ["--config", str(cfg)]
        args += self.extra_args
        self._log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(args, stdout=self._log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"broker exited with {self.proc.returncode}:\n{self.log()}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    return self
            except OSError:
                time.sleep(0.05)
        self.kill()
        raise TimeoutError(f"broker did not listen within {timeout}s:\n{self.log()}")
