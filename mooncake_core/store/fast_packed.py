"""Packed replies of the fast control channel: replica lists without protobuf objects.

A 64-key ``BatchGetReplicaList`` reply costs ~520 us in protobuf conversion alone (one
message per key, one per replica, one per slice, built on the master and read back on
the client: 8 us a key), more than six times the master core's own work for the lookup
(docs/benchmarks.md, "Where a 64-key batch goes"). The packed ops of
:mod:`.fast_control` answer the same handlers' results in this flat form instead (the
single PutStart, Upsert and GetReplicaList as one-item replies). The
requests stay protobuf, and gRPC keeps the protobuf replies.

Layout, little-endian::

    u32 count                       results, one per key of the request, in order
    u16 segments                    string table of the segment names used below
      { u16 length, utf-8 name } * segments
    { item } * count

    item := u8 code                 ErrorCode; 0 is a result, anything else an error
            code != 0: u32 length, utf-8 message
            code == 0: [u64 size, f64 lease_ttl_s]     (replica-list replies only)
                       u8 replicas, { u16 slices, { u16 segment, u64 offset, u64 length }
                       * slices } * replicas
                       (an outcome reply, BatchPutEnd's, has nothing after code 0)

Decoding checks every count, index and length against the buffer and rejects trailing
bytes: a reply that does not parse raises :class:`ValueError` naming what is wrong (the
client then treats the call as lost, as for a broken connection).

Sans-IO: bytes in, bytes out.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import overload

from .errors import ErrorCode, StoreError, error_from_code
from .objects import Replica, Slice
from .results import GetResult, ReadRow

__all__ = [
    "ReadRun",
    "pack_batch_commit",
    "pack_errors",
    "pack_placements",
    "pack_read_batch",
    "pack_read_versioned",
    "pack_reads",
    "unpack_batch_commit",
    "unpack_errors",
    "unpack_placements",
    "unpack_read_batch",
    "unpack_read_versioned",
    "unpack_reads",
]

_U8 = struct.Struct("<B")
_U16 = struct.Struct("<H")
_U32 = struct.Struct("<I")
_SLICE = struct.Struct("<HQQ")
_READ_HEAD = struct.Struct("<BQdB")  # code 0, size, lease, replicas
_READ_TAIL = struct.Struct("<Qd")  # size, lease (after the code)
_PUT_HEAD = struct.Struct("<BB")  # code 0, replicas
# The common shape (one replica of one slice), packed in one call.
_READ_ONE = struct.Struct("<BQdBHHQQ")
_PUT_ONE = struct.Struct("<BBHHQQ")
_VERSION = struct.Struct("<QQ")  # master run id, object version
_GRANT = struct.Struct("<Q")  # grant id (0: none)
_RUN = struct.Struct("<QQQQ")  # a run of grants: first id, start, step, size
_READ_RUN = struct.Struct("<QdQQ")  # a run of reads: size, lease, start, step
_MAX_U16 = 0xFFFF
_CODES = frozenset(int(c) for c in ErrorCode if c)


class _Table:
    """Segment names to indices, in first-seen order."""

    __slots__ = ("index", "names")

    def __init__(self) -> None:
        self.index: dict[str, int] = {}
        self.names: list[str] = []

    def __call__(self, name: str) -> int:
        i = self.index.get(name)
        if i is None:
            i = len(self.names)
            if i > _MAX_U16:
                raise ValueError("more than 65536 segment names in one reply")
            self.index[name] = i
            self.names.append(name)
        return i

    def header(self, count: int) -> bytes:
        out = bytearray(_U32.pack(count))
        out += _U16.pack(len(self.names))
        for name in self.names:
            raw = name.encode()
            out += _U16.pack(len(raw))
            out += raw
        return bytes(out)


def _pack_error(out: bytearray, err: StoreError) -> None:
    raw = err.message.encode()
    out += _U8.pack(int(err.code))
    out += _U32.pack(len(raw))
    out += raw


def _pack_replicas(out: bytearray, replicas: Sequence[Replica], seg: _Table) -> None:
    for r in replicas:
        if len(r) > _MAX_U16:
            raise ValueError(f"a replica of {len(r)} slices exceeds {_MAX_U16}")
        out += _U16.pack(len(r))
        for s in r:
            out += _SLICE.pack(seg(s.segment), s.offset, s.length)


def pack_reads(results: Sequence[ReadRow | StoreError]) -> bytes:
    """A replica-list reply: one result (``(size, replicas, lease_ttl_s)``, as
    ``MasterState.read_rows`` gives it) or error per key."""
    seg = _Table()
    body = bytearray()
    one = _READ_ONE.pack
    for r in results:
        if isinstance(r, StoreError):
            _pack_error(body, r)
            continue
        size, reps, lease, _ = r
        if len(reps) == 1 and len(reps[0]) == 1:
            s = reps[0][0]
            body += one(0, size, lease, 1, 1, seg(s.segment), s.offset, s.length)
            continue
        if len(reps) > 255:
            raise ValueError(f"{len(reps)} replicas exceed 255")
        body += _READ_HEAD.pack(0, size, lease, len(reps))
        _pack_replicas(body, reps, seg)
    return seg.header(len(results)) + body


def pack_read_batch(results: Sequence[ReadRow | StoreError]) -> bytes:
    """A batch's replica-list reply: ``u8`` form 1 when every key's result is one
    slice of one size and lease on one segment at a fixed step (a batch written through
    its grants is: "Grants"), then ``u64`` size, ``f64`` lease, ``u64`` start and step,
    ``u16`` length and name of the segment; else form 0 and :func:`pack_reads`'s reply."""
    run = _read_run(results)
    if run is None:
        return b"\0" + pack_reads(results)
    name = run[4].encode()
    return _U8.pack(1) + _READ_RUN.pack(*run[:4]) + _U16.pack(len(name)) + name


