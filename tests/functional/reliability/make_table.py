"""Run every test behind the reliability table and write docs/reliability.md.

Usage::

    python tests/functional/reliability/make_table.py            # run, then write the doc
    python tests/functional/reliability/make_table.py --check    # run; exit 1 on a failure
    MOONCAKE_SOAK_SECONDS=600 python tests/functional/reliability/make_table.py

Each row names the tests that back it; the outcome column is what the run observed
(pass / known bug (strict xfail) / fail / skipped with its reason), and the soak row
carries the numbers the soak test measured. Rows are only ever rendered from a run.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
DOC = ROOT / "docs" / "reliability.md"
BEGIN, END = "<!-- table:begin -->", "<!-- table:end -->"


@dataclass(frozen=True)
class Row:
    """One fault, load or fuzzed input, how it is produced, and the tests behind it."""

    kind: str
    what: str
    how: str
    expect: str
    tests: tuple[str, ...]  # pytest node ids without parameters


R = "tests/functional/reliability/"
ROWS = (
    Row(
        "fault",
        "store node SIGKILLed mid-read (replica_num=2)",
        "3 client threads loop `get` of a 24 MiB two-replica object; SIGKILL one node",
        "every read returns the exact bytes (sha256); no failed read; readers keep going",
        (
            R
            + "test_rel_node_kill_midread.py::test_rel_node_killed_mid_read_falls_back_to_other_replica",
            "tests/functional/store_client/test_store_client_node_kill.py::test_kill_node_surviving_replicas_read_lost_ones_not_found",
        ),
    ),
    Row(
        "fault",
        "link cut mid-transfer (2 NICs)",
        "netns rig, `ip link set down` on one veth while a 256 MiB TE read is flowing",
        "read completes over the other NIC, xxh3 identical; the NIC is used again when up",
        (
            "tests/functional/transfer_netns/test_netns_transfer.py::test_netns_link_down_mid_transfer_fails_over_and_recovers",
        ),
    ),
    Row(
        "fault",
        "link slowed with tc",
        "netns rig; `tc netem delay 20ms rate 40mbit` (tbf 40mbit where sch_netem is absent) on one link; "
        "real TE reads measure both links; measured B/s fed to the conductor's NetworkModel",
        "predicted transfer time over the slowed link grows by the measured factor; the replica behind "
        "the fast link is chosen. The live conductor does not feed NIC measurements yet: sans-IO path",
        (R + "test_rel_netem.py::test_rel_netem_slowed_link_moves_prediction_and_choice",),
    ),
    Row(
        "fault",
        "partition store node <-> master",
        "master in netns A, node in netns B; link down for > client_ttl_s, then up",
        "master expires the node, the node re-mounts by itself; master lists exactly one client/segment",
        (R + "test_rel_partition.py::test_rel_partitioned_node_reconnects_and_mounts_once",),
    ),
    Row(
        "fault",
        "a heartbeat reply lost after the master expired the node",
        "node dials the master through a TCP proxy; both ways cut past client_ttl_s "
        "(expired), then only the replies held past the beat deadline, then healed",
        'the beat that re-registered the client got its "unknown" reply too late; the node '
        "remounts anyway (after any failed beat the next good one remounts, idempotently; a "
        "refused remount is retried every beat). Found when `test_rel_partition.py` failed "
        "once in CI with `clients: 1, segments: []`: the node beat forever while its memory "
        "stayed out of the store",
        (
            R + "test_rel_lost_reply.py::test_rel_node_remounts_when_the_forgotten_reply_is_lost",
            "tests/functional/store/test_store_master_service_inproc.py::test_keep_alive_retries_a_refused_remount_until_it_lands",
        ),
    ),
    Row(
        "fault",
        "master SIGKILLed",
        "SIGKILL the master with a journal (--data-dir / state_dir), restart; HA leader SIGKILL",
        "no acknowledged object lost; bytes identical after restart; followers take over",
        (
            "tests/functional/durability/test_durability_restart.py::test_sigkill_and_restart_keeps_acknowledged_objects",
            "tests/functional/durability/test_durability_restart_data.py::test_objects_read_back_byte_identical_after_master_sigkill",
            "tests/functional/durability/test_durability_failover.py::test_leader_sigkill_loses_no_acknowledged_write",
        ),
    ),
    Row(
        "fault",
        "decode worker SIGKILLed mid-request",
        "secured serving cluster (1 prefill, 2 decode); SIGKILL the decode named in the audit row "
        "after the first streamed token of a 900-token request",
        "the HTTP caller gets an SSE error event (`decode stream: UNAVAILABLE ...`) at once; the request "
        "has its audit row; the next requests succeed on the other decode worker",
        (R + "test_rel_serving_faults.py::test_rel_decode_worker_killed_mid_request",),
    ),
    Row(
        "fault",
        "master SIGSTOPped 2 x client_ttl_s, then SIGCONT; master clock stepped",
        "real master + 2 nodes, 200 objects; the master stopped for twice the clients' TTL; "
        "journaled: stopped 15 s, then SIGKILL, 20 s down, restart; libfaketime steps the "
        "master's wall + monotonic clocks +60 s and +3600 s (and the wall clock alone +-hours)",
        "0 of 200 objects lost, all byte-exact, lost_objects_total 0: liveness counts the "
        "master's running time, a stall or jump counts one step (was: 200 lost here; the issue "
        "measured 1798, 1332 with the journal). A SIGKILLed node is still expired after the "
        "TTL (1.7-1.8 s for 2 s; later on a CPU-starved master)",
        (
            R + "test_rel_master_pause.py::test_rel_master_paused_twice_client_ttl_loses_nothing",
            R + "test_rel_master_pause.py::test_rel_master_clock_jumps_keep_healthy_nodes",
            R
            + "test_rel_master_pause.py::test_rel_journaled_master_paused_15s_then_down_20s_loses_nothing",
        ),
    ),
    Row(
        "fault",
        "store node SIGKILLed under single-replica put load",
        "3 nodes, client threads putting single-replica objects (tcp and auto/shm); SIGKILL one "
        "node; a silent (SIGSTOPped) node; a 40-item put_batch right after a kill",
        "excluded from placement 0.05-0.13 s after the kill (a writer's report; 0.73-0.83 s from "
        "missed heartbeats alone) instead of at expiry (1.8 s); a put whose target failed is "
        "placed again around it: 0 failed puts (was 219), 0 lost puts started after the kill "
        "(shm: the owner process must still run), all 40 batch items stored",
        (
            R
            + "test_rel_node_kill_put_load.py::test_rel_killed_node_leaves_placement_fast_and_puts_do_not_fail",
            R
            + "test_rel_node_kill_put_load.py::test_rel_silent_node_leaves_placement_within_a_heartbeat",
            R
            + "test_rel_node_kill_put_load.py::test_rel_batch_put_items_on_a_dead_node_are_placed_again",
        ),
    ),
    Row(
        "fault",
        "journal disk full, then room again, then master SIGKILL + restart",
        "SmallDisk (8 MiB tmpfs) as --data-dir; 300 puts + 30 removes; fill; 400 puts + 30 "
        "removes; free; 300 puts + 20 removes; kill -9 and restart",
        "while full, puts and removes refused cleanly (UNAVAILABLE, nothing changed), /health "
        "durable: false + journal_error, reads served, 0 bytes left reserved; writes accepted "
        "again 0.03 s after the room came back, no restart; after the restart every acknowledged "
        "object byte-exact (531), 0 missing, 0 wrong bytes, removed keys stay removed, 0 tracebacks, "
        "one log line per outage (was: durable: true, 4833 tracebacks, 6000 puts lost, another "
        "object's 4096 bytes served)",
        (
            R + "test_rel_journal_disk_full.py::test_rel_journal_disk_full_then_room_then_sigkill",
            "tests/unit/durability/test_durability_journal_faults.py::test_partial_record_alone_reads_as_nothing",
            "tests/unit/durability/test_durability_undo.py::test_refused_remove_puts_the_object_back_at_its_range",
            "tests/unit/durability/test_durability_undo.py::test_refused_put_start_releases_its_space",
        ),
    ),
    Row(
        "fault",
        "reads racing removal / reuse of their range; readers stalled past their lease",
        "real master + node, lease_ttl_s 0.2, six live 1 MiB keys; churn removes (half forced) "
        "and re-puts same-size keys onto the freed ranges while 6 reader threads and 2 reader "
        "processes (one getting over tcp, one batch-reading over shm; SIGSTOPped 0.6 s at "
        "random) read for 12 s; every 64-byte row names its key",
        "0 reads of another key's bytes (0 of 7255 and 0 of 6015; was 117 of 4753): a forced "
        "remove under a live lease holds its range until the lease ends, restored objects are "
        "read-held for lease_ttl_s, a client whose transfer outlasted its lease reads again or "
        "fails cleanly; the rest exact or a clean NOT_FOUND / NOT_READY. A range held when the "
        "master was SIGKILLed stays held by the restarted one (journaled): a same-size put is "
        "refused STORE_FULL until the lease ends (was: placed on it at once)",
        (
            R
            + "test_rel_reclaimed_reads.py::test_rel_reads_racing_removal_and_reuse_never_return_other_bytes",
            "tests/unit/store/test_store_held_ranges.py::test_forced_remove_holds_the_range_until_the_lease_ends",
            "tests/functional/durability/test_durability_restart.py::test_range_held_for_a_reader_stays_held_across_a_restart",
            "tests/unit/store_client/test_store_client_lease.py::test_a_read_is_trusted_only_inside_its_lease_counted_from_the_ask",
            "tests/functional/store_client/test_store_client_roundtrip.py::test_a_batch_read_stalled_past_its_lease_is_an_error_not_bytes",
        ),
    ),
    Row(
        "fault",
        "a writer stalled between its PutStart and its transfer, past put_timeout_s",
        "real master + node, put_timeout_s 0.3, put_release_s 3; the writer's PutStart is "
        "answered, it stalls 0.9 s, another client puts a same-size key, then the writer's "
        "transfer runs (shm and tcp); a put whose PutStart answer is read after the timeout",
        "the victim reads its own bytes; the discarded write's range is held for its writer "
        "until put_release_s after its PutStart (journaled as such: a rebuilt master holds it "
        "as long), then freed; put refuses to start a transfer past put_timeout_s (revoked, "
        "UNAVAILABLE naming the delay) (was: the victim was placed on the zombie's range and "
        "read 1 MiB of the zombie's bytes, shm and tcp)",
        (
            R
            + "test_rel_zombie_writes.py::test_rel_a_stalled_transfer_lands_in_its_own_held_range",
            R
            + "test_rel_zombie_writes.py::test_rel_put_never_starts_a_transfer_after_the_put_timeout",
            "tests/unit/store/test_store_puts.py::test_zombie_put_start_is_reclaimed",
            "tests/unit/store/test_store_held_ranges.py::test_a_rebuilt_master_holds_a_discarded_write_for_its_writer_not_one_lease",
        ),
    ),
    Row(
        "fault",
        "the master SIGKILLed and restarted while a writer holds a grant (the space of its next "
        "put, handed out ahead)",
        "real master with a journal; a client ends a put asking for a grant, which lands on "
        "node-b; SIGKILL, restart on the same journal; another write of that size; the writer's "
        "commit of the grant. The same with a batch committed through its grants and the next "
        "batch's grants out",
        "the restarted master does not hand the granted range out (the other write is refused "
        "STORE_FULL: the range is held for its writer until put_release_s, journaled as a writer "
        "hold) and refuses the stale commit (STALE: the client puts again the usual way); "
        "every key of the committed batch is where it was",
        (
            "tests/functional/durability/test_durability_restart.py::test_range_of_a_grant_stays_held_across_a_restart",
            "tests/functional/durability/test_durability_restart.py::test_a_batch_committed_through_grants_and_the_next_batch_s_ranges_survive_a_restart",
            "tests/unit/store/test_store_grants.py::test_released_grant_is_free_at_once_and_unused_one_held_for_its_writer",
            "tests/unit/durability/test_durability_undo.py::test_refused_commit_with_a_new_grant_undoes_both_without_a_rebuild",
        ),
    ),
    Row(
        "fault",
        "HA leader SIGKILLed, then the new leader SIGSTOPped past its lease (through `cluster up`)",
        "`mooncake.yaml` with etcd + 3 masters, `cluster up --detach`; objects via `mooncake store "
        "put/get` without `--master`; leader from `cluster status`; a read queued at a paused "
        "leader whose key the new leader removed",
        "every object byte-exact through the CLI's default master after each fault and after "
        "2 x client_ttl_s; new leader 3.7 s after the kill; the old leader back as a caught-up "
        "follower by itself (keeper); the resumed leader refuses the queued read (NOT_LEADER) "
        "(was: 0 of 10 objects readable, masters left down, stale replica list served)",
        (
            "tests/functional/cluster/test_cluster_ha_failover.py::test_leader_kill_and_pause_through_cluster_up_lose_nothing",
            "tests/functional/durability/test_durability_stale_leader.py::test_resumed_leader_refuses_reads_after_losing_its_lease",
        ),
    ),
    Row(
        "fault",
        "randomized (Jepsen-style): pauses, kills, partitions, full journal disk",
        "4 client threads put/upsert/get/remove unique values (replica_num=2) while a seeded "
        "nemesis (MOONCAKE_JEPSEN_SEED) pauses/kills/restarts the master and nodes and fills the "
        "journal tmpfs, one fault at a time, MOONCAKE_JEPSEN_SECONDS (40 s in CI); a node's "
        "link to the master cut (each node dials it through its own TCP proxy; clients still "
        "reach both) for < 0.4 x client_ttl_s, and node pauses; history kept on failure with a "
        "replay command",
        "checker: every acknowledged write readable with its exact bytes, no read of bytes never "
        "written to that key, removed keys stay removed (on the code before this wave: 18 "
        "cross-wired or never-written reads and 54 lost writes with seed 1, 52 lost with seed 2)",
        (
            R + "test_rel_jepsen.py::test_rel_jepsen_acknowledged_writes_survive_random_faults",
            "tests/unit/reliability/test_jepsen_checker.py::test_a_lost_write_is_caught",
            "tests/unit/reliability/test_jepsen_checker.py::test_wrong_bytes_are_caught",
            "tests/unit/reliability/test_jepsen_checker.py::test_a_resurrected_removed_key_is_caught",
        ),
    ),
    Row(
        "fault",
        "randomized, HA: leader paused / killed / partitioned from etcd",
        "real etcd + 3 `--ha` masters (lease 2 s), each reaching etcd through its own TCP proxy, "
        "3 nodes, 4 client threads on `etcd://`; a seeded nemesis pauses the leader 0.3-6 s "
        "(shorter than and past the lease), SIGKILLs it, cuts one master's (mostly the "
        "leader's) link to etcd for 0.3-6 s while clients still reach it, SIGSTOPs etcd for less "
        "than the lease, pauses/kills a node; one at a time, healed; 30 s in CI. Directed: the "
        "leader cut from etcd is sent a put and polled with reads",
        "checker: 0 lost acknowledged writes, 0 wrong or stale reads (seeds 1-3; with "
        "partitions: 1397150341 at 45 s, 992209945 and 70048146 at 90 s, 3-8 partitions each). "
        "The cut-off leader acknowledges no put, serves no read past its lease or after the new "
        "leader removed the key, and exits 3 by itself. Found and "
        "fixed: a call resent after a leader switch answered as if definite (a resent Remove "
        "'not found' after the first attempt removed the key; a resent PutStart 'exists' "
        "because of its own unfinished first attempt): now UNAVAILABLE, outcome unknown",
        (
            R + "test_rel_jepsen.py::test_rel_jepsen_ha_leader_faults_lose_nothing",
            R + "test_rel_ha_partition.py::"
            "test_leader_cut_off_from_etcd_acknowledges_nothing_and_serves_no_stale_read",
            "tests/unit/store_client/test_store_client_resend.py::test_resent_put_start_answered_exists_is_indeterminate",
            "tests/unit/store_client/test_store_client_resend.py::test_resent_remove_answered_not_found_is_indeterminate",
        ),
    ),
    Row(
        "fault",
        "conductor SIGKILLed / SIGTERMed under load",
        "16 clients back to back, 2 decode slots, SIGKILL after 4 s; 8 clients, SIGTERM",
        "every answered request (200 or 429) has its decision row and outcome: the front door "
        "waits for the audit commit before it dispatches or answers (was: 13 answered 429s "
        "without a row); SIGKILL loses only decisions not yet acted on; SIGTERM writes all",
        (
            R + "test_rel_conductor_audit.py::test_sigkill_under_load_loses_no_answered_decision",
            R + "test_rel_conductor_audit.py::test_sigterm_writes_every_decided_request",
        ),
    ),
    Row(
        "load",
        "200 concurrent clients, small decode KV pool",
        "200 clients x 3 requests (31-token prompts, max_tokens 40) at the front door; 1 decode "
        "worker with 20 KV blocks, 8 slots",
        "0 mid-decode capacity failures (was 14 of 21 admitted): the decode worker reserves the "
        "KV of every token a request may generate at Prepare; each request completes or gets a "
        "429 up front; audit: 0 failed",
        (R + "test_rel_decode_capacity.py::test_admitted_requests_never_fail_for_decode_kv",),
    ),
    Row(
        "input",
        "dashboard without login: ReDoS regex, foreign Host header (DNS rebinding)",
        "`GET /api/store/objects?regex=^kv/moonc([\\w/-]+)+!$` over 100 keys with /health probed "
        "meanwhile; requests with Host evil.example, 127.0.0.1.nip.io, empty",
        "regex answered in 11-25 ms on RE2 off the event loop, /health max 29 ms (was > 10 s, "
        "/health blocked); foreign Host refused 421 on every route, no key or audit row served",
        (
            R
            + "test_rel_dashboard_input.py::test_redos_regex_is_answered_fast_and_health_stays_responsive",
            R + "test_rel_dashboard_input.py::test_host_header_is_checked",
        ),
    ),
    Row(
        "input",
        "CLI / config input: billion laughs, deep YAML, huge files, bad keys, read-only state_dir",
        "`config validate` on an alias bomb, 10k-deep nesting, a 64 MiB file, broken YAML; "
        "`store put` of a 2 GiB sparse file and an 80 MiB file; non-UTF-8 keys (API, CLI); "
        "`cluster up` on a read-only tmpfs; `store ls --regex` ReDoS",
        "one line and exit 2 in <= 1.4 s at 72 MiB RSS (was > 120 s growing / RecursionError); "
        "2 GiB refused before reading (72 MiB RSS, was 2.2 GB), 80 MiB streamed at 81 MiB RSS; "
        "INVALID_KEY (was UnicodeEncodeError); read-only state_dir one line naming it, exit 1",
        (
            R
            + "test_rel_cli_input.py::test_billion_laughs_config_is_refused_fast_with_bounded_memory",
            R + "test_rel_cli_input.py::test_deep_config_is_a_clear_error",
            R + "test_rel_cli_input.py::test_huge_config_file_is_refused_before_parsing",
            R + "test_rel_cli_input.py::test_broken_yaml_is_one_line",
            R + "test_rel_cli_input.py::test_put_of_a_2gib_sparse_file_is_refused_before_reading",
            R + "test_rel_cli_input.py::test_put_streams_a_file_larger_than_a_slice",
            R + "test_rel_cli_input.py::test_put_of_a_directory_or_missing_file_is_one_line",
            R + "test_rel_cli_input.py::test_invalid_utf8_key_from_the_python_api",
            R + "test_rel_cli_input.py::test_invalid_utf8_key_from_the_cli",
            R + "test_rel_cli_input.py::test_redos_regex_from_the_cli_is_fast",
            R + "test_rel_cli_input.py::test_cluster_up_on_a_read_only_state_dir_is_one_line",
        ),
    ),
    Row(
        "input",
        "raw peer addresses outside registered memory (upstream's `mooncake.engine` API)",
        "writes and reads past a region's end, just before one, one byte after the last, "
        "address 8, the top of the address space, an unmapped address, a batch with one bad "
        "item, a region just unregistered; no-access (GPU-like) pointers registered",
        "all refused (-1, out of the target segment's bounds) and counted by the peer (exactly "
        "13); no bytes read back, nothing written beyond the good item, the peer stays up; "
        "no-access pointers refused at register_memory",
        (
            "tests/functional/compat/test_compat_engine.py::test_out_of_range_remote_addresses_refused",
            "tests/functional/compat/test_compat_engine.py::test_gpu_like_and_unmapped_pointers_refused",
        ),
    ),
    Row(
        "security",
        "file modes under state_dir",
        "umask 022 and a pre-made 0755 state_dir; `cluster up` (journaled master, nodes, "
        "dashboard) and `db upgrade`; walk the state_dir",
        "every directory 0700, every file 0600 (secret, audit.db + -wal/-shm, journal, logs, "
        "run/*.json) (was 0755 / 0644)",
        (R + "test_rel_file_modes.py::test_state_dir_is_private_after_cluster_up",),
    ),
    Row(
        "harness",
        "the fault tools themselves",
        "SIGSTOP a ticking process; fill a tmpfs; step a child's clocks with libfaketime; "
        "throttle a loop device's writes with a blkio cgroup; cut a TCP proxy's link",
        "a stopped process prints nothing and resumes; ENOSPC then room; wall and monotonic "
        "clocks jump by the step; 2 MiB + fsync at 1 MiB/s takes > 1 s; a cut link is silent "
        "(no reset, no answer, new connections hear nothing) and delivers the held bytes "
        "once healed",
        (
            R + "test_rel_harness.py::test_paused_process_makes_no_progress_and_resumes",
            R + "test_rel_harness.py::test_small_disk_fills_frees_and_grows",
            R + "test_rel_harness.py::test_fake_clock_jumps_wall_and_monotonic_of_a_child",
            R + "test_rel_harness.py::test_slow_disk_throttles_fsync_of_one_process",
            R + "test_rel_harness.py::"
            "test_cut_proxy_holds_bytes_while_cut_and_delivers_them_once_healed",
        ),
    ),
    Row(
        "load",
        "soak: concurrent put/get/remove",
        "6 client threads (3 shm, 3 tcp) against a real master + 2 nodes for MOONCAKE_SOAK_SECONDS "
        "(20 s in CI); values 512 B-256 KiB, a third with 2 replicas",
        "no corrupt read (sha256), every acknowledged write readable at the end, removed keys NOT_FOUND, "
        "RSS growth bounded, p50/p99 of the last third within 5x/10x of the first",
        (R + "test_rel_soak.py::test_rel_soak_put_get_remove",),
    ),
    Row(
        "fuzz",
        "data-plane frame parser",
        "hypothesis: random bytes to the C and Python parsers, and to a live TE server socket",
        "only ProtocolError; both parsers agree; the server survives and counts the bad frame",
        (
            "tests/unit/transfer/test_transfer_protocol.py::test_random_bytes_only_ever_raise_protocol_error",
            "tests/unit/transfer/test_transfer_protocol.py::test_c_and_python_parsers_agree_on_random_headers",
            "tests/functional/transfer/test_transfer_security.py::test_random_bytes_never_crash_the_server",
        ),
    ),
    Row(
        "fuzz",
        "master gRPC handlers",
        "hypothesis: 400 requests of every unary MasterService RPC with random field values "
        "(generated from the proto descriptors), authenticated, to a real master",
        "every answer is a known error code with a message, never UNKNOWN/INTERNAL; master healthy after. "
        "Found and fixed: huge MountSegment capacities overflowed GetSnapshot's totals; now refused",
        (
            R + "test_rel_master_secure.py::test_rel_fuzzed_master_rpcs_answer_with_clear_codes",
            R + "test_rel_master_secure.py::test_rel_master_healthy_after_fuzzing",
            R + "test_rel_master_secure.py::test_rel_huge_capacities_are_refused",
        ),
    ),
    Row(
        "fuzz",
        "worker gRPC handlers",
        "hypothesis: 60 authenticated requests of every Worker RPC (unary and streaming) with random "
        "field values to the live prefill/decode workers of a serving cluster",
        "a known status with a message, the worker stays up. Found and fixed: StageForward "
        "answered UNKNOWN (numpy ValueError) to an empty request; now INVALID_ARGUMENT",
        (
            R + "test_rel_serving_faults.py::test_rel_fuzzed_worker_rpcs_answer_with_clear_codes",
            R + "test_rel_serving_faults.py::test_rel_worker_stage_forward_validates_its_request",
        ),
    ),
    Row(
        "fuzz",
        "trace loader",
        "hypothesis: random text, JSON values and partial records as JSONL lines",
        "a valid trace or TraceError naming the file, the 1-based line and the field",
        (
            "tests/unit/fuzz/test_fuzz_trace_loader.py::test_fuzz_trace_lines_parse_or_name_the_line",
            "tests/unit/fuzz/test_fuzz_trace_loader.py::test_fuzz_trace_file_error_names_the_file_and_line",
        ),
    ),
    Row(
        "fuzz",
        "config loader",
        "hypothesis: random YAML mappings over the real section/field names, random YAML text",
        "a ClusterConfig or ConfigError whose every problem names a key",
        (
            "tests/unit/fuzz/test_fuzz_config_loader.py::test_fuzz_config_mapping_valid_or_config_error",
            "tests/unit/fuzz/test_fuzz_config_loader.py::test_fuzz_config_file_text_valid_or_config_error",
        ),
    ),
    Row(
        "security",
        "master gRPC without / with a wrong token",
        "secret set; raw calls with no, wrong and empty bearer tokens",
        "UNAUTHENTICATED, and master_auth_failures{rpc} grows by exactly the refused calls",
        (
            R
            + "test_rel_master_secure.py::test_rel_master_refuses_and_counts_missing_and_wrong_tokens",
        ),
    ),
    Row(
        "security",
        "worker gRPC without / with a wrong token",
        "secured serving cluster; Health probes to prefill and decode workers",
        "UNAUTHENTICATED; each refusal counted by RPC on the worker's /telemetry and /metrics",
        (
            R + "test_rel_serving_faults.py::test_rel_worker_rpc_refuses_missing_and_wrong_token",
            "tests/functional/telemetry_live/test_telemetry_worker.py::test_worker_counts_refused_calls",
        ),
    ),
    Row(
        "security",
        "store data plane (TE) without / with a wrong secret; replayed handshake",
        "TE client without the secret, with a wrong one; a captured server answer replayed",
        "connection refused and counted; replay refused",
        (
            "tests/functional/transfer/test_transfer_security.py::test_right_secret_works_and_wrong_or_missing_is_refused",
            "tests/functional/transfer/test_transfer_security.py::test_replayed_answer_is_refused",
            "tests/functional/store_client/test_store_client_auth.py::test_secret_holders_round_trip_others_are_refused",
        ),
    ),
    Row(
        "security",
        "web dashboard mutations",
        "pin/drain without login, wrong token, missing CSRF",
        "refused; only a logged-in session with the CSRF token mutates",
        (
            "tests/functional/web/test_web_api.py::test_actions_refused_without_login",
            "tests/functional/web/test_web_api.py::test_login_wrong_token",
            "tests/functional/web/test_web_api.py::test_session_cookie_and_csrf",
        ),
    ),
    Row(
        "security",
        "secret never in logs, state or audit rows",
        "secured store cluster and secured serving cluster; grep every log, state file and every "
        "audit table row for the secret and its derived bearer token",
        "absent everywhere",
        (
            R + "test_rel_master_secure.py::test_rel_secret_and_token_never_logged",
            R + "test_rel_serving_faults.py::test_rel_secret_never_in_cluster_logs_or_audit",
        ),
    ),
)


def _parse(report: Path) -> dict[str, list[tuple[str, str]]]:
    """Results by ``file::name`` from a pytest junit XML report."""
    results: dict[str, list[tuple[str, str]]] = {}
    for case in ET.parse(report).getroot().iter("testcase"):
        mod = case.get("classname", "").replace(".", "/") + ".py"
        name = case.get("name", "").split("[")[0]
        status, why = "passed", ""
        for child in case:
            if child.tag == "skipped":
                msg = child.get("message", "")
                status = (
                    "xfailed"
                    if child.get("type") == "pytest.xfail" or "xfail" in msg
                    else "skipped"
                )
                why = msg
            elif child.tag in ("failure", "error"):
                status, why = "failed", child.get("message", "")
        results.setdefault(f"{mod}::{name}", []).append((status, why))
    return results


def _run(report: Path, soak: Path) -> tuple[dict[str, list[tuple[str, str]]], float]:
    ids = sorted({t.split("::")[0] + "::" + t.split("::")[1] for row in ROWS for t in row.tests})
    # Collect by file, select by keyword: parametrized ids are covered without listing params.
    files = sorted({i.split("::")[0] for i in ids})
    names = sorted({i.split("::")[1] for i in ids})
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        *files,
        "-k",
        " or ".join(names),
        f"--junitxml={report}",
        "-W",
        "ignore::DeprecationWarning",
    ]
    env = dict(os.environ, MOONCAKE_SOAK_REPORT=str(soak))
    t0 = time.monotonic()
    subprocess.run(cmd, cwd=ROOT, env=env, check=False)
    took = time.monotonic() - t0
    return _parse(report), took


def _outcome(row: Row, results: dict[str, list[tuple[str, str]]]) -> tuple[str, bool]:
    parts, ok = [], True
    for t in row.tests:
        got = results.get(t)
        if not got:
            parts.append(f"NOT RUN `{t.split('::')[1]}`")
            ok = False
            continue
        statuses = {s for s, _ in got}
        if "failed" in statuses:
            ok = False
            parts.append(f"**FAILED** `{t.split('::')[1]}`")
        elif statuses == {"skipped"}:
            parts.append(f"skipped ({got[0][1][:80]})")
        elif "xfailed" in statuses:
            parts.append("known bug (strict xfail)")
    return ("; ".join(parts) or "pass"), ok


def _soak_cell(soak: Path) -> str:
    if not soak.exists():
        return ""
    s = json.loads(soak.read_text())
    bits = [f"{s['ops']} ops in {s['seconds']:.0f} s by {s['workers']} clients"]
    for op in ("put", "get", "remove"):
        if op in s:
            p50, p99 = s[op]["p50_ms"], s[op]["p99_ms"]
            bits.append(
                f"{op} p50 {p50[0]:.1f}->{p50[1]:.1f} ms, p99 {p99[0]:.1f}->{p99[1]:.1f} ms"
            )
    bits.append("RSS growth " + ", ".join(f"{k} {v} MiB" for k, v in s["rss_growth_mib"].items()))
    return "; ".join(bits)


def render(results: dict[str, list[tuple[str, str]]], soak: Path, took: float) -> tuple[str, bool]:
    """The markdown table and whether every row held."""
    lines = [
        "| kind | fault / load / input | how | outcome observed | run | tests |",
        "|---|---|---|---|---|---|",
    ]
    all_ok = True
    for row in ROWS:
        outcome, ok = _outcome(row, results)
        all_ok &= ok
        observed = row.expect
        measured = _soak_cell(soak) if ok and "test_rel_soak" in row.tests[0] else ""
        if measured:
            observed += f". Measured: {measured}"
        tests = "<br>".join(f"`{t}`" for t in row.tests)
        cells = [row.kind, row.what, row.how, observed, outcome, tests]
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    lines.append("")
    lines.append(
        f"_Generated {stamp} by `python tests/functional/reliability/make_table.py` "
        f"({took:.0f} s, soak {os.environ.get('MOONCAKE_SOAK_SECONDS', '20')} s)._"
    )
    return "\n".join(lines), all_ok


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="run only; exit 1 if a row fails")
    ap.add_argument(
        "--from-junit",
        type=Path,
        metavar="XML",
        help="render from the junit report of a run that included every row's tests "
        "(e.g. the full suite with MOONCAKE_SOAK_REPORT set) instead of running them",
    )
    ap.add_argument("--soak", type=Path, help="with --from-junit: that run's soak report")
    ap.add_argument("--took", type=float, default=0.0, help="with --from-junit: its seconds")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        if args.from_junit is not None:
            soak = args.soak or Path(tmp) / "soak.json"
            results, took = _parse(args.from_junit), args.took
        else:
            report, soak = Path(tmp) / "junit.xml", Path(tmp) / "soak.json"
            results, took = _run(report, soak)
        table, ok = render(results, soak, took)
    if not args.check:
        text = DOC.read_text()
        head, _, rest = text.partition(BEGIN)
        _, _, tail = rest.partition(END)
        DOC.write_text(f"{head}{BEGIN}\n{table}\n{END}{tail}")
        print(f"wrote {DOC}")
    print(table)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
