"""A small typed async client for etcd v3 through its JSON gRPC gateway (httpx).

Only what leader election and log replication need: put, range, delete-range, one-key
compare-and-put transactions, and leases. Keys and values are bytes on our side and
base64 on the wire; etcd's int64 fields arrive as JSON strings.

No maintained Python etcd3 client works with current protobuf; the gateway is part of
every etcd server (``/v3/...`` on the client URL), so plain HTTP is enough.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import Any

import httpx


class EtcdError(RuntimeError):
    """etcd answered with an error, or could not be reached."""


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _unb64(text: str | None) -> bytes:
    return base64.b64decode(text) if text else b""


def prefix_end(prefix: bytes) -> bytes:
    """The ``range_end`` that selects every key starting with ``prefix``."""
    end = bytearray(prefix)
    for i in range(len(end) - 1, -1, -1):
        if end[i] < 0xFF:
            end[i] += 1
            return bytes(end[: i + 1])
    return b"\x00"


@dataclass(frozen=True, slots=True)
class KeyValue:
    """One key as etcd returns it."""

    key: bytes
    value: bytes
    create_revision: int
    mod_revision: int
    lease: int


@dataclass(frozen=True, slots=True)
class RangeResult:
    """Keys found, whether more remain past ``limit``, and the store revision."""

    kvs: list[KeyValue]
    more: bool
    revision: int


def _kv(d: dict[str, Any]) -> KeyValue:
    return KeyValue(
        _unb64(d.get("key")),
        _unb64(d.get("value")),
        int(d.get("create_revision", 0)),
        int(d.get("mod_revision", 0)),
        int(d.get("lease", 0)),
    )


class EtcdClient:
    """Async etcd v3 client over HTTP.

    Args:
        endpoint: ``http://host:port`` of an etcd client URL.
        timeout_s: per-request timeout.
    """

    def __init__(self, endpoint: str, *, timeout_s: float = 2.0) -> None:
        self.endpoint = endpoint.rstrip("/")
        self._http = httpx.AsyncClient(base_url=self.endpoint, timeout=timeout_s)

    async def close(self) -> None:
        """Close the HTTP connections."""
        await self._http.aclose()

    async def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        try:
            r = await self._http.post(path, json=body)
        except httpx.HTTPError as exc:
            raise EtcdError(f"etcd at {self.endpoint}{path}: {type(exc).__name__}: {exc}") from None
        if r.status_code != 200:
            raise EtcdError(f"etcd at {self.endpoint}{path}: HTTP {r.status_code}: {r.text[:300]}")
        data: dict[str, Any] = r.json()
        if "error" in data:
            raise EtcdError(f"etcd at {self.endpoint}{path}: {data['error']}")
        return data

    # -------------------------------------------------------------------- kv
    async def put(self, key: bytes, value: bytes, *, lease: int = 0) -> int:
        """Set a key. Returns the new store revision."""
        body: dict[str, Any] = {"key": _b64(key), "value": _b64(value)}
        if lease:
            body["lease"] = str(lease)
        data = await self._post("/v3/kv/put", body)
        return int(data["header"]["revision"])

    async def get(self, key: bytes) -> KeyValue | None:
        """One key, or None."""
        r = await self.range(key)
        return r.kvs[0] if r.kvs else None

    async def range(
        self, key: bytes, range_end: bytes | None = None, *, limit: int = 0
    ) -> RangeResult:
        """Keys in ``[key, range_end)`` (just ``key`` when ``range_end`` is None), sorted."""
        body: dict[str, Any] = {"key": _b64(key)}
        if range_end is not None:
            body["range_end"] = _b64(range_end)
        if limit:
            body["limit"] = str(limit)
        data = await self._post("/v3/kv/range", body)
        return RangeResult(
            [_kv(d) for d in data.get("kvs", [])],
            bool(data.get("more", False)),
            int(data["header"]["revision"]),
        )

    async def delete_range(self, key: bytes, range_end: bytes | None = None) -> int:
        """Delete keys in ``[key, range_end)``. Returns how many were deleted."""
        body: dict[str, Any] = {"key": _b64(key)}
        if range_end is not None:
            body["range_end"] = _b64(range_end)
        data = await self._post("/v3/kv/deleterange", body)
        return int(data.get("deleted", 0))

    async def put_if_created_at(
        self, guard: bytes, create_revision: int, puts: list[tuple[bytes, bytes]]
    ) -> bool:
        """Put every ``(key, value)`` only if ``guard`` exists with ``create_revision``
        (0: only if ``guard`` does not exist). All or nothing.

        Returns:
            Whether the compare held (and the puts happened).
        """
        compare = [
            {
                "key": _b64(guard),
                "target": "CREATE",
                "result": "EQUAL",
                "create_revision": str(create_revision),
            }
        ]
        success = [{"request_put": {"key": _b64(k), "value": _b64(v)}} for k, v in puts]
        data = await self._post("/v3/kv/txn", {"compare": compare, "success": success})
        return bool(data.get("succeeded", False))

    async def create(self, key: bytes, value: bytes, *, lease: int = 0) -> int | None:
        """Create ``key`` only if it does not exist.

        Returns:
            Its create revision, or None when it already existed.
        """
        put: dict[str, Any] = {"key": _b64(key), "value": _b64(value)}
        if lease:
            put["lease"] = str(lease)
        body = {
            "compare": [
                {"key": _b64(key), "target": "CREATE", "result": "EQUAL", "create_revision": "0"}
            ],
            "success": [{"request_put": put}],
        }
        data = await self._post("/v3/kv/txn", body)
        if not data.get("succeeded", False):
            return None
        return int(data["header"]["revision"])

    # ---------------------------------------------------------------- leases
    async def lease_grant(self, ttl_s: int) -> int:
        """A new lease of ``ttl_s`` seconds. Returns its id."""
        data = await self._post("/v3/lease/grant", {"TTL": str(ttl_s)})
        return int(data["ID"])

    async def lease_keepalive(self, lease: int) -> int:
        """Refresh a lease. Returns the TTL granted (0: the lease has expired)."""
        data = await self._post("/v3/lease/keepalive", {"ID": str(lease)})
        return int(data.get("result", {}).get("TTL", 0))

    async def lease_revoke(self, lease: int) -> None:
        """End a lease now; its keys are deleted."""
        await self._post("/v3/lease/revoke", {"ID": str(lease)})