def _read_run(results: Sequence[ReadRow | StoreError]) -> tuple[int, float, int, int, str] | None:
    """``(size, lease, start, step, segment)`` when ``results`` form a run."""
    if not results or isinstance(results[0], StoreError):
        return None
    size, reps, lease, _ = results[0]
    if len(reps) != 1 or len(reps[0]) != 1:
        return None
    s0 = reps[0][0]
    seg, start = s0.segment, s0.offset
    step = 0
    if len(results) > 1:
        second = results[1]
        if isinstance(second, StoreError) or len(second[1]) != 1 or len(second[1][0]) != 1:
            return None
        step = second[1][0][0].offset - start
    if step < 0 or s0.length != size:
        return None
    for k, r in enumerate(results):
        if isinstance(r, StoreError) or r[0] != size or r[2] != lease:
            return None
        rr = r[1]
        if len(rr) != 1 or len(rr[0]) != 1:
            return None
        sl = rr[0][0]
        if sl.offset != start + k * step or sl.length != size or sl.segment != seg:
            return None
    return size, lease, start, step, seg


class ReadRun(Sequence["GetResult | StoreError"]):
    """The results of a batch read that form a run: the object of ``keys[k]`` is
    ``size`` bytes at ``start + k * step`` of ``segment``, leased for ``lease_ttl_s``.
    Indexing makes each :class:`GetResult`; a reader that needs only the run reads its
    fields and makes none."""

    __slots__ = ("keys", "lease_ttl_s", "segment", "size", "start", "step")

    def __init__(
        self,
        keys: Sequence[str],
        size: int,
        lease_ttl_s: float,
        segment: str,
        start: int,
        step: int,
    ) -> None:
        self.keys, self.size, self.lease_ttl_s = keys, size, lease_ttl_s
        self.segment, self.start, self.step = segment, start, step

    def __len__(self) -> int:
        return len(self.keys)

    @overload
    def __getitem__(self, i: int) -> GetResult: ...
    @overload
    def __getitem__(self, i: slice) -> list[GetResult]: ...
    def __getitem__(self, i: int | slice) -> GetResult | list[GetResult]:
        if isinstance(i, slice):
            return [self[k] for k in range(*i.indices(len(self)))]
        k = range(len(self.keys))[i]  # IndexError as a list's
        n = self.size
        sl = Slice(self.segment, self.start + k * self.step, n)
        return GetResult(self.keys[k], n, ((sl,),), self.lease_ttl_s)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Sequence) or isinstance(other, str):
            return NotImplemented
        return list(self) == list(other)

    __hash__ = None  # type: ignore[assignment]


