"""A store node's SSD tier settings are validated together."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from mooncake_core.config.models import StoreNodeConfig


def test_both_or_neither() -> None:
    assert StoreNodeConfig(name="n0").ssd_dir is None
    on = StoreNodeConfig.model_validate({"name": "n0", "ssd_dir": "/var/ssd", "ssd_size": "1GiB"})
    assert int(on.ssd_size) == 1 << 30


@pytest.mark.parametrize("kw", [{"ssd_dir": "/var/ssd"}, {"ssd_size": "1GiB"}])
def test_one_without_the_other_is_refused(kw: dict[str, str]) -> None:
    with pytest.raises(ValidationError, match="ssd_dir and ssd_size go together"):
        StoreNodeConfig.model_validate({"name": "n0", **kw})
