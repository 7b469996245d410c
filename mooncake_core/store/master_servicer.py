"""gRPC handlers: translate ``store.proto`` messages to core calls and back.

Each handler is a few lines: decode, ``service.call`` (or ``call_bulk`` for calls that
walk every key), encode. Errors from the core travel in the response's ``Error``.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

import grpc

from mooncake_core.rpc import store_pb2 as pb
from mooncake_core.rpc import store_pb2_grpc as pb_grpc

from . import convert as cv
from .errors import ErrorCode, StoreError
from .fast_packed import (
    pack_batch_commit,
    pack_commit,
    pack_errors,
    pack_placements,
    pack_read_batch,
    pack_read_versioned,
    pack_reads,
)
from .ha.image import started_record, writer_hold_records
from .ha.readiness import Readiness
from .master import StagePending
from .objects import RUN_ID, Replica
from .results import GetResult, ReadRow

if TYPE_CHECKING:
    from .master import MasterState
    from .master_service import MasterService

Ctx = grpc.aio.ServicerContext[Any, Any]


class MasterServicer(pb_grpc.MasterServiceServicer):
    """The MasterService RPCs over one :class:`MasterService`."""

    def __init__(self, service: MasterService) -> None:
        self._svc = service

    @property
    def _st(self) -> MasterState:
        # Read at call time: an HA master swaps its core when it is promoted.
        return self._svc.state

    # ------------------------------------------------------- segments, clients
    async def MountSegment(
        self, request: pb.MountSegmentRequest, context: Ctx
    ) -> pb.MountSegmentResponse:
        r = await self._svc.call(
            "MountSegment",
            lambda now: self._st.mount_segment(
                request.name,
                request.client_id,
                request.capacity,
                now,
                transport_address=request.transport_address,
                location=request.location or "cpu:0",
                ssd_capacity=request.ssd_capacity,
            ),
        )
        if isinstance(r, StoreError):
            return pb.MountSegmentResponse(error=cv.error_to_pb(r))
        return pb.MountSegmentResponse(error=cv.OK, segment=cv.segment_to_pb(r))

    async def UnmountSegment(self, request: pb.SegmentRequest, context: Ctx) -> pb.SegmentResponse:
        r = await self._svc.call(
            "UnmountSegment",
            lambda now: self._st.unmount_segment(
                request.name, now, client_id=request.client_id or None
            ),
        )
        return pb.SegmentResponse(error=_err(r))

    async def DrainSegment(self, request: pb.SegmentRequest, context: Ctx) -> pb.SegmentResponse:
        r = await self._svc.call(
            "DrainSegment", lambda now: self._st.drain_segment(request.name, now)
        )
        return pb.SegmentResponse(error=_err(r))

    async def UndrainSegment(self, request: pb.SegmentRequest, context: Ctx) -> pb.SegmentResponse:
        r = await self._svc.call(
            "UndrainSegment", lambda now: self._st.undrain_segment(request.name, now)
        )
        return pb.SegmentResponse(error=_err(r))

    async def ListSegmentObjects(
        self, request: pb.ListSegmentObjectsRequest, context: Ctx
    ) -> pb.ListKeysResponse:
        r = await self._svc.call(
            "ListSegmentObjects",
            lambda now: self._st.list_segment_objects(
                request.segment, request.start_after, request.limit or 1000
            ),
        )
        if isinstance(r, StoreError):
            return pb.ListKeysResponse(error=cv.error_to_pb(r))
        return cv.list_to_pb(r)

    async def AddReplicaStart(
        self, request: pb.AddReplicaStartRequest, context: Ctx
    ) -> pb.AddReplicaStartResponse:
        r = await self._svc.call(
            "AddReplicaStart",
            lambda now: self._st.add_replica_start(
                request.key,
                now,
                exclude_segments=tuple(request.exclude_segments),
                target_segment=request.target_segment or None,
            ),
            started=writer_hold_records,
        )
        if isinstance(r, StoreError):
            return pb.AddReplicaStartResponse(error=cv.error_to_pb(r))
        return pb.AddReplicaStartResponse(error=cv.OK, replica=cv.replicas_to_pb((r,))[0])

    async def AddReplicaEnd(self, request: pb.KeyRequest, context: Ctx) -> pb.KeyResponse:
        r = await self._svc.call(
            "AddReplicaEnd", lambda now: self._st.add_replica_end(request.key, now)
        )
        return pb.KeyResponse(error=_err(r))

    async def AddReplicaRevoke(self, request: pb.KeyRequest, context: Ctx) -> pb.KeyResponse:
        r = await self._svc.call(
            "AddReplicaRevoke", lambda now: self._st.add_replica_revoke(request.key, now)
        )
        return pb.KeyResponse(error=_err(r))

    async def DropReplica(
        self, request: pb.DropReplicaRequest, context: Ctx
    ) -> pb.DropReplicaResponse:
        r = await self._svc.call(
            "DropReplica",
            lambda now: self._st.drop_replica(request.key, request.segment, now),
        )
        if isinstance(r, StoreError):
            return pb.DropReplicaResponse(error=cv.error_to_pb(r))
        return pb.DropReplicaResponse(error=cv.OK, freed=r)

    # ---------------------------------------------------------------- SSD tier
    async def TierOffloadDone(self, request: pb.TierDoneRequest, context: Ctx) -> pb.KeyResponse:
        r = await self._svc.call(
            "TierOffloadDone",
            lambda now: self._st.tier_offload_done(
                request.client_id,
                request.key,
                request.segment,
                request.token,
                request.ok,
                now,
                request.reason,
            ),
        )
        return pb.KeyResponse(error=_err(r))

    async def TierStageDone(self, request: pb.TierDoneRequest, context: Ctx) -> pb.KeyResponse:
        r = await self._svc.call(
            "TierStageDone",
            lambda now: self._st.tier_stage_done(
                request.client_id,
                request.key,
                request.segment,
                request.token,
                request.ok,
                now,
                request.reason,
            ),
        )
        return pb.KeyResponse(error=_err(r))

    async def TierDropped(
        self, request: pb.TierDroppedRequest, context: Ctx
    ) -> pb.RemoveManyResponse:
        keys = list(request.keys)
        r = await self._svc.call(
            "TierDropped",
            lambda now: self._st.tier_dropped(request.client_id, request.segment, keys, now),
        )
        return _many(r)

    async def Heartbeat(self, request: pb.HeartbeatRequest, context: Ctx) -> pb.HeartbeatResponse:
        r = self._svc.call_heartbeat(request.client_id)
        if isinstance(r, StoreError):
            return pb.HeartbeatResponse(error=cv.error_to_pb(r))
        return pb.HeartbeatResponse(error=cv.OK, known=r)

    # ------------------------------------------------------------------ writes
    async def PutStart(self, request: pb.PutStartRequest, context: Ctx) -> pb.PutStartResponse:
        return _put_response(await self._put_start("PutStart", request, upsert=False))

    async def Upsert(self, request: pb.PutStartRequest, context: Ctx) -> pb.PutStartResponse:
        return _put_response(await self._put_start("Upsert", request, upsert=True))

    async def PutStartPacked(self, request: pb.PutStartRequest, context: Ctx) -> bytes:
        """PutStart with a packed reply (fast channel only, :mod:`.fast_packed`)."""
        return pack_placements([await self._put_start("PutStart", request, upsert=False)])

    async def UpsertPacked(self, request: pb.PutStartRequest, context: Ctx) -> bytes:
        """Upsert with a packed reply (fast channel only)."""
        return pack_placements([await self._put_start("Upsert", request, upsert=True)])

    async def _put_start(
        self, rpc: str, request: pb.PutStartRequest, *, upsert: bool
    ) -> tuple[Replica, ...] | StoreError:
        cfg = cv.config_from_pb(request.config)
        avoid = tuple(request.avoid_segments)
        start = self._st.upsert_start if upsert else self._st.put_start
        return await self._svc.call(
            rpc,
            lambda now: start(request.key, request.size, request.client_id, now, cfg, avoid=avoid),
            started=lambda reps: [started_record(request.key, request.size, reps)],
        )

    async def PutEnd(self, request: pb.KeyRequest, context: Ctx) -> pb.KeyResponse:
        r = await self._svc.call("PutEnd", lambda now: self._st.put_end(request.key, now))
        return pb.KeyResponse(error=_err(r))

    async def PutCommit(self, request: pb.PutCommitRequest, context: Ctx) -> pb.PutCommitResponse:
        r = await self._put_commit(request)
        if isinstance(r, StoreError):
            return pb.PutCommitResponse(error=cv.error_to_pb(r))
        if r is None:
            return pb.PutCommitResponse(error=cv.OK)
        return pb.PutCommitResponse(error=cv.OK, grant_id=r[0], replicas=cv.replicas_to_pb(r[1]))

    async def PutCommitPacked(self, request: pb.PutCommitRequest, context: Ctx) -> bytes:
        """PutCommit with a packed reply (fast channel only, :mod:`.fast_packed`)."""
        return pack_commit(await self._put_commit(request))

    async def _put_commit(
        self, request: pb.PutCommitRequest
    ) -> tuple[int, tuple[Replica, ...]] | StoreError | None:
        cid, key = request.client_id, request.key
        cfg = cv.config_from_pb(request.config)

        def commit(now: float) -> tuple[int, tuple[Replica, ...]] | None:
            if request.release_grant_id:
                self._st.release_grant(cid, request.release_grant_id)
            if request.grant_id:
                self._st.put_commit(cid, key, request.grant_id, request.size, now)
            elif key:
                self._st.put_end(key, now)
            if not request.next_size or not key:
                # A grant only rides on a put's end: that reply waits for the durable
                # ``stored`` record, and with it for the grant's hold records.
                return None
            return self._st.grant_put(cid, request.next_size, cfg, now)

        return await self._svc.call(
            "PutCommit",
            commit,
            # A grant is journaled as a writer hold: a rebuilt master keeps its ranges
            # for its writer until put_release_s (docs/store.md, "Grants").
            started=lambda g: [h for rep in (g[1] if g else ()) for h in writer_hold_records(rep)],
        )

    async def PutRevoke(self, request: pb.KeyRequest, context: Ctx) -> pb.KeyResponse:
        r = await self._svc.call("PutRevoke", lambda now: self._st.put_revoke(request.key, now))
        return pb.KeyResponse(error=_err(r))

    async def BatchPutStart(
        self, request: pb.BatchPutStartRequest, context: Ctx
    ) -> pb.BatchPutStartResponse:
        return await self._batch_put("BatchPutStart", request, upsert=False)

    async def BatchUpsert(
        self, request: pb.BatchPutStartRequest, context: Ctx
    ) -> pb.BatchPutStartResponse:
        return await self._batch_put("BatchUpsert", request, upsert=True)

    async def BatchPutStartPacked(self, request: pb.BatchPutStartRequest, context: Ctx) -> bytes:
        """BatchPutStart with a packed reply (fast channel only, :mod:`.fast_packed`)."""
        return pack_placements(await self._batch_put_results("BatchPutStart", request, False))

    async def BatchUpsertPacked(self, request: pb.BatchPutStartRequest, context: Ctx) -> bytes:
        """BatchUpsert with a packed reply (fast channel only)."""
        return pack_placements(await self._batch_put_results("BatchUpsert", request, True))

    async def _batch_put(
        self, rpc: str, request: pb.BatchPutStartRequest, *, upsert: bool
    ) -> pb.BatchPutStartResponse:
        r = await self._batch_put_results(rpc, request, upsert)
        return pb.BatchPutStartResponse(results=[_put_response(x) for x in r])

    async def _batch_put_results(
        self, rpc: str, request: pb.BatchPutStartRequest, upsert: bool
    ) -> list[tuple[Replica, ...] | StoreError]:
        cfg = cv.config_from_pb(request.config)
        items = [(i.key, i.size) for i in request.items]
        fn = self._st.batch_upsert_start if upsert else self._st.batch_put_start
        r = await self._svc.call(
            rpc,
            lambda now: fn(items, request.client_id, now, cfg),
            started=lambda res: [
                started_record(k, size, reps)
                for (k, size), reps in zip(items, res, strict=True)
                if not isinstance(reps, StoreError)
            ],
        )
        return self._per_item(rpc, r, len(items))

    async def BatchPutEnd(self, request: pb.BatchKeysRequest, context: Ctx) -> pb.BatchKeyResponse:
        keys = list(request.keys)
        return await self._batch_keys(
            "BatchPutEnd", keys, lambda now: self._st.batch_put_end(keys, now)
        )

    async def BatchPutRevoke(
        self, request: pb.BatchKeysRequest, context: Ctx
    ) -> pb.BatchKeyResponse:
        keys = list(request.keys)
        return await self._batch_keys(
            "BatchPutRevoke", keys, lambda now: self._st.batch_put_revoke(keys, now)
        )

    async def BatchPutEndPacked(self, request: pb.BatchKeysRequest, context: Ctx) -> bytes:
        """BatchPutEnd with a packed reply (fast channel only, :mod:`.fast_packed`)."""
        keys = list(request.keys)
        return pack_errors(
            await self._batch_outcomes(
                "BatchPutEnd", keys, lambda now: self._st.batch_put_end(keys, now)
            )
        )

    async def BatchPutCommit(
        self, request: pb.BatchPutCommitRequest, context: Ctx
    ) -> pb.BatchPutCommitResponse:
        errors, grants = await self._batch_put_commit(request)
        return pb.BatchPutCommitResponse(
            errors=cv.batch_errors_to_pb(errors),
            grants=[
                pb.BatchPutCommitResponse.Granted(grant_id=g, replicas=cv.replicas_to_pb(r))
                for g, r in grants
            ],
        )

    async def BatchPutCommitPacked(self, request: pb.BatchPutCommitRequest, context: Ctx) -> bytes:
        """BatchPutCommit with a packed reply (fast channel only, :mod:`.fast_packed`)."""
        return pack_batch_commit(*await self._batch_put_commit(request))

    async def _batch_put_commit(self, request: pb.BatchPutCommitRequest) -> _Committed:
        cid, keys, gids = request.client_id, list(request.keys), list(request.grant_ids)
        if gids and len(gids) != len(keys):
            bad = StoreError(
                ErrorCode.INVALID_PARAMS,
                f"{len(keys)} keys but {len(gids)} grant ids; they must match one to one",
            )
            return [bad for _ in keys], []
        cfg = cv.config_from_pb(request.config)

        def commit(now: float) -> _Committed:
            for gid in request.release_grant_ids:
                self._st.release_grant(cid, gid)
            if gids:
                errors = self._st.batch_put_commit(cid, keys, gids, request.size, now)
            else:
                errors = self._st.batch_put_end(keys, now)
            if not request.next_count or all(e is not None for e in errors):
                # A grant only rides on a put's end: that reply waits for the durable
                # ``stored`` records, and with them for the grants' hold records.
                return errors, []
            return errors, self._st.grant_batch(cid, request.size, request.next_count, cfg, now)

        r = await self._svc.call(
            "BatchPutCommit",
            commit,
            # Journaled as writer holds, as a single grant is (docs/store.md, "Grants").
            started=lambda res: [
                h for _, reps in res[1] for rep in reps for h in writer_hold_records(rep)
            ],
        )
        if isinstance(r, StoreError):
            return [r for _ in keys], []
        self._svc.count_item_failures("BatchPutCommit", r[0])
        return r

    async def _batch_keys(self, rpc: str, keys: list[str], fn: Any) -> pb.BatchKeyResponse:
        outcomes = await self._batch_outcomes(rpc, keys, fn)
        return pb.BatchKeyResponse(errors=cv.batch_errors_to_pb(outcomes))

    async def _batch_outcomes(self, rpc: str, keys: list[str], fn: Any) -> list[StoreError | None]:
        return self._per_item(rpc, await self._svc.call(rpc, fn), len(keys))

    def _per_item(self, rpc: str, r: Any, n: int) -> list[Any]:
        """A batch call's per-item results, its failures counted; a whole-call error
        (not expected: batch calls report per item) stands for each of the ``n``."""
        if isinstance(r, StoreError):
            return [r for _ in range(n)]
        self._svc.count_item_failures(rpc, r)
        return list(r)

    # ------------------------------------------------------------------- reads
    async def GetReplicaList(
        self, request: pb.GetReplicaListRequest, context: Ctx
    ) -> pb.GetReplicaListResponse:
        r = await self._read("GetReplicaList", [request.key])
        return _get_response(_result(request.key, r[0]))

    async def GetReplicaListPacked(self, request: pb.GetReplicaListRequest, context: Ctx) -> bytes:
        """GetReplicaList with a packed reply (fast channel only, :mod:`.fast_packed`)."""
        r = await self._read("GetReplicaList", [request.key])
        return pack_reads(r)

    async def GetReplicaListVersioned(
        self, request: pb.GetReplicaListRequest, context: Ctx
    ) -> bytes:
        """GetReplicaList with a packed reply and the replica set's version (fast
        channel only, :mod:`.fast_packed`)."""
        r = await self._read("GetReplicaList", [request.key])
        return pack_read_versioned(r[0], RUN_ID)

    async def BatchGetReplicaList(
        self, request: pb.BatchKeysRequest, context: Ctx
    ) -> pb.BatchGetReplicaListResponse:
        keys = list(request.keys)
        r = await self._read("BatchGetReplicaList", keys)
        return pb.BatchGetReplicaListResponse(
            results=[_get_response(_result(k, x)) for k, x in zip(keys, r, strict=True)]
        )

    async def BatchGetReplicaListPacked(self, request: pb.BatchKeysRequest, context: Ctx) -> bytes:
        """BatchGetReplicaList with a packed reply (fast channel only, :mod:`.fast_packed`)."""
        keys = list(request.keys)
        r = await self._read("BatchGetReplicaList", keys)
        return pack_reads(r)

    async def BatchGetReplicaListRun(self, request: pb.BatchKeysRequest, context: Ctx) -> bytes:
        """BatchGetReplicaList with a packed reply that may be one run (fast channel
        only, :func:`~.fast_packed.pack_read_batch`)."""
        keys = list(request.keys)
        return pack_read_batch(await self._read("BatchGetReplicaList", keys))

    async def _read(self, rpc: str, keys: list[str]) -> list[ReadRow | StoreError]:
        """Replica lists of ``keys`` (as ``MasterState.read_rows`` gives them), waiting
        for SSD-only objects to be staged; the failed items are counted under ``rpc``.

        A read of an SSD-only object makes the core start (or join) a stage; the handler
        then waits on the key's shared future, resolved by the service at the next event
        about the key (stage done, next SSD copy tried, object removed), and reads
        again. The future is taken inside the core call, under the service lock, so a
        stage that settles before this coroutine waits is not missed.
        """
        results: list[ReadRow | StoreError | None] = [None] * len(keys)
        todo = list(range(len(keys)))
        # Each stage settles within stage_timeout_s (the upkeep fails it after that):
        # a key with no news for longer than this is reported, not waited for forever.
        patience = self._svc.config.stage_timeout_s + 4 * self._svc.options.tick_interval_s + 1
        while todo:
            sub = [keys[i] for i in todo]

            def fn(now: float, sub: list[str] = sub) -> tuple[list[Any], list[Any]]:
                out = self._st.read_rows(sub, now)
                waits = [
                    self._svc.key_changed(k)
                    for k, x in zip(sub, out, strict=True)
                    if isinstance(x, StagePending)
                ]
                return out, waits

            r = await self._svc.call(rpc, fn)
            if isinstance(r, StoreError):
                for i in todo:
                    results[i] = r
                break
            out, waits = r
            pending = []
            for i, x in zip(todo, out, strict=True):
                if isinstance(x, StagePending):
                    pending.append(i)
                else:
                    results[i] = x
            if not pending:
                break
            done, _ = await asyncio.wait(
                set(waits), timeout=patience, return_when=asyncio.FIRST_COMPLETED
            )
            if not done:
                for i in pending:
                    results[i] = StoreError(
                        ErrorCode.UNAVAILABLE,
                        f"object {keys[i]!r} is being staged from SSD and the stage did "
                        f"not settle within {patience:.1f} s",
                    )
                break
            todo = pending
        out = [x if x is not None else StoreError(ErrorCode.INTERNAL, "no result") for x in results]
        self._svc.count_item_failures(rpc, out)
        return out

    async def Exist(self, request: pb.ExistRequest, context: Ctx) -> pb.ExistResponse:
        r = await self._svc.call("Exist", lambda now: self._st.exist(request.key, now))
        if isinstance(r, StoreError):
            return pb.ExistResponse(error=cv.error_to_pb(r))
        return pb.ExistResponse(error=cv.OK, exists=r)

    async def BatchExist(self, request: pb.BatchKeysRequest, context: Ctx) -> pb.BatchExistResponse:
        keys = list(request.keys)
        r = await self._svc.call("BatchExist", lambda now: self._st.batch_exist(keys, now))
        return pb.BatchExistResponse(exists=[] if isinstance(r, StoreError) else r)

    async def Stat(self, request: pb.StatRequest, context: Ctx) -> pb.StatResponse:
        r = await self._svc.call("Stat", lambda now: self._st.stat(request.key, now))
        if isinstance(r, StoreError):
            return pb.StatResponse(error=cv.error_to_pb(r))
        return cv.stat_to_pb(r)

    async def ListKeys(self, request: pb.ListKeysRequest, context: Ctx) -> pb.ListKeysResponse:
        r = await self._svc.call(
            "ListKeys",
            lambda now: self._st.list_keys(
                request.prefix, request.start_after, request.limit or 1000
            ),
        )
        if isinstance(r, StoreError):
            return pb.ListKeysResponse(error=cv.error_to_pb(r))
        return cv.list_to_pb(r)

    # ---------------------------------------------------------------- removals
    async def Remove(self, request: pb.RemoveRequest, context: Ctx) -> pb.KeyResponse:
        r = await self._svc.call(
            "Remove", lambda now: self._st.remove(request.key, now, force=request.force)
        )
        return pb.KeyResponse(error=_err(r))

    async def BatchRemove(self, request: pb.BatchKeysRequest, context: Ctx) -> pb.BatchKeyResponse:
        keys = list(request.keys)
        return await self._batch_keys(
            "BatchRemove", keys, lambda now: self._st.batch_remove(keys, now, force=request.force)
        )

    async def RemoveByPrefix(
        self, request: pb.RemoveByPrefixRequest, context: Ctx
    ) -> pb.RemoveManyResponse:
        r = await self._svc.call_bulk(
            "RemoveByPrefix",
            lambda now: self._st.remove_by_prefix(request.prefix, now, force=request.force),
        )
        return _many(r)

    async def RemoveByRegex(
        self, request: pb.RemoveByRegexRequest, context: Ctx
    ) -> pb.RemoveManyResponse:
        r = await self._svc.call_bulk(
            "RemoveByRegex",
            lambda now: self._st.remove_by_regex(request.pattern, now, force=request.force),
        )
        return _many(r)

    async def RemoveAll(self, request: pb.RemoveAllRequest, context: Ctx) -> pb.RemoveManyResponse:
        r = await self._svc.call_bulk(
            "RemoveAll", lambda now: self._st.remove_all(now, force=request.force)
        )
        return _many(r)

    # -------------------------------------------------------------------- pins
    async def Pin(self, request: pb.PinRequest, context: Ctx) -> pb.PinResponse:
        ttl = request.ttl_s if request.HasField("ttl_s") else None
        r = await self._svc.call(
            "Pin",
            lambda now: (
                self._st.pin(
                    request.target, now, prefix=request.prefix, hard=request.hard, ttl_s=ttl
                ),
                now,
            ),
        )
        if isinstance(r, StoreError):
            return pb.PinResponse(error=cv.error_to_pb(r))
        return pb.PinResponse(error=cv.OK, pin=cv.pin_to_pb(*r))

    async def Unpin(self, request: pb.UnpinRequest, context: Ctx) -> pb.PinResponse:
        r = await self._svc.call(
            "Unpin",
            lambda now: (self._st.unpin(request.target, now, prefix=request.prefix), now),
        )
        if isinstance(r, StoreError):
            return pb.PinResponse(error=cv.error_to_pb(r))
        return pb.PinResponse(error=cv.OK, pin=cv.pin_to_pb(*r))

    async def ListPins(self, request: pb.ListPinsRequest, context: Ctx) -> pb.ListPinsResponse:
        r = await self._svc.call("ListPins", lambda now: (self._st.list_pins(now), now))
        if isinstance(r, StoreError):
            return pb.ListPinsResponse()
        pins, now = r
        return pb.ListPinsResponse(pins=[cv.pin_to_pb(p, now) for p in pins])

    # -------------------------------------------------------- read-model, events
    async def GetReadiness(self, request: pb.ReadinessRequest, context: Ctx) -> pb.Readiness:
        return cv.readiness_to_pb(Readiness.from_dict(self._svc.readiness()))

    async def GetSnapshot(self, request: pb.SnapshotRequest, context: Ctx) -> pb.Snapshot:
        r = await self._svc.call("GetSnapshot", lambda now: self._st.snapshot())
        if isinstance(r, StoreError):
            await context.abort(grpc.StatusCode.INTERNAL, r.message)
        return cv.snapshot_to_pb(r)

    async def WatchEvents(
        self, request: pb.WatchEventsRequest, context: Ctx
    ) -> AsyncIterator[pb.Event]:
        self._svc.metrics.requests.labels("WatchEvents").inc()
        q = self._svc.subscribe()
        try:
            last = self._svc.last_seq
            yield pb.Event(seq=last, started=pb.WatchStartedEvent(last_seq=last))
            while True:
                item = await q.get()
                if self._svc.is_closed(item):
                    return
                if self._svc.is_overflow(item):
                    self._svc.metrics.failures.labels("WatchEvents", "OVERFLOW").inc()
                    await context.abort(
                        grpc.StatusCode.RESOURCE_EXHAUSTED,
                        "event subscriber fell behind; resubscribe and resync with ListKeys",
                    )
                assert isinstance(item, pb.Event)
                yield item
        finally:
            self._svc.unsubscribe(q)


_Committed = tuple[list[StoreError | None], list[tuple[int, tuple[Replica, ...]]]]
"""A batch commit's outcome per key and the grants of the writer's next batch."""


def _err(r: object) -> pb.Error:
    return cv.error_to_pb(r) if isinstance(r, StoreError) else cv.OK


def _put_response(r: object) -> pb.PutStartResponse:
    if isinstance(r, StoreError):
        return pb.PutStartResponse(error=cv.error_to_pb(r))
    assert isinstance(r, tuple)
    return pb.PutStartResponse(error=cv.OK, replicas=cv.replicas_to_pb(r))


def _result(key: str, r: ReadRow | StoreError) -> GetResult | StoreError:
    return r if isinstance(r, StoreError) else GetResult(key, *r)


def _get_response(r: GetResult | StoreError) -> pb.GetReplicaListResponse:
    if isinstance(r, StoreError):
        return pb.GetReplicaListResponse(error=cv.error_to_pb(r))
    return cv.get_result_to_pb(r)


def _many(r: object) -> pb.RemoveManyResponse:
    if isinstance(r, StoreError):
        return pb.RemoveManyResponse(error=cv.error_to_pb(r))
    return pb.RemoveManyResponse(error=cv.OK, removed=r.removed, skipped=r.skipped)  # type: ignore[attr-defined]
