"""How many threads a large shm copy is split over (sans-IO rule)."""

import pytest

from mooncake_core.transfer.shm import COPY_THREADS, copy_threads


@pytest.mark.parametrize(
    ("cpus", "load", "expected"),
    [
        (2, 0.0, 2),  # an idle core for the second thread
        (2, 0.9, 2),
        (2, 1.01, 1),  # less than one idle core: the split waits for the slower thread
        (2, 10.0, 1),
        (1, 0.0, 1),  # one CPU never splits
        (64, 0.0, COPY_THREADS),  # capped
    ],
)
def test_copy_threads(cpus: int, load: float, expected: int) -> None:
    assert copy_threads(cpus, load) == expected
