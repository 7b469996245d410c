"""`python -m mooncake_cli` runs the `mooncake` command."""

from .main import main

main()
