"""cluster (see docs/architecture.md)."""
