"""Fixtures of the dashboard tests: one live backend per session (see web_live_procs.py)
and apps created over it."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from web_live_procs import WebBackend, start_backend, stop_backend

from mooncake_web import WebOptions, create_app


@pytest.fixture(scope="session")
def backend(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WebBackend]:
    b = start_backend(tmp_path_factory.mktemp("web"))
    try:
        yield b
    finally:
        stop_backend(b)


@pytest.fixture(scope="session")
def make_app(backend: WebBackend) -> Callable[..., FastAPI]:
    def make(**kw: object) -> FastAPI:
        fields: dict[str, object] = {
            "master": backend.master,
            "audit_url": backend.audit_url,
            "targets": backend.target_args(),
            "targets_only": True,
            "interval_s": 0.5,
            "poll_timeout_s": 0.5,
            "page_cap": 100,
        }
        opts = WebOptions(**{**fields, **kw})  # type: ignore[arg-type]
        return create_app(backend.cfg, opts)

    return make


@pytest.fixture(scope="module")
def client(make_app: Callable[..., FastAPI]) -> Iterator[TestClient]:
    """Anonymous client of an app with anonymous_read on."""
    with TestClient(make_app(anonymous_read=True), base_url="http://127.0.0.1") as c:
        yield c
