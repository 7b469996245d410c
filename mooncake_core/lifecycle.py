"""Run one long-lived component until SIGINT/SIGTERM: start, ready, wait, stop.

Every long-running process (the store master, a store node, a worker) is this one
sequence around a different component; a front end only says what to print::

    start()                      a failure -> StartFailed(message), nothing served
    settle_heap()                start-up's objects out of the collector's scans
    SIGINT/SIGTERM -> stop flag  (installed after start: a start that hangs stays killable)
    on_ready()                   the ready line that probes and `cluster up` wait for
    wait: a signal, or the component's own end (e.g. a master that lost its lease)
    on_stopping(by_itself)
    stop()

No front-end framework here: ``mooncake_cli.serve`` prints the lines and maps
:class:`StartFailed` to its exit code.
"""

from __future__ import annotations

import asyncio
import gc
import signal
from collections.abc import Callable
from typing import Protocol

__all__ = ["Component", "StartFailed", "run_until_signalled", "settle_heap"]


class Component(Protocol):
    """What :func:`run_until_signalled` runs."""

    async def start(self) -> None:
        """Start serving (raises on failure)."""

    async def stop(self) -> None:
        """Stop serving and release everything."""


class StartFailed(Exception):
    """The component could not start; the message is the whole explanation."""


def settle_heap() -> None:
    """Take what start-up allocated out of the cyclic garbage collector's scans.

    A service allocates most of its long-lived objects while it starts (modules, the
    gRPC server, protobuf descriptors, a restored master's metadata); every later
    collection of the oldest generation would walk them again. One collection, then
    :func:`gc.freeze`, leaves later collections only what was allocated since (those
    objects are still freed by reference counting when they go). Measured on the
    master's batch path: about 10-20% of a 64-key batch (docs/benchmarks.md, "The
    master's heap frozen after start-up").
    """
    gc.collect()
    gc.freeze()


async def run_until_signalled(
    component: Component,
    *,
    on_ready: Callable[[], None],
    on_stopping: Callable[[bool], None],
    ended: Callable[[], asyncio.Event | None] = lambda: None,
    start_errors: tuple[type[BaseException], ...] = (),
    stop_on_start_error: bool = False,
) -> bool:
    """Start ``component``, serve until SIGINT/SIGTERM (or its own end), stop it.

    Args:
        component: what to run.
        on_ready: called once started and the signal handlers are in place.
        on_stopping: called before ``stop`` with whether the component ended by itself.
        ended: after start, the component's own end event (None: only signals end it).
        start_errors: exceptions of ``start`` that mean it could not start (their text
            is the message).
        stop_on_start_error: call ``stop`` after such a failure (to release what the
            failed start took).

    Returns:
        True when the component ended by itself, False on a signal.

    Raises:
        StartFailed: ``start`` raised one of ``start_errors`` (or StartFailed itself).
    """
    try:
        await component.start()
    except start_errors as exc:
        if stop_on_start_error:
            await component.stop()
        raise StartFailed(str(exc)) from exc
    settle_heap()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    on_ready()
    own_end = ended()
    waits = [asyncio.ensure_future(stop.wait())]
    if own_end is not None:
        waits.append(asyncio.ensure_future(own_end.wait()))
    try:
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for w in waits:
            w.cancel()
    by_itself = own_end is not None and own_end.is_set()
    on_stopping(by_itself)
    await component.stop()
    return by_itself
