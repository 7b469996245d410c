"""The dashboard's Host check (DNS rebinding guard)."""

from __future__ import annotations

from fastapi import FastAPI
from fastapi.testclient import TestClient

from mooncake_web.hosts import HostCheck, allowed_hosts, host_name


def test_host_name() -> None:
    assert host_name("LocalHost:8080") == "localhost"
    assert host_name("[::1]:8080") == "::1"
    assert host_name("::1") == "::1"
    assert host_name("example.com.") == "example.com"
    assert host_name("") == ""


def test_allowed_hosts() -> None:
    assert allowed_hosts("127.0.0.1") == {"localhost", "127.0.0.1", "::1"}
    assert allowed_hosts("10.0.0.5", ["Dash.Example"]) == {
        "localhost",
        "127.0.0.1",
        "::1",
        "10.0.0.5",
        "dash.example",
    }
    assert "0.0.0.0" not in allowed_hosts("0.0.0.0")


def test_host_check_middleware() -> None:
    app = FastAPI()

    @app.get("/x")
    def x() -> dict[str, str]:
        return {"ok": "yes"}

    app.add_middleware(HostCheck, allowed=allowed_hosts("127.0.0.1", ["dash.example"]))
    with TestClient(app, base_url="http://127.0.0.1") as c:
        assert c.get("/x").status_code == 200
        assert c.get("/x", headers={"Host": "dash.example:80"}).status_code == 200
        r = c.get("/x", headers={"Host": "evil.example:8080"})
        assert r.status_code == 421 and "dashboard.allowed_hosts" in r.json()["detail"]
    open_app = FastAPI()
    open_app.add_middleware(HostCheck, allowed=allowed_hosts("127.0.0.1", ["*"]))
    with TestClient(open_app, base_url="http://anything.example") as c:
        assert c.get("/nope").status_code == 404
