"""Fixture sysfs trees for the topology tests (built per test under tmp_path)."""

from __future__ import annotations

from pathlib import Path

import pytest
from topo_sysfs_builder import build_8gpu, build_malformed, build_nic_only, build_no_numa, build_vm


@pytest.fixture
def vm_root(tmp_path: Path) -> Path:
    return build_vm(tmp_path / "vm")


@pytest.fixture(scope="session")
def gpu8_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # ~400 files: built once; tests must treat it as read-only.
    return build_8gpu(tmp_path_factory.mktemp("gpu8") / "root")


@pytest.fixture
def nic_only_root(tmp_path: Path) -> Path:
    return build_nic_only(tmp_path / "nic_only")


@pytest.fixture
def no_numa_root(tmp_path: Path) -> Path:
    return build_no_numa(tmp_path / "no_numa")


@pytest.fixture
def malformed_root(tmp_path: Path) -> Path:
    return build_malformed(tmp_path / "malformed")
