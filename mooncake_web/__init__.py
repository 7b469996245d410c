"""The web dashboard (``mooncake web``) and, in :mod:`mooncake_web.frontdoor`, the
conductor's OpenAI-style front door.

The dashboard reads the telemetry read-model (:class:`~mooncake_core.telemetry.ClusterView`),
the master (store objects, pins, drain) and the audit database; see docs/web.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .app import create_app
    from .options import WebOptions

__all__ = ["WebOptions", "create_app"]


def __getattr__(name: str) -> Any:
    # Lazy: importing mooncake_web.frontdoor must not pull in the dashboard.
    if name == "create_app":
        from .app import create_app

        return create_app
    if name == "WebOptions":
        from .options import WebOptions

        return WebOptions
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
