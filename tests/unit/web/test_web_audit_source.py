"""Which audit database the dashboard reads (``mooncake_web.backend.audit_url_for``)."""

from __future__ import annotations

from pathlib import Path

from mooncake_core.config import ClusterConfig
from mooncake_web.backend import audit_url_for


def _cfg(tmp_path: Path, **audit: object) -> ClusterConfig:
    return ClusterConfig.model_validate({"state_dir": str(tmp_path), "audit": audit})


def test_the_configs_database_is_read_only_once_it_exists(tmp_path: Path) -> None:
    cfg = _cfg(tmp_path)
    assert audit_url_for(cfg, None) is None  # never created by the dashboard
    (tmp_path / "audit.db").write_bytes(b"")
    assert audit_url_for(cfg, None) == f"sqlite:///{tmp_path}/audit.db"


def test_audit_disabled_shows_no_leftover_database(tmp_path: Path) -> None:
    (tmp_path / "audit.db").write_bytes(b"")
    cfg = _cfg(tmp_path, enabled=False)
    assert audit_url_for(cfg, None) is None
    assert audit_url_for(cfg, "sqlite:////x/y.db") == "sqlite:////x/y.db"  # named: read
    assert audit_url_for(_cfg(tmp_path), "") is None  # "": none


def test_a_dashboard_started_before_the_conductor_finds_the_database_it_creates(
    tmp_path: Path,
) -> None:
    # `cluster up` starts the dashboard beside the conductor, which creates the audit
    # database as it starts: the dashboard must not keep "none" from its own start.
    from mooncake_core.conductor.audit import upgrade
    from mooncake_web import WebOptions
    from mooncake_web.backend import Backend

    cfg = _cfg(tmp_path)
    backend = Backend(cfg, WebOptions())
    try:
        assert backend.audit_url is None and backend.collector.audit is None
        upgrade(f"sqlite:///{tmp_path}/audit.db")
        assert backend.audit_url == f"sqlite:///{tmp_path}/audit.db"
        assert backend.collector.audit is not None  # the live feed reads it too
    finally:
        backend.collector.close()
