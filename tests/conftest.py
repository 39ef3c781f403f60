import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from brokerproc import BrokerProcess  # noqa: E402


@pytest.fixture
def broker(tmp_path):
    """A fresh broker process on a free loopback port."""
    b = BrokerProcess(tmp_path / "data").start()
    yield b
    b.stop()


@pytest.fixture
def broker_factory(tmp_path):
    """Start brokers with custom TOML settings; all are stopped at the end."""
    started: list[BrokerProcess] = []

    def make(config_toml: str | None = None, data_dir: Path | None = None, port: int | None = None, extra_args=None) -> BrokerProcess:
        b = BrokerProcess(data_dir or tmp_path / f"data{len(started)}", port=port, config_toml=config_toml, extra_args=extra_args).start()
        started.append(b)
        return b

    yield make
    for b in started:
        b.stop()


@pytest.fixture
def cluster_factory(tmp_path):
    """Start clusters of broker processes: cluster_factory(brokers=3, racks=[...], metadata=URL, settings={...})."""
    from clusterproc import ClusterProcess

    started: list[ClusterProcess] = []

    def make(**kwargs) -> ClusterProcess:
        c = ClusterProcess(tmp_path / f"cluster{len(started)}", **kwargs)
        started.append(c)
        return c.start()

    yield make
    for c in started:
        c.stop()