def unpack_read_batch(keys: Sequence[str], buf: bytes) -> Sequence[GetResult | StoreError]:
    """The results :func:`pack_read_batch` packed, for ``keys`` (the request's, in order):
    a :class:`ReadRun` for a run.

    Raises:
        ValueError: the reply does not parse.
    """
    if not buf:
        raise ValueError("empty batch read reply")
    if buf[0] == 0:
        return unpack_reads(keys, buf[1:])
    if buf[0] != 1:
        raise ValueError(f"batch read reply of form {buf[0]}")
    rd = _Reader(buf)
    rd.pos = 1
    size, lease, start, step = rd.take(_READ_RUN)
    name = rd.text(int(rd.take(_U16)[0]))
    rd.done()
    return ReadRun(keys, int(size), float(lease), name, int(start), int(step))


def pack_read_versioned(result: ReadRow | StoreError, run_id: int) -> bytes:
    """One key's :func:`pack_reads` reply followed by the version of its replica set
    (``run_id`` and the row's version; zeros for an error)."""
    if isinstance(result, StoreError):
        return pack_reads([result]) + _VERSION.pack(0, 0)
    return pack_reads([result]) + _VERSION.pack(run_id, result[3])


def unpack_read_versioned(key: str, buf: bytes) -> GetResult | StoreError:
    """The result :func:`pack_read_versioned` packed; its ``version`` is the run id
    above bit 64 and the object's version below (0 for a version of 0).

    Raises:
        ValueError: the reply does not parse.
    """
    if len(buf) < _VERSION.size:
        raise ValueError(f"versioned reply of {len(buf)} bytes")
    run_id, version = _VERSION.unpack_from(buf, len(buf) - _VERSION.size)
    (r,) = unpack_reads([key], buf[: len(buf) - _VERSION.size])
    if isinstance(r, StoreError) or not (run_id and version):
        return r
    return GetResult(r.key, r.size, r.replicas, r.lease_ttl_s, run_id << 64 | version)


def pack_errors(results: Sequence[StoreError | None]) -> bytes:
    """A per-key outcome reply (``BatchPutEnd``): ``None`` (done, code 0) or the error."""
    if not any(results):  # all done: the common case
        return _Table().header(len(results)) + bytes(len(results))
    body = bytearray()
    for r in results:
        if r is None:
            body += b"\0"
        else:
            _pack_error(body, r)
    return _Table().header(len(results)) + body


def pack_placements(results: Sequence[tuple[Replica, ...] | StoreError]) -> bytes:
    """A put-start reply: the replicas allocated for each key, or its error."""
    seg = _Table()
    body = bytearray()
    for r in results:
        if isinstance(r, StoreError):
            _pack_error(body, r)
            continue
        if len(r) == 1 and len(r[0]) == 1:
            s = r[0][0]
            body += _PUT_ONE.pack(0, 1, 1, seg(s.segment), s.offset, s.length)
            continue
        if len(r) > 255:
            raise ValueError(f"{len(r)} replicas exceed 255")
        body += _PUT_HEAD.pack(0, len(r))
        _pack_replicas(body, r, seg)
    return seg.header(len(results)) + body


def pack_commit(result: tuple[int, tuple[Replica, ...]] | StoreError | None) -> bytes:
    """A PutCommit reply: the grant id (0: none) and, after it, the grant's replicas or
    the call's error (nothing more when it succeeded without a grant)."""
    if result is None:
        return _GRANT.pack(0)
    if isinstance(result, StoreError):
        return _GRANT.pack(0) + pack_placements([result])
    gid, replicas = result
    return _GRANT.pack(gid) + pack_placements([replicas])


def unpack_commit(buf: bytes) -> tuple[int, tuple[Replica, ...]] | StoreError | None:
    """What :func:`pack_commit` packed.

    Raises:
        ValueError: the reply does not parse.
    """
    if len(buf) < _GRANT.size:
        raise ValueError(f"commit reply of {len(buf)} bytes")
    (gid,) = _GRANT.unpack_from(buf)
    if len(buf) == _GRANT.size:
        if gid:
            raise ValueError(f"grant {gid} without replicas")
        return None
    (r,) = unpack_placements(1, buf[_GRANT.size :])
    if isinstance(r, StoreError) == bool(gid):
        raise ValueError(f"commit reply with grant {gid} and {r!r}")
    return r if isinstance(r, StoreError) else (gid, r)


