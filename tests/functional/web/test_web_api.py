"""The dashboard's JSON API over a live master, two store nodes, a TE pair and a real
audit DB: every endpoint, its bad input, and the auth rules."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from web_live_procs import OBJECTS, REQUESTS, TOKEN, WebBackend, login, read_back, value_of

pytestmark = pytest.mark.integration


def _wait(c: TestClient, path: str, ok: Callable[[dict], bool], timeout: float = 15.0) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        doc = c.get(path).json()
        if ok(doc) or time.monotonic() > deadline:
            return doc
        time.sleep(0.2)


def test_health_and_openapi(client: TestClient) -> None:
    assert client.get("/health").json() == {"status": "ok"}
    assert client.get("/api/health").json() == {"status": "ok"}
    spec = client.get("/openapi.json").json()
    paths = set(spec["paths"])
    for p in (
        "/api/overview",
        "/api/store/objects",
        "/api/store/pins",
        "/api/network",
        "/api/scheduler",
        "/api/audit/decisions",
        "/api/audit/decisions/{request_id}",
        "/api/nodes/{node}/drain",
        "/api/nodes/{node}/undrain",
        "/api/auth/login",
        "/api/events",
    ):
        assert p in paths, p
    assert not any(p.startswith("/static") for p in paths)


def test_overview(client: TestClient) -> None:
    o = client.get("/api/overview").json()
    names = {n["name"]: n for n in o["nodes"]}
    assert set(names) == {"master", "store-a", "store-b", "te-target", "te-reader", "conductor"}
    assert all(n["up"] for n in names.values())
    assert o["store"]["available"] and o["store"]["keys"] == len(OBJECTS)
    assert o["scheduler"]["decisions_total"] == REQUESTS
    assert o["alerts"] == []
    view = client.get("/api/view").json()
    assert view["store"]["keys"] == len(OBJECTS)


def test_events_stream(client: TestClient) -> None:
    r = client.get("/api/events", params={"once": True})
    assert r.headers["content-type"].startswith("text/event-stream")
    line = next(x for x in r.text.splitlines() if x.startswith("data: "))
    doc = json.loads(line.removeprefix("data: "))
    assert set(doc) == {"overview", "network", "scheduler", "store"}
    assert doc["store"]["keys"] == len(OBJECTS)


def test_store_capacity(client: TestClient) -> None:
    cap = client.get("/api/store/capacity").json()
    nodes = {(n["node"], n["tier"]): n for n in cap["nodes"]}
    assert set(nodes) == {("store-a", "dram"), ("store-b", "dram")}
    assert all(n["capacity"] == 16 << 20 for n in nodes.values())
    assert sum(n["keys"] for n in nodes.values()) == len(OBJECTS)
    assert cap["tiers"] == [{"tier": "dram", "capacity": 32 << 20, "used": cap["used"]}]


def test_object_browser_pages(client: TestClient) -> None:
    seen: list[str] = []
    after = ""
    while True:
        r = client.get(
            "/api/store/objects", params={"prefix": "web/", "limit": 7, "start_after": after}
        )
        assert r.status_code == 200, r.text
        page = r.json()
        seen += [e["key"] for e in page["entries"]]
        if page["next_start_after"] is None:
            break
        after = page["next_start_after"]
    assert seen == sorted(k for k in OBJECTS if k.startswith("web/"))
    r = client.get("/api/store/objects", params={"prefix": "web/", "regex": r"obj-00[1-3]$"})
    assert [e["key"] for e in r.json()["entries"]] == ["web/obj-001", "web/obj-002", "web/obj-003"]
    info = client.get("/api/store/objects/web/obj-002").json()
    assert info["size"] == 3 * 4096 and info["state"] == "COMPLETE"
    assert info["segments"] and set(info["segments"]) <= {"store-a", "store-b"}


@pytest.mark.parametrize(
    ("params", "needle"),
    [
        ({"limit": 101}, "over the cap of 100"),
        ({"limit": 0}, "limit must be >= 1"),
        ({"limit": "x"}, "limit"),
        ({"prefix": "web/\x01"}, "control character"),
        ({"prefix": "p" * 1025}, "at most 1024"),
        ({"regex": "obj-(["}, "malformed regex"),
    ],
)
def test_object_browser_bad_input(client: TestClient, params: dict, needle: str) -> None:
    r = client.get("/api/store/objects", params=params)
    assert r.status_code == 422
    assert needle in r.text


def test_object_unknown_key(client: TestClient) -> None:
    r = client.get("/api/store/objects/web/nope")
    assert r.status_code == 404 and "web/nope" in r.text


def test_network(client: TestClient) -> None:
    net = _wait(
        client,
        "/api/network",
        lambda d: any(len(nic["points"]) >= 2 for n in d["nodes"] for nic in n["nics"]),
    )
    nodes = {n["node"]: n["nics"] for n in net["nodes"]}
    # The TE pair, and the store nodes' own engines (store nodes serve /telemetry too).
    assert (
        {"te-target", "te-reader"} <= set(nodes) <= {"te-target", "te-reader", "store-a", "store-b"}
    )
    reader = nodes["te-reader"][0]
    assert reader["nic"] == "127.0.0.1" and not reader["paused"]
    assert reader["te_rx_bps"] > 0  # the reader pulls data in a loop
    assert net["paused"] == []
    one = client.get("/api/network/te-reader").json()
    assert [n["node"] for n in one["nodes"]] == ["te-reader"]
    r = client.get("/api/network/nope")
    assert r.status_code == 404 and "'nope'" in r.text and "te-reader" in r.text


def test_scheduler(client: TestClient) -> None:
    s = client.get("/api/scheduler").json()
    assert s["source"] == "conductor+audit" and s["policy"] == "kvcache_centric"
    assert sum(b["decisions"] for b in s["buckets"]) == REQUESTS
    assert {p["request_id"] for p in s["ttft_pairs"]} == {f"req-{i}" for i in range(0, 8, 2)}
    assert {q["name"] for q in s["queues"]} == {"prefill-0", "decode-0"}
    assert client.get("/api/scheduler", params={"bucket_s": 0}).status_code == 422


def test_audit_list_and_filters(client: TestClient) -> None:
    r = client.get("/api/audit/decisions", params={"limit": 3})
    doc = r.json()
    assert doc["total"] == REQUESTS and len(doc["decisions"]) == 3
    assert doc["decisions"][0]["request_id"] == f"req-{REQUESTS - 1}"
    page2 = client.get("/api/audit/decisions", params={"limit": 3, "offset": 3}).json()
    assert {d["request_id"] for d in page2["decisions"]}.isdisjoint(
        d["request_id"] for d in doc["decisions"]
    )
    one = client.get("/api/audit/decisions", params={"request_id": "req-3"}).json()
    assert [d["request_id"] for d in one["decisions"]] == ["req-3"]
    assert client.get("/api/audit/decisions", params={"rejected": True}).json()["total"] == 0
    assert client.get("/api/audit/decisions", params={"instance": "prefill-0"}).json()["total"] == 8
    assert client.get("/api/audit/decisions", params={"policy": "nope"}).json()["total"] == 0
    assert client.get("/api/audit/decisions", params={"since": "1h"}).json()["total"] == 8
    assert client.get("/api/audit/decisions", params={"until": "1h"}).json()["total"] == 0


@pytest.mark.parametrize(
    ("params", "needle"),
    [
        ({"since": "yesterday-ish"}, "since"),
        ({"until": "12:99"}, "until"),
        ({"limit": 1000}, "over the cap of 100"),
        ({"offset": -1}, "offset"),
    ],
)
def test_audit_bad_input(client: TestClient, params: dict, needle: str) -> None:
    r = client.get("/api/audit/decisions", params=params)
    assert r.status_code == 422 and needle in r.text


def test_audit_explain(client: TestClient) -> None:
    d = client.get("/api/audit/decisions/req-0").json()
    assert d["decision"]["request_id"] == "req-0"
    roles = [c["role"] for c in d["candidates"]]
    assert "prefill" in roles and "decode" in roles
    assert sum(c["chosen"] for c in d["candidates"]) == 2
    assert "was chosen for prefill" in d["explanation"]
    r = client.get("/api/audit/decisions/req-nope")
    assert r.status_code == 404 and "req-nope" in r.text


def test_nodes(client: TestClient) -> None:
    n = client.get("/api/nodes").json()
    assert {s["node"] for s in n["store_nodes"]} == {"store-a", "store-b"}
    assert client.get("/api/nodes/store-a").json()["segments"][0]["state"] == "MOUNTED"
    r = client.get("/api/nodes/store-z")
    assert r.status_code == 404 and "store-z" in r.text and "store-a" in r.text
    r = client.get("/api/nodes/store-a/drain")
    assert r.status_code == 404 and "no drain" in r.text


# ------------------------------------------------------------------------- auth
def test_actions_refused_without_login(client: TestClient) -> None:
    r = client.post("/api/store/pins", json={"target": "web/"})
    assert r.status_code == 401 and "login required" in r.text
    assert client.delete("/api/store/pins", params={"target": "web/"}).status_code == 401
    assert client.post("/api/nodes/store-a/drain").status_code == 401
    r = client.post("/api/nodes/store-a/undrain")
    assert r.status_code == 401 and "login required" in r.text
    assert client.post("/api/auth/logout").status_code == 401


def test_login_wrong_token(client: TestClient) -> None:
    r = client.post("/api/auth/login", json={"token": "0" * 64})
    assert r.status_code == 401 and "wrong cluster token" in r.text
    assert client.post("/api/auth/login", json={"token": ""}).status_code == 422
    assert "set-cookie" not in r.headers


@pytest.fixture
def logged(make_app: Callable[..., FastAPI]) -> Iterator[tuple[TestClient, str]]:
    with TestClient(make_app(), base_url="http://127.0.0.1") as c:
        yield c, login(c)


def test_session_cookie_and_csrf(logged: tuple[TestClient, str]) -> None:
    c, csrf = logged
    cookie = c.cookies.jar
    assert any(k.name == "mooncake_session" for k in cookie)
    r = c.post("/api/auth/login", json={"token": TOKEN})  # a second login: a new session
    csrf = r.json()["csrf"]
    sc = r.headers["set-cookie"].lower()
    assert "httponly" in sc and "samesite=strict" in sc and "path=/" in sc
    assert c.get("/api/auth/session").json()["logged_in"] is True
    # Logged in, but no or a wrong CSRF token: refused.
    r = c.post("/api/store/pins", json={"target": "web/"})
    assert r.status_code == 403 and "CSRF" in r.text
    r = c.post("/api/store/pins", json={"target": "web/"}, headers={"X-CSRF-Token": "x"})
    assert r.status_code == 403
    assert c.post("/api/auth/logout", headers={"X-CSRF-Token": csrf}).status_code == 204
    assert c.get("/api/auth/session").json()["logged_in"] is False


def test_pin_unpin(logged: tuple[TestClient, str]) -> None:
    c, csrf = logged
    h = {"X-CSRF-Token": csrf}
    r = c.post("/api/store/pins", json={"target": "other/", "hard": True}, headers=h)
    assert r.status_code == 201, r.text
    assert r.json() == {"target": "other/", "prefix": True, "hard": True, "remaining_s": None}
    pins = c.get("/api/store/pins").json()
    assert {"target": "other/", "prefix": True, "hard": True, "remaining_s": None} in pins
    assert c.get("/api/store/objects/other/x").json()["pin"] == "HARD"
    r = c.post("/api/store/pins", json={"target": "other/", "hard": True, "ttl_s": 5}, headers=h)
    assert r.status_code == 422 and "hard pin has no TTL" in r.text
    r = c.post("/api/store/pins", json={"target": "a\x00b"}, headers=h)
    assert r.status_code == 422
    r = c.delete("/api/store/pins", params={"target": "other/"}, headers=h)
    assert r.status_code == 200, r.text
    assert all(p["target"] != "other/" for p in c.get("/api/store/pins").json())
    r = c.delete("/api/store/pins", params={"target": "never-pinned/"}, headers=h)
    assert r.status_code == 404 and "never-pinned/" in r.text


def test_drain_bad_node_and_undrain(logged: tuple[TestClient, str]) -> None:
    c, csrf = logged
    h = {"X-CSRF-Token": csrf}
    r = c.post("/api/nodes/store-z/drain", headers=h)
    assert r.status_code == 404 and "store-z" in r.text
    r = c.post("/api/nodes/store-z/undrain", headers=h)
    assert r.status_code == 404 and "store-z" in r.text and "store-a" in r.text
    r = c.post("/api/nodes/store-a/undrain")  # logged in, no CSRF token
    assert r.status_code == 403 and "CSRF" in r.text
    r = c.post("/api/nodes/store-a/undrain", headers=h)  # already MOUNTED: a no-op
    assert r.status_code == 200, r.text
    assert r.json() == {
        "node": "store-a",
        "segments": ["store-a"],
        "states": ["MOUNTED"],
        "drain_cancelled": False,
    }


def test_anonymous_read_off(make_app: Callable[..., FastAPI]) -> None:
    with TestClient(make_app(anonymous_read=False), base_url="http://127.0.0.1") as c:
        for path in ("/api/overview", "/api/store/objects", "/api/audit/decisions", "/api/nodes"):
            r = c.get(path)
            assert r.status_code == 401 and "anonymous_read" in r.text, path
        r = c.get("/store", follow_redirects=False)
        assert r.status_code == 303 and r.headers["location"] == "/login?next=/store"
        assert c.get("/login").status_code == 200
        assert c.get("/api/auth/session").json()["anonymous_read"] is False
        login(c)
        assert c.get("/api/overview").status_code == 200
        assert c.get("/store", follow_redirects=False).status_code == 200


def test_no_secret_means_no_login(backend: WebBackend, make_app: Callable[..., FastAPI]) -> None:
    app = make_app(secret_file=backend.tmp / "absent-secret")
    with TestClient(app, base_url="http://127.0.0.1") as c:
        assert c.get("/api/auth/session").json()["login_possible"] is False
        r = c.post("/api/auth/login", json={"token": TOKEN})
        assert r.status_code == 503 and "absent-secret" in r.text


def test_drain_moves_everything_then_undrain(
    make_app: Callable[..., FastAPI], backend: WebBackend
) -> None:
    """The core drain path end to end: store-b ends DRAINED holding nothing, every object
    still reads back identical through a store client, and undrain mounts it again.

    The dashboard's own polling is slowed to once an hour: what a reader sees of the
    node once the drain says done must not wait for the next poll (the nodes page
    stops polling then, and showed the node DRAINING with its objects)."""
    with TestClient(make_app(interval_s=3600.0), base_url="http://127.0.0.1") as c:
        _drain_and_undrain(c, login(c), backend)


def _drain_and_undrain(c: TestClient, csrf: str, backend: WebBackend) -> None:
    h = {"X-CSRF-Token": csrf}
    before = c.get("/api/nodes/store-b").json()["keys"]
    assert before > 0  # both nodes got objects, so the drain has something to move
    r = c.post("/api/nodes/store-b/drain", headers=h)
    assert r.status_code == 202, r.text
    assert r.json()["segments"] == ["store-b"] and r.json()["state"] == "running"
    assert c.get("/api/nodes/store-b").json()["segments"][0]["state"] in ("DRAINING", "DRAINED")
    # Lease-bound: a copied object's old replica is freed when the drain's own read lease
    # ends (10 s by default).
    job = _wait(c, "/api/nodes/store-b/drain", lambda d: d["state"] != "running", 60.0)
    assert job["state"] == "done", job
    assert job["segment_states"] == ["DRAINED"] and job["failed_count"] == 0
    assert job["dropped"] == before == job["done"]
    assert job["copied"] == before  # one replica per object: each had none elsewhere
    (b,) = [n for n in c.get("/api/nodes").json()["store_nodes"] if n["node"] == "store-b"]
    assert b["keys"] == 0 and b["used"] == 0 and b["segments"][0]["state"] == "DRAINED", b
    got = read_back(backend.master, backend.cfg, OBJECTS)
    assert all(got[k] == value_of(k) for k in OBJECTS)
    # Undrain: back to MOUNTED, the job stays as the last drain.
    r = c.post("/api/nodes/store-b/undrain", headers=h)
    assert r.status_code == 200, r.text
    assert r.json()["states"] == ["MOUNTED"] and r.json()["drain_cancelled"] is False
    assert c.get("/api/nodes/store-b").json()["segments"][0]["state"] == "MOUNTED"
    assert c.get("/api/nodes/store-b/drain").json()["state"] == "done"


def test_undrain_stops_a_running_drain(logged: tuple[TestClient, str], backend: WebBackend) -> None:
    """Undrain while store-a's drain runs (moving objects, or waiting for leases; which
    one depends on timing): the job is cancelled, the node is MOUNTED again and no object
    is lost or changed."""
    c, csrf = logged
    h = {"X-CSRF-Token": csrf}
    assert c.get("/api/nodes/store-a").json()["keys"] > 0
    # Read every object first: their read leases (lease_ttl_s) keep the drain from
    # finishing before the undrain below, however fast (or loaded) this machine is.
    assert read_back(backend.master, backend.cfg, OBJECTS)
    assert c.post("/api/nodes/store-a/drain", headers=h).status_code == 202
    # Once objects are moving (or moved and the drain waits for leases): still running.
    job = _wait(c, "/api/nodes/store-a/drain", lambda d: d["done"] > 0 or d["state"] != "running")
    assert job["state"] == "running", job
    r = c.post("/api/nodes/store-a/undrain", headers=h)
    assert r.status_code == 200, r.text
    assert r.json()["drain_cancelled"] is True and r.json()["states"] == ["MOUNTED"]
    assert c.get("/api/nodes/store-a/drain").json()["state"] == "cancelled"
    got = read_back(backend.master, backend.cfg, OBJECTS)
    assert all(got[k] == value_of(k) for k in OBJECTS)
    # Moved objects stay moved, the rest stay on store-a; once the drain's read leases
    # are over, each object has exactly one replica again.
    deadline = time.monotonic() + 30
    while True:
        total = sum(c.get(f"/api/nodes/{n}").json()["keys"] for n in ("store-a", "store-b"))
        if total == len(OBJECTS) or time.monotonic() > deadline:
            break
        time.sleep(0.3)
    assert total == len(OBJECTS)


def test_favicon_is_served_and_linked(client: TestClient) -> None:
    # A browser asks for it on every page: a 404 in every console otherwise.
    icon = client.get("/favicon.ico")
    assert icon.status_code == 200
    assert icon.headers["content-type"].startswith("image/svg+xml")
    assert icon.content.startswith(b"<svg")
    assert 'rel="icon"' in client.get("/").text
