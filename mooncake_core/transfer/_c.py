"""Handle on the C extension ``mooncake_core._native`` (built from native/mc_native.c).

It ships no type stubs, so it is imported once here as ``Any`` for the type checker.
"""

from __future__ import annotations

import importlib
from typing import Any

native: Any = importlib.import_module("mooncake_core._native")
