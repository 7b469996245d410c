"""`mooncake topo discover|show` through typer's CliRunner, plus one real subprocess run."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from mooncake_cli.main import app

runner = CliRunner()


def _flat(text: str) -> str:
    """Join the lines rich wrapped at the console width."""
    return " ".join(text.split())


NICS = [f"mlx5_{k}" for k in range(8)]


def test_discover_prints_the_matrix_json(gpu8_root: Path) -> None:
    result = runner.invoke(app, ["topo", "discover", "--sysfs-root", str(gpu8_root)])
    assert result.exit_code == 0, result.output
    matrix = json.loads(result.stdout)
    assert matrix["cuda:3"] == [["mlx5_3"], [n for n in NICS if n != "mlx5_3"]]
    assert matrix["cpu:1"] == [NICS[4:], NICS[:4]]
    assert result.stderr == ""


def test_discover_full_format(vm_root: Path) -> None:
    result = runner.invoke(
        app,
        [
            "topo",
            "discover",
            "--sysfs-root",
            str(vm_root),
            "--format",
            "full",
            "--include-loopback",
        ],
    )
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["matrix"] == {"cpu:0": [["eth0", "lo"], []]}
    assert [i["name"] for i in doc["inventory"]["interfaces"]] == ["eth0", "lo"]
    assert doc["inventory"]["interfaces"][0]["pci_path"] == "pci0000:00/0000:00:03.0"


def test_discover_bad_format_is_a_usage_error(vm_root: Path) -> None:
    result = runner.invoke(app, ["topo", "discover", "--sysfs-root", str(vm_root), "--format", "x"])
    assert result.exit_code == 2
    assert "'x' is not one of" in _flat(result.stderr)


def test_discover_warnings_go_to_stderr(malformed_root: Path) -> None:
    result = runner.invoke(app, ["topo", "discover", "--sysfs-root", str(malformed_root)])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == {"cpu:1": [["eth0"], []], "cuda:0": [["eth0"], []]}
    assert "warning: /sys/class/net/eth1: interface eth1 skipped" in result.stderr
    assert "Traceback" not in result.output


def test_discover_missing_root_is_a_clear_error(tmp_path: Path) -> None:
    result = runner.invoke(app, ["topo", "discover", "--sysfs-root", str(tmp_path / "none")])
    assert result.exit_code == 2
    assert result.stdout == ""
    assert "error:" in result.stderr and "does not exist" in _flat(result.stderr)


def test_discover_empty_matrix_warns(tmp_path: Path) -> None:
    (tmp_path / "sys/devices/system/cpu").mkdir(parents=True)
    (tmp_path / "sys/devices/system/cpu/online").write_text("0\n")
    result = runner.invoke(app, ["topo", "discover", "--sysfs-root", str(tmp_path)])
    assert result.exit_code == 0
    assert json.loads(result.stdout) == {}
    assert "no NIC found" in _flat(result.stderr)


def test_show_renders_matrix_and_inventory(gpu8_root: Path, tmp_path: Path) -> None:
    full = runner.invoke(
        app, ["topo", "discover", "--sysfs-root", str(gpu8_root), "--format", "full"]
    )
    path = tmp_path / "topology.json"
    path.write_text(full.stdout)
    result = runner.invoke(app, ["topo", "show", str(path)])
    assert result.exit_code == 0, result.output
    out = result.stdout
    for title in ("NIC preference", "NUMA nodes", "RDMA devices", "Network interfaces", "GPUs"):
        assert title in out
    assert "cuda:7" in out and "mlx5_7" in out and "0-23,48-71" in out
    assert "0000:c2:00.0" in out and "enp195s0np0" in out


def test_show_plain_matrix(tmp_path: Path) -> None:
    path = tmp_path / "m.json"
    path.write_text('{"cpu:0": [["mlx5_0", "mlx5_1"], ["mlx5_2"]]}')
    result = runner.invoke(app, ["topo", "show", str(path)])
    assert result.exit_code == 0, result.output
    assert "mlx5_0 mlx5_1" in result.stdout and "mlx5_2" in result.stdout
    assert "NUMA nodes" not in result.stdout


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "cannot read"),
        ("{bad", "not valid JSON"),
        ('{"cpu:0": [["a"]]}', "key 'cpu:0': must be [[preferred NICs], [secondary NICs]]"),
        ('{"matrix": {"cpu:0": [["a"], []]}, "inventory": {"gpus": []}}', "missing key"),
    ],
)
def test_show_bad_file_is_a_clear_error(tmp_path: Path, content: str | None, message: str) -> None:
    path = tmp_path / "t.json"
    if content is not None:
        path.write_text(content)
    result = runner.invoke(app, ["topo", "show", str(path)])
    assert result.exit_code == 2
    stderr = _flat(result.stderr)
    assert message in stderr and str(path) in stderr
    assert "Traceback" not in result.output


def _mooncake() -> list[str]:
    script = Path(sys.executable).with_name("mooncake")
    if script.exists():
        return [str(script)]
    found = shutil.which("mooncake")
    return (
        [found] if found else [sys.executable, "-c", "from mooncake_cli.main import main; main()"]
    )


@pytest.mark.integration
def test_real_machine_discover_then_show(tmp_path: Path) -> None:
    """`mooncake topo discover > topology.json` on this host, then `mooncake topo show`."""
    proc = subprocess.run(
        [*_mooncake(), "topo", "discover"], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    matrix = json.loads(proc.stdout)
    assert isinstance(matrix, dict)
    assert all(key.startswith(("cpu:", "cuda:")) for key in matrix)
    path = tmp_path / "topology.json"
    path.write_text(proc.stdout)
    shown = subprocess.run(
        [*_mooncake(), "topo", "show", str(path)], capture_output=True, text=True, timeout=60
    )
    assert shown.returncode == 0, shown.stderr
    assert "NIC preference" in shown.stdout
    for location in matrix:
        assert location in shown.stdout
