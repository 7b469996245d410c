"""Settings validated together: a store node's SSD tier, HA vs a local journal."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from mooncake_core.config.loader import ConfigError, load_config
from mooncake_core.config.models import StoreNodeConfig


def test_both_or_neither() -> None:
    assert StoreNodeConfig(name="n0").ssd_dir is None
    on = StoreNodeConfig.model_validate({"name": "n0", "ssd_dir": "/var/ssd", "ssd_size": "1GiB"})
    assert int(on.ssd_size) == 1 << 30


@pytest.mark.parametrize("kw", [{"ssd_dir": "/var/ssd"}, {"ssd_size": "1GiB"}])
def test_one_without_the_other_is_refused(kw: dict[str, str]) -> None:
    with pytest.raises(ValidationError, match="ssd_dir and ssd_size go together"):
        StoreNodeConfig.model_validate({"name": "n0", **kw})


def test_ha_and_a_local_journal_are_exclusive() -> None:
    from mooncake_core.config.models import ClusterConfig

    ClusterConfig.model_validate({"master": {"data_dir": "/var/j"}})
    ClusterConfig.model_validate({"etcd": {"enabled": True}})
    with pytest.raises(ValidationError, match=r"master\.data_dir: not with etcd\.enabled"):
        ClusterConfig.model_validate({"master": {"data_dir": "/var/j"}, "etcd": {"enabled": True}})


def test_conductor_predictor_files_go_together() -> None:
    from mooncake_core.config.models import ConductorConfig

    ConductorConfig(prefill_model="a.json", decode_model="b.json")  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match=r"prefill_model and conductor\.decode_model go"):
        ConductorConfig(prefill_model="a.json")  # type: ignore[arg-type]


def test_removed_conductor_rpc_port_is_named() -> None:
    from mooncake_core.config.models import ConductorConfig

    with pytest.raises(ValidationError, match=r"conductor\.rpc_port was removed"):
        ConductorConfig.model_validate({"rpc_port": 50061})


def test_a_port_clash_is_one_line_naming_both_keys_not_the_config_back(tmp_path: Path) -> None:
    p = tmp_path / "mooncake.yaml"
    p.write_text("master:\n  port: 50051\n  metrics_port: 50051\n  data_dir: /tmp/x\n")
    with pytest.raises(ConfigError) as info:
        load_config(p)
    assert info.value.problems == [
        "master.metrics_port: port 50051 on host 'local' already used by master.port"
    ]
    # A plain bad value still quotes what it got.
    p.write_text("master:\n  port: 99999999\n")
    with pytest.raises(ConfigError) as info:
        load_config(p)
    assert info.value.problems == [
        "master.port: Input should be less than or equal to 65535 (got 99999999)"
    ]
