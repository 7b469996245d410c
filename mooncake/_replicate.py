"""Upstream's ``ReplicateConfig`` and ``SoftPinAction``: mutable, type-checked fields.

Upstream's pybind class is a plain C++ struct with read-write fields; assigning a value
of the wrong type (or out of the C++ type's range) raises ``TypeError``. This class
keeps that behaviour and converts itself to our frozen
:class:`mooncake_core.store.ReplicateConfig` at each call (:meth:`ReplicateConfig.to_core`).
"""

from __future__ import annotations

from enum import IntEnum
from typing import Any

from mooncake_core.store import ReplicateConfig as CoreReplicateConfig
from mooncake_core.store.errors import ErrorCode, InvalidArgumentError

_U64 = 1 << 64


class SoftPinAction(IntEnum):
    """What a write does to the key's soft pin (upstream's enum, same order)."""

    PRESERVE = 0
    """Keep whatever soft pin the key has (a new key: none)."""
    ENABLE = 1
    """Soft-pin the key (TTL ``soft_pin_ttl_ms`` or the master's default)."""
    DISABLE = 2
    """Clear the key's soft pin."""


def _uint(name: str, value: Any) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < _U64:
        raise TypeError(f"{name} must be an int in 0..2**64-1, got {value!r}")
    return value


def _str_list(name: str, value: Any) -> list[str]:
    if isinstance(value, str) or not all(isinstance(v, str) for v in value):
        raise TypeError(f"{name} must be a list of str, got {value!r}")
    return list(value)


class ReplicateConfig:
    """Placement and protection of one write (upstream's field names and defaults)."""

    __slots__ = (
        "_dfs_replica_num",
        "_group_ids",
        "_nof_replica_num",
        "_preferred_nof_segments",
        "_preferred_segment",
        "_preferred_segments",
        "_replica_num",
        "_soft_pin_action",
        "_soft_pin_ttl_ms",
        "data_type",
        "host_id",
        "prefer_alloc_in_same_node",
        "with_hard_pin",
    )

    def __init__(self) -> None:
        self._replica_num = 1
        self._nof_replica_num = 0
        self._dfs_replica_num = 0
        self._soft_pin_action = SoftPinAction.PRESERVE
        self._soft_pin_ttl_ms: int | None = None
        self.with_hard_pin = False
        self._preferred_segments: list[str] = []
        self._preferred_segment = ""
        self._preferred_nof_segments: list[str] = []
        self.prefer_alloc_in_same_node = False
        self.data_type = 0
        self.host_id = ""
        self._group_ids: list[str] | None = None

    # upstream's size_t fields
    @property
    def replica_num(self) -> int:
        return self._replica_num

    @replica_num.setter
    def replica_num(self, v: int) -> None:
        self._replica_num = _uint("replica_num", v)

    @property
    def nof_replica_num(self) -> int:
        return self._nof_replica_num

    @nof_replica_num.setter
    def nof_replica_num(self, v: int) -> None:
        self._nof_replica_num = _uint("nof_replica_num", v)

    @property
    def dfs_replica_num(self) -> int:
        return self._dfs_replica_num

    @dfs_replica_num.setter
    def dfs_replica_num(self, v: int) -> None:
        self._dfs_replica_num = _uint("dfs_replica_num", v)

    @property
    def soft_pin_action(self) -> SoftPinAction:
        return self._soft_pin_action

    @soft_pin_action.setter
    def soft_pin_action(self, v: SoftPinAction) -> None:
        if not isinstance(v, SoftPinAction):
            raise TypeError(f"soft_pin_action must be a SoftPinAction, got {v!r}")
        self._soft_pin_action = v

    @property
    def with_soft_pin(self) -> bool:
        """Older upstream releases' boolean spelling of ``soft_pin_action = ENABLE``."""
        return self._soft_pin_action == SoftPinAction.ENABLE

    @with_soft_pin.setter
    def with_soft_pin(self, v: bool) -> None:
        self._soft_pin_action = SoftPinAction.ENABLE if v else SoftPinAction.PRESERVE

    @property
    def soft_pin_ttl_ms(self) -> int | None:
        return self._soft_pin_ttl_ms

    @soft_pin_ttl_ms.setter
    def soft_pin_ttl_ms(self, v: int | None) -> None:
        self._soft_pin_ttl_ms = None if v is None else _uint("soft_pin_ttl_ms", v)

    @property
    def preferred_segments(self) -> list[str]:
        return self._preferred_segments

    @preferred_segments.setter
    def preferred_segments(self, v: list[str]) -> None:
        self._preferred_segments = _str_list("preferred_segments", v)

    @property
    def preferred_segment(self) -> str:
        return self._preferred_segment

    @preferred_segment.setter
    def preferred_segment(self, v: str) -> None:
        if not isinstance(v, str):
            raise TypeError(f"preferred_segment must be a str, got {v!r}")
        self._preferred_segment = v

    @property
    def preferred_nof_segments(self) -> list[str]:
        return self._preferred_nof_segments

    @preferred_nof_segments.setter
    def preferred_nof_segments(self, v: list[str]) -> None:
        self._preferred_nof_segments = _str_list("preferred_nof_segments", v)

    @property
    def group_ids(self) -> list[str] | None:
        return self._group_ids

    @group_ids.setter
    def group_ids(self, v: list[str] | None) -> None:
        self._group_ids = None if v is None else _str_list("group_ids", v)

    def __str__(self) -> str:
        ttl = "default" if self._soft_pin_ttl_ms is None else f"{self._soft_pin_ttl_ms}ms"
        return (
            f"ReplicateConfig: {{ replica_num: {self._replica_num}, "
            f"soft_pin_action: {self._soft_pin_action.name}, soft_pin_ttl: {ttl}, "
            f"with_hard_pin: {str(self.with_hard_pin).lower()}, "
            f"preferred_segments: [{', '.join(self.segments())}] }}"
        )

    __repr__ = __str__

    def segments(self) -> list[str]:
        """Preferred segments, the deprecated single one first."""
        out = [self._preferred_segment] if self._preferred_segment else []
        return out + [s for s in self._preferred_segments if s not in out]

    def to_core(self) -> CoreReplicateConfig:
        """Our master's config for this write.

        Raises:
            InvalidArgumentError: a combination upstream refuses too (a soft-pin TTL
                without ``ENABLE``, zero replicas), or one we do not serve (NoF/DFS
                replicas).
        """
        if self._soft_pin_ttl_ms is not None and self._soft_pin_action != SoftPinAction.ENABLE:
            raise InvalidArgumentError(
                ErrorCode.INVALID_PARAMS, "soft_pin_ttl_ms needs soft_pin_action ENABLE"
            )
        if self._replica_num < 1:
            raise InvalidArgumentError(ErrorCode.INVALID_PARAMS, "replica_num must be >= 1")
        if self._nof_replica_num or self._dfs_replica_num:
            raise InvalidArgumentError(
                ErrorCode.INVALID_PARAMS, "NoF and DFS replicas are not supported here"
            )
        ttl = None if self._soft_pin_ttl_ms is None else self._soft_pin_ttl_ms / 1000.0
        return CoreReplicateConfig(
            replica_num=self._replica_num,
            soft_pin=self._soft_pin_action == SoftPinAction.ENABLE,
            hard_pin=bool(self.with_hard_pin),
            soft_pin_ttl_s=ttl,
            preferred_segments=tuple(self.segments()),
            local_first=bool(self.prefer_alloc_in_same_node),
        )
