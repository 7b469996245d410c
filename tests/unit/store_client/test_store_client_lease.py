"""The client's lease checks: a read whose transfer ends after its lease is not trusted;
a write starts no transfer once its PutStart may have been discarded."""

from __future__ import annotations

from mooncake_core.store.client.data import (
    LEASE_TRIES,
    lease_outlasted_error,
    outlasted,
    write_too_late,
)
from mooncake_core.store.errors import ErrorCode, UnavailableError


def test_a_read_is_trusted_only_inside_its_lease_counted_from_the_ask() -> None:
    assert not outlasted(100.0, 0.2, 100.199)
    assert outlasted(100.0, 0.2, 100.2)  # the lease may have ended right then
    assert outlasted(100.0, 10.0, 111.0)


def test_the_error_is_one_clean_line_naming_key_times_and_tries() -> None:
    e = lease_outlasted_error("kv/a", 0.6123, 0.2, LEASE_TRIES)
    assert isinstance(e, UnavailableError) and e.code == ErrorCode.UNAVAILABLE
    assert "\n" not in e.message
    assert "'kv/a'" in e.message and "0.612 s" in e.message and "0.200 s" in e.message
    assert f"{LEASE_TRIES} time(s)" in e.message


def test_a_write_starts_no_transfer_once_its_put_timeout_has_passed() -> None:
    assert write_too_late("k", 100.0, 30.0, 129.999) is None
    e = write_too_late("kv/b", 100.0, 30.0, 130.0)  # the master may discard it now
    assert isinstance(e, UnavailableError) and e.code == ErrorCode.UNAVAILABLE
    assert "\n" not in e.message
    assert "'kv/b'" in e.message and "30.000 s after its PutStart" in e.message
    assert "put_timeout_s (30.000 s)" in e.message and "revoked, retry" in e.message
