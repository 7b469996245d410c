"""mooncake_cli: the typer front end. Commands translate options into core calls."""

__all__: list[str] = []
