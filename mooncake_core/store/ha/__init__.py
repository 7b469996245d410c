"""Store durability: the metadata image, local restore, etcd election and replication.

See ``docs/durability.md``. Public API::

    restore_local(directory, config, options) -> Restored     # journal -> serving core
    MetadataImage, records_from_events                         # records <-> state
    build_state(image, config, now, wall) -> MasterState
    EtcdClient, HaKeys, EtcdLog, LogFollower                   # etcd pieces
    HaController, HaOptions                                    # election + promotion
    EtcdLeaderResolver                                         # client-side discovery
"""

from .discovery import EtcdLeaderResolver
from .durable import RecordSink, Restored, restore_local
from .election import HaController, HaOptions, parse_ha_url
from .etcd import EtcdClient, EtcdError
from .image import MetadataImage, records_from_events
from .readiness import Readiness
from .rebuild import RebuildError, build_state
from .replication import EtcdLog, FencedOut, HaKeys, LogFollower

__all__ = [
    "EtcdClient",
    "EtcdError",
    "EtcdLeaderResolver",
    "EtcdLog",
    "FencedOut",
    "HaController",
    "HaKeys",
    "HaOptions",
    "LogFollower",
    "MetadataImage",
    "Readiness",
    "RebuildError",
    "RecordSink",
    "Restored",
    "build_state",
    "parse_ha_url",
    "records_from_events",
    "restore_local",
]
