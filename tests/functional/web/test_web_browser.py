"""Browser tests: Debian's chromium (headless) driven by Playwright against the
dashboard served by uvicorn over the live backend (web_live_procs.py).

Skipped with a message when chromium or the playwright package is missing (CI must
install both: ``apt-get install chromium``, ``pip install playwright``; never
``playwright install``, which downloads its own browsers).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from fastapi import FastAPI
from web_live_procs import OBJECTS, TOKEN, WebBackend, value_of

pytestmark = pytest.mark.integration

CHROMIUM = "/usr/bin/chromium"
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
PAGES = ("overview", "store", "network", "scheduler", "audit", "nodes")

if not Path(CHROMIUM).exists():
    pytest.skip(f"{CHROMIUM} missing: apt-get install chromium", allow_module_level=True)
sync_api = pytest.importorskip(
    "playwright.sync_api", reason="the playwright package is missing: pip install playwright"
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def base_url(make_app: Callable[..., FastAPI]) -> Iterator[str]:
    import uvicorn

    port = _free_port()
    server = uvicorn.Server(
        uvicorn.Config(
            make_app(anonymous_read=True), host="127.0.0.1", port=port, log_level="warning"
        )
    )
    t = threading.Thread(target=server.run, daemon=True)
    t.start()
    deadline = time.monotonic() + 20
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.05)
    assert server.started, "uvicorn did not start"
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    t.join(10)


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=ARGS, headless=True)
        yield b
        b.close()


@pytest.fixture
def page(browser: object, base_url: str) -> Iterator[object]:
    ctx = browser.new_context(base_url=base_url, viewport={"width": 1360, "height": 900})  # type: ignore[attr-defined]
    pg = ctx.new_page()
    pg.set_default_timeout(15_000)
    yield pg
    ctx.close()


def _login(page: object) -> None:
    page.goto("/login?next=/store")  # type: ignore[attr-defined]
    page.fill("#token", TOKEN)  # type: ignore[attr-defined]
    page.click("#login-submit")  # type: ignore[attr-defined]
    page.wait_for_url("**/store")  # type: ignore[attr-defined]
    page.wait_for_selector("#auth-state:text('logged in')")  # type: ignore[attr-defined]


def _wait_js(page: object, expr: str, timeout: float = 20.0) -> None:
    """Poll ``expr`` from Python: ``wait_for_function`` evaluates strings in the page,
    which the dashboard's Content-Security-Policy (no unsafe-eval) rightly forbids."""
    deadline = time.monotonic() + timeout
    while not page.evaluate(expr):  # type: ignore[attr-defined]
        assert time.monotonic() < deadline, f"timed out waiting for {expr}"
        time.sleep(0.2)


def _shots_dir(tmp_path: Path) -> Path:
    d = Path(os.environ.get("MOONCAKE_WEB_SCREENSHOTS", tmp_path))
    d.mkdir(parents=True, exist_ok=True)
    return d


