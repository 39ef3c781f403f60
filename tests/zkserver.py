"""A real ZooKeeper server for tests, from Debian's `zookeeper` package.

`ZooKeeperServer(data_dir).start()` runs `org.apache.zookeeper.server.ZooKeeperServerMain` on a
free loopback port and waits (bounded) until it answers `ruok` with `imok`. The `zookeeper`
fixture (session-scoped) yields "127.0.0.1:port"; use it from a test module with
`from zkserver import zookeeper  # noqa: F401`. Each test should use its own chroot.

The server runs with tickTime 500 ms, so sessions from 1 s (2 ticks) to 10 s (20 ticks) can be
negotiated and short session timeouts in tests are honoured.
"""

from __future__ import annotations

import glob
import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest

TICK_MS = 500
JAR_DIRS = ("/usr/share/java", "/usr/share/zookeeper", "/usr/share/zookeeper/lib")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def zookeeper_classpath() -> str | None:
    """The server jar (its manifest names its dependencies) plus jute, wherever the package put them."""
    for d in JAR_DIRS:
        jar = os.path.join(d, "zookeeper.jar")
        if os.path.exists(jar):
            extra = [p for p in glob.glob(os.path.join(d, "zookeeper-jute*.jar"))[:1]]
            return ":".join([jar, *extra])
        found = sorted(glob.glob(os.path.join(d, "zookeeper-3*.jar")))
        if found:
            return ":".join(found + sorted(glob.glob(os.path.join(d, "*.jar"))))
    return None


def four_letter(port: int, word: str, timeout: float = 1.0) -> str:
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(word.encode())
        chunks = []
        while True:
            b = s.recv(4096)
            if not b:
                break
            chunks.append(b)
    return b"".join(chunks).decode(errors="replace")


class ZooKeeperServer:
    def __init__(self, data_dir: Path, port: int | None = None) -> None:
        self.data_dir = Path(data_dir)
        self.port = port or _free_port()
        self.proc: subprocess.Popen | None = None
        self.log_path = self.data_dir / "zookeeper.log"

    @property
    def hosts(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, timeout: float = 30.0) -> "ZooKeeperServer":
        java = shutil.which("java")
        cp = zookeeper_classpath()
        if java is None or cp is None:
            raise RuntimeError("ZooKeeper needs Debian's zookeeper package and java: apt-get install -y zookeeper")
        self.data_dir.mkdir(parents=True, exist_ok=True)
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [
                java,
                "-Xmx256m",
                "-Dzookeeper.4lw.commands.whitelist=ruok,srvr,stat",
                "-Dzookeeper.admin.enableServer=false",
                "-Dzookeeper.clientPortAddress=127.0.0.1",
                "-cp",
                cp,
                "org.apache.zookeeper.server.ZooKeeperServerMain",
                str(self.port),
                str(self.data_dir / "data"),
                str(TICK_MS),
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"ZooKeeper exited with {self.proc.returncode}: {self.log_path.read_text()[-2000:]}")
            try:
                if four_letter(self.port, "ruok") == "imok":
                    return self
            except OSError:
                pass
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"ZooKeeper did not answer ruok on port {self.port} within {timeout} s")

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)


@pytest.fixture(scope="session")
def zookeeper(tmp_path_factory):
    """A ZooKeeper server on a free loopback port for the whole test session: "127.0.0.1:port"."""
    if zookeeper_classpath() is None:
        pytest.fail("ZooKeeper is not installed: scripts/test.sh installs Debian's zookeeper package")
    server = ZooKeeperServer(tmp_path_factory.mktemp("zookeeper")).start()
    yield server.hosts
    server.stop()
