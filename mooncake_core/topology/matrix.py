"""The NIC preference matrix: build it from an inventory, load and validate it from JSON.

The format is upstream Mooncake's (the file ``MC_CUSTOM_TOPO_JSON`` points to)::

    {"cpu:0":  [["mlx5_0", "mlx5_1"], ["mlx5_2", "mlx5_3"]],
     "cuda:0": [["mlx5_0"], ["mlx5_1", "mlx5_2", "mlx5_3"]]}

Each memory location maps to ``[preferred NICs, secondary NICs]``.

- ``cpu:N`` (NUMA node N): preferred are the NICs whose ``numa_node`` is N; when no NIC is on
  that node, every NIC is preferred (nothing is better than anything else).
- ``cuda:N``: preferred are the NICs at the smallest PCI path distance from the GPU (behind
  the same PCIe switch first), the others are secondary. NICs without a PCI path (veth) only
  count as preferred when no NIC has one.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .errors import TopologyError
from .inventory import Inventory, PciPath, natural_key, pci_distance

__all__ = ["LOCATION_PATTERN", "Matrix", "build_matrix", "load_matrix", "validate_matrix"]

Matrix = dict[str, list[list[str]]]
"""``{location: [preferred NIC names, secondary NIC names]}``."""

LOCATION_PATTERN = re.compile(r"^[a-z][a-z0-9_]*:\d+$")
"""A memory location key: a kind and an index, e.g. ``cpu:0``, ``cuda:7``."""


def build_matrix(inv: Inventory) -> Matrix:
    """Compute the preference matrix of an inventory.

    NICs are RDMA device names when the host has RDMA devices, else interface names.

    Args:
        inv: The discovered inventory.

    Returns:
        ``cpu:N`` for every NUMA node, then ``cuda:N`` for every CUDA GPU; NIC lists in
        natural name order. Empty when the host has no NIC.
    """
    nics = _nics(inv)
    if not nics:
        return {}
    names = sorted(nics, key=natural_key)
    matrix: Matrix = {}
    for node in inv.numa_nodes:
        local = [n for n in names if nics[n][1] == node.id]
        matrix[f"cpu:{node.id}"] = _split(names, local or names)
    for gpu in inv.gpus:
        if gpu.cuda_index is None:
            continue
        matrix[f"cuda:{gpu.cuda_index}"] = _split(names, _closest(names, nics, gpu.pci_path))
    return matrix


def _nics(inv: Inventory) -> dict[str, tuple[PciPath | None, int | None]]:
    if inv.rdma_devices:
        return {d.name: (d.pci_path, d.numa_node) for d in inv.rdma_devices}
    return {i.name: (i.pci_path, i.numa_node) for i in inv.interfaces}


def _closest(
    names: list[str], nics: Mapping[str, tuple[PciPath | None, int | None]], gpu: PciPath | None
) -> list[str]:
    if gpu is None:
        return names
    distances = {n: pci_distance(gpu, p) for n in names if (p := nics[n][0]) is not None}
    if not distances:
        return names
    best = min(distances.values())
    return [n for n in names if distances.get(n) == best]


def _split(names: list[str], preferred: list[str]) -> list[list[str]]:
    chosen = set(preferred)
    return [list(preferred), [n for n in names if n not in chosen]]


def validate_matrix(data: Any, source: str = "matrix") -> Matrix:
    """Check that ``data`` is a well-formed matrix and return a clean copy.

    Args:
        data: Decoded JSON: the matrix itself, or a ``--format full`` document
            ``{"matrix": ..., "inventory": ...}``.
        source: Name used in error messages (usually the file path).

    Returns:
        The matrix.

    Raises:
        TopologyError: Naming the bad key: not an object, a key that is not
            ``<kind>:<index>``, an entry that is not two lists of NIC names, a NIC listed
            twice in one entry, or an entry without any NIC.
    """
    if isinstance(data, Mapping) and isinstance(data.get("matrix"), Mapping):
        data = data["matrix"]
    if not isinstance(data, Mapping):
        raise TopologyError(f"{source}: a topology matrix must be a JSON object, got {_kind(data)}")
    matrix: Matrix = {}
    for key, entry in data.items():
        where = f"{source}: key {key!r}"
        if not isinstance(key, str) or not LOCATION_PATTERN.match(key):
            raise TopologyError(f"{where}: not a location like 'cpu:0' or 'cuda:3'")
        if (
            not isinstance(entry, list)
            or len(entry) != 2
            or not all(isinstance(part, list) for part in entry)
        ):
            raise TopologyError(
                f"{where}: must be [[preferred NICs], [secondary NICs]], got {entry!r}"
            )
        seen: set[str] = set()
        for part in entry:
            for nic in part:
                if not isinstance(nic, str) or not nic:
                    raise TopologyError(
                        f"{where}: NIC names must be non-empty strings, got {nic!r}"
                    )
                if nic in seen:
                    raise TopologyError(f"{where}: NIC {nic!r} is listed twice")
                seen.add(nic)
        if not seen:
            raise TopologyError(f"{where}: lists no NIC")
        matrix[key] = [list(entry[0]), list(entry[1])]
    return matrix


def load_matrix(path: Path) -> Matrix:
    """Read and validate a matrix file (plain or ``--format full``).

    This is what the Transfer Engine uses instead of discovery when
    ``transfer.topology_file`` is set (upstream's ``MC_CUSTOM_TOPO_JSON``).

    Args:
        path: The JSON file.

    Returns:
        The validated matrix.

    Raises:
        TopologyError: The file is missing, unreadable, not JSON or not a valid matrix; the
            message names the path (and the bad key).
    """
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise TopologyError(f"{path}: cannot read topology file ({exc.strerror or exc})") from None
    except UnicodeError:
        raise TopologyError(f"{path}: topology file is not UTF-8 text") from None
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise TopologyError(f"{path}: not valid JSON ({exc})") from None
    return validate_matrix(data, str(path))


def _kind(value: Any) -> str:
    return {list: "a list", str: "a string", type(None): "null"}.get(
        type(value), type(value).__name__
    )
