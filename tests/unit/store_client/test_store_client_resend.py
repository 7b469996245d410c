"""A call the store client resent after a leader switch may have been applied by the old
leader (its reply lost). PutStart answered OBJECT_ALREADY_EXISTS, or Remove answered
OBJECT_NOT_FOUND, after a resend may be this client's own first attempt: the outcome is
unknown (UnavailableError), never a definite "exists" / "not found". Without a resend the
answers stand. The randomized HA fault test found both (test_rel_jepsen.py)."""

from __future__ import annotations

from typing import Any

import pytest

from mooncake_core.rpc import store_pb2 as pb
from mooncake_core.store.client_master import SyncMaster
from mooncake_core.store.errors import ConflictError, NotFoundError, UnavailableError

EXISTS = pb.Error(code=pb.OBJECT_ALREADY_EXISTS, message="object 'k' already exists (PROCESSING)")
MISSING = pb.Error(code=pb.OBJECT_NOT_FOUND, message="object 'k' not found")


def _master(reply: Any, resent: bool) -> SyncMaster:
    m = SyncMaster("127.0.0.1:1", client_id="c", secret=None)

    def call(fn: Any, req: Any) -> Any:
        m._tls.retried = resent
        return reply

    m._call = call  # type: ignore[method-assign]
    return m


@pytest.mark.parametrize("upsert", [False, True])
def test_resent_put_start_answered_exists_is_indeterminate(upsert: bool) -> None:
    m = _master(pb.PutStartResponse(error=EXISTS), resent=True)
    with pytest.raises(UnavailableError, match="resent after a leader switch"):
        m.put_start("k", 10, None, upsert=upsert)
    m = _master(pb.PutStartResponse(error=EXISTS), resent=False)
    with pytest.raises(ConflictError):
        m.put_start("k", 10, None, upsert=upsert)


def test_resent_remove_answered_not_found_is_indeterminate() -> None:
    m = _master(pb.KeyResponse(error=MISSING), resent=True)
    with pytest.raises(UnavailableError, match="resent after a leader switch"):
        m.remove("k", force=True)
    m = _master(pb.KeyResponse(error=MISSING), resent=False)
    with pytest.raises(NotFoundError):
        m.remove("k", force=True)
