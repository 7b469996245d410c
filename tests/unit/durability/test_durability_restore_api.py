"""MasterState.restore_objects: exact ranges, and nothing changed when it refuses."""

from __future__ import annotations

import pytest

from mooncake_core.config.models import MasterConfig
from mooncake_core.store.errors import ConflictError, NotFoundError
from mooncake_core.store.master import MasterState, RebuildError
from mooncake_core.store.objects import Slice


def state() -> MasterState:
    m = MasterState(MasterConfig())
    m.mount_segment("s", "c", 8192, 0.0)
    return m


def used(m: MasterState) -> int:
    return next(s.used for s in m.snapshot().segments if s.name == "s")


def test_objects_come_back_at_their_ranges() -> None:
    m = state()
    m.restore_objects(
        [
            ("a", 4096, ((Slice("s", 4096, 4096),),), True),
            ("b", 128, ((Slice("s", 0, 128),),), False),
        ],
        1.0,
        token_base=10,
    )
    assert used(m) == 4096 + 128 and m.has_object("a") and m.has_object("b")
    assert m.get_replica_list("a", 1.0).replicas == ((Slice("s", 4096, 4096),),)
    assert m.exist("a", 1.0) and not m.exist("b", 1.0)  # b was being written


@pytest.mark.parametrize(
    ("objects", "error"),
    [
        # the second overlaps the first: the first's range is given back too
        (
            [
                ("a", 4096, ((Slice("s", 0, 4096),),), True),
                ("b", 10, ((Slice("s", 100, 10),),), True),
            ],
            RebuildError,
        ),
        ([("a", 4096, ((Slice("s", 8000, 4096),),), True)], RebuildError),  # past the end
        ([("a", 10, ((Slice("gone", 0, 10),),), True)], NotFoundError),
        (
            [("a", 10, ((Slice("s", 0, 10),),), True), ("a", 10, ((Slice("s", 64, 10),),), True)],
            ConflictError,
        ),
    ],
)
def test_a_refused_restore_changes_nothing(objects: list, error: type[Exception]) -> None:
    m = state()
    before = m.snapshot().segments
    with pytest.raises(error):
        m.restore_objects(objects, 1.0, token_base=1)
    assert m.snapshot().segments == before
    assert not m.has_object("a") and not m.has_object("b")
