"""Upstream's store config: the ``MOONCAKE_CONFIG_PATH`` JSON file and ``MOONCAKE_*``
environment variables that vLLM, SGLang and LMCache read, as ``setup(dict)`` keys.

``MooncakeDistributedStore().setup()`` with no arguments uses :func:`load_setup_dict`.
Fields we cannot honour are refused with one message naming them; fields that only
tune upstream's internals are accepted and ignored (listed in :data:`IGNORED_FIELDS`).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path

__all__ = ["IGNORED_FIELDS", "ConfigError", "load_setup_dict"]

_JSON_FIELDS = {
    "local_hostname": "local_hostname",
    "metadata_server": "metadata_server",
    "global_segment_size": "global_segment_size",
    "local_buffer_size": "local_buffer_size",
    "protocol": "protocol",
    "device_name": "rdma_devices",
    "rdma_devices": "rdma_devices",
    "master_server_address": "master_server_addr",
    "master_server_addr": "master_server_addr",
}
_ENV = {
    "MOONCAKE_LOCAL_HOSTNAME": "local_hostname",
    "MOONCAKE_TE_META_DATA_SERVER": "metadata_server",
    "MOONCAKE_METADATA_SERVER": "metadata_server",
    "MOONCAKE_GLOBAL_SEGMENT_SIZE": "global_segment_size",
    "MOONCAKE_LOCAL_BUFFER_SIZE": "local_buffer_size",
    "MOONCAKE_PROTOCOL": "protocol",
    "MOONCAKE_DEVICE": "rdma_devices",
    "MOONCAKE_MASTER": "master_server_addr",
}
IGNORED_FIELDS = frozenset(
    {"transfer_timeout", "storage_root_dir", "enable_offload", "replica_num", "save_chunk_meta"}
)
"""Upstream JSON fields that tune upstream's client internals; accepted, not used."""
REFUSED_FIELDS = {
    "ipc_socket_path": "dummy clients attached to a mooncake_client process are not served",
    "enable_ssd_offload": "the SSD tier is run by `mooncake store node --ssd-dir`",
    "ssd_offload_path": "the SSD tier is run by `mooncake store node --ssd-dir`",
}


class ConfigError(ValueError):
    """The config names a field we refuse or do not know (the message names it)."""


def _from_json(doc: Mapping[str, object], source: str) -> dict[str, object]:
    out: dict[str, object] = {}
    for key, value in doc.items():
        if key in _JSON_FIELDS:
            out[_JSON_FIELDS[key]] = value
        elif key in REFUSED_FIELDS:
            if value in (False, "", None, "false"):
                continue
            raise ConfigError(f"{source}: field {key!r} is not supported: {REFUSED_FIELDS[key]}")
        elif key not in IGNORED_FIELDS:
            raise ConfigError(f"{source}: unknown field {key!r}")
    return out


def load_setup_dict(environ: Mapping[str, str] | None = None) -> dict[str, object]:
    """The ``setup(dict)`` keys from ``MOONCAKE_CONFIG_PATH`` (JSON), else ``MOONCAKE_*``.

    Raises:
        ConfigError: the file is unreadable or not JSON, names a refused or unknown
            field, or neither source names a master.
    """
    env = os.environ if environ is None else environ
    path = env.get("MOONCAKE_CONFIG_PATH")
    if path:
        try:
            doc = json.loads(Path(path).expanduser().read_text())
        except OSError as exc:
            raise ConfigError(f"MOONCAKE_CONFIG_PATH {path}: {exc.strerror}") from None
        except json.JSONDecodeError as exc:
            raise ConfigError(f"MOONCAKE_CONFIG_PATH {path}: not JSON ({exc.msg})") from None
        if not isinstance(doc, dict):
            raise ConfigError(f"MOONCAKE_CONFIG_PATH {path}: expected a JSON object")
        out = _from_json(doc, f"MOONCAKE_CONFIG_PATH {path}")
    else:
        out = {dst: env[src] for src, dst in _ENV.items() if env.get(src)}
        if "master_server_addr" not in out:
            raise ConfigError("no store config: set MOONCAKE_CONFIG_PATH or MOONCAKE_MASTER")
    out.setdefault("local_hostname", "localhost")
    out.setdefault("metadata_server", "P2PHANDSHAKE")
    return out
