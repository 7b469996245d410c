"""The Transfer Engine's view of the topology: which NICs to use for a memory location."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType

from .errors import TopologyError
from .inventory import Inventory, natural_key
from .matrix import Matrix, build_matrix, validate_matrix

__all__ = ["Topology"]


@dataclass(frozen=True, slots=True)
class Topology:
    """Preferred and secondary NICs per memory location, plus NIC addresses.

    Build it with :meth:`from_matrix` (a loaded topology file) or :meth:`from_inventory`
    (discovery). A location missing from the matrix (a ``cuda:3`` on a host the file was
    not written for) gets every NIC as preferred rather than an error: any NIC works, the
    matrix only ranks them.
    """

    entries: Mapping[str, tuple[tuple[str, ...], tuple[str, ...]]]
    nics: tuple[str, ...]
    """Every NIC named anywhere in the matrix, in natural name order."""
    addresses: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    @classmethod
    def from_matrix(
        cls, matrix: Matrix, nic_addresses: Mapping[str, Sequence[str]] | None = None
    ) -> Topology:
        """Build from a matrix (validated again here, so a hand-built dict is safe).

        Args:
            matrix: ``{location: [[preferred], [secondary]]}``.
            nic_addresses: NIC name -> IPv4 addresses (no prefix) the NIC can be reached at.

        Returns:
            The topology.

        Raises:
            TopologyError: The matrix is malformed (naming the key), or ``nic_addresses``
                names a NIC the matrix does not know.
        """
        clean = validate_matrix(matrix)
        names = {nic for entry in clean.values() for part in entry for nic in part}
        return cls._build(clean, names, nic_addresses or {})

    @classmethod
    def from_inventory(cls, inv: Inventory) -> Topology:
        """Build from discovery: its matrix and the IPv4 addresses of its NICs.

        Every NIC of the inventory is known, even one no location ranks (a host whose NUMA
        files were all unreadable still has usable NICs).
        """
        return cls._build(build_matrix(inv), set(inv.nic_names()), inv.nic_addresses())

    @classmethod
    def _build(
        cls, matrix: Matrix, names: set[str], nic_addresses: Mapping[str, Sequence[str]]
    ) -> Topology:
        addresses = {n: tuple(a) for n, a in nic_addresses.items()}
        unknown = sorted(set(addresses) - names, key=natural_key)
        if unknown:
            raise TopologyError(f"nic_addresses names NICs not in the matrix: {unknown}")
        entries = {loc: (tuple(e[0]), tuple(e[1])) for loc, e in matrix.items()}
        return cls(
            entries=MappingProxyType(entries),
            nics=tuple(sorted(names, key=natural_key)),
            addresses=MappingProxyType(addresses),
        )

    @property
    def locations(self) -> tuple[str, ...]:
        """Locations the matrix names explicitly."""
        return tuple(self.entries)

    def preferred(self, location: str) -> tuple[str, ...]:
        """NICs to use first for memory at ``location`` (all NICs if it is unknown)."""
        entry = self.entries.get(location)
        return entry[0] if entry is not None else self.nics

    def secondary(self, location: str) -> tuple[str, ...]:
        """NICs to fall back to for ``location`` (none if it is unknown)."""
        entry = self.entries.get(location)
        return entry[1] if entry is not None else ()

    def addresses_of(self, nic: str) -> tuple[str, ...]:
        """Every known IPv4 address of ``nic``.

        Raises:
            TopologyError: ``nic`` is not in the matrix.
        """
        if nic not in self.nics:
            raise TopologyError(f"unknown NIC {nic!r}; known: {list(self.nics)}")
        return self.addresses.get(nic, ())

    def address_of(self, nic: str) -> str | None:
        """The first IPv4 address of ``nic``, or ``None`` if it has none.

        Raises:
            TopologyError: ``nic`` is not in the matrix.
        """
        addrs = self.addresses_of(nic)
        return addrs[0] if addrs else None

    def to_matrix(self) -> Matrix:
        """The matrix in JSON form."""
        return {loc: [list(p), list(s)] for loc, (p, s) in self.entries.items()}
