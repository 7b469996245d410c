"""Small pure pieces of the serving path: TBT definition, request validation, options."""

from __future__ import annotations

import pytest

from mooncake_core.conductor.service import CompletionRequest, kv_bytes_per_token, tbt_of
from mooncake_core.config.models import ClusterConfig, ModelConfig
from mooncake_core.worker.sampling import SamplingParams
from mooncake_core.worker.service import WorkerServiceOptions, sampling_from_pb, sampling_to_pb
from mooncake_core.worker.service_store import layer_object_key


def test_serving_tbt_is_the_mean_of_the_worst_tenth_of_intervals() -> None:
    times = [0.0] + [0.01 * i for i in range(1, 21)]  # 20 gaps of 10 ms
    times[-1] += 0.5  # one slow gap
    assert tbt_of(times) == pytest.approx((0.51 + 0.01) / 2)  # worst 2 of 20
    assert tbt_of([1.0]) is None and tbt_of([]) is None


def test_serving_completion_request_needs_exactly_one_prompt_form() -> None:
    with pytest.raises(ValueError, match="exactly one"):
        CompletionRequest()
    with pytest.raises(ValueError, match="exactly one"):
        CompletionRequest(prompt="a", token_ids=(1,))
    with pytest.raises(ValueError, match="empty"):
        CompletionRequest(token_ids=())
    with pytest.raises(ValueError, match="max_tokens"):
        CompletionRequest(prompt="a", max_tokens=0)


def test_serving_worker_options_come_from_the_cluster_config() -> None:
    cfg = ClusterConfig(model=ModelConfig())
    opts = WorkerServiceOptions.from_cluster(cfg, "decode", cfg.decode_workers[0].name)
    w = cfg.decode_workers[0]
    assert (opts.rpc_port, opts.data_port, opts.max_batch) == (w.rpc_port, w.data_port, w.max_batch)
    assert opts.host == "127.0.0.1" and opts.role == "decode"
    with pytest.raises(KeyError, match="no prefill worker named 'nope'"):
        WorkerServiceOptions.from_cluster(cfg, "prefill", "nope")


def test_serving_sampling_round_trips_through_protobuf() -> None:
    s = SamplingParams(max_tokens=5, temperature=0.7, seed=3, stop_at_eos=False)
    assert sampling_from_pb(sampling_to_pb(s)) == s


def test_serving_kv_sizes_and_layer_object_names() -> None:
    cfg = ClusterConfig(model=ModelConfig())  # 4 layers, 2 KV heads of 32 dims, float32
    assert kv_bytes_per_token(cfg) == 4 * 2 * 2 * 32 * 4
    assert layer_object_key("m", 0x6FC1EBD4F4D6EA31, 2) == "kv/m/6fc1ebd4f4d6ea31/L2"


def test_serving_store_layer_objects_map_onto_their_block() -> None:
    from mooncake_core.conductor.service.store_events import as_block_event
    from mooncake_core.store import (
        ObjectRemoved,
        ObjectStored,
        RemoveReason,
        SegmentUnmounted,
        UnmountReason,
    )

    key = "kv/m/6fc1ebd4f4d6ea31"
    last = ObjectStored(1.0, key + "/L3", 4096, ())
    assert as_block_event(last, layers=4) == ObjectStored(1.0, key, 4096, ())
    assert as_block_event(ObjectStored(1.0, key + "/L0", 4096, ()), layers=4) is None
    gone = ObjectRemoved(2.0, key + "/L1", RemoveReason.EVICTED, True)
    assert as_block_event(gone, layers=4) == ObjectRemoved(2.0, key, RemoveReason.EVICTED, True)
    assert as_block_event(ObjectStored(1.0, "other/key", 1, ()), layers=4) is None
    assert as_block_event(ObjectStored(1.0, "x/Lfoo", 1, ()), layers=4) is None
    unmounted = SegmentUnmounted(3.0, "store-0", UnmountReason.CLIENT_EXPIRED)
    assert as_block_event(unmounted, layers=4) is unmounted  # not about one object
