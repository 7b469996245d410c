"""The Store's clients: the store ``Client`` (bytes through the Transfer Engine) and the
master's two clients (async ``MasterClient``, blocking ``SyncMaster``).

::

    client.py        Client: put/get/batch/tensor API of the Store (docs/store_client.md)
    options.py       ClientOptions
    batch.py         batch puts and gets (placement retries, per-item results)
    data.py          the data path: plans, Transfer Engine batches, same-host checks
    tensor.py        tensors in and out of the Store
    heartbeat.py     mounting and heartbeats on a background loop
    async_master.py  MasterClient (asyncio), made from master_rpc's surface
    sync_master.py   SyncMaster (blocking, the data path's calls), from the same surface
"""

from __future__ import annotations

from .client import Client, Readable

__all__ = ["Client", "Readable"]
