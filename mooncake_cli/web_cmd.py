"""``mooncake web``: the admin dashboard in the browser (FastAPI + uvicorn).

A thin layer: builds :class:`mooncake_web.WebOptions` from the flags and serves
:func:`mooncake_web.create_app` through the serve scaffold (``serve.py``) with uvicorn.
fastapi and uvicorn load inside.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from .common import ConfigOption, fail, load, write_stdout

if TYPE_CHECKING:
    from mooncake_core.config import ClusterConfig
    from mooncake_web import WebOptions


def web(
    config: ConfigOption = None,
    host: Annotated[
        str | None,
        typer.Option(
            "--host", help="Address to bind (default: the address of dashboard.host's host)."
        ),
    ] = None,
    port: Annotated[
        int | None,
        typer.Option("--port", "-p", min=0, max=65535, help="Port (default: dashboard.port)."),
    ] = None,
    secret_file: Annotated[
        Path | None,
        typer.Option("--secret-file", help="Cluster secret (default: the config's secret file)."),
    ] = None,
    master: Annotated[
        str | None, typer.Option("--master", help="Master host:port (default: the config's).")
    ] = None,
    audit_db: Annotated[
        str | None,
        typer.Option("--audit-db", help="Audit database URL (default: the config's; '' none)."),
    ] = None,
    target: Annotated[
        list[str] | None,
        typer.Option("--target", "-t", help="Extra telemetry endpoint NAME[:ROLE]=URL."),
    ] = None,
    interval: Annotated[
        float, typer.Option("--interval", min=0.1, max=60, help="Seconds between polls.")
    ] = 1.0,
    print_token: Annotated[
        bool,
        typer.Option("--print-token", help="Print the login token (from the secret) and exit."),
    ] = False,
) -> None:
    """Serve the dashboard (pages, JSON API under /api/, OpenAPI at /docs)."""
    cfg = load(config)
    path = secret_file or cfg.secret_path
    if print_token:
        from mooncake_web.backend import read_token

        try:
            token = read_token(path)
        except (OSError, ValueError) as exc:
            fail(f"cannot read the cluster secret: {exc}")
        if token is None:
            fail(f"no cluster secret at {path}")
        write_stdout(token + "\n")
        return
    from mooncake_web import create_app
    from mooncake_web.http_component import HttpComponent

    from .serve import serve

    try:
        host, bind_port, opts = web_settings(
            cfg,
            host=host,
            port=port,
            secret_file=secret_file,
            master=master,
            audit_db=audit_db,
            target=target,
            interval=interval,
        )
        application = create_app(cfg, opts)
    except (OSError, ValueError) as exc:
        fail(str(exc), code=2)
    # Open SSE streams never end by themselves: bound the graceful shutdown so
    # `mooncake cluster down` does not wait for browsers to go away.
    serve(
        lambda: HttpComponent(application, host, bind_port, graceful_s=3, access_log=False),
        ready=lambda http: f"dashboard on http://{host}:{http.port}/ (API docs at /docs)",
        stopping="mooncake web: stopping",
    )


def web_settings(
    cfg: ClusterConfig,
    *,
    host: str | None = None,
    port: int | None = None,
    secret_file: Path | None = None,
    master: str | None = None,
    audit_db: str | None = None,
    target: list[str] | None = None,
    interval: float = 1.0,
) -> tuple[str, int, WebOptions]:
    """Bind address, port and dashboard options of ``mooncake web`` from the config
    and the flags given (None: the config's).

    Raises:
        ValueError: ``dashboard.host`` is not a configured host, or bad options.
    """
    from mooncake_web import WebOptions

    if host is None:
        try:
            host = cfg.host(cfg.dashboard.host).address
        except KeyError:
            raise ValueError(
                f"dashboard.host {cfg.dashboard.host!r} is not one of the configured hosts"
            ) from None
    opts = WebOptions(
        master=master,
        secret_file=secret_file,
        audit_url=audit_db,
        targets=tuple(target or ()),
        interval_s=interval,
        poll_timeout_s=min(2.0, 0.8 * interval),
        bind_host=host,
    )
    return host, cfg.dashboard.port if port is None else port, opts
