"""The one exception type of the topology package."""

from __future__ import annotations

__all__ = ["TopologyError"]


class TopologyError(ValueError):
    """A topology source (sysfs root, matrix file, inventory JSON) cannot be used.

    The message always names the offending path, key or value.
    """
