"""Typed configuration for every component (see ``docs/configuration.md``)."""

from .loader import (
    CONFIG_ENV,
    ConfigError,
    config_source,
    dump_config,
    load_config,
    parse_config,
)
from .models import (
    AuditConfig,
    ClusterConfig,
    ConductorConfig,
    DashboardConfig,
    EtcdConfig,
    HashingConfig,
    HostConfig,
    MasterConfig,
    ModelConfig,
    StoreNodeConfig,
    TransferConfig,
    WorkerConfig,
)

__all__ = [
    "CONFIG_ENV",
    "AuditConfig",
    "ClusterConfig",
    "ConductorConfig",
    "ConfigError",
    "DashboardConfig",
    "EtcdConfig",
    "HashingConfig",
    "HostConfig",
    "MasterConfig",
    "ModelConfig",
    "StoreNodeConfig",
    "TransferConfig",
    "WorkerConfig",
    "config_source",
    "dump_config",
    "load_config",
    "parse_config",
]
