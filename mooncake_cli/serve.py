"""The serve scaffold of every long-running command (master, store node, workers,
conductor): the cluster secret, service logging, the ready line and the run until
SIGINT/SIGTERM (:func:`mooncake_core.lifecycle.run_until_signalled`).

A command is then: options in (its ``*_settings`` function, which tests and
``cluster up`` share), one call here, out.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import typer

from .common import err, fail, setup_service_logging

if TYPE_CHECKING:
    import asyncio

    from mooncake_core.config import ClusterConfig
    from mooncake_core.lifecycle import Component

C = TypeVar("C", bound="Component")


def say(line: str) -> None:
    """One plain line on stderr (ready lines: probes and ``cluster up`` parse them)."""
    err.print(line, highlight=False, markup=False)


def cluster_secret(cfg: ClusterConfig, secret_file: Path | None) -> bytes | None:
    """The cluster secret of ``--secret-file``, else of the config's ``secret_file``, else
    None (no authentication); exits 1 when the file cannot be read."""
    from mooncake_core.store.auth import read_secret

    path = secret_file or cfg.secret_file
    if path is None:
        return None
    try:
        return read_secret(path.expanduser())
    except (OSError, ValueError) as exc:
        fail(f"cannot read the cluster secret: {exc}")


def run_service(main: Callable[[], Coroutine[Any, Any, bool]], *, ended_code: int = 3) -> None:
    """Set up service logging and run ``main`` on a fresh event loop.

    ``main`` returns whether the component ended by itself (then exit ``ended_code``);
    :class:`~mooncake_core.lifecycle.StartFailed` exits 1 with its message.
    """
    import asyncio

    from mooncake_core.lifecycle import StartFailed

    setup_service_logging()
    try:
        by_itself = asyncio.run(main())
    except StartFailed as exc:
        fail(str(exc))
    if by_itself:
        raise typer.Exit(ended_code)


def serve(
    make: Callable[[], C],
    *,
    ready: Callable[[C], str],
    stopping: str,
    start_errors: tuple[type[BaseException], ...] = (RuntimeError,),
    stop_on_start_error: bool = False,
    ended: Callable[[C], asyncio.Event | None] = lambda _: None,
    ended_line: str = "",
) -> None:
    """Serve the component ``make()`` builds (on the loop) until SIGINT/SIGTERM.

    Args:
        make: builds the component (inside the event loop).
        ready: the ready line, once started.
        stopping: the line printed before stopping.
        start_errors, stop_on_start_error: see ``run_until_signalled``.
        ended: the component's own end event, after start (exit 3 when it ends).
        ended_line: printed (before ``stopping``) when it ended by itself.
    """
    from mooncake_core.lifecycle import run_until_signalled

    async def main() -> bool:
        component = make()

        def stopping_line(by_itself: bool) -> None:
            if by_itself and ended_line:
                say(ended_line)
            say(stopping)

        return await run_until_signalled(
            component,
            on_ready=lambda: say(ready(component)),
            on_stopping=stopping_line,
            ended=lambda: ended(component),
            start_errors=start_errors,
            stop_on_start_error=stop_on_start_error,
        )

    run_service(main)
