"""The serve scaffold's core: start, ready, run until a signal or the component's own
end, stop; a failed start is one StartFailed (exact order of the calls)."""

from __future__ import annotations

import asyncio
import gc
import os
import signal
from collections.abc import Iterator

import pytest

from mooncake_core.lifecycle import StartFailed, run_until_signalled


@pytest.fixture(autouse=True)
def _unfrozen() -> Iterator[None]:
    # run_until_signalled freezes the heap it finds after start; give pytest's back.
    gc.unfreeze()
    yield
    gc.unfreeze()


class _Component:
    def __init__(self, calls: list[str], fail: BaseException | None = None) -> None:
        self.calls, self.fail = calls, fail
        self.ended = asyncio.Event()

    async def start(self) -> None:
        self.calls.append("start")
        if self.fail is not None:
            raise self.fail

    async def stop(self) -> None:
        self.calls.append("stop")


def _run(component: _Component, *, on_ready_too: object = None, **kw: object) -> bool:
    calls = component.calls

    def ready() -> None:
        calls.append("ready")
        if callable(on_ready_too):
            on_ready_too()

    return asyncio.run(
        run_until_signalled(
            component,
            on_ready=ready,
            on_stopping=lambda by_itself: calls.append(f"stopping {by_itself}"),
            **kw,  # type: ignore[arg-type]
        )
    )


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_stops_the_component_after_its_ready_line(sig: signal.Signals) -> None:
    calls: list[str] = []
    by_itself = _run(_Component(calls), on_ready_too=lambda: os.kill(os.getpid(), sig))
    assert not by_itself
    assert calls == ["start", "ready", "stopping False", "stop"]


def test_the_component_may_end_by_itself() -> None:
    calls: list[str] = []
    c = _Component(calls)
    assert _run(c, on_ready_too=c.ended.set, ended=lambda: c.ended)
    assert calls == ["start", "ready", "stopping True", "stop"]


def test_a_failed_start_is_start_failed_with_its_text() -> None:
    calls: list[str] = []
    with pytest.raises(StartFailed, match=r"^port 5 in use$"):
        _run(_Component(calls, RuntimeError("port 5 in use")), start_errors=(RuntimeError,))
    assert calls == ["start"]  # no ready line, nothing to stop
    calls.clear()
    with pytest.raises(StartFailed, match=r"^disk$"):
        _run(
            _Component(calls, OSError("disk")),
            start_errors=(OSError,),
            stop_on_start_error=True,
        )
    assert calls == ["start", "stop"]
    # Not one of start_errors: raised as it is.
    calls.clear()
    with pytest.raises(KeyError):
        _run(_Component(calls, KeyError("x")), start_errors=(OSError,))


def test_start_up_objects_are_frozen_before_the_ready_line() -> None:
    # What start-up allocated leaves the cyclic collector's scans (gc.freeze) once
    # start succeeded and before the ready line; a failed start freezes nothing.
    with pytest.raises(StartFailed):
        _run(_Component([], fail=RuntimeError("no")), start_errors=(RuntimeError,))
    assert gc.get_freeze_count() == 0
    frozen: list[int] = []
    c = _Component([])

    def ready() -> None:
        frozen.append(gc.get_freeze_count())
        c.ended.set()

    assert _run(c, on_ready_too=ready, ended=lambda: c.ended)
    assert frozen and frozen[0] > 1000, frozen
