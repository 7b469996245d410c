"""Read-only access to a sysfs tree under an injectable root.

The real machine is root ``/``; tests pass a fixture directory that holds ``sys/...`` with
the same relative symlinks the kernel uses. Every path handed out is relative to the root so
a fixture symlink can never make discovery read the host's files by accident.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from .errors import TopologyError
from .inventory import PciPath

__all__ = ["SysfsTree", "parse_cpulist"]

_PCI_ROOT = re.compile(r"^pci[0-9a-f]{4}:[0-9a-f]{2}$")
_PCI_BDF = re.compile(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")


def parse_cpulist(text: str) -> tuple[int, ...]:
    """Parse a kernel cpulist such as ``0-3,8,10-11``.

    Args:
        text: The file content (surrounding whitespace allowed; empty means no CPUs).

    Returns:
        The CPU ids, sorted and without duplicates.

    Raises:
        ValueError: A range is malformed or reversed; the message quotes it.
    """
    cpus: set[int] = set()
    text = text.strip()
    if not text:
        return ()
    for part in text.split(","):
        lo, sep, hi = part.partition("-")
        if not lo.isdigit() or (sep and not hi.isdigit()):
            raise ValueError(f"bad cpulist range {part!r}")
        start, end = int(lo), int(hi) if sep else int(lo)
        if end < start:
            raise ValueError(f"reversed cpulist range {part!r}")
        cpus.update(range(start, end + 1))
    return tuple(sorted(cpus))


@dataclass
class SysfsTree:
    """A sysfs tree rooted at ``root`` that collects warnings while it is read.

    Args:
        root: Directory that contains ``sys/`` (``/`` on a real machine).

    Raises:
        TopologyError: ``root`` does not exist or holds no ``sys`` directory.
    """

    root: Path
    warnings: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.root.is_dir():
            raise TopologyError(f"sysfs root {self.root} does not exist or is not a directory")
        if not (self.root / "sys").is_dir():
            raise TopologyError(f"sysfs root {self.root} has no sys/ directory")
        self._resolved_root = self.root.resolve()

    def path(self, rel: str) -> Path:
        """The absolute path of ``rel`` (e.g. ``sys/class/net``) under the root."""
        return self.root / rel

    def display(self, path: Path) -> str:
        """``path`` as it would read on the target machine (``/sys/...``)."""
        for base in (self.root, self._resolved_root):
            if path.is_relative_to(base):
                return "/" + str(path.relative_to(base)).lstrip("/")
        return str(path)

    def warn(self, message: str) -> None:
        """Record one warning line."""
        self.warnings.append(message)

    def entries(self, rel: str) -> list[Path]:
        """Entries of a directory sorted by name; empty if it does not exist."""
        base = self.path(rel)
        try:
            return sorted(base.iterdir(), key=lambda p: p.name)
        except FileNotFoundError:
            return []
        except OSError as exc:
            self.warn(f"{self.display(base)}: cannot list ({exc.strerror or exc})")
            return []

    def read(self, path: Path) -> str | None:
        """Stripped text of ``path``, or ``None`` if it is missing or unreadable.

        sysfs answers EINVAL for attributes that do not apply (``speed`` of a link that is
        down), so an unreadable file is normal and not warned about here.
        """
        try:
            return path.read_text(encoding="utf-8", errors="replace").strip()
        except (OSError, UnicodeError):
            return None

    def read_int(self, path: Path, *, base: int = 10, warn: bool = True) -> int | None:
        """Integer content of ``path``; ``None`` (with a warning) when it is not a number."""
        text = self.read(path)
        if text is None:
            return None
        try:
            return int(text, base)
        except ValueError:
            if warn:
                self.warn(f"{self.display(path)}: not an integer: {text!r}")
            return None

    def numa_node(self, device_dir: Path | None) -> int | None:
        """``numa_node`` of a PCI device directory; ``-1`` and absence mean ``None``."""
        if device_dir is None:
            return None
        value = self.read_int(device_dir / "numa_node")
        return None if value is None or value < 0 else value

    def resolve(self, link: Path) -> Path | None:
        """Resolve a symlink inside the root.

        Returns:
            The resolved absolute path, or ``None`` (with a warning) if the target does not
            exist or lies outside the root.
        """
        try:
            target = link.resolve(strict=True)
        except (OSError, RuntimeError) as exc:
            self.warn(f"{self.display(link)}: broken link ({getattr(exc, 'strerror', exc)})")
            return None
        if not target.is_relative_to(self._resolved_root):
            self.warn(f"{self.display(link)}: points outside the sysfs root ({target})")
            return None
        return target

    def pci_location(self, resolved: Path) -> tuple[PciPath, Path] | None:
        """PCI path of a resolved device directory and the directory of its PCI function.

        A virtio NIC resolves to ``.../0000:00:03.0/virtio2``: its PCI path ends at
        ``0000:00:03.0`` and ``numa_node`` lives there, not in ``virtio2``.

        Returns:
            ``(path components from the root complex, PCI function directory)``, or ``None``
            when the device is not on a PCI bus.
        """
        parts = resolved.relative_to(self._resolved_root).parts
        start = next((i for i, p in enumerate(parts) if _PCI_ROOT.match(p)), None)
        if start is None:
            return None
        end = start + 1
        while end < len(parts) and _PCI_BDF.match(parts[end]):
            end += 1
        if end == start + 1:
            return None
        pci_dir = self._resolved_root.joinpath(*parts[:end])
        return tuple(parts[start:end]), pci_dir

    def is_virtual(self, resolved: Path) -> bool:
        """Whether a resolved device lives under ``/sys/devices/virtual``."""
        parts = resolved.relative_to(self._resolved_root).parts
        return parts[:3] == ("sys", "devices", "virtual")
