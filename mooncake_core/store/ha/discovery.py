"""Client-side leader discovery: where the HA leader is, read from its key in etcd.

Both master clients find the leader here: ``MasterClient`` with
:class:`EtcdLeaderResolver` (async, etcd's gRPC gateway client of ``etcd.py``),
``SyncMaster`` with :class:`SyncLeaderResolver` (blocking, one JSON request from the
user's thread). Both read the same key and decode the record the same way
(:func:`_leader`); how a client follows a leader change is ``follow.py``.
"""

from __future__ import annotations

import base64
import json
import urllib.request

from ..errors import ErrorCode, UnavailableError
from .etcd import EtcdClient, EtcdError
from .follow import leader_address
from .replication import HaKeys


def _leader(record: bytes | None) -> str:
    """The leader's address from its etcd record (``None``: no key).

    Raises:
        UnavailableError: no leader elected, or a record that does not parse.
    """
    if record is None:
        raise UnavailableError(ErrorCode.UNAVAILABLE, "no master leader elected (yet)")
    try:
        return leader_address(record)
    except ValueError as exc:
        raise UnavailableError(ErrorCode.UNAVAILABLE, f"leader lookup: {exc}") from None


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
        return _leader(None if kv is None else kv.value)

    async def close(self) -> None:
        """Close the etcd connection."""
        await self._etcd.close()


ETCD_SCHEME = "etcd://"


def split_master_url(master: str) -> tuple[str | None, str]:
    """Split ``etcd://host:port[/cluster]`` into the etcd URL and the cluster name.

    Args:
        master: ``host:port`` (a fixed master) or ``etcd://host:port[/cluster]``.

    Returns:
        ``(None, master)`` for a fixed address, else ``("http://host:port", cluster)``
        (cluster ``default`` when not given).

    Raises:
        ValueError: an ``etcd://`` URL without a host.
    """
    if not master.startswith(ETCD_SCHEME):
        return None, master
    host, _, cluster = master[len(ETCD_SCHEME) :].partition("/")
    if not host:
        raise ValueError(f"master URL {master!r} has no etcd host (want etcd://HOST:PORT)")
    return f"http://{host}", cluster.strip("/") or "default"


class SyncLeaderResolver:
    """Blocking read of the HA leader's gRPC address from etcd (its JSON gateway).

    Args:
        endpoint: etcd client URL (``http://host:port``).
        cluster: the masters' cluster name.
        timeout_s: deadline of one etcd request.
    """

    def __init__(self, endpoint: str, cluster: str = "default", timeout_s: float = 2.0) -> None:
        self.endpoint = endpoint
        self._key = base64.b64encode(HaKeys(cluster).leader).decode()
        self._timeout = timeout_s

    def __call__(self) -> str:
        """The leader's ``host:port``.

        Raises:
            UnavailableError: etcd unreachable or no leader elected right now.
        """
        body = json.dumps({"key": self._key}).encode()
        req = urllib.request.Request(self.endpoint + "/v3/kv/range", data=body)
        try:
            with urllib.request.urlopen(req, timeout=self._timeout) as r:
                data = json.loads(r.read())
        except (OSError, ValueError) as exc:
            raise UnavailableError(
                ErrorCode.UNAVAILABLE, f"leader lookup at {self.endpoint}: {exc}"
            ) from None
        kvs = data.get("kvs") or [] if isinstance(data, dict) else []
        try:
            return _leader(base64.b64decode(kvs[0]["value"]) if kvs else None)
        except (KeyError, TypeError, ValueError) as exc:
            raise UnavailableError(ErrorCode.UNAVAILABLE, f"leader lookup: {exc}") from None
