"""Reliability suite: reuses the real-process helpers of the store client tests."""

from __future__ import annotations

import sys
from pathlib import Path

# The master/node launcher lives with the store client tests; import it, don't copy it.
_HELPERS = Path(__file__).resolve().parents[1] / "store_client"
if str(_HELPERS) not in sys.path:
    sys.path.insert(0, str(_HELPERS))
