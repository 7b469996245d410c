"""The journal under write faults: short writes, ENOSPC mid-record, torn and garbage tails."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from mooncake_core.store import journal as journal_mod
from mooncake_core.store.journal import Journal, JournalOptions, decode_all, encode, recover


def _recs(n: int, start: int = 0) -> list[dict[str, object]]:
    return [{"t": "removed", "key": f"k{i}"} for i in range(start, start + n)]


def _log(directory: Path) -> Path:
    (path,) = list(directory.glob("log-*.mj"))
    return path


@pytest.mark.parametrize(
    "garbage",
    [b"\0" * 8, b"\xff" * 3, os.urandom(64), encode({"s": 3, "t": "removed", "key": "x"})[:-1]],
)
async def test_record_followed_by_garbage_is_trimmed_never_misread(
    tmp_path: Path, garbage: bytes
) -> None:
    j = Journal(tmp_path, 0)
    j.append(_recs(2))
    await j.close()
    with open(_log(tmp_path), "ab") as f:
        f.write(garbage)
    got = recover(tmp_path)
    assert [r["key"] for r in got.records] == ["k0", "k1"]
    assert got.last_seq == 2 and got.torn_files == [_log(tmp_path).name]
    j = Journal(tmp_path, got.last_seq, good_bytes=got.good_bytes)
    j.append(_recs(1, 7))
    await j.close()
    again = recover(tmp_path)
    assert [(r["s"], r["key"]) for r in again.records] == [(1, "k0"), (2, "k1"), (3, "k7")]
    assert again.torn_files == []


def test_partial_record_alone_reads_as_nothing() -> None:
    frame = encode({"s": 1, "t": "removed", "key": "only"})
    for cut in range(len(frame)):
        res = decode_all(frame[:cut])
        assert res.records == [] and res.good_bytes == 0 and res.torn == (cut > 0)


async def test_short_writes_are_continued(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real = os.write
    calls = 0

    def dribble(fd: int, data: bytes | memoryview) -> int:
        nonlocal calls
        calls += 1
        return real(fd, bytes(data[:5]))  # the kernel may write less than asked

    j = Journal(tmp_path, 0, JournalOptions(fsync="none"))
    monkeypatch.setattr(journal_mod.os, "write", dribble)
    assert j.append(_recs(3)) == 3
    monkeypatch.undo()
    await j.close()
    assert calls > 3
    assert [r["key"] for r in recover(tmp_path).records] == ["k0", "k1", "k2"]


async def test_enospc_mid_record_cuts_back_and_the_next_append_follows_good_frames(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    j = Journal(tmp_path, 0, JournalOptions(fsync="none"))
    j.append(_recs(2))
    size = _log(tmp_path).stat().st_size
    real = os.write

    def full(fd: int, data: bytes | memoryview) -> int:
        if len(data) > 10:
            return real(fd, bytes(data[:10]))  # a partial frame lands on disk...
        raise OSError(errno.ENOSPC, "No space left on device")  # ...then the disk is full

    monkeypatch.setattr(journal_mod.os, "write", full)
    with pytest.raises(OSError) as info:
        j.append(_recs(3, 10))
    monkeypatch.undo()
    assert info.value.errno == errno.ENOSPC
    assert j.last_seq == 2 and _log(tmp_path).stat().st_size == size  # nothing of it stayed
    assert j.append(_recs(1, 20)) == 3  # the disk has room again: seqs continue
    await j.close()
    got = recover(tmp_path)
    assert [(r["s"], r["key"]) for r in got.records] == [(1, "k0"), (2, "k1"), (3, "k20")]
    assert got.torn_files == []


async def test_a_failed_cut_is_retried_before_the_next_append(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    j = Journal(tmp_path, 0, JournalOptions(fsync="none"))
    j.append(_recs(1))
    size = _log(tmp_path).stat().st_size
    real_write, real_trunc = os.write, os.ftruncate

    def partial(fd: int, data: bytes | memoryview) -> int:
        real_write(fd, bytes(data[:6]))
        raise OSError(errno.EIO, "Input/output error")

    def broken(fd: int, n: int) -> None:
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(journal_mod.os, "write", partial)
    monkeypatch.setattr(journal_mod.os, "ftruncate", broken)
    with pytest.raises(OSError):
        j.append(_recs(1, 5))
    monkeypatch.setattr(journal_mod.os, "write", real_write)
    with pytest.raises(OSError):  # still cannot cut the partial frame: refuse, write nothing
        j.append(_recs(1, 6))
    assert _log(tmp_path).stat().st_size == size + 6
    monkeypatch.setattr(journal_mod.os, "ftruncate", real_trunc)
    assert j.append(_recs(1, 7)) == 2
    await j.close()
    assert [r["key"] for r in recover(tmp_path).records] == ["k0", "k7"]


async def test_rotate_that_cannot_open_a_new_log_changes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    j = Journal(tmp_path, 0, JournalOptions(fsync="none"))
    j.append(_recs(2))
    real_open = os.open

    def no_inode(path: object, flags: int, mode: int = 0o777) -> int:
        if str(path).endswith(".mj"):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_open(path, flags, mode)  # type: ignore[arg-type]

    monkeypatch.setattr(journal_mod.os, "open", no_inode)
    with pytest.raises(OSError):
        j.rotate()
    monkeypatch.undo()
    assert j.append(_recs(1, 9)) == 3
    await j.close()
    assert [r["key"] for r in recover(tmp_path).records] == ["k0", "k1", "k9"]