def test_every_page_renders_real_data(page, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    shots = _shots_dir(tmp_path)
    checks = {
        "overview": ("#components tr[data-key='store-a']", "#card-store .value"),
        "store": (
            "#capacity-table tr[data-key='store-a/dram']",
            "#objects-table tr[data-key='web/obj-000']",
        ),
        "network": (".chart[data-node='te-reader'] svg path.rx", "#paused"),
        "scheduler": ("#last-decisions tr[data-key='req-0']", "#chart-ttft circle"),
        "audit": ("#decisions-table tr[data-key='req-7']", "#decisions-count"),
        "nodes": ("#store-nodes tr[data-key='store-a']", "#components tr[data-key='conductor']"),
    }
    for name in PAGES:
        page.goto("/" if name == "overview" else f"/{name}")
        for sel in checks[name]:
            page.wait_for_selector(sel)
        assert page.locator("#error").is_hidden(), page.locator("#error").text_content()
        if name == "scheduler":
            # TTFT bias = mean of actual - predicted, shown with its sign: these requests
            # took longer than predicted (docs/audit.md, "Prediction error").
            bias = page.request.get("/api/scheduler").json()["ttft_bias_s"]
            shown = page.locator("#ttft-bias").text_content()
            assert bias is not None and bias > 0, bias
            assert shown.startswith("bias +") and "(actual − predicted)" in shown, shown
        if name == "audit":
            page.click("#decisions-table tr[data-key='req-2'] a.req")
            page.wait_for_selector("#explanation")
        if name == "store":
            page.click("#objects-table tr[data-key='web/obj-002'] a.obj")
            page.wait_for_selector("#object-table")
            detail = page.locator("#object-table").text_content()
            assert "12.0 KiB" in detail and "COMPLETE" in detail and "replica 0" in detail
        if name == "network":
            _wait_js(
                page,
                "Number(document.querySelector(\".chart[data-node='te-reader'] svg\")"
                ".dataset.points) >= 6",
            )
        page.screenshot(path=str(shots / f"web-{name}.png"), full_page=True)
    assert "store-a" in page.locator("#store-nodes").text_content()


def test_nic_chart_updates_while_transfer_runs(page) -> None:  # type: ignore[no-untyped-def]
    page.goto("/network")
    chart = ".chart[data-node='te-reader'] svg"
    page.wait_for_selector(chart)
    first = page.eval_on_selector(
        chart, "e => [Number(e.dataset.points), e.querySelector('path.rx').getAttribute('d')]"
    )
    _wait_js(page, f'Number(document.querySelector("{chart}").dataset.points) >= {first[0] + 4}')
    later = page.eval_on_selector(
        chart, "e => [Number(e.dataset.points), e.querySelector('path.rx').getAttribute('d')]"
    )
    assert later[1] != first[1]
    legend = page.locator(".chart[data-node='te-reader'] .legend").text_content()
    assert "rx 0 B/s" not in legend and "rx -" not in legend  # the reader is moving data


def test_action_without_login_is_refused(page, backend: WebBackend) -> None:  # type: ignore[no-untyped-def]
    page.goto("/store")
    page.wait_for_selector("#auth-state:text('read-only')")
    page.fill("#pin-target", "refused/")
    page.click("#pin-submit")
    page.wait_for_selector("#error:not([hidden])")
    assert "401" in page.locator("#error").text_content()
    assert "login required" in page.locator("#error").text_content()
    assert "refused/" not in json.dumps(_cli_pins(backend))


def _cli_pins(b: WebBackend) -> list[dict]:
    r = subprocess.run(
        [
            *(sys.executable, "-m", "mooncake_cli", "store", "pins", "--json"),
            *("--master", b.master, "--config", str(b.live.config)),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0, r.stderr
    return list(json.loads(r.stdout))


def test_pin_from_ui_shows_in_cli(page, backend: WebBackend, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    _login(page)
    page.fill("#pin-target", "web/obj-01")
    page.click("#pin-submit")
    page.wait_for_selector("#pins-table tr[data-key='web/obj-01']")
    pins = _cli_pins(backend)
    mine = [p for p in pins if p["target"] == "web/obj-01"]
    assert len(mine) == 1 and mine[0]["prefix"] is True and mine[0]["hard"] is False
    page.screenshot(path=str(_shots_dir(tmp_path) / "web-store-pinned.png"))
    # And unpin from the UI (confirm dialog accepted).
    page.once("dialog", lambda d: d.accept())
    page.click("#pins-table tr[data-key='web/obj-01'] button.unpin")
    page.wait_for_selector("#pins-table tr[data-key='web/obj-01']", state="detached")
    assert all(p["target"] != "web/obj-01" for p in _cli_pins(backend))


def test_decision_found_and_explained(page) -> None:  # type: ignore[no-untyped-def]
    page.goto("/audit")
    page.fill("#f-request_id", "req-5")
    page.click("#filter-submit")
    page.wait_for_selector("#decisions-count:text('1 matching')")
    page.click("#decisions-table tr[data-key='req-5'] a.req")
    page.wait_for_selector("#explanation")
    assert "was chosen for prefill" in page.locator("#explanation").text_content()
    assert page.locator("#candidates tr.chosen").count() == 2
    # From a request on the Scheduler page to its decision.
    page.goto("/scheduler")
    page.click("#last-decisions tr[data-key='req-1'] a")
    page.wait_for_url("**/audit?request=req-1")
    page.wait_for_selector("#explanation")
    assert "req-1" in page.locator("#detail h2").first.text_content()


def _cli_get(b: WebBackend, key: str) -> bytes:
    r = subprocess.run(
        [
            *(sys.executable, "-m", "mooncake_cli", "store", "get", key),
            *("--master", b.master, "--config", str(b.live.config)),
            *("--secret-file", str(b.tmp / "secret")),
        ],
        capture_output=True,
        timeout=60,
    )
    assert r.returncode == 0, r.stderr.decode(errors="replace")
    return r.stdout


def test_drain_and_undrain_from_nodes_page(
    page, backend: WebBackend, base_url: str, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    """Drain the store node holding objects through the confirmation dialog to DRAINED
    with nothing left on it, objects still readable (``mooncake store get``), then
    undrain it back to MOUNTED."""
    import httpx

    # Earlier drains (API tests) may have moved every object to either node.
    nodes = httpx.get(f"{base_url}/api/nodes", timeout=10).json()["store_nodes"]
    full = max(nodes, key=lambda n: n["keys"])
    node, before = full["node"], full["keys"]
    assert before > 0
    _login(page)
    page.goto("/nodes")
    row = f"#store-nodes tr[data-key='{node}']"
    page.wait_for_selector(f"{row} button.undrain[disabled]")  # MOUNTED: nothing to undo
    page.click(f"{row} button.drain")
    page.wait_for_selector("dialog#confirm[open]")
    assert "copied" in page.locator("dialog#confirm").text_content()
    page.click("#confirm-cancel")
    assert page.locator(f"{row} .drain-progress").count() == 0
    page.click(f"{row} button.drain")
    page.click("#confirm-ok")
    page.wait_for_selector(f"{row} .drain-progress")
    # Lease-bound: the last copied object's old replica goes when its read lease ends.
    page.wait_for_selector(f"{row} .drain-progress[data-state='done']", timeout=60_000)
    # The drain's progress and the node's row come from two feeds (the drain job, the
    # polled cluster view): the row says DRAINED with 0 objects one poll later.
    page.wait_for_function(
        """([sel, want]) => {
            const r = document.querySelector(sel);
            const cells = r ? r.querySelectorAll("td") : [];
            return r && r.textContent.includes(want) && cells[5]?.textContent === "0";
        }""",
        arg=[row, f"{node} (dram) DRAINED"],
        timeout=30_000,
    )
    text = page.locator(f"{row}").text_content()
    assert "DRAINED:" in text and "failed" not in text and f"{node} (dram) DRAINED" in text
    assert f"{before} replicas dropped" in text
    cells = page.locator(f"{row} td")
    assert cells.nth(5).text_content() == "0"  # objects on the node
    page.screenshot(path=str(_shots_dir(tmp_path) / "web-nodes-drain.png"), full_page=True)
    for key in OBJECTS[:3] + OBJECTS[-2:]:
        assert _cli_get(backend, key) == value_of(key), key
    # Undrain, confirmed.
    page.click(f"{row} button.undrain")
    page.wait_for_selector("dialog#confirm[open]")
    page.click("#confirm-ok")
    page.wait_for_selector(f"{row} button.undrain[disabled]")
    assert f"{node} (dram) MOUNTED" in page.locator(f"{row}").text_content()
