"""The shm ledger: an initiator's counts beside a peer's segment file, summed by the
target, removed with the segment (real files, no engine)."""

from pathlib import Path

from mooncake_core.transfer.shm import ShmTransport, ledger_paths, remove_ledgers, served


def test_two_initiators_are_summed_and_removed_with_the_segment(tmp_path: Path) -> None:
    seg = tmp_path / "mooncake-1-0123456789abcdef"
    seg.write_bytes(b"\0" * 8192)
    a, b = ShmTransport(lambda _: None), ShmTransport(lambda _: None)
    try:
        a.map(str(seg), 8192)
        b.map(str(seg), 8192)
        assert served(str(seg)) == (0, 0)
        a.account(str(seg), False, 1000)
        a.account(str(seg), True, 10)
        b.account(str(seg), False, 7)
        assert served(str(seg)) == (1017, 3)
        assert len(ledger_paths(str(seg))) == 2
    finally:
        a.close()
        b.close()
    # Closing an initiator keeps its counts: the target's counters never go back.
    assert served(str(seg)) == (1017, 3)
    remove_ledgers(str(seg))
    assert served(str(seg)) == (0, 0) and ledger_paths(str(seg)) == []


def test_a_segment_never_mapped_has_nothing_served(tmp_path: Path) -> None:
    seg = tmp_path / "mooncake-1-0123456789abcdef"
    t = ShmTransport(lambda _: None)
    t.account(str(seg), False, 5)  # no mapping, no ledger: counted nowhere, no error
    assert served(str(seg)) == (0, 0)
    t.close()


def test_an_exited_initiators_ledger_is_folded_in_and_removed(tmp_path: Path) -> None:
    import subprocess
    import sys

    seg = tmp_path / "mooncake-1-0123456789abcdef"
    seg.write_bytes(b"\0" * 4096)
    code = (
        "import sys; from mooncake_core.transfer.shm import ShmTransport as T;"
        "t = T(lambda _: None); t.map(sys.argv[1], 4096); t.account(sys.argv[1], False, 300)"
    )
    for _ in range(3):  # three short-lived clients, e.g. `mooncake store put`
        subprocess.run([sys.executable, "-c", code, str(seg)], check=True)
    live = ShmTransport(lambda _: None)
    live.map(str(seg), 4096)
    live.account(str(seg), True, 5)
    folded = [0, 0]
    try:
        assert served(str(seg), folded) == (905, 4)
        assert folded == [900, 3] and len(ledger_paths(str(seg))) == 1  # the live one
        assert served(str(seg), folded) == (905, 4)  # counted once, never goes back
    finally:
        live.close()
