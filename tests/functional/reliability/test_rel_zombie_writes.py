"""A writer stalled past ``put_timeout_s`` never writes into another object's bytes.

Real master and node processes; two clients over shm, then tcp. The writer gets its
PutStart answered and then stalls (a GC pause, VM steal, swap) for three put timeouts:
the master discards the write meanwhile and another client puts an object of the same
size, which the best-fit allocator would place exactly on the discarded range. Then the
writer's transfer runs, late. Until the master held a discarded write's space for
``put_release_s``, that transfer overwrote the other object: its reader got the
stalled writer's bytes (measured before the fix: every byte of the victim was the
zombie's, over shm and over tcp).

The second test drives the public ``put``: a client whose PutStart answer arrives only
after ``put_timeout_s`` refuses to start the transfer at all, revokes, and says why, with
the master's timeout (from its readiness) when its own configuration says a longer one.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from store_client_procs import TEST_MASTER, Cluster, make_client, start_cluster

from mooncake_core.store import Client, ClientOptions
from mooncake_core.store.client.data import plan
from mooncake_core.store.errors import NotFoundError, UnavailableError
from mooncake_core.transfer import OpCode

pytestmark = pytest.mark.integration

PUT_TIMEOUT_S = 0.3
RELEASE_S = 3.0
SIZE = 1 << 20
MASTER = {
    **TEST_MASTER,
    "put_timeout_s": PUT_TIMEOUT_S,
    "put_release_s": RELEASE_S,
    "stage_timeout_s": 1.0,  # put_release_s must cover it too
}


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    c = start_cluster(tmp_path, nodes=("n0",), master_settings=MASTER, node_size="16MiB")
    try:
        yield c
    finally:
        c.close()


def allocated(c: Cluster) -> int:
    return int(c.snapshot()["allocated_bytes"])


@pytest.mark.parametrize("transport", ["shm", "tcp"])
def test_rel_a_stalled_transfer_lands_in_its_own_held_range(
    cluster: Cluster, transport: str
) -> None:
    with (
        make_client(cluster, transport=transport) as writer,
        make_client(cluster, transport=transport) as other,
    ):
        # The writer's own two steps, with the stall between them.
        (zombie,) = writer._m.put_start("zombie", SIZE, None)
        time.sleep(3 * PUT_TIMEOUT_S)  # stalled; the master discards the write
        assert not other.is_exist("zombie")
        other.put("victim", b"V" * SIZE)
        (victim,) = other._m.get_replica_list("victim").replicas
        assert victim != zombie  # the discarded range is still held for its writer
        st = writer._stage(SIZE)
        st.view()[:SIZE] = b"Z" * SIZE
        ops = plan(OpCode.WRITE, st, 0, zombie)
        assert writer._dp.run_reporting([ops]) == ([None], [set()])  # the late transfer
        got = other.get("victim")
        assert got == b"V" * SIZE, f"victim reads {got.count(b'Z')} bytes of the zombie's"
        with pytest.raises(NotFoundError):
            writer._m.put_end("zombie")  # discarded: the writer learns it here
        # The held range goes back put_release_s after the PutStart (upkeep: 0.1 s).
        # (``other`` was also granted its next put, unused: held as long after it.)
        assert allocated(cluster) == 3 * SIZE
        deadline = time.monotonic() + RELEASE_S + 5
        while allocated(cluster) != SIZE and time.monotonic() < deadline:
            time.sleep(0.1)
        assert allocated(cluster) == SIZE
        assert other.get("victim") == b"V" * SIZE


def test_rel_put_never_starts_a_transfer_after_the_put_timeout(cluster: Cluster) -> None:
    # The writer is configured with the default put_timeout_s (30 s), as an application
    # using the upstream API is: it goes by the master's 0.3 s, learnt from its readiness.
    own = ClientOptions(master=cluster.address, transport="shm")
    assert own.master_config.put_timeout_s == 30.0
    with Client(own).setup() as writer, make_client(cluster, transport="shm") as other:
        m = writer._m
        real = m.put_start

        def answered_late(*args: Any, **kw: Any) -> Any:
            got = real(*args, **kw)
            time.sleep(2 * PUT_TIMEOUT_S)  # the answer is read only after the timeout
            return got

        m.put_start = answered_late  # type: ignore[method-assign]
        with pytest.raises(UnavailableError, match="past put_timeout_s"):
            writer.put("late", b"L" * SIZE)
        m.put_start = real  # type: ignore[method-assign]
        assert not other.is_exist("late")
        writer.put("late", b"L" * SIZE)  # a retry in time succeeds
        assert other.get("late") == b"L" * SIZE