def pack_batch_commit(
    errors: Sequence[StoreError | None], grants: Sequence[tuple[int, tuple[Replica, ...]]]
) -> bytes:
    """A BatchPutCommit reply: ``u32`` length of the per-key outcomes (as
    :func:`pack_errors`), those outcomes, ``u32`` grants and, when there are any, a
    ``u8`` form: 1, a run (consecutive ids, one slice each on one segment at a fixed
    step: ``u64`` first id, start, step, size, ``u16`` length and name of the segment);
    0, their ``u64`` ids then their replicas (as :func:`pack_placements`)."""
    head = pack_errors(errors)
    out = bytearray(_U32.pack(len(head)) + head + _U32.pack(len(grants)))
    if not grants:
        return bytes(out)
    run = _run(grants)
    if run is not None:
        name = run[4].encode()
        out += _U8.pack(1) + _RUN.pack(*run[:4]) + _U16.pack(len(name)) + name
        return bytes(out)
    out += _U8.pack(0) + struct.pack(f"<{len(grants)}Q", *(g for g, _ in grants))
    out += pack_placements([r for _, r in grants])
    return bytes(out)


def _run(
    grants: Sequence[tuple[int, tuple[Replica, ...]]],
) -> tuple[int, int, int, int, str] | None:
    """``(first id, start, step, size, segment)`` when ``grants`` form a run."""
    first, reps = grants[0]
    if len(reps) != 1 or len(reps[0]) != 1:
        return None
    s0 = reps[0][0]
    step = 0
    if len(grants) > 1:
        r1 = grants[1][1]
        if len(r1) != 1 or len(r1[0]) != 1:
            return None
        step = r1[0][0].offset - s0.offset
    if step < 0:
        return None
    seg, at, size = s0.segment, s0.offset, s0.length
    for k, (gid, r) in enumerate(grants):
        if gid != first + k or len(r) != 1 or len(r[0]) != 1:
            return None
        sl = r[0][0]
        if sl.offset != at + k * step or sl.length != size or sl.segment != seg:
            return None
    return first, s0.offset, step, s0.length, s0.segment


def unpack_batch_commit(
    count: int, buf: bytes
) -> tuple[list[StoreError | None], list[tuple[int, tuple[Replica, ...]]]]:
    """What :func:`pack_batch_commit` packed for ``count`` keys.

    Raises:
        ValueError: the reply does not parse.
    """
    rd = _Reader(buf)
    (n,) = rd.take(_U32)
    end = rd.pos + int(n)
    if end + _U32.size > len(buf):
        raise ValueError(f"batch commit reply of {len(buf)} bytes, outcomes of {n}")
    errors = unpack_errors(count, buf[rd.pos : end])
    rd.pos = end
    (grants,) = rd.take(_U32)
    if not grants:
        rd.done()
        return errors, []
    (form,) = rd.take(_U8)
    if form == 1:
        first, start, step, size = (int(x) for x in rd.take(_RUN))
        name = rd.text(int(rd.take(_U16)[0]))
        rd.done()
        return errors, [
            (first + k, ((Slice(name, start + k * step, size),),)) for k in range(int(grants))
        ]
    if form != 0:
        raise ValueError(f"batch commit reply of form {form}")
    ids_end = rd.pos + 8 * int(grants)
    if ids_end > len(buf):
        raise ValueError(f"batch commit reply of {len(buf)} bytes for {grants} grants")
    ids = struct.unpack_from(f"<{grants}Q", buf, rd.pos)
    placed = unpack_placements(int(grants), buf[ids_end:])
    out: list[tuple[int, tuple[Replica, ...]]] = []
    for gid, r in zip(ids, placed, strict=True):
        if isinstance(r, StoreError) or not gid:
            raise ValueError(f"batch commit reply: grant {gid} with {r!r}")
        out.append((gid, r))
    return errors, out


