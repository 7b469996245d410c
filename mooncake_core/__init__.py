"""mooncake_core: the library behind every mooncake front end (CLI, TUI, web).

Never imports typer, textual, fastapi or rich (enforced by tests/unit/test_import_contracts.py).
"""

__version__ = "0.1.0"
__all__ = ["__version__"]
