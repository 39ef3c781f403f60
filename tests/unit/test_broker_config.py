from pathlib import Path

import pytest

from logbus.broker.config import BrokerConfig


def test_layers_defaults_toml_env_flags(tmp_path):
    toml = tmp_path / "b.toml"
    toml.write_text('broker_id = 3\nlisten = "127.0.0.1:9500"\nrack = "r1"\n[topic_defaults]\n"retention.ms" = 1000\n"unclean.leader.election.enable" = true\n')
    cfg = BrokerConfig.load(toml, env={"LOGBUS_RACK": "r2", "LOGBUS_AUTO_CREATE_TOPICS": "true"}, data_dir="/x")
    assert cfg.broker_id == 3 and cfg.listen_port == 9500 and cfg.rack == "r2" and cfg.auto_create_topics is True
    assert cfg.data_dir == Path("/x")
    assert cfg.topic_defaults.retention_ms == 1000 and cfg.topic_defaults.unclean_leader_election_enable is True
    assert cfg.advertised_host_port == ("127.0.0.1", 9500)


@pytest.mark.parametrize("bad", [{"listen": "nohost"}, {"broker_id": "x"}, {"auto_create_topics": "maybe"}, {"nonsense": 1}])
def test_bad_settings_are_refused(bad):
    with pytest.raises(ValueError):
        BrokerConfig.load(None, env={}, **bad)
