"""OpenAI-style HTTP front door of the conductor (a thin FastAPI adapter).

All request logic lives in :mod:`mooncake_core.conductor.service`; this package only
maps JSON and SSE onto :class:`~mooncake_core.conductor.service.FrontDoor`.
"""

from mooncake_web.frontdoor.app import create_app
from mooncake_web.frontdoor.server import ConductorProcess

__all__ = ["ConductorProcess", "create_app"]
