"""Stop strings over streamed text: matched across chunk boundaries.

:class:`StopMatcher` takes text chunks as they come and returns what may be sent now.
Text that could still be the start of a stop string is held back until the next chunk
decides; once a stop string appears, everything from it on is dropped and
:attr:`stopped` is set.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["StopMatcher"]


class StopMatcher:
    """Cut a text stream at the first of ``stops``.

    Args:
        stops: the stop strings (empty ones are ignored).
    """

    def __init__(self, stops: Sequence[str]) -> None:
        self.stops = [s for s in stops if s]
        self.stopped = False
        self._held = ""

    def push(self, text: str) -> str:
        """Add ``text``; return the part that is certainly before any stop string."""
        if self.stopped:
            return ""
        buf = self._held + text
        cut = min((i for i in (buf.find(s) for s in self.stops) if i >= 0), default=-1)
        if cut >= 0:
            self.stopped = True
            self._held = ""
            return buf[:cut]
        keep = 0  # longest suffix of buf that is a proper prefix of some stop string
        for s in self.stops:
            for n in range(min(len(s) - 1, len(buf)), keep, -1):
                if buf.endswith(s[:n]):
                    keep = n
                    break
        self._held = buf[len(buf) - keep :] if keep else ""
        return buf[: len(buf) - keep]

    def flush(self) -> str:
        """The held text at the end of the stream (no stop string came)."""
        out, self._held = ("" if self.stopped else self._held), ""
        return out
