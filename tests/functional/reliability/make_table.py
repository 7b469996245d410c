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
    return results, took


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
        if row.kind == "load" and ok:
            observed += f". Measured: {_soak_cell(soak)}"
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
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
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
