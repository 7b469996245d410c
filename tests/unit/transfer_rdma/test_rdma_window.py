"""Posting window and completion bookkeeping, fed with made-up completion records."""

import pytest

from mooncake_core.transfer.rdma_window import (
    WC_SUCCESS,
    WC_WR_FLUSH_ERR,
    Completion,
    PostingWindow,
    wc_status_name,
)

RETRY_EXC = 12
REM_ACCESS = 10


def test_window_bounds_posts_and_ids_are_fresh():
    w = PostingWindow(3, "qp")
    w.queue("abcde")
    assert w.take_posts() == [(1, "a"), (2, "b"), (3, "c")]
    assert w.take_posts() == []  # full
    assert (w.outstanding, w.queued, w.idle) == (3, 2, False)
    ev = w.on_completions([Completion(2, WC_SUCCESS)])
    assert ev.completed == ("b",) and not ev.failed and not ev.flushed
    assert w.take_posts() == [(4, "d")]
    ev = w.on_completions([Completion(1, WC_SUCCESS), Completion(3, WC_SUCCESS)])
    assert ev.completed == ("a", "c")
    assert w.take_posts() == [(5, "e")]
    w.on_completions([Completion(4, WC_SUCCESS), Completion(5, WC_SUCCESS)])
    assert w.idle and not w.broken


def test_first_error_fails_its_slice_and_flushes_the_rest():
    w = PostingWindow(4, "mlx5_0 -> h:1")
    w.queue(["s1", "s2", "s3", "s4", "s5", "s6"])
    w.take_posts()
    ev = w.on_completions(
        [
            Completion(1, WC_SUCCESS),
            Completion(2, RETRY_EXC, vendor_err=0x81),
            Completion(3, WC_WR_FLUSH_ERR),
            Completion(4, WC_WR_FLUSH_ERR),
        ]
    )
    assert ev.completed == ("s1",)
    assert ev.failed == (("s2", "mlx5_0 -> h:1: IBV_WC_RETRY_EXC_ERR (vendor_err 0x81)"),)
    assert ev.flushed == ("s3", "s4")
    assert w.broken and w.broken_reason == ev.failed[0][1]
    assert w.take_posts() == []  # a broken QP posts nothing more
    assert w.take_unposted() == ["s5", "s6"]
    assert w.idle


def test_flush_before_any_error_counts_as_failure():
    # A flush with no error seen yet means the QP died under us: that slice failed.
    w = PostingWindow(2)
    w.queue(["x"])
    w.take_posts()
    ev = w.on_completions([Completion(1, WC_WR_FLUSH_ERR)])
    assert [s for s, _ in ev.failed] == ["x"] and "IBV_WC_WR_FLUSH_ERR" in ev.failed[0][1]


def test_stray_completions_are_counted_not_matched():
    w = PostingWindow(2)
    w.queue(["x"])
    w.take_posts()
    ev = w.on_completions([Completion(99, WC_SUCCESS), Completion(1, WC_SUCCESS)])
    assert ev.stray == 1 and ev.completed == ("x",)
    ev = w.on_completions([Completion(1, WC_SUCCESS)])  # duplicate: no longer outstanding
    assert ev.stray == 1 and ev.completed == ()


def test_post_failure_fails_the_unposted_rest_of_the_burst():
    w = PostingWindow(8, "qp")
    w.queue(["a", "b", "c"])
    posts = w.take_posts()
    ev = w.post_failed([wr for wr, _ in posts[1:]], "ENOMEM")
    assert ev.failed == (
        ("b", "qp: post_send failed: ENOMEM"),
        ("c", "qp: post_send failed: ENOMEM"),
    )
    assert w.broken and w.outstanding == 1
    ev = w.on_completions([Completion(posts[0][0], WC_WR_FLUSH_ERR)])
    assert ev.flushed == ("a",)


def test_expire_fails_everything_outstanding():
    w = PostingWindow(2, "qp")
    w.queue(["a", "b", "c"])
    w.take_posts()
    ev = w.expire()
    assert ev.failed == (
        ("a", "qp: no completion within the I/O timeout"),
        ("b", "qp: no completion within the I/O timeout"),
    )
    assert w.outstanding == 0 and w.broken and w.take_unposted() == ["c"]


def test_remote_access_error_reason_names_the_status():
    w = PostingWindow(1)
    w.queue(["a"])
    w.take_posts()
    ((_item, why),) = w.on_completions([Completion(1, REM_ACCESS)]).failed
    assert "IBV_WC_REM_ACCESS_ERR" in why


def test_status_names_and_bad_window():
    assert wc_status_name(0) == "IBV_WC_SUCCESS"
    assert wc_status_name(5) == "IBV_WC_WR_FLUSH_ERR"
    assert wc_status_name(21) == "IBV_WC_GENERAL_ERR"
    assert wc_status_name(99) == "IBV_WC_STATUS_99"
    with pytest.raises(ValueError, match="window must be >= 1"):
        PostingWindow(0)
