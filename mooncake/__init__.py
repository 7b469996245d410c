"""Upstream Mooncake's Python import names over mooncake_core (a thin adapter).

``mooncake.store`` (``MooncakeDistributedStore``, ``ReplicateConfig``,
``SoftPinAction``) and the ``mooncake_master`` console script speak upstream's surface so
vLLM, SGLang and LMCache integrations run unchanged; see ``docs/compat.md`` for
what is supported and what is refused.

Upstream's wheel (``mooncake-transfer-engine*``) installs a package of the same name.
When both are installed, whichever comes first on ``sys.path`` wins; this package says
so on import instead of shadowing the other silently.
"""

from __future__ import annotations

import warnings
from importlib import metadata

__all__ = ["UPSTREAM_DISTRIBUTIONS", "upstream_installed"]

UPSTREAM_DISTRIBUTIONS = (
    "mooncake-transfer-engine",
    "mooncake-transfer-engine-non-cuda",
    "mooncake-transfer-engine-cuda13",
)


def upstream_installed() -> str | None:
    """The name of an installed upstream Mooncake wheel, or None."""
    for name in UPSTREAM_DISTRIBUTIONS:
        try:
            metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue
        return name
    return None


_other = upstream_installed()
if _other is not None:
    warnings.warn(
        f"upstream's {_other} is also installed and owns the 'mooncake' package name; "
        f"this import is mooncake-py's adapter ({__file__}); uninstall one of them",
        RuntimeWarning,
        stacklevel=2,
    )
