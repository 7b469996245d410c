"""Client-side leader discovery: read the leader key from etcd."""

from __future__ import annotations

from ..errors import ErrorCode, UnavailableError
from .etcd import EtcdClient, EtcdError
from .follow import leader_address
from .replication import HaKeys


class EtcdLeaderResolver:
    """Resolves the current leader's gRPC address from etcd.

    Args:
        endpoint: etcd client URL (``http://host:port``; ``etcd://`` accepted).
        cluster: cluster name the masters use.
    """

    def __init__(self, endpoint: str, cluster: str = "default") -> None:
        from .election import parse_ha_url

        self._etcd = EtcdClient(parse_ha_url(endpoint))
        self._keys = HaKeys(cluster)

    async def __call__(self) -> str:
        """The leader's ``host:port``.

        Raises:
            UnavailableError: no leader elected right now, or etcd unreachable.
        """
        try:
            kv = await self._etcd.get(self._keys.leader)
        except EtcdError as exc:
            raise UnavailableError(ErrorCode.UNAVAILABLE, f"leader lookup: {exc}") from None
        if kv is None:
            raise UnavailableError(ErrorCode.UNAVAILABLE, "no master leader elected (yet)")
        try:
            return leader_address(kv.value)
        except ValueError as exc:
            raise UnavailableError(ErrorCode.UNAVAILABLE, f"leader lookup: {exc}") from None

    async def close(self) -> None:
        """Close the etcd connection."""
        await self._etcd.close()
