"""A call a client resent after a leader switch may have been applied by the old leader
(its reply lost). PutStart answered OBJECT_ALREADY_EXISTS, or Remove answered
OBJECT_NOT_FOUND, after a resend may be this client's own first attempt: the outcome is
unknown (UnavailableError), never a definite "exists" / "not found"; PutEnd answered
"already complete" (INVALID_STATE) after a resend is its own first attempt: success.
Without a resend the answers stand. The randomized HA fault test found the first two
(test_rel_jepsen.py).

These are the replies of the master RPC surface (``master_rpc``), which both the
blocking and the async client use, so both get the same rules."""

from __future__ import annotations

import pytest

from mooncake_core.rpc import store_pb2 as pb
from mooncake_core.store import master_rpc as rpc
from mooncake_core.store.client.async_master import MasterClient
from mooncake_core.store.client.sync_master import SyncMaster
from mooncake_core.store.errors import ConflictError, NotFoundError, UnavailableError

EXISTS = pb.Error(code=pb.OBJECT_ALREADY_EXISTS, message="object 'k' already exists (PROCESSING)")
MISSING = pb.Error(code=pb.OBJECT_NOT_FOUND, message="object 'k' not found")
DONE = pb.Error(code=pb.INVALID_STATE, message="object 'k' is already complete")


@pytest.mark.parametrize("call", [rpc.PUT_START, rpc.UPSERT])
def test_resent_put_start_answered_exists_is_indeterminate(call: rpc.Unary) -> None:  # type: ignore[type-arg]
    req = call.request("c", "k", 10)
    reply = pb.PutStartResponse(error=EXISTS)
    with pytest.raises(UnavailableError, match="resent after a leader switch"):
        call.reply(reply, req, True)
    with pytest.raises(ConflictError):
        call.reply(reply, req, False)


def test_resent_remove_answered_not_found_is_indeterminate() -> None:
    req = rpc.REMOVE.request("c", "k", force=True)
    assert req.force
    reply = pb.KeyResponse(error=MISSING)
    with pytest.raises(UnavailableError, match="resent after a leader switch"):
        rpc.REMOVE.reply(reply, req, True)
    with pytest.raises(NotFoundError):
        rpc.REMOVE.reply(reply, req, False)


def test_resent_put_end_answered_already_complete_is_success() -> None:
    req = rpc.PUT_END.request("c", "k")
    assert rpc.PUT_END.reply(pb.KeyResponse(error=DONE), req, True) is None
    with pytest.raises(ConflictError):
        rpc.PUT_END.reply(pb.KeyResponse(error=DONE), req, False)
    batch = rpc.BATCH_PUT_END.request("c", ["k", "j"])
    reply = pb.BatchKeyResponse(errors=[DONE, MISSING])
    first, second = rpc.BATCH_PUT_END.reply(reply, batch, True)
    assert first is None and isinstance(second, NotFoundError)
    assert isinstance(rpc.BATCH_PUT_END.reply(reply, batch, False)[0], ConflictError)


def test_resent_batch_commit_reads_as_its_end_or_its_grants_unknown() -> None:
    stale = pb.Error(code=pb.STALE, message="put 'k': grant 5 is not held by this client")
    ok = pb.Error(code=pb.OK)
    reply = pb.BatchPutCommitResponse(errors=[DONE, EXISTS, stale, ok, MISSING])
    keys = ["k", "j", "i", "h", "g"]
    # Ending started puts (no grants): "already complete" after a resend is success.
    ended = rpc.BATCH_PUT_COMMIT.request("c", keys)
    got, grants = rpc.BATCH_PUT_COMMIT.reply(reply, ended, True)
    assert got[0] is None and grants == []
    assert [type(e) for e in got[1:]] == [ConflictError, ConflictError, type(None), NotFoundError]
    # Through grants: "exists" or STALE after a resend may be the first copy's doing.
    granted = rpc.BATCH_PUT_COMMIT.request("c", keys, [1, 2, 3, 4, 5], 10)
    got, _ = rpc.BATCH_PUT_COMMIT.reply(reply, granted, True)
    assert [type(e) for e in got] == [
        ConflictError,
        UnavailableError,
        UnavailableError,
        type(None),
        NotFoundError,
    ]
    assert "put 'j': resent after a leader switch" in str(got[1])
    first, _ = rpc.BATCH_PUT_COMMIT.reply(reply, granted, False)
    assert [type(e) for e in first[:3]] == [ConflictError] * 3


def test_both_clients_take_these_calls_from_the_surface() -> None:
    for client in (SyncMaster, MasterClient):
        for name in (
            "put_start",
            "upsert",
            "put_end",
            "batch_put_end",
            "batch_put_commit",
            "remove",
        ):
            assert vars(client)[name].call is getattr(rpc, name.upper())
