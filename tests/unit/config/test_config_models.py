"""Config models: defaults, the shipped file, and errors that name the key."""

from pathlib import Path

import pytest

from mooncake_core.config import ClusterConfig, ConfigError, load_config, parse_config
from mooncake_core.config.docgen import render

ROOT = Path(__file__).resolve().parents[3]


def test_shipped_yaml_is_the_embedded_default() -> None:
    assert load_config(ROOT / "mooncake.yaml") == ClusterConfig()


def test_embedded_default_is_all_loopback() -> None:
    cfg = ClusterConfig()
    assert [h.address for h in cfg.hosts] == ["127.0.0.1"]
    assert [n.name for n in cfg.store_nodes] == ["store-0", "store-1"]
    assert cfg.master.port == 50051 and cfg.master.metrics_port == 9003


def test_configuration_reference_is_current() -> None:
    assert (ROOT / "docs" / "configuration.md").read_text() == render()


@pytest.mark.parametrize(
    ("data", "key", "fragment"),
    [
        ({"master": {"port": "fast"}}, "master.port", "valid integer"),
        ({"master": {"port": 70000}}, "master.port", "less than or equal to 65535"),
        ({"master": {"eviction_high_watermark": 1.5}}, "master.eviction_high_watermark", "1"),
        ({"master": {"put_release_s": 10.0}}, "master", "at least put_timeout_s (30.0)"),
        ({"master": {"prot": 1}}, "master.prot", "unknown key"),
        ({"colour": "blue"}, "colour", "unknown key"),
        ({"transfer": {"protocol": "carrier-pigeon"}}, "transfer.protocol", "'auto'"),
        (
            {"store_nodes": [{"name": "a", "segment_size": "1KiB"}]},
            "store_nodes.0.segment_size",
            "greater",
        ),
    ],
)
def test_errors_name_the_key(data: dict, key: str, fragment: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_config(data, "test.yaml")
    problems = info.value.problems
    assert any(p.startswith(f"{key}: ") and fragment in p for p in problems), problems


def test_port_clash_is_reported_with_both_owners() -> None:
    with pytest.raises(ConfigError) as info:
        parse_config({"dashboard": {"port": 50051}})
    assert "dashboard.port" in str(info.value) and "master.port" in str(info.value)


def test_unknown_host_reference() -> None:
    with pytest.raises(ConfigError, match="unknown host 'gpu-9'"):
        parse_config({"master": {"host": "gpu-9"}})


def test_sizes_accept_units() -> None:
    cfg = parse_config({"store_nodes": [{"name": "s", "segment_size": "64MiB"}]})
    assert cfg.store_nodes[0].segment_size == 64 << 20


def test_model_head_divisibility() -> None:
    with pytest.raises(ConfigError, match="kv_heads"):
        parse_config({"model": {"heads": 8, "kv_heads": 3}})


def test_missing_and_non_yaml_files(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(tmp_path / "nope.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("master: [unclosed\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(bad)
    scalar = tmp_path / "scalar.yaml"
    scalar.write_text("42\n")
    with pytest.raises(ConfigError, match="expected a mapping"):
        load_config(scalar)


def test_env_variable_selects_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    f = tmp_path / "c.yaml"
    f.write_text("name: from-env\n")
    monkeypatch.setenv("MOONCAKE_CONFIG", str(f))
    assert load_config().name == "from-env"
