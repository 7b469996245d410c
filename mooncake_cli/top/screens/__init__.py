"""Screens of ``mooncake top``."""

from .base import TopScreen
from .explain import ExplainScreen
from .nics import NicsScreen
from .nodes import NodesScreen
from .scheduler import SchedulerScreen
from .store import StoreScreen

__all__ = [
    "ExplainScreen",
    "NicsScreen",
    "NodesScreen",
    "SchedulerScreen",
    "StoreScreen",
    "TopScreen",
]
