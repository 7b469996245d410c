"""Host topology: discover NUMA nodes, NICs and GPUs from sysfs and rank NICs per memory
location in upstream Mooncake's matrix format (see ``docs/topology.md``).

Typical use::

    inv = discover()                      # or discover(Path("tests/fixtures/..."))
    matrix = build_matrix(inv)            # {"cpu:0": [[...], [...]], "cuda:0": ...}
    topo = Topology.from_inventory(inv)   # or Topology.from_matrix(load_matrix(path))
    topo.preferred("cuda:0")
"""

from .discovery import discover
from .errors import TopologyError
from .inventory import (
    Gpu,
    InterfaceKind,
    Inventory,
    NetInterface,
    NumaNode,
    PciPath,
    RdmaDevice,
    RdmaPort,
    natural_key,
    pci_distance,
)
from .matrix import LOCATION_PATTERN, Matrix, build_matrix, load_matrix, validate_matrix
from .netinfo import (
    ADDRESS_FILE,
    KernelLink,
    NetSource,
    NetView,
    json_net_view,
    static_net_view,
    system_net_view,
)
from .sysfs import parse_cpulist
from .topology import Topology

__all__ = [
    "ADDRESS_FILE",
    "LOCATION_PATTERN",
    "Gpu",
    "InterfaceKind",
    "Inventory",
    "KernelLink",
    "Matrix",
    "NetInterface",
    "NetSource",
    "NetView",
    "NumaNode",
    "PciPath",
    "RdmaDevice",
    "RdmaPort",
    "Topology",
    "TopologyError",
    "build_matrix",
    "discover",
    "json_net_view",
    "load_matrix",
    "natural_key",
    "parse_cpulist",
    "pci_distance",
    "static_net_view",
    "system_net_view",
    "validate_matrix",
]