class _Reader:
    """Bounds-checked reads from one reply."""

    __slots__ = ("buf", "pos")

    def __init__(self, buf: bytes) -> None:
        self.buf = buf
        self.pos = 0

    def take(self, st: struct.Struct) -> tuple[int | float, ...]:
        end = self.pos + st.size
        if end > len(self.buf):
            raise ValueError(f"packed reply truncated at byte {self.pos} of {len(self.buf)}")
        v = st.unpack_from(self.buf, self.pos)
        self.pos = end
        return v

    def text(self, n: int) -> str:
        end = self.pos + n
        if end > len(self.buf):
            raise ValueError(f"packed reply truncated at byte {self.pos} of {len(self.buf)}")
        raw = self.buf[self.pos : end]
        self.pos = end
        try:
            return raw.decode()
        except UnicodeDecodeError:
            raise ValueError(f"packed reply: text at byte {end - n} is not UTF-8") from None

    def header(self, expected: int) -> list[str]:
        (count,) = self.take(_U32)
        if count != expected:
            raise ValueError(f"packed reply holds {count} results for {expected} keys")
        (n,) = self.take(_U16)
        return [self.text(int(self.take(_U16)[0])) for _ in range(int(n))]

    def error(self, code: int) -> StoreError:
        (n,) = self.take(_U32)
        message = self.text(int(n))
        if code not in _CODES:
            raise ValueError(f"packed reply: unknown error code {code}")
        return error_from_code(code, message)

    def replicas(self, names: list[str]) -> tuple[Replica, ...]:
        (n,) = self.take(_U8)
        out = []
        for _ in range(int(n)):
            (k,) = self.take(_U16)
            rep = []
            for _ in range(int(k)):
                i, off, length = self.take(_SLICE)
                if i >= len(names):
                    raise ValueError(f"packed reply: segment index {i} of {len(names)}")
                rep.append(Slice(names[int(i)], int(off), int(length)))
            out.append(tuple(rep))
        return tuple(out)

    def done(self) -> None:
        if self.pos != len(self.buf):
            raise ValueError(f"packed reply: {len(self.buf) - self.pos} bytes after the last item")


def unpack_reads(keys: Sequence[str], buf: bytes) -> list[GetResult | StoreError]:
    """The results :func:`pack_reads` packed, for ``keys`` (the request's, in order).

    Raises:
        ValueError: the reply does not parse, or holds another number of results.
    """
    rd = _Reader(buf)
    names = rd.header(len(keys))
    out: list[GetResult | StoreError] = []
    one, n_names, end = _READ_ONE, len(names), len(buf)
    for key in keys:
        pos = rd.pos
        if pos + one.size <= end and buf[pos] == 0:
            _, size, lease, reps, slices, i, off, length = one.unpack_from(buf, pos)
            if reps == 1 and slices == 1 and i < n_names:
                rd.pos = pos + one.size
                out.append(GetResult(key, size, ((Slice(names[i], off, length),),), lease))
                continue
        (code,) = rd.take(_U8)
        if code:
            out.append(rd.error(int(code)))
            continue
        size, lease = rd.take(_READ_TAIL)
        out.append(GetResult(key, int(size), rd.replicas(names), float(lease)))
    rd.done()
    return out


def unpack_errors(count: int, buf: bytes) -> list[StoreError | None]:
    """The outcomes :func:`pack_errors` packed, ``count`` of them.

    Raises:
        ValueError: the reply does not parse, or holds another number of results.
    """
    rd = _Reader(buf)
    rd.header(count)
    if buf[rd.pos :] == bytes(count):  # all done: the common case
        return [None] * count
    out: list[StoreError | None] = []
    for _ in range(count):
        (code,) = rd.take(_U8)
        out.append(rd.error(int(code)) if code else None)
    rd.done()
    return out


def unpack_placements(count: int, buf: bytes) -> list[tuple[Replica, ...] | StoreError]:
    """The results :func:`pack_placements` packed, ``count`` of them.

    Raises:
        ValueError: the reply does not parse, or holds another number of results.
    """
    rd = _Reader(buf)
    names = rd.header(count)
    out: list[tuple[Replica, ...] | StoreError] = []
    one, n_names, end = _PUT_ONE, len(names), len(buf)
    for _ in range(count):
        pos = rd.pos
        if pos + one.size <= end and buf[pos] == 0:
            _, reps, slices, i, off, length = one.unpack_from(buf, pos)
            if reps == 1 and slices == 1 and i < n_names:
                rd.pos = pos + one.size
                out.append(((Slice(names[i], off, length),),))
                continue
        (code,) = rd.take(_U8)
        out.append(rd.error(int(code)) if code else rd.replicas(names))
    rd.done()
    return out
