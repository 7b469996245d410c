"""Journal framing, torn tails, group commit and snapshots (real files in tmp_path)."""

from __future__ import annotations

import asyncio
import os
import zlib
from pathlib import Path

import pytest

from mooncake_core.store.journal import (
    Journal,
    JournalOptions,
    decode_all,
    encode,
    recover,
)


def _recs(n: int, start: int = 0) -> list[dict[str, object]]:
    return [{"t": "removed", "key": f"k{i}"} for i in range(start, start + n)]


def test_frames_roundtrip_and_carry_crc() -> None:
    frame = encode({"s": 7, "t": "removed", "key": "a"})
    length = int.from_bytes(frame[:4], "little")
    crc = int.from_bytes(frame[4:8], "little")
    assert length == len(frame) - 8
    assert crc == zlib.crc32(frame[8:])
    res = decode_all(frame + encode({"s": 8, "t": "removed", "key": "b"}))
    assert [r["key"] for r in res.records] == ["a", "b"]
    assert not res.torn and res.good_bytes == len(frame) * 2


@pytest.mark.parametrize("cut", [1, 4, 8, 12])
def test_torn_tail_is_ignored(cut: int) -> None:
    a = encode({"s": 1, "t": "removed", "key": "a"})
    b = encode({"s": 2, "t": "removed", "key": "bbbbbbbb"})
    res = decode_all(a + b[:cut])
    assert [r["s"] for r in res.records] == [1]
    assert res.torn and res.good_bytes == len(a)


def test_corrupt_record_ends_the_log_there() -> None:
    a = encode({"s": 1, "t": "removed", "key": "a"})
    b = bytearray(encode({"s": 2, "t": "removed", "key": "b"}))
    b[-2] ^= 0xFF
    c = encode({"s": 3, "t": "removed", "key": "c"})
    res = decode_all(a + bytes(b) + c)
    assert [r["s"] for r in res.records] == [1]
    assert res.torn


async def test_append_numbers_records_and_recover_reads_them(tmp_path: Path) -> None:
    j = Journal(tmp_path, 0, JournalOptions(fsync="always"))
    assert j.append(_recs(3)) == 3
    await j.wait_durable(3)
    assert j.durable_seq == 3 and j.fsyncs == 1
    await j.close()
    got = recover(tmp_path)
    assert [r["s"] for r in got.records] == [1, 2, 3]
    assert got.last_seq == 3 and got.torn_files == []


async def test_batch_policy_group_commits(tmp_path: Path) -> None:
    j = Journal(tmp_path, 0, JournalOptions(fsync="batch", batch_ms=20))
    seqs = [j.append(_recs(1, i)) for i in range(10)]
    await asyncio.gather(*(j.wait_durable(s) for s in seqs))
    assert j.durable_seq == 10
    assert j.fsyncs == 1  # one fsync covered all ten waiting callers
    await j.close()


async def test_always_policy_shares_fsyncs_between_concurrent_replies(tmp_path: Path) -> None:
    j = Journal(tmp_path, 0, JournalOptions(fsync="always"))
    seqs = [j.append(_recs(1, i)) for i in range(10)]
    await asyncio.gather(*(j.wait_durable(s) for s in seqs))
    assert j.durable_seq == 10 and j.fsyncs == 1
    j.append(_recs(1, 99))
    await j.wait_durable(11)  # a later record needs a new fsync
    assert j.fsyncs == 2
    await j.close()


async def test_none_policy_never_fsyncs(tmp_path: Path) -> None:
    j = Journal(tmp_path, 0, JournalOptions(fsync="none"))
    await j.wait_durable(j.append(_recs(3)))
    assert j.fsyncs == 0
    await j.close()
    assert len(recover(tmp_path).records) == 3


@pytest.mark.parametrize("pass_good_bytes", [False, True])
async def test_reopen_cuts_torn_tail_and_appends_after_good_frames(
    tmp_path: Path, pass_good_bytes: bool
) -> None:
    j = Journal(tmp_path, 0)
    j.append(_recs(2))
    await j.close()
    (log,) = list(tmp_path.glob("log-*.mj"))
    with open(log, "ab") as f:
        f.write(encode({"s": 3, "t": "removed", "key": "torn"})[:7])
    got = recover(tmp_path)
    assert got.last_seq == 2 and got.torn_files == [log.name]
    j = Journal(tmp_path, got.last_seq, good_bytes=got.good_bytes if pass_good_bytes else None)
    j.append(_recs(1, 5))
    await j.close()
    again = recover(tmp_path)
    assert [(r["s"], r["key"]) for r in again.records] == [(1, "k0"), (2, "k1"), (3, "k5")]
    assert again.torn_files == []


async def test_snapshot_replaces_older_logs(tmp_path: Path) -> None:
    j = Journal(tmp_path, 0)
    j.append(_recs(5))
    seq = j.rotate()
    j.write_snapshot(seq, [{"t": "removed", "key": "snap"}])
    j.append(_recs(2, 100))
    await j.close()
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == [f"log-{5:020d}.mj", f"snap-{5:020d}.mj"]
    got = recover(tmp_path)
    assert [(r["s"], r["key"]) for r in got.records] == [(0, "snap"), (6, "k100"), (7, "k101")]
    assert got.last_seq == 7


async def test_crash_before_snapshot_rename_keeps_every_record(tmp_path: Path) -> None:
    j = Journal(tmp_path, 0)
    j.append(_recs(3))
    j.rotate()  # new log started, snapshot never written (crash)
    j.append(_recs(2, 10))
    await j.close()
    (tmp_path / "snap-00000000000000000003.mj.tmp").write_bytes(b"partial")
    got = recover(tmp_path)
    assert [r["s"] for r in got.records] == [1, 2, 3, 4, 5]


def test_corrupt_snapshot_is_an_error_not_silent_loss(tmp_path: Path) -> None:
    data = encode({"s": 0, "t": "removed", "key": "a"})
    (tmp_path / f"snap-{4:020d}.mj").write_bytes(data[:-1])
    with pytest.raises(ValueError, match="corrupt"):
        recover(tmp_path)


def test_recover_of_missing_directory_is_empty(tmp_path: Path) -> None:
    got = recover(tmp_path / "nope")
    assert got.records == [] and got.last_seq == 0
    assert not os.path.exists(tmp_path / "nope")


async def test_maybe_compact_snapshots_the_image_after_n_records(tmp_path: Path) -> None:
    from mooncake_core.store.ha.image import MetadataImage

    image = MetadataImage()
    j = Journal(tmp_path, 0, JournalOptions(fsync="none", snapshot_every=4))
    recs = [
        {"t": "mount", "seg": "a", "client": "c", "cap": 4096, "addr": "", "loc": "cpu:0"},
        *(
            {"t": "stored", "key": f"k{i}", "size": 8, "replicas": [[["a", i * 64, 8]]]}
            for i in range(3)
        ),
    ]
    j.append(recs[:2])
    image.apply_all(recs[:2])
    j.maybe_compact(image)  # 2 < 4: nothing
    j.append(recs[2:])
    image.apply_all(recs[2:])
    j.maybe_compact(image)
    await j.close()  # waits for the snapshot thread
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"log-{4:020d}.mj", f"snap-{4:020d}.mj"]
    got = recover(tmp_path)
    assert [r["t"] for r in got.records] == ["mount", "stored", "stored", "stored"]
    assert got.last_seq == 4
