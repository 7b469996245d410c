"""JSON API of the dashboard: one router per resource, all under ``/api/``."""

from fastapi import APIRouter

from . import audit, auth, events, network, nodes, overview, scheduler, store

ROUTERS: tuple[APIRouter, ...] = (
    auth.router,
    overview.router,
    events.router,
    store.router,
    network.router,
    scheduler.router,
    audit.router,
    nodes.router,
)
"""Every API router, in the order the OpenAPI page lists them."""

__all__ = ["ROUTERS"]
