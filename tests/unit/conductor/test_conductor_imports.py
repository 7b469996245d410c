"""The decision path stays free of the database and front-end stacks."""

from __future__ import annotations

import subprocess
import sys


def test_conductor_import_pulls_no_database_or_ui() -> None:
    code = (
        "import sys, mooncake_core.conductor as c\n"
        "from mooncake_core.conductor import Conductor\n"
        "bad = [m for m in ('sqlalchemy', 'alembic', 'typer', 'rich', 'textual', 'fastapi') "
        "if m in sys.modules]\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""
