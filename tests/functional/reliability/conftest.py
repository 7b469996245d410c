"""Reliability suite: reuses the real-process helpers of the store client tests."""

from __future__ import annotations

import sys
from pathlib import Path

# The launchers live with the store client and serving tests; import them, don't copy them.
for _dir in ("store_client", "serving", "transfer_netns", "durability"):
    _helpers = Path(__file__).resolve().parents[1] / _dir
    if str(_helpers) not in sys.path:
        sys.path.insert(0, str(_helpers))
